#!/bin/bash
# One device command: GPU decode tests, bench_decode, then the peers on the same
# shapes, in that order; logs under $OUT, a short table last.
#   BIN=<dir with gpu_test_decode, bench_decode, libxqajit.so*, libfmt, libspdlog>
#   tools/bench/run_decode_gpu.sh
# Building .gk on the dev host (templates are embedded in libxqajit at build time):
#   cmake --build build-kernel -j2 --target gpu_test_decode bench_decode
#   cp build-kernel/tests/gpu_test_decode build-kernel/tools/bench/bench_decode .gk/
#   cp -L build-kernel/libxqajit.so.0 .gk/libxqajit.so.0; strip .gk/*_decode .gk/libxqajit.so.0.*
# and carry [".gk", ".peers"]. Kernel-only variants: tools/bench/run_decode_variants.sh.
# NO_PEERS=1 skips the peers. `bench_decode --sweep` times split counts and tiles at the
# shapes that miss a target (PERF.md run 8).
BIN=${BIN:-.gk}
source "$(dirname "$0")/gpu_run_common.sh"
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,memory.total --format=csv,noheader | tee "$OUT/device.txt"
date -u | tee -a "$OUT/device.txt"
# The decode grid once per GQA backend (auto = the launch plan's choice; portable and
# hopper each on every case; hopper needs sm_90a: TEST_BACKENDS=auto elsewhere).
: > "$OUT/test.log"
for be in ${TEST_BACKENDS:-auto portable hopper}; do
  XQAJIT_TEST_DECODE_BACKEND=$be timeout 240 "$BIN/gpu_test_decode" ${TEST_ARGS:-} > "$OUT/test_$be.log" 2>&1
  rc=$?
  echo "gpu_test_decode backend=$be exit: $rc $(grep -E 'seed|decode cases' "$OUT/test_$be.log" | tr '\n' ' ')" | tee -a "$OUT/test.log"
  cat "$OUT/test_$be.log" >> "$OUT/test.log"
done
# Every shape with each backend side by side; the driver's JIT cache off so nvrtc_s is a cold compile.
CUDA_CACHE_DISABLE=1 XQAJIT_BENCH_BACKENDS=${BENCH_BACKENDS:-auto,portable,hopper} timeout 300 "$BIN/bench_decode" \
  ${BENCH_ARGS:-} > "$OUT/bench.txt" 2> "$OUT/bench.jsonl"
echo "bench_decode exit: $?" >> "$OUT/bench.txt"
run_peers tools/bench/peer_shapes.json peers
echo "===== test (tail)"; grep -E "FAILED|failed|passed|decode cases|worst|/fp|prewarm|seed|exit|error" "$OUT/test.log" | tail -40
echo "===== bench"; cat "$OUT/bench.txt"
print_peers gqa peers peers

#!/bin/bash
# One device command for the MLA family: the GPU tests (both backends on
# sm_90a), bench_mla, then the two-bmm PyTorch peer on the same shapes; logs
# under $OUT, a short table last. BIN holds what scripts/pack_gpu_bins.sh packs.
# NO_PEERS=1 skips the peers; TEST_ARGS / BENCH_ARGS pass through.
BIN=${BIN:-.gpu}
source "$(dirname "$0")/gpu_run_common.sh"
# Compile what the tests and the benchmark use over every core first (NVRTC
# serialises compiles inside one process; the CLI fans out over processes).
timeout 200 "$BIN/xqajit" prewarm --jobs "$(nproc)" --skip-invalid kind=mla input=bf16,fp8 kv=bf16,fp8 \
  group=16,32,64,128 page_size=32,64 q_len=1,2,3,4 backend=portable,hopper > "$OUT/mla_prewarm.txt" 2>&1
echo "mla prewarm exit $?: $(grep -E '^prewarm' "$OUT/mla_prewarm.txt")"
timeout 300 "$BIN/gpu_test_mla_decode" ${TEST_ARGS:-} > "$OUT/mla_test.log" 2>&1
echo "gpu_test_mla_decode exit: $?" | tee -a "$OUT/mla_test.log"
timeout 200 "$BIN/bench_mla" ${BENCH_ARGS:-} > "$OUT/mla_bench.txt" 2> "$OUT/mla_bench.jsonl"
echo "bench_mla exit: $?" >> "$OUT/mla_bench.txt"
run_peers tools/bench/peer_shapes_mla.json mla_peers
echo "===== mla test (tail)"; grep -E "FAILED|failed|passed|mla cases|worst|hopper |portable |seed|exit|error" "$OUT/mla_test.log" | tail -30
echo "===== mla bench"; cat "$OUT/mla_bench.txt"
print_peers mla mla_peers "mla peers (PyTorch two bmm, bf16)"

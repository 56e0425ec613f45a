#!/usr/bin/env bash
# Everything that needs a GPU, in one command on the GPU machine (the `device`
# tool's machine has CUDA but none of the Debian packages, so binaries are
# built on the dev host and carried):
#
#   scripts/pack_gpu_bins.sh            # on the dev host: builds and fills .gpu/
#   scripts/gpu_suite.sh                # on the GPU host, with .gpu and .peers carried
#
# Runs: every GPU test (decode family, graph replay, bundle-served kernel), the
# JIT tier benchmark, prewarm scaling, then bench_decode and the peers on the same
# shapes (tools/bench/run_decode_gpu.sh). Logs under $OUT; a short table last.
set -u
BIN=${BIN:-.gpu}
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
export LD_LIBRARY_PATH=$PWD/$BIN:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
export XQAJIT_CACHE_DIR=/tmp/xqajit-suite-cache

echo "== GPU tests" | tee "$OUT/suite.txt"
for t in "$BIN"/gpu_test_*; do
  case "$(basename "$t")" in gpu_test_decode|gpu_test_mla_decode) continue ;; esac  # run by run_*_gpu.sh below
  timeout 200 "$t" > "$OUT/$(basename "$t").log" 2>&1
  echo "$(basename "$t") exit $? : $(grep -E 'All tests passed|test cases:' "$OUT/$(basename "$t").log" | tail -1)" | tee -a "$OUT/suite.txt"
done

# NVRTC 12.9+ keeps its front-end output in the driver's JIT cache
# (~/.nv/ComputeCache) when libcuda is present, so a repeated compile of the same
# source takes ~20 ms there. Compile timings below turn that cache off.
export CUDA_CACHE_DISABLE=1
echo "== JIT tiers (cold compile / disk hit / memory hit; driver JIT cache off)" | tee -a "$OUT/suite.txt"
timeout 120 "$BIN/xqajit_bench_jit" --arch sm_90a --specs 5 2>&1 | tee -a "$OUT/suite.txt"

echo "== prewarm scaling: serving-gqa preset at head_dim=128 (fresh caches each, driver JIT cache off)" | tee -a "$OUT/suite.txt"
for jobs in 1 2 "$(nproc)"; do
  rm -rf /tmp/xqajit-prewarm-scale
  "$BIN/xqajit" --cache-dir /tmp/xqajit-prewarm-scale --json prewarm --preset serving-gqa \
    arch=sm_90a head_dim=128 --jobs "$jobs" > "$OUT/prewarm_$jobs.json" 2> "$OUT/prewarm_$jobs.err"
  python3 - "$OUT/prewarm_$jobs.json" "$jobs" <<'PY' | tee -a "$OUT/suite.txt"
import json, sys
d = json.load(open(sys.argv[1]))
n = d["compiled"]; s = d["seconds"]
print(f"jobs {sys.argv[2]:>3}: {n} compiled, {d['failed']} failed, {s:.1f} s wall, {60*n/s:.0f} specs/minute")
PY
done

unset CUDA_CACHE_DISABLE
[ -n "${SKIP_DECODE:-}" ] || OUT=$OUT BIN=$BIN tools/bench/run_decode_gpu.sh
[ -n "${SKIP_MLA:-}" ] || OUT=$OUT BIN=$BIN tools/bench/run_mla_gpu.sh
echo "===== suite summary"; cat "$OUT/suite.txt"

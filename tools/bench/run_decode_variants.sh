#!/bin/bash
# Variant timing on the device, after run_decode_gpu.sh: for each template
# directory under $BIN/tpl_* (a copy of kernel_templates/ with one change), the
# GPU tests (unless its name holds "diag": diagnostic variants compute wrong
# results on purpose; or SKIP_TESTS=1 for variants already tested) and bench_decode on the shapes in $SHAPES, through
# XQAJIT_TEMPLATE_DIR (the library reads templates from there instead of the
# embedded copy; the launch geometry stays the host's, so variants may change
# only kernel-internal code). tools/bench/make_breakdown_variants.sh makes the
# small-batch time-breakdown set (docs/PERF.md, session 5).
set -u
BIN=${BIN:-.gk}
OUT=${OUT:-/tmp/out}
SHAPES=${SHAPES:-"64 4096 32 8 128 bf16 fp8|16 4096 32 8 128 bf16 fp8|128 8192 32 8 128 bf16 bf16"}
export LD_LIBRARY_PATH=$PWD/$BIN:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
export XQAJIT_CACHE_DIR=${XQAJIT_CACHE_DIR:-/tmp/xqajit-cache-variants}
mkdir -p "$OUT"
for dir in "$BIN"/tpl_*; do
  name=$(basename "$dir")
  if [[ "$name" != *diag* && -z "${SKIP_TESTS:-}" ]]; then
    XQAJIT_TEMPLATE_DIR=$PWD/$dir timeout 200 "$BIN/gpu_test_decode" > "$OUT/test_$name.log" 2>&1
    echo "== $name tests exit $?: $(grep -E 'decode cases|All tests|failed' "$OUT/test_$name.log" | tr '\n' ' ')"
  fi
  XQAJIT_TEMPLATE_DIR=$PWD/$dir timeout 120 "$BIN/bench_decode" --only "$SHAPES" > "$OUT/bench_$name.txt" 2>/dev/null
  echo "== $name bench exit $?"; tail -n +4 "$OUT/bench_$name.txt"
done

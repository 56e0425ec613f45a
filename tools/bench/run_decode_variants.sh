#!/bin/bash
# Variant timing on the device, after run_decode_gpu.sh: for each template
# directory under $BIN/tpl_* (a copy of kernel_templates/ with one change), the
# GPU tests on every GQA backend in $TEST_BACKENDS (default auto, portable and hopper:
# common/ reaches both kernels, and auto alone never runs portable for an fp8 cache on
# sm_90a -- docs/KERNEL_NOTES.md h13; unless the name holds "diag": diagnostic variants
# compute wrong results on purpose; or SKIP_TESTS=1 for variants already tested) and
# bench_decode on the shapes in $SHAPES, through
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
  [[ "$name" == tpl_mla_* ]] && continue  # the MLA kernel's variants: bench_mla times them
  if [[ "$name" != *diag* && -z "${SKIP_TESTS:-}" ]]; then
    for be in ${TEST_BACKENDS:-auto portable hopper}; do
      XQAJIT_TEMPLATE_DIR=$PWD/$dir XQAJIT_TEST_DECODE_BACKEND=$be timeout 200 "$BIN/gpu_test_decode" \
        > "$OUT/test_${name}_$be.log" 2>&1
      echo "== $name tests backend=$be exit $?: $(grep -E 'decode cases|All tests|failed' "$OUT/test_${name}_$be.log" | tr '\n' ' ')"
    done
  fi
  XQAJIT_TEMPLATE_DIR=$PWD/$dir timeout 120 "$BIN/bench_decode" --only "$SHAPES" > "$OUT/bench_$name.txt" 2>/dev/null
  echo "== $name bench exit $?"; tail -n +4 "$OUT/bench_$name.txt"
done

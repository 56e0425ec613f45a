#!/usr/bin/env bash
# `xqajit tune` on the GPU machine (issue #8): a slice of the serving-gqa preset
# and the whole serving-mla preset over batch {1,8,64} x seq-len {1024,8192,32768},
# then the [tune] GPU test (Engine::tune: capture refusal, publish, tuned launch
# matches the reference).
#
#   BUILD_DIR=build scripts/pack_gpu_bins.sh     # on the dev host: builds and fills .gpu/
#   BIN=.gpu OUT=/tmp/out scripts/gpu_tune.sh    # on the GPU host (cwd = the checkout)
#
# Per key: every candidate's median µs per launch (random inputs allocated once per
# key, warm-up, CUDA graphs of launches over rotated KV-cache copies), the winner, and
# the gain of the winner over the heuristic from a separate interleaved A/B
# re-timing. Per family: the geometric-mean and worst gain, reverted winners,
# and how long tuning took (compiling the candidates included). Budget: ~3 min
# (GQA_LIMIT / MLA_LIMIT: seconds per family; the graph timer of session 19 takes
# ~0.9 s a GQA key on an H100, 2.5 x the old single-launch timer).
set -u
BIN=${BIN:-.gpu}
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
export LD_LIBRARY_PATH=$PWD/$BIN:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
export XQAJIT_CACHE_DIR=${XQAJIT_CACHE_DIR:-/tmp/xqajit-tune-cache}
export CUDA_CACHE_DISABLE=1  # compile times as a fresh host sees them
XQ="$BIN/xqajit"
GRID=(--batch ${TUNE_BATCH:-1,8,64} --seq-len ${TUNE_SEQ:-1024,8192,32768} --iters 10 --confirm 15)

run() {  # name, timeout, args...
  local name=$1 limit=$2; shift 2
  local t0=$(date +%s.%N)
  timeout "$limit" "$XQ" tune "${GRID[@]}" "$@" > "$OUT/tune_$name.txt" 2> "$OUT/tune_$name.err"
  local rc=$?
  local t1=$(date +%s.%N)
  echo "$name exit $rc, $(python3 -c "print(f'{$t1 - $t0:.1f}')" 2>/dev/null || echo '?') s wall (compiles included)" >> "$OUT/tune_summary.txt"
}

nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,temperature.gpu --format=csv > "$OUT/tune_summary.txt" 2>&1
# GQA: by default bf16 activations over bf16 and fp8 caches, head_dim 128, group 1 and
# 8, pages 16 and 64; GQA_SET="--preset serving-gqa head_dim=64,128" (and GQA_LIMIT in
# seconds) tunes a larger slice of the preset (~0.4 s per key). SKIP_MLA=1 skips MLA.
GQA_SET=${GQA_SET:-"--preset serving-gqa input=bf16 head_dim=128 group=1,8 page_size=16,64"}
# shellcheck disable=SC2086  # GQA_SET is a word list
run gqa "${GQA_LIMIT:-120}" $GQA_SET
: > "$OUT/tune_mla.txt"
[ -n "${SKIP_MLA:-}" ] || run mla "${MLA_LIMIT:-80}" --preset serving-mla
"$XQ" tune --show --json > "$OUT/tuning_table.json" 2>> "$OUT/tune_mla.err"
timeout 60 "$BIN/gpu_test_engine_paths" "[tune]" > "$OUT/gpu_test_tune.txt" 2>&1
echo "gpu_test_engine_paths [tune] exit $?" >> "$OUT/tune_summary.txt"

{
  echo "== per key (winner vs heuristic; gain from the interleaved re-timing)"
  cat "$OUT"/tune_gqa.txt "$OUT"/tune_mla.txt | grep ' gain '
  echo "== per family: geometric-mean gain, worst gain, keys, keys with a gain other than 1, reverted"
  for fam in gqa mla; do
    grep "^$fam " "$OUT/tune_$fam.txt" | grep ' gain ' |
      awk -v f="$fam" '{g=$NF; sub("x","",g); if (g>0) {s+=log(g); n++; if (min==""||g<min) min=g; if (g+0!=1) w++}
        if ($0 ~ /heuristic kept/) r++}
        END {if (n) printf "%s  geomean %.3fx  worst %.3fx  keys %d  changed %d  reverted %d\n", f, exp(s/n), min, n, w, r;
             else print f "  no keys tuned"}'
  done
  echo "== time"
  cat "$OUT/tune_summary.txt"
  grep -h "keys tuned in\|candidate kernels ready" "$OUT"/tune_gqa.txt "$OUT"/tune_mla.txt "$OUT"/tune_gqa.err "$OUT"/tune_mla.err
  tail -4 "$OUT/gpu_test_tune.txt"
} | tee "$OUT/tune_table.txt"

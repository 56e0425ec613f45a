#!/usr/bin/env bash
# `xqajit tune` on the GPU machine (issue #8): a modest GQA grid and the
# serving-mla preset over batch {1,8,64} x seq-len {1024,8192,32768}.
#
#   scripts/pack_gpu_bins.sh     # on the dev host: builds and fills .gpu/
#   scripts/gpu_tune.sh          # on the GPU host (cwd = repo root, .gpu carried)
#
# Per key: every candidate's median µs (CUDA events, warm-up, L2 rewritten
# between launches), the winner and its gain over the heuristic plan. Per
# family: the geometric-mean and worst gain, and how long tuning took. Logs
# under $OUT; the short table last. Budget: ~3 minutes.
set -u
BIN=${BIN:-.gpu}
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
export LD_LIBRARY_PATH=$PWD/$BIN:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
export XQAJIT_CACHE_DIR=${XQAJIT_CACHE_DIR:-/tmp/xqajit-tune-cache}
XQ="$BIN/xqajit"
GRID=(--batch 1,8,64 --seq-len 1024,8192,32768 --iters 10)

run() {  # name, args...
  local name=$1; shift
  local t0=$(date +%s.%N)
  timeout 150 "$XQ" tune "${GRID[@]}" "$@" > "$OUT/tune_$name.txt" 2> "$OUT/tune_$name.err"
  local rc=$?
  local t1=$(date +%s.%N)
  echo "$name exit $rc, $(echo "$t1 - $t0" | bc 2>/dev/null || echo '?') s" >> "$OUT/tune_summary.txt"
}

: > "$OUT/tune_summary.txt"
# GQA: bf16 and fp8 caches at the Llama-70B-like shape (head_dim 128, group 8).
run gqa kind=gqa input=bf16 kv=bf16,fp8 head_dim=128 page_size=64 group=8
run mla --preset serving-mla
"$XQ" tune --show --json > "$OUT/tuning_table.json" 2>> "$OUT/tune_mla.err"

{
  echo "== per key (winner vs heuristic, same run)"
  cat "$OUT"/tune_gqa.txt "$OUT"/tune_mla.txt | grep ' gain '
  echo "== per family: geometric-mean gain, worst gain, keys"
  for fam in gqa mla; do
    cat "$OUT/tune_$fam.txt" | grep "^$fam " | grep ' gain ' |
      awk -v f="$fam" '{g=$NF; sub("x","",g); if (g>0) {s+=log(g); n++; if (min==""||g<min) min=g}}
        END {if (n) printf "%s  geomean %.3fx  worst %.3fx  keys %d\n", f, exp(s/n), min, n; else print f "  no keys tuned"}'
  done
  echo "== time"
  cat "$OUT/tune_summary.txt"
} | tee "$OUT/tune_table.txt"

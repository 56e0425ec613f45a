#!/usr/bin/env bash
# Where a small-batch decode spends its time (docs/PERF.md and docs/KERNEL_NOTES.md,
# session 5, "Where B=1 L=8192 spends its 14.3 us"): copies of kernel_templates/ whose
# hopper GQA kernel stops after one stage. Wrong results on purpose -- the names hold
# "diag", so tools/bench/run_decode_variants.sh times them without testing them.
#   tpl_diag_launch          returns after griddepcontrol: the launch in a graph
#   tpl_diag_noloop_nomerge  empty splits, no merge: seq_len, table, Q, partial stores
#   tpl_diag_noloop          empty splits with the merge tail
#   tpl_diag_nomerge         every tile, no merge tail
#   tpl_diag_trace           the whole kernel with common/stage_trace_on.cuh: clock64 sums per
#                            stage of a few CTAs, printed once per process ("xqtrace ..."; one
#                            shape per bench_decode process, since the launch count is per module)
# and of the hopper MLA kernel (session 19: where its tile's time goes), timed with bench_mla:
#   tpl_mla_diag_noload      no tile copies (the tiles hold whatever shared memory held)
#   tpl_mla_diag_nos         no S wgmmas
#   tpl_mla_diag_nopv        no P V wgmmas
#   tpl_mla_diag_nomath      neither
#   tpl_mla_diag_noxchg      no barriers around the warpgroups' exchange of row maxima and P
#
#   XQAJIT_TUNING=off; for v in .gpu/tpl_mla_diag_*; do XQAJIT_TEMPLATE_DIR=$PWD/$v \
#     XQAJIT_CACHE_DIR=/tmp/c_$(basename $v) .gpu/bench_mla --only "128 64 8192 1 bf16/bf16"; done
#
#   tools/bench/make_breakdown_variants.sh .gpu      # on the dev host, next to the binaries
#   XQAJIT_BENCH_BACKENDS=hopper BIN=.gpu SHAPES="1 8192 32 8 128 bf16 bf16 64|1 8192 32 8 128 bf16 fp8 64" \
#     tools/bench/run_decode_variants.sh            # on the GPU host
#
# --check DEST CLI: also compiles each variant for the B=1 specs through the CLI's NVRTC
# (no GPU), so a kernel edit that moves an anchor fails CI rather than the next GPU run.
set -euo pipefail
check=0
if [ "${1:-}" = --check ]; then check=1; shift; fi
dest=${1:?usage: make_breakdown_variants.sh [--check] DEST [CLI]}
cli=${2:-}
src=$(cd "$(dirname "$0")/../../kernel_templates" && pwd)
mkdir -p "$dest"

# variant_in FILE NAME EDIT...: copy the templates, apply each EDIT ("anchor=>replacement", the
# anchor must occur in FILE, relative to the templates) once; variant NAME EDIT...: in
# gqa_decode_hopper.cu.
variant_in() {
  local file=$1 name=$2; shift 2
  rm -rf "$dest/tpl_$name"
  cp -r "$src" "$dest/tpl_$name"
  python3 - "$dest/tpl_$name/$file" "$@" <<'PY'
import sys
path, edits = sys.argv[1], sys.argv[2:]
text = open(path).read()
for edit in edits:
    anchor, replacement = edit.split("=>")
    if anchor not in text:
        sys.exit(f"make_breakdown_variants: anchor not found in {path}: {anchor!r}")
    text = text.replace(anchor, replacement, 1)
open(path, "w").write(text)
PY
}
variant() { variant_in gqa_decode_hopper.cu "$@"; }
after_pdl=$'  if constexpr (!kLateTrigger) pdl_launch_dependents();\n'  # a CTA that returns here counts as triggered
split_keys=$'  const int split_begin = work.begin, split_end = work.end, num_tiles = work.num_tiles;\n'
empty_split=$'  const int split_begin = work.begin, split_end = work.begin, num_tiles = 0;\n'
merge=$'  if (!multi) return trace.finish(num_tiles);\n'
variant diag_launch "${after_pdl}=>${after_pdl}  if (args.batch > 0) return;"$'\n'
variant diag_noloop "${split_keys}=>${empty_split}"
variant diag_nomerge "${merge}=>  return;"$'\n'
variant diag_noloop_nomerge "${split_keys}=>${empty_split}" "${merge}=>  return;"$'\n'
rm -rf "$dest/tpl_diag_trace"
cp -r "$src" "$dest/tpl_diag_trace"
cp "$(dirname "$0")/stage_trace_on.cuh" "$dest/tpl_diag_trace/common/stage_trace_on.cuh"

mla_copies=$'    constexpr int kChunks = kRawRowBytes / 16;\n'
mla_s=$'    WgmmaSS<kHalfKeys, false, 0>::run(d, da, db, 1);\n'
mla_pv=$'    wgmma_m64n256k16_rs<1>(d, pa[kb], db);\n'
mla_max_sync=$'    math_sync();\n    tile_max[0] = fmaxf'
mla_p_sync=$'  math_sync();\n#pragma unroll\n  for (int j = 0; j < kHalfKeys / 16; ++j) {\n    const uint4 v'
variant_in mla/hopper_loads.cuh mla_diag_noload "${mla_copies}=>${mla_copies}    if (tile >= 0) return;"$'\n'
variant_in mla/hopper_math.cuh mla_diag_nos "${mla_s}=>    if (kk < 0) ${mla_s# }"
variant_in mla/hopper_math.cuh mla_diag_nopv "${mla_pv}=>    if (kb < 0) ${mla_pv# }"
variant_in mla/hopper_math.cuh mla_diag_nomath "${mla_s}=>    if (kk < 0) ${mla_s# }" "${mla_pv}=>    if (kb < 0) ${mla_pv# }"
variant_in mla/hopper_math.cuh mla_diag_noxchg "${mla_max_sync}=>    tile_max[0] = fmaxf" \
  "${mla_p_sync}=>#pragma unroll"$'\n  for (int j = 0; j < kHalfKeys / 16; ++j) {\n    const uint4 v'
echo "breakdown variants in $dest: $(cd "$dest" && ls -d tpl_diag_* tpl_mla_diag_* | tr '\n' ' ')"

if [ "$check" = 1 ]; then
  [ -n "$cli" ] || { echo "--check needs the CLI's path" >&2; exit 2; }
  for dir in "$dest"/tpl_diag_*; do
    for kv in bf16 fp8; do
      XQAJIT_TEMPLATE_DIR=$dir "$cli" --cache-dir "$dest/cache/$(basename "$dir")" compile kind=gqa input=bf16 kv=$kv head_dim=128 \
        group=4 page_size=64 arch=sm_90a backend=hopper > /dev/null
    done
  done
  for dir in "$dest"/tpl_mla_diag_*; do
    XQAJIT_TEMPLATE_DIR=$dir "$cli" --cache-dir "$dest/cache/$(basename "$dir")" compile kind=mla input=bf16 kv=bf16 \
      group=128 page_size=64 arch=sm_90a backend=hopper > /dev/null
  done
  echo "every variant compiles"
fi

#!/usr/bin/env bash
# The main job: install what is missing, build (Release, build/), fill ./cache with
# a default set of kernels and print what was done; on a GPU host, launch a decode
# and check it against the CPU float64 reference.
set -euo pipefail
cd "$(dirname "$0")/.."
repo=$PWD

scripts/setup.sh
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release
cmake --build build -j"$(nproc)"

xq=$repo/build/tools/xqajit
cache=$repo/cache

# Compile for this host's GPU (its best arch, e.g. sm_90a on H100/H200); a host
# without a GPU prewarms for sm_90a, the GPU machines' arch.
gpu=0
arch=sm_90a
if nvidia-smi -L >/dev/null 2>&1; then
  gpu=1
  if gpu_arch=$("$xq" spec --json input=bf16 2>/dev/null | sed -n 's/.*"arch":"\([^"]*\)".*/\1/p') &&
    [[ -n $gpu_arch ]]; then
    arch=$gpu_arch
  else
    echo "run: nvidia-smi sees a GPU but xqajit cannot (see: $xq doctor); compiling for $arch" >&2
  fi
fi

# The default set: fp16/bf16 input x 16-bit/fp8 KV cache, head dim 128, the two
# common page sizes and head-group ratios (Llama-style 32/4 and 32/8 heads).
specs=(
  "input=bf16 kv=bf16 head_dim=128 page_size=64 group=8"
  "input=bf16 kv=fp8  head_dim=128 page_size=64 group=8"
  "input=fp16 kv=fp16 head_dim=128 page_size=64 group=8"
  "input=fp16 kv=fp8  head_dim=128 page_size=64 group=8"
  "input=bf16 kv=bf16 head_dim=128 page_size=16 group=4"
  "input=fp16 kv=fp8  head_dim=128 page_size=16 group=4"
)

row() { printf '%-56s %-9s %9s\n' "$@"; }

echo
echo "== filling $cache for arch $arch =="
if "$xq" prewarm --help >/dev/null 2>&1; then
  spec_file=$(mktemp --suffix=.json)
  trap 'rm -f "$spec_file"' EXIT
  {
    echo "["
    sep=""
    for spec in "${specs[@]}"; do
      printf '%s  {' "$sep"
      comma=""
      for field in $spec arch=$arch; do
        printf '%s"%s": "%s"' "$comma" "${field%%=*}" "${field#*=}"
        comma=", "
      done
      printf '}'
      sep=$',\n'
    done
    printf '\n]\n'
  } >"$spec_file"
  row SPEC STATUS SECONDS
  # Piped, so prewarm prints one "[i/n] status name (s s)" line per spec, not a progress bar.
  "$xq" --cache-dir "$cache" prewarm --spec-file "$spec_file" 2>&1 |
    awk '/^\[[0-9]+\/[0-9]+\] / { s = $4; gsub(/[()]/, "", s); printf "%-56s %-9s %9s\n", $3, $2, s; next }
         { print }'
else
  row SPEC STATUS SECONDS
  for spec in "${specs[@]}"; do
    # shellcheck disable=SC2086  # the fields are meant to split
    json=$("$xq" --cache-dir "$cache" compile --json $spec arch="$arch")
    row "$(sed -n 's/.*"name":"\([^"]*\)".*/\1/p' <<<"$json")" \
      "$(sed -n 's/.*"status":"\([^"]*\)".*/\1/p' <<<"$json")" \
      "$(sed -n 's/.*"seconds":\([0-9.e+-]*\).*/\1/p' <<<"$json" | xargs printf '%.3f')"
  done
fi

echo
echo "== cache =="
"$xq" --cache-dir "$cache" list

echo
if ((gpu)); then
  echo "== GPU smoke test: a decode through the engine vs the CPU float64 reference =="
  smoke=build/tests/gpu_test_engine_paths
  # Catch2 passes a filter that matches nothing, so make sure the tagged test exists.
  if ! "$smoke" --list-test-names-only "[smoke]" 2>/dev/null | grep -q .; then
    echo "run: $smoke has no [smoke] test case (or cannot see the GPU); nothing was launched" >&2
    exit 1
  fi
  # The cache filled above serves the test's kernels, so it launches without compiling.
  if ! XQAJIT_CACHE_DIR=$cache "$smoke" "[smoke]"; then
    echo "run: the GPU smoke test FAILED (exit 77 means the GPU was not usable; see: build/tools/xqajit doctor)" >&2
    exit 1
  fi
  echo "GPU smoke test passed: the decode matches the CPU reference."
else
  echo "== no GPU on this host (nvidia-smi -L failed): skipped the decode launch =="
  echo "   the cache above is ready for an $arch GPU; run this script on a GPU host to launch."
fi

#!/usr/bin/env bash
# Fuzzes the bundle reader (src/cache/bundle.cpp) with libFuzzer + ASan + UBSan for a
# bounded time and prints how many inputs it ran.
#
#   scripts/fuzz_bundle.sh [SECONDS=60] [BUILD_DIR=build-fuzz]
#
# Seeds: the golden bundle plus a few corruptions of it. Crashes are written to
# BUILD_DIR/fuzz-artifacts/; reproduce one with BUILD_DIR/fuzz_bundle FILE.
set -euo pipefail

seconds=${1:-60}
build=${2:-build-fuzz}
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"

# clang with the libFuzzer runtime (Debian/Ubuntu ship it with the clang package).
if ! command -v clang++ >/dev/null; then
  echo "fuzz_bundle: installing clang" >&2
  if [ "$(id -u)" = 0 ]; then apt-get update -qq && apt-get install -y -qq clang >/dev/null
  else sudo apt-get update -qq && sudo apt-get install -y -qq clang >/dev/null; fi
fi

mkdir -p "$build/fuzz-corpus" "$build/fuzz-artifacts"
# Header-only spdlog over the system fmt: the target needs no compiled logger.
clang++ -std=c++17 -g -O1 -fno-omit-frame-pointer \
  -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=undefined \
  -DSPDLOG_FMT_EXTERNAL -Iinclude -Isrc \
  fuzz/fuzz_bundle.cpp src/cache/bundle.cpp src/util/sha256.cpp \
  -lfmt -o "$build/fuzz_bundle"

# Seed corpus: the golden file, its header alone, and a few single-byte edits.
golden=tests/golden/tiny.xqab
cp "$golden" "$build/fuzz-corpus/golden.xqab"
head -c 96 "$golden" > "$build/fuzz-corpus/header-only.xqab"
for at in 8 12 16 24 40 300 1030 1100; do
  cp "$golden" "$build/fuzz-corpus/edit-$at.xqab"
  printf '\xff' | dd of="$build/fuzz-corpus/edit-$at.xqab" bs=1 seek="$at" conv=notrunc status=none
done

log="$build/fuzz.log"
set +e
"$build/fuzz_bundle" "$build/fuzz-corpus" -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 \
  -artifact_prefix="$build/fuzz-artifacts/" -print_final_stats=1 2>&1 | tee "$log" | grep -E "^#[0-9]+[[:space:]]+(INITED|DONE)|ERROR|SUMMARY"
status=${PIPESTATUS[0]}
set -e
runs=$(grep -oE "Done [0-9]+ runs" "$log" | grep -oE "[0-9]+" || echo 0)
echo "fuzz_bundle: ${runs} inputs in ${seconds} s, exit ${status} (full log: $log)"
exit "$status"

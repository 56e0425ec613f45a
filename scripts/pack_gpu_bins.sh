#!/usr/bin/env bash
# Builds (Release, build-gpu/) and collects what scripts/gpu_suite.sh runs into
# one folder (default .gpu/, git-ignored), with the fmt/spdlog libraries the GPU
# machine lacks. Binaries are stripped to keep the carried tree small.
set -euo pipefail
cd "$(dirname "$0")/.."
dest=${1:-.gpu}
scripts/setup.sh
cmake -S . -B build-gpu -G Ninja -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build build-gpu -j"$(nproc)"
rm -rf "$dest" && mkdir -p "$dest"
cp build-gpu/tests/gpu_test_* build-gpu/tools/bench/bench_decode build-gpu/tools/bench/bench_mla build-gpu/tools/xqajit \
   build-gpu/tools/xqajit_bench_jit "$dest"/
cp -P build-gpu/libxqajit.so* "$dest"/
for lib in libfmt.so libspdlog.so; do
  cp -P "$(dirname "$(readlink -f "$(ldconfig -p | grep -m1 "$lib" | awk '{print $NF}')")")"/"$lib"* "$dest"/ 2>/dev/null || true
done
find "$dest" -type f -exec strip --strip-unneeded {} + 2>/dev/null || true
du -sh "$dest"

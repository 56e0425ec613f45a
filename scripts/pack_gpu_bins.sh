#!/usr/bin/env bash
# Builds (Release, build-gpu/) and collects what scripts/gpu_suite.sh and
# scripts/gpu_python.sh run into
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
# The Python package (pure Python over the C ABI) and, for a GPU machine without
# it, pytest (pure Python too, so one copy serves its python3): scripts/gpu_python.sh.
mkdir -p "$dest/python"
cp -r python/xqajit "$dest/python/"
find "$dest/python" -name __pycache__ -prune -exec rm -rf {} +
python3 -m pip install --quiet --disable-pip-version-check --target "$dest/pylib" pytest >/dev/null
find "$dest" -maxdepth 1 -type f -exec strip --strip-unneeded {} + 2>/dev/null || true
du -sh "$dest"

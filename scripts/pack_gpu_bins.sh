#!/usr/bin/env bash
# Builds (Release, build-gpu/ or $BUILD_DIR) and collects what scripts/gpu_suite.sh and
# scripts/gpu_python.sh run into
# one folder (default .gpu/, git-ignored), with the fmt/spdlog libraries the GPU
# machine lacks. Binaries are stripped to keep the carried tree small.
set -euo pipefail
cd "$(dirname "$0")/.."
dest=${1:-.gpu}
build=${BUILD_DIR:-build-gpu}  # BUILD_DIR=build reuses the test build (Release too)
scripts/setup.sh
cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build "$build" -j"$(nproc)"
rm -rf "$dest" && mkdir -p "$dest"
cp "$build"/tests/gpu_test_* "$build"/tools/bench/bench_decode "$build"/tools/bench/bench_mla "$build"/tools/xqajit \
   "$build"/tools/xqajit_bench_jit "$dest"/
cp -P "$build"/libxqajit.so* "$dest"/
for lib in libfmt.so libspdlog.so; do
  cp -P "$(dirname "$(readlink -f "$(ldconfig -p | grep -m1 "$lib" | awk '{print $NF}')")")"/"$lib"* "$dest"/ 2>/dev/null || true
done
# The Python package (pure Python over the C ABI) and, for a GPU machine without
# it, pytest (pure Python too, so one copy serves its python3): scripts/gpu_python.sh.
mkdir -p "$dest/python"
cp -r python/xqajit "$dest/python/"
find "$dest/python" -name __pycache__ -prune -exec rm -rf {} +
find "$dest/python" -name "*.so" -delete
# The ops' C fast path: one stable-ABI (abi3) module, so the GPU machine's 3.12 loads what 3.11 headers built.
gcc -std=c11 -O2 -Wall -Wextra -shared -fPIC -I"$(python3 -c 'import sysconfig; print(sysconfig.get_path("include"))')" \
    python/xqajit/_fastcall*.c -o "$dest/python/xqajit/_fastcall.abi3.so"
python3 -m pip install --quiet --disable-pip-version-check --target "$dest/pylib" pytest >/dev/null
find "$dest" -maxdepth 1 -type f -exec strip --strip-unneeded {} + 2>/dev/null || true
du -sh "$dest"

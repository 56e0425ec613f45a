#!/usr/bin/env bash
# The whole test suite: installs what is missing, builds into build/, runs CTest.
# GPU tests exit 77 without a GPU, which CTest reports as "Skipped" (never passed).
set -euo pipefail
cd "$(dirname "$0")/.."

scripts/setup.sh
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release
cmake --build build -j"$(nproc)"
ctest --test-dir build --output-on-failure -j2
scripts/test_python.sh build

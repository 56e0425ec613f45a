#!/usr/bin/env bash
# The Python package's tests (CPU; the GPU ones skip loudly without a GPU):
# a virtual environment under build/pyenv with torch from PyPI, `pip install
# ./python` packaging the library already built in build/ (no second compile),
# then pytest on the installed package.
#
#   scripts/test_python.sh [BUILD_DIR=build]      (scripts/test.sh calls it after ctest)
#
# First run on a fresh machine: ~1.5 min of downloads (torch 2.11 + its CUDA
# wheels, ~3 GB, which `import torch` needs even without a GPU); later runs reuse
# the environment. pip keeps no cache of those wheels (--no-cache-dir): a second
# copy would double what the install needs on disk.
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build}
venv=$build/pyenv
torch_version=${XQAJIT_TEST_TORCH:-2.11.0}  # the GPU machine's torch

if [[ ! -x $venv/bin/python ]]; then
  if ! python3 -m venv "$venv" 2>/dev/null; then
    echo "test_python: installing python3-venv"
    apt-get update -q && DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends python3-venv
    rm -rf "$venv" && python3 -m venv "$venv"
  fi
fi
# Python's headers build the package's C fast path (xqajit/_fastcall*.c); without
# them it would be skipped and the tests below would not cover it.
if [[ ! -f $(python3 -c 'import sysconfig; print(sysconfig.get_path("include"))')/Python.h ]]; then
  echo "test_python: installing python3-dev (headers for the C fast path)"
  apt-get update -q && DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends python3-dev
fi
py=$venv/bin/python
if ! "$py" -c "import torch, pytest, numpy; assert torch.__version__.startswith('$torch_version')" 2>/dev/null; then
  echo "test_python: installing torch==$torch_version, numpy, pytest into $venv"
  free_gib=$(( $(df -Pk "$build" | awk 'NR==2 {print $4}') / 1048576 ))
  if (( free_gib < 8 )); then
    echo "test_python: warning: $free_gib GiB free under $build; torch and its CUDA wheels take ~5 GiB installed," \
         "more while installing (free space there, or point TMPDIR at a larger disk)" >&2
  fi
  "$py" -m pip install -q --no-cache-dir --upgrade pip
  "$py" -m pip install -q --no-cache-dir "torch==$torch_version" numpy pytest
fi

echo "test_python: pip install ./python (packaging $build/libxqajit.so.0 and $build/tools/xqajit)"
"$py" -m pip install -q --force-reinstall --no-deps ./python \
  --config-settings=cmake.define.XQAJIT_PREBUILT_DIR="$PWD/$build" \
  --config-settings=build-dir="$PWD/$build/python-wheel"
# The installed package must use its own copy of the library, and find its CLI.
env -u XQAJIT_LIBRARY "$py" - <<'PY'
import xqajit, xqajit._library as L
from xqajit.__main__ import find_cli
L.library()
assert "site-packages/xqajit/lib/" in L._lib._name, L._lib._name
assert xqajit.library_version() == xqajit.__version__
from xqajit.ops import _fast
assert _fast.status == "on", f"the C fast path is off: {_fast.status}"
print(f"test_python: xqajit {xqajit.__version__} loads {L._lib._name}; CLI {find_cli()}; C fast path {_fast.status}")
PY

# From build/ so that the checkout's python/ folder is not on sys.path: the
# installed package is what runs.
cd "$build"
env -u XQAJIT_LIBRARY PYTHONPATH="$OLDPWD/python/tests" "$OLDPWD/$venv/bin/pytest" -rs -p no:cacheprovider \
  "$OLDPWD/python/tests"

#!/usr/bin/env bash
# The Python package on the GPU machine, in one command (no network there, so
# nothing is installed: python3 with torch is the machine's; libxqajit, the CLI
# and, where the machine lacks it, pytest come in the carried folder):
#
#   scripts/pack_gpu_bins.sh        # on the dev host: fills .gpu/ (libxqajit, CLI, .gpu/python, .gpu/pylib)
#   scripts/gpu_python.sh           # on the GPU host, repo root as cwd, .gpu carried; logs under $OUT
#
# Runs: pytest on python/tests (CPU + GPU suites), the per-call overhead
# (python/benchmarks/overhead.py), the side-by-side timing against the peers
# installed there (python/benchmarks/compare.py), `python -m xqajit doctor`.
# Time limits (seconds) fit one 300 s device call: PYTEST_S, OVERHEAD_S, COMPARE_S;
# COMPARE_SHAPES (B:L,...) picks compare.py's shapes.
set -u
BIN=${BIN:-.gpu}
PYTEST_S=${PYTEST_S:-170}
OVERHEAD_S=${OVERHEAD_S:-40}
COMPARE_S=${COMPARE_S:-60}
COMPARE_SHAPES=${COMPARE_SHAPES:-1:8192,16:4096,64:4096,128:8192}
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
root=$PWD
export LD_LIBRARY_PATH=$root/$BIN:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
export XQAJIT_LIBRARY=$root/$BIN/libxqajit.so.0
export XQAJIT_CLI=$root/$BIN/xqajit
export XQAJIT_CACHE_DIR=${XQAJIT_CACHE_DIR:-/tmp/xqajit-python-cache}
pkg=$root/python
[ -d "$root/$BIN/python/xqajit" ] && pkg=$root/$BIN/python
export PYTHONPATH=$pkg:$root/python/tests${PYTHONPATH:+:$PYTHONPATH}
# pytest from the carried folder only where the machine has none (never shadow its own).
python3 -c "import pytest" 2>/dev/null || export PYTHONPATH=$PYTHONPATH:$root/$BIN/pylib
summary=$OUT/python_summary.txt
: > "$summary"

echo "== python: versions" | tee -a "$summary"
python3 - <<'PY' 2>&1 | tee -a "$summary"
import sys, torch, xqajit, xqajit._library as L
from xqajit.ops import _fast
L.library()
print(f"python {sys.version.split()[0]}, torch {torch.__version__}, {torch.cuda.get_device_name() if torch.cuda.is_available() else 'no GPU'}; "
      f"xqajit {xqajit.__version__} from {xqajit.__file__.rsplit('/', 2)[0]}, library {L._lib._name}; "
      f"C fast path: {_fast.status}")
PY

echo "== python: pytest python/tests (CPU + GPU)" | tee -a "$summary"
(cd /tmp && timeout "$PYTEST_S" python3 -m pytest -rs -p no:cacheprovider -s --durations=8 "$root/python/tests" \
  > "$OUT/python_pytest.log" 2>&1)
echo "pytest exit $?: $(grep -E '^(=+ )?[0-9]+ (passed|failed)|error' "$OUT/python_pytest.log" | tail -1)" | tee -a "$summary"
grep -E "^(FAILED|ERROR)|worst relative error" "$OUT/python_pytest.log" | head -20 | tee -a "$summary"

echo "== python: per-call host overhead (warm kernels)" | tee -a "$summary"
timeout "$OVERHEAD_S" python3 "$root/python/benchmarks/overhead.py" --json "$OUT/python_overhead.json" 2>&1 | tee -a "$summary"

echo "== python: xqajit vs peers on the same tensors (us, do_bench median)" | tee -a "$summary"
timeout "$COMPARE_S" python3 "$root/python/benchmarks/compare.py" --shapes "$COMPARE_SHAPES" \
  --json "$OUT/python_compare.json" 2>&1 | tee -a "$summary"

python3 -m xqajit doctor > "$OUT/python_doctor.txt" 2>&1
echo "python -m xqajit doctor exit $? (log: python_doctor.txt)" | tee -a "$summary"
echo "===== python summary"; cat "$summary"

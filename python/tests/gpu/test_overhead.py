"""The per-call host overhead (reported, not asserted: a timing, not a test of
correctness). benchmarks/overhead.py has the method."""

import importlib.util
import json
import os
from pathlib import Path


def test_measure_per_call_overhead():
    path = Path(__file__).resolve().parents[2] / "benchmarks" / "overhead.py"
    spec = importlib.util.spec_from_file_location("overhead", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    r = mod.measure()
    print("\n" + "\n".join(f"  {k:16s} {v:7.2f} us/call" for k, v in r.items()))
    if os.environ.get("OUT"):
        Path(os.environ["OUT"], "python_overhead.json").write_text(json.dumps(r, indent=1))
    assert r["direct"] > 0 and r["custom_op"] > 0

"""`python -m xqajit ...` runs the CLI."""

import json
import subprocess
import sys

import pytest

from xqajit.__main__ import find_cli


@pytest.mark.skipif(find_cli() is None, reason="no xqajit CLI next to this package or on PATH")
def test_python_m_xqajit_runs_the_cli():
    r = subprocess.run([sys.executable, "-m", "xqajit", "spec", "--json", "input=bf16", "group=4", "arch=sm_90a"],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["name"].startswith("gqa_bf16_kvbf16_obf16_d128_p64_g4")
    bad = subprocess.run([sys.executable, "-m", "xqajit", "spec", "input=fp32", "arch=sm_90a"],
                         capture_output=True, text=True, timeout=60)
    assert bad.returncode == 2 and "input" in bad.stderr

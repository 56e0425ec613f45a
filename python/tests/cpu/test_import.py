"""Importing needs no GPU, no toolkit and no library; the versions agree."""

import os
import re
import subprocess
import sys
from pathlib import Path

import xqajit

REPO = Path(__file__).resolve().parents[3]


def run_python(code, **env):
    full = dict(os.environ, **env)
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=full, timeout=120)


def test_import_loads_no_library_and_needs_no_gpu():
    r = run_python("import xqajit, xqajit._library as L; print(L._lib is None, xqajit.__version__)",
                   CUDA_VISIBLE_DEVICES="", XQAJIT_LIBRARY="/nonexistent/libxqajit.so")
    assert r.returncode == 0, r.stderr
    assert r.stdout.split()[0] == "True"


def test_a_missing_library_is_a_library_error_saying_where_it_looked():
    r = run_python("import xqajit\ntry:\n xqajit.spec(arch='sm_90a')\nexcept xqajit.LibraryError as e:\n print('LE', e)",
                   XQAJIT_LIBRARY="/nonexistent/libxqajit.so")
    assert "LE" in r.stdout and "/nonexistent/libxqajit.so" in r.stdout and "XQAJIT_LIBRARY" in r.stdout, r


def test_package_version_is_the_librarys():
    assert xqajit.library_version() == xqajit.__version__
    cmake = REPO / "CMakeLists.txt"
    if cmake.exists():  # running from a checkout
        m = re.search(r"project\(xqajit VERSION ([0-9.]+)", cmake.read_text())
        assert m and m.group(1) == xqajit.__version__


def test_decode_args_struct_matches_the_library():
    from xqajit.ops._abi import DECODE_ARGS

    assert DECODE_ARGS.size == 344  # sizeof(XqajitDecodeArgs) on x86_64
    buf, addr = DECODE_ARGS.buffer()
    values = [0] * len(DECODE_ARGS.names)
    values[0] = DECODE_ARGS.size + 8
    DECODE_ARGS.packer.pack_into(buf, 0, *values)
    status = xqajit._library.library().xqajit_decode_validate(addr)
    assert status == 3  # ArgumentError: the size is checked before anything else
    assert "do not match" in xqajit._library.library().xqajit_last_error().decode()


def test_torch_custom_op_is_registered():
    import torch

    assert hasattr(torch.ops.xqajit, "decode")

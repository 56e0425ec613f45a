"""Finds and loads libxqajit through ctypes (its C ABI, include/xqajit/c_api.h).

Loaded on first use, never at import: `import xqajit` needs no library, no
toolkit and no GPU. One shared library serves every Python version.

Where it looks, in order:
  1. $XQAJIT_LIBRARY: the library file, or a folder holding libxqajit.so* (when
     set, nothing else is tried);
  2. the package's own lib/ folder (a wheel, or `pip install ./python`);
  3. the source tree's build/ folder (running from a checkout);
  4. the dynamic loader's search path (LD_LIBRARY_PATH, an installed prefix).
"""

from __future__ import annotations

import ctypes
import glob
import json
import os
import threading
from pathlib import Path

from .errors import LibraryError, error_from_status

C_ABI_VERSION = 2  # XQAJIT_C_ABI_VERSION this package was written against
NEED_WORKSPACE = 10  # XQAJIT_NEED_WORKSPACE

_PACKAGE_DIR = Path(__file__).resolve().parent
_lock = threading.Lock()
_lib: ctypes.CDLL | None = None

_c_int_p = ctypes.POINTER(ctypes.c_int)
_c_str_p = ctypes.POINTER(ctypes.c_char_p)

# name -> (restype, argtypes)
_SIGNATURES = {
    "xqajit_c_abi_version": (ctypes.c_int, []),
    "xqajit_version": (ctypes.c_char_p, []),
    "xqajit_last_error": (ctypes.c_char_p, []),
    "xqajit_last_error_detail": (ctypes.c_char_p, [ctypes.c_char_p]),
    "xqajit_engine_create": (ctypes.c_int, [ctypes.c_char_p, ctypes.POINTER(ctypes.c_void_p)]),
    "xqajit_engine_destroy": (None, [ctypes.c_void_p]),
    "xqajit_engine_default": (ctypes.c_int, [ctypes.POINTER(ctypes.c_void_p)]),
    "xqajit_engine_stats": (ctypes.c_int, [ctypes.c_void_p, _c_str_p]),
    "xqajit_spec": (ctypes.c_int, [ctypes.c_char_p, _c_str_p]),
    "xqajit_prewarm": (ctypes.c_int, [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_int, _c_str_p]),
    "xqajit_engine_cubin": (ctypes.c_int, [ctypes.c_void_p, ctypes.c_char_p, _c_str_p]),
    "xqajit_device_arch": (ctypes.c_int, [ctypes.c_int, _c_str_p]),
    # Ops take a pointer to their packed args struct (see ops/_abi.py).
    "xqajit_decode": (ctypes.c_int, [ctypes.c_void_p]),
    "xqajit_decode_validate": (ctypes.c_int, [ctypes.c_void_p]),
    "xqajit_decode_workspace_size": (ctypes.c_int, [ctypes.c_void_p, ctypes.c_int, ctypes.POINTER(ctypes.c_uint64)]),
    "xqajit_decode_spec": (ctypes.c_int, [ctypes.c_void_p, ctypes.c_int, ctypes.c_char_p, _c_str_p]),
    "xqajit_mla_decode": (ctypes.c_int, [ctypes.c_void_p]),
    "xqajit_mla_decode_validate": (ctypes.c_int, [ctypes.c_void_p]),
    "xqajit_mla_decode_workspace_size": (ctypes.c_int, [ctypes.c_void_p, ctypes.c_int,
                                                        ctypes.POINTER(ctypes.c_uint64)]),
    "xqajit_mla_decode_spec": (ctypes.c_int, [ctypes.c_void_p, ctypes.c_int, ctypes.c_char_p, _c_str_p]),
}


def _candidates() -> list[str]:
    found: list[str] = []
    env = os.environ.get("XQAJIT_LIBRARY")
    if env:  # an explicit choice: never silently fall back to another copy
        return sorted(glob.glob(os.path.join(env, "libxqajit.so*"))) or [env] if os.path.isdir(env) else [env]
    for folder in (_PACKAGE_DIR / "lib", _PACKAGE_DIR.parent.parent / "build"):
        found += sorted(glob.glob(str(folder / "libxqajit.so*")))
    found.append("libxqajit.so.0")  # the loader's own search path
    return found


def _open(path: str) -> ctypes.CDLL:
    try:
        return ctypes.CDLL(path)
    except OSError:
        # A carried folder (the GPU machine's .gpu/) may hold the fmt/spdlog the
        # library needs without being on LD_LIBRARY_PATH: load those first.
        folder = os.path.dirname(path)
        if not folder:
            raise
        for dep in sorted(glob.glob(os.path.join(folder, "libfmt.so.*")) + glob.glob(os.path.join(folder, "libspdlog.so.*"))):
            try:
                ctypes.CDLL(dep, mode=ctypes.RTLD_GLOBAL)
            except OSError:
                pass
        return ctypes.CDLL(path)


def library() -> ctypes.CDLL:
    """libxqajit, loaded once; raises LibraryError saying where it looked."""
    global _lib
    if _lib is not None:
        return _lib
    with _lock:
        if _lib is not None:
            return _lib
        tried = []
        for path in _candidates():
            try:
                lib = _open(path)
            except OSError as e:
                tried.append(f"{path}: {e}")
                continue
            for name, (restype, argtypes) in _SIGNATURES.items():
                fn = getattr(lib, name)
                fn.restype, fn.argtypes = restype, argtypes
            abi = lib.xqajit_c_abi_version()
            if abi != C_ABI_VERSION:
                raise LibraryError(
                    f"{path} has C ABI version {abi} but this package needs {C_ABI_VERSION}: "
                    "install the package and the library from the same checkout"
                )
            _lib = lib
            return lib
        raise LibraryError(
            "libxqajit could not be loaded; set XQAJIT_LIBRARY to the library file or its folder. Tried:\n  "
            + "\n  ".join(tried)
        )


def raise_last_error(status: int) -> None:
    """Raises the exception for a failed C ABI call (the last error of this thread)."""
    lib = library()
    message = lib.xqajit_last_error().decode(errors="replace")
    raise error_from_status(status, message, lambda key: lib.xqajit_last_error_detail(key.encode()).decode(errors="replace"))


def call_json(fn_name: str, *args):
    """Calls a function whose last parameter is a `const char**` of JSON; returns it parsed."""
    out = ctypes.c_char_p()
    status = getattr(library(), fn_name)(*args, ctypes.byref(out))
    if status:
        raise_last_error(status)
    return json.loads(out.value)


def library_version() -> str:
    return library().xqajit_version().decode()

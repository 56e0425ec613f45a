"""The C fast path of the eager ops (xqajit/_fastcall*.c), and its ctypes fallback.

A call is checked in Python the first time its argument metadata is seen; the
packed args struct is then registered with _fastcall as a template under that
metadata, with the list of fields each call patches in (device pointers, float
scales, stream, workspace). Later calls with the same metadata are one C call
(`call(op, *args)`): 0 launched, -1 a miss (take the Python path), else the
library's status. Without the compiled module, without torch's DLPack exchange
API (torch < 2.10) or with XQAJIT_PY_FASTPATH=0, `call` is None and every call
takes the Python path (ctypes; checks cached by metadata).

An op's calls with optional tensors (lse, sparse indices, sinks) pass them after
the op's own arguments: the same op code, struct and
launcher, a longer key (None or each tensor's metadata), and a patch for each tensor
given (an absent one stays NULL, as the template holds it).
"""

from __future__ import annotations

import ctypes
import os

import torch

OP_DECODE, OP_MLA = 0, 1
PTR, F32, RCP_F32, STREAM, WORKSPACE, NBYTES = range(6)  # enum PatchKind in _fastcall.h
_FUNCTIONS = {OP_DECODE: "xqajit_decode", OP_MLA: "xqajit_mla_decode"}


def _load():
    if os.environ.get("XQAJIT_PY_FASTPATH", "1") == "0":
        return None, "disabled by XQAJIT_PY_FASTPATH=0"
    try:
        from .. import _fastcall
    except ImportError as e:
        return None, f"xqajit._fastcall is not built ({e})"
    api = getattr(torch.Tensor, "__dlpack_c_exchange_api__", None)
    if api is None:
        return None, f"torch {torch.__version__} has no DLPack C exchange API (torch >= 2.10 has)"
    if not _fastcall.init(api, torch.Tensor):
        return None, "torch's DLPack exchange API is not a version this module reads"
    return _fastcall, "on"


module, status = _load()
call = module.call if module is not None else None
_functions_set = False
_overrides: dict = {}  # op -> address of another `int f(void*)`


def set_function(op: int, address) -> None:
    """Points op at another `int f(void* args)` (None: the library's launcher again).
    The CPU stand-in of tests and benchmarks/overhead.py points decode at
    xqajit_decode_validate: every step of a call but the launch itself."""
    if address is None:
        _overrides.pop(op, None)
    else:
        _overrides[op] = address
    if _functions_set:
        _apply_functions()


def function_address(name: str) -> int:
    """The address of a libxqajit function (from the library itself, whatever Python
    attributes of the CDLL object say)."""
    from .. import _library

    return ctypes.cast(_library.library()[name], ctypes.c_void_p).value


def _apply_functions() -> None:
    for op, name in _FUNCTIONS.items():
        module.set_function(op, _overrides.get(op) or function_address(name))


def set_workspace(device: int, pointer: int, nbytes: int) -> None:
    if module is not None:
        module.set_workspace(device, pointer, nbytes)


def register(op: int, template: bytes, patches: list, device: int, args: tuple) -> None:
    """Registers the checked call `args` (the exact arguments a later `call(op, *args)`
    passes) with its packed template and patches."""
    global _functions_set
    if module is None:
        return
    if not _functions_set:
        _apply_functions()
        _functions_set = True
    try:
        module.register(op, template, tuple(patches), device, *args)
    except (TypeError, ValueError):
        pass  # an argument it cannot patch (a bool scale, say): the Python path keeps serving such calls


def scale_patch(patches: list, arg: int, value, value_offset: int, pointer_offset: int) -> None:
    """A scale given as a tensor is read by the kernel through its pointer; a number is written as a float."""
    if isinstance(value, torch.Tensor):
        patches.append((PTR, arg, pointer_offset, 0))
    else:
        patches.append((F32, arg, value_offset, 0))


def workspace_patch(patches: list, arg: int, workspace, offset: int) -> None:
    """The default workspace (pointer and bytes, 16 bytes from `offset`), or the tensor passed."""
    if workspace is None:
        patches.append((WORKSPACE, 0, offset, 0))
    else:
        patches.append((PTR, arg, offset, 0))
        patches.append((NBYTES, arg, offset + 8, 0))


def launched(status: int) -> bool:
    """A fast call's status: True when it launched; False for a miss or a workspace that must
    grow (take the checked path); a library error raises."""
    if not status:
        return True
    from .. import _library

    if status > 0 and status != _library.NEED_WORKSPACE:
        _library.raise_last_error(status)
    return False

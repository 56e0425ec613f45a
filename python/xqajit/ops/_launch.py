"""What every op's Python path shares past its own argument checks: the launch
through the C ABI (the per-device default workspace grown when a launch needs
more), the launch's hot path, and the cache of checked calls keyed by their
arguments' metadata. An op module (gqa.py, mla.py) keeps its checks, its packed
values and its custom-op schema; it resolves the device's stream itself (so that
tests can stand a CPU in for it)."""

from __future__ import annotations

from typing import Optional

import torch

from .. import _library
from .._tensors import same_device
from ..errors import ArgumentError
from ..workspace import _grow, default_pointer
from ..workspace import _pointers as _DEFAULT_WS
from ._abi import ArgsStruct


class Launcher:
    """One op's entry into the C ABI: its packed struct and its function."""

    def __init__(self, op: str, args: ArgsStruct, entry: str):
        self.op, self.args, self.entry = op, args, entry
        self._pack = args.packer.pack_into
        self._size = args.size

    def launch(self, ptrs, mid, scales, device: int, workspace: Optional[torch.Tensor], engine: int,
               stream: int) -> None:
        """Packs the struct and launches on `stream`; grows the default workspace when
        the launch needs more (an explicit one never is: that is an error to the caller)."""
        if workspace is None:
            ws_ptr, ws_bytes = default_pointer(device)
        else:
            same_device(self.op, "workspace", workspace, device)
            ws_ptr, ws_bytes = workspace.data_ptr(), workspace.numel() * workspace.element_size()
        buf, addr = self.args.buffer()
        self._pack(buf, 0, self._size, engine, stream, *ptrs, ws_ptr, ws_bytes, 0, *mid, *scales)
        lib = _library.library()
        status = getattr(lib, self.entry)(addr)
        if status == _library.NEED_WORKSPACE:
            needed = self.args.read_u64(buf, "needed_workspace_bytes")
            if workspace is not None:
                raise ArgumentError(f"xqajit.{self.op}: workspace has {ws_bytes} bytes but this launch needs "
                                    f"{needed}: allocate it once, zeroed (torch.zeros({needed}, dtype=torch.uint8, "
                                    "device=...)), or leave workspace=None to use the per-device default")
            grown = _grow(device, needed)
            self._pack(buf, 0, self._size, engine, stream, *ptrs, grown.data_ptr(), grown.numel(), 0, *mid, *scales)
            status = getattr(lib, self.entry)(addr)
        if status:
            _library.raise_last_error(status)

    def launch_default(self, ptrs, mid, scales, device: int, engine: int, stream: int) -> bool:
        """The hot path of launch() with the default workspace as it stands: True when
        launched, False when the launch needs more workspace (then call launch())."""
        ws = _DEFAULT_WS.get(device)
        buf, addr = self.args.buffer()
        self._pack(buf, 0, self._size, engine, stream, *ptrs, *(ws or (0, 0)), 0, *mid, *scales)
        status = getattr(_library._lib or _library.library(), self.entry)(addr)
        if status == 0:
            return True
        if status != _library.NEED_WORKSPACE:
            _library.raise_last_error(status)
        return False


class CheckedCalls(dict):
    """Metadata of a call's arguments -> what their checks computed. The checks depend
    on metadata alone, so a call seen before only reads pointers and scales. Bounded:
    a process that churns shapes starts over rather than grow without end."""

    def remember(self, key, value) -> None:
        if key is None:
            return
        if len(self) >= 1024:
            self.clear()
        self[key] = value


def data_ptr(t: torch.Tensor) -> int:
    return t.data_ptr()


def no_ptr(t: torch.Tensor) -> int:
    return 0  # fake and meta tensors have no storage


def meta(t):
    return None if t is None else (t.shape, t.stride(), t.dtype, t.get_device())


def scale_value(s):
    """(host value, device pointer) of a scale already checked by the op's args."""
    if type(s) is float:
        return s, 0
    return (1.0, s.data_ptr()) if isinstance(s, torch.Tensor) else (float(s), 0)

"""The split-KV scratch: one zeroed buffer per device, allocated once and reused.

The kernels' merge counters reset themselves, so the buffer is zeroed only when
it is allocated and stays valid across launches and CUDA graph replays. A decode
that needs more than the buffer holds grows it (once per larger shape; never
while a graph is being captured: run one eager call first, as torch's own
warm-up before capture does). The default buffer is shared by every op on its
device: ops on two streams at once each need their own (`workspace=`).
"""

from __future__ import annotations

import threading

import torch

from .errors import NotAvailableError

_lock = threading.Lock()
_buffers: dict = {}  # device index -> uint8 tensor
_pointers: dict = {}  # device index -> (pointer, bytes) of _buffers[index], for the launch path
_retired: list = []  # outgrown buffers (geometric growth: at most as much again)


def workspace(device=None, nbytes: int = 0) -> torch.Tensor:
    """The default workspace of `device` (default: the current CUDA device),
    grown to at least `nbytes` (zeroed, 256-byte aligned). Pass it as
    `workspace=` or let the ops use it by themselves."""
    if isinstance(device, int):
        index = device
    else:
        index = None if device is None else torch.device(device).index
        index = torch.cuda.current_device() if index is None else index
    buf = _buffers.get(index)
    if buf is not None and buf.numel() >= nbytes:
        return buf
    return _grow(index, nbytes)


def _grow(index: int, nbytes: int) -> torch.Tensor:
    with _lock:
        buf = _buffers.get(index)
        if buf is not None and buf.numel() >= nbytes:
            return buf
        if torch.cuda.is_current_stream_capturing():
            raise NotAvailableError(
                f"xqajit: the split-KV workspace on cuda:{index} must grow to {nbytes} bytes while a CUDA "
                "graph is being captured; run the same call once before capture (or allocate it first with "
                f"xqajit.workspace('cuda:{index}', {nbytes}))"
            )
        # Round up so that a slowly growing batch does not reallocate every step.
        size = max(nbytes, 1 << 20)
        size = 1 << (size - 1).bit_length()
        new = torch.zeros(size, dtype=torch.uint8, device=torch.device("cuda", index))
        if buf is not None:
            # Launches still queued (on any stream) may use the old buffer: keep it.
            _retired.append(buf)
        _buffers[index] = new
        _pointers[index] = (new.data_ptr(), new.numel())
        from .ops import _fast

        _fast.set_workspace(index, new.data_ptr(), new.numel())
        return new


def default_pointer(index: int):
    """(pointer, bytes) of the default workspace of device `index`, (0, 0) before its first use."""
    buf = _buffers.get(index)
    return (buf.data_ptr(), buf.numel()) if buf is not None else (0, 0)

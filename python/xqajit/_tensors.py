"""Turning torch tensors into what the C ABI takes: dtype codes, device pointers,
strides, scales and the current stream. Every refusal names the argument.

Hot path: each helper reads a tensor's metadata once (a torch attribute read
costs ~0.1 us), so these are written for speed more than for elegance.
"""

from __future__ import annotations

import numbers

import torch

from .errors import ArgumentError

FP16, BF16, FP8, FP8DS = 0, 1, 2, 3  # XqajitDType (FP8DS: an MLA cache of 656-byte fp8-with-scales rows)
# An fp8 (e4m3) cache may come as float8_e4m3fn or as its raw bytes (uint8, as vLLM stores it).
DTYPE_CODE = {torch.float16: FP16, torch.bfloat16: BF16, torch.float8_e4m3fn: FP8, torch.uint8: FP8}
DTYPE_NAME = {FP16: "fp16", BF16: "bf16", FP8: "fp8", FP8DS: "fp8ds"}
ELEM_BYTES = {FP16: 2, BF16: 2, FP8: 1, FP8DS: 1}


def fail(op: str, arg: str, why: str):
    raise ArgumentError(f"xqajit.{op}: {arg} {why}")


def require_tensor(op: str, name: str, t) -> None:
    if not isinstance(t, torch.Tensor):
        fail(op, name, f"must be a torch.Tensor, got {type(t).__name__}")


def dtype_code(op: str, name: str, t: torch.Tensor, allowed: tuple) -> int:
    code = DTYPE_CODE.get(t.dtype)
    if code not in allowed:
        names = ", ".join(sorted({str(d) for d, c in DTYPE_CODE.items() if c in allowed}))
        fail(op, name, f"has dtype {t.dtype}: allowed {names}")
    return code


def same_device(op: str, name: str, t: torch.Tensor, device: int) -> None:
    if t.get_device() != device:
        fail(op, name, f"is on {t.device} but q is on {_device_name(device)}: every tensor must be on q's device")


def require_cuda(op: str, device: int) -> None:
    if device < 0:
        fail(op, "q", "is a CPU tensor: xqajit runs on CUDA tensors (move every input with .cuda())")


def _device_name(device: int) -> str:
    return "cpu" if device < 0 else f"cuda:{device}"


def strides_for(op: str, name: str, shape, stride, dims: tuple) -> list:
    """The strides of `dims` (indices into shape) with the last dim required
    contiguous. A dim of extent 1 has no meaningful stride (torch may report
    anything): it gets one past the tensor's span, so it never looks like overlap."""
    if shape[-1] > 1 and stride[-1] != 1:
        fail(op, name, f"has stride {stride[-1]} in its last (head_dim) dimension: it must be contiguous "
                       "(stride 1); call .contiguous() or pass a view whose rows are contiguous")
    span = 1
    for n, s in zip(shape, stride):
        if n > 1:
            span = max(span, n * s)
    return [stride[d] if shape[d] != 1 else span for d in dims]


def scale_arg(op: str, name: str, value, device: int):
    """(host value, device pointer) of a scale: a Python number, or a 1-element
    float32 CUDA tensor (read by the kernel at launch, so graph replays see updates)."""
    if isinstance(value, torch.Tensor):
        if value.dtype != torch.float32 or value.numel() != 1:
            fail(op, name, f"as a tensor must be float32 with one element, got {value.dtype} {tuple(value.shape)}")
        same_device(op, name, value, device)
        return 1.0, value.data_ptr()
    if isinstance(value, numbers.Real):
        return float(value), 0
    fail(op, name, f"must be a float or a 1-element float32 CUDA tensor, got {type(value).__name__}")


def optional_ptr(op: str, name: str, t, device: int, dtypes: tuple, numel: int, ptr=None) -> int:
    """Device pointer of an optional contiguous tensor of `numel` elements (0 for None)."""
    if t is None:
        return 0
    require_tensor(op, name, t)
    if t.dtype not in dtypes:
        fail(op, name, f"has dtype {t.dtype}: allowed {', '.join(str(d) for d in dtypes)}")
    if t.numel() != numel or not t.is_contiguous():
        fail(op, name, f"must be contiguous with {numel} elements, got shape {tuple(t.shape)}"
                       f"{'' if t.is_contiguous() else ' (not contiguous)'}")
    same_device(op, name, t, device)
    return t.data_ptr() if ptr is None else ptr(t)


def current_stream(device: int) -> int:
    """The current torch stream of `device` as a raw cudaStream_t (0: the legacy default stream)."""
    return torch._C._cuda_getCurrentRawStream(device)


_INT32_DTYPES = (torch.int32, torch.uint32) if hasattr(torch, "uint32") else (torch.int32,)


def paged_table(op: str, block_table, seq_lens, batch: int, device: int):
    """Checks the block table (int32 [batch, max_pages], contiguous rows) and seq_lens
    (contiguous int32 [batch]) every paged op takes; returns (block table strides, max_pages)."""
    require_tensor(op, "block_table", block_table)
    if block_table.dtype != torch.int32 or block_table.dim() != 2 or block_table.shape[0] != batch:
        fail(op, "block_table", f"must be int32 [batch={batch}, max_pages_per_seq], got {block_table.dtype} "
                                f"{tuple(block_table.shape)}")
    bts = block_table.stride()
    max_pages = block_table.shape[1]
    if max_pages > 1 and bts[1] != 1:
        fail(op, "block_table", f"must have contiguous rows (stride 1 in dim 1), got strides {bts}")
    same_device(op, "block_table", block_table, device)
    require_tensor(op, "seq_lens", seq_lens)
    if seq_lens.dtype not in _INT32_DTYPES or seq_lens.shape != (batch,) or (batch > 1 and seq_lens.stride(0) != 1):
        fail(op, "seq_lens", f"must be a contiguous int32 [batch={batch}], got {seq_lens.dtype} {tuple(seq_lens.shape)}")
    same_device(op, "seq_lens", seq_lens, device)
    return bts, max_pages


def new_lse(q: torch.Tensor) -> torch.Tensor:
    """An lse output for q ([batch, q_len, heads, d] -> [batch, q_len, heads]; [batch, heads, d] -> [batch, heads])."""
    return torch.empty(tuple(q.shape[:-1]), dtype=torch.float32, device=q.device)


def lse_arg(op: str, lse, batch: int, q_len: int, heads: int, heads_name: str, device: int, ptr):
    """Checks an optional lse output, float32 [batch, q_len, heads] of any strides (a
    [batch, heads] one where q has no token axis); returns (pointer, (stride_batch,
    stride_token, stride_head)), zeros when lse is None."""
    if lse is None:
        return 0, (0, 0, 0)
    require_tensor(op, "lse", lse)
    if lse.dim() == 2 and q_len == 1:
        lse = lse.unsqueeze(1)
    if lse.dtype != torch.float32 or tuple(lse.shape) != (batch, q_len, heads):
        fail(op, "lse", f"must be float32 [batch={batch}, q_len={q_len}, {heads_name}={heads}] (any strides), "
                        f"got {lse.dtype} {tuple(lse.shape)}")
    same_device(op, "lse", lse, device)
    span = max(1, max((n * s for n, s in zip(lse.shape, lse.stride()) if n > 1), default=1))
    return ptr(lse), tuple(s if n > 1 else span for n, s in zip(lse.shape, lse.stride()))


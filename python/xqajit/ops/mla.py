"""xqajit.mla_decode: DeepSeek-style multi-head latent attention decode over a
paged latent cache, on torch tensors (include/xqajit/ops/mla_decode.hpp).

Every head reads one shared latent row per token: 576 values (512 latent + 64
rope) used as K, the first 512 as V. The same three ways in as decode (gqa.py):
  mla_decode(...)                     eager: checks, packs XqajitMlaDecodeArgs, calls the C ABI;
  torch.ops.xqajit.mla_decode         the custom op torch.compile traces (fake impl: checks only),
  torch.ops.xqajit.mla_decode_extras  and its twin for sparse calls, lse and sinks (the EXTRAS);
  mla_decode_args(...)                the packed values without launching (tests, dry runs).
"""

from __future__ import annotations

import numbers
from typing import Optional

import torch

from .. import _library
from .._tensors import (BF16, DTYPE_NAME, FP8, FP8DS, current_stream, dtype_code, fail, lse_arg, new_lse,
                        optional_ptr, paged_table, require_cuda, require_tensor, same_device, scale_arg, strides_for)
from . import _fast
from ._abi import MLA_DECODE_ARGS
from ._fast import OP_MLA
from ._fast import call as _fast_call
from ._launch import CheckedCalls, Launcher
from ._launch import data_ptr as _data_ptr
from ._launch import meta as _meta
from ._launch import no_ptr as _no_ptr
from ._launch import scale_value as _scale
from ._register import register

_OP = "mla_decode"
_is_compiling = torch.compiler.is_compiling  # dynamo folds it to True while tracing
_PACK = MLA_DECODE_ARGS.packer.pack_into
_SIZE = MLA_DECODE_ARGS.size
QK_DIM, V_DIM = 576, 512  # a latent row: 512 latent + 64 rope values; V is its first 512
# DeepSeek-V3.2's "fp8 with scales" row (kv=fp8ds): 512 e4m3 latent values, 4 float32 scales (one
# per 128 values, multiplied), 64 bf16 rope values; FlashMLA's is_fp8_kvcache=True layout.
FP8DS_ROW_BYTES = 656
_FP8DS_DTYPES = (torch.uint8, torch.float8_e4m3fn)
BACKENDS = {"auto": 0, "portable": 1, "hopper": 2}  # XqajitBackend
_MASK_DTYPES = (torch.int32, torch.uint32) if hasattr(torch, "uint32") else (torch.int32,)


def _sm_scale(value) -> float:
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        fail(_OP, "sm_scale", f"must be a Python float (the softmax scale, e.g. 1/sqrt(192) for DeepSeek-V3), "
                              f"got {type(value).__name__}")
    value = float(value)
    if not value > 0.0:
        fail(_OP, "sm_scale", f"= {value} must be > 0 (DeepSeek-V3: 1/sqrt(192) = 0.0721688)")
    return value


# The fields after the scales (sparse MLA and the optional outputs), zeros for a plain dense call:
# topk, indices, topk_length, lse, attn_sink, then the index and lse strides.
TAIL_FIELDS = ("topk", "indices", "topk_length", "lse", "attn_sink", "indices_stride_batch",
               "indices_stride_token", "lse_stride_batch", "lse_stride_token", "lse_stride_head")
# The tail's pointers: the optional tensors of an extended call (sparse, lse, sinks), in the order
# launch_eager takes them after mla_decode()'s 13 arguments.
EXTRAS = TAIL_FIELDS[1:5]
_NO_EXTRAS, _NO_POINTERS = (None,) * len(EXTRAS), (0,) * len(EXTRAS)


def _kv_code(kv_cache: torch.Tensor, input_code: int) -> int:
    """The cache's XqajitDType: by its dtype, or FP8DS for rows of FP8DS_ROW_BYTES bytes."""
    row = kv_cache.shape[-1]
    if row == FP8DS_ROW_BYTES:
        if kv_cache.dtype not in _FP8DS_DTYPES:
            fail(_OP, "kv_cache", f"has {row} values per row of dtype {kv_cache.dtype}: a {FP8DS_ROW_BYTES}-byte "
                                  "fp8-with-scales row (512 e4m3, 4 float32 scales, 64 bf16) is torch.uint8 or "
                                  "torch.float8_e4m3fn")
        if input_code != BF16:
            fail(_OP, "kv_cache", f"is an fp8-with-scales cache ({FP8DS_ROW_BYTES}-byte rows): it needs a bf16 q, "
                                  f"got {DTYPE_NAME[input_code]}")
        return FP8DS
    if row != QK_DIM:
        fail(_OP, "kv_cache", f"has {row} values per row: MLA decode takes {QK_DIM} (or the {FP8DS_ROW_BYTES} "
                              "bytes of an fp8-with-scales row)")
    return dtype_code(_OP, "kv_cache", kv_cache, (BF16, FP8) if input_code == BF16 else (FP8,))


def _sparse_tail(indices, topk_length, lse, attn_sink, batch, q_len, heads, device, ptr):
    """Checks the sparse and optional-output tensors; returns the struct's tail fields."""
    topk = ix_b = ix_t = 0
    ix_ptr = len_ptr = 0
    if indices is not None:
        require_tensor(_OP, "indices", indices)
        three = indices.dim() == 3
        want = (batch, q_len) if three else (batch,)
        if indices.dtype != torch.int32 or indices.dim() not in (2, 3) or tuple(indices.shape[:-1]) != want \
                or (not three and q_len != 1):
            fail(_OP, "indices", f"must be int32 [batch={batch}, q_len={q_len}, topk], got {indices.dtype} "
                                 f"{tuple(indices.shape)}")
        topk = indices.shape[-1]
        if topk < 1:
            fail(_OP, "indices", f"has topk = {topk} entries per list: allowed 1 or more")
        st = indices.stride()
        if topk > 1 and st[-1] != 1:
            fail(_OP, "indices", f"must have contiguous lists (stride 1 in its last dim), got strides {st}")
        ix_t = st[1] if three and q_len > 1 else max(topk, 1)
        ix_b = st[0] if batch > 1 else q_len * ix_t
        same_device(_OP, "indices", indices, device)
        ix_ptr = ptr(indices)
        len_ptr = optional_ptr(_OP, "topk_length", topk_length, device, (torch.int32,), batch, ptr)
    elif topk_length is not None:
        fail(_OP, "topk_length", "is given without indices (it limits sparse index lists)")
    lse_ptr, ls = lse_arg(_OP, lse, batch, q_len, heads, "num_heads", device, ptr)
    sink_ptr = optional_ptr(_OP, "attn_sink", attn_sink, device, (torch.float32,), heads, ptr)
    return (topk, ix_ptr, len_ptr, lse_ptr, sink_ptr, ix_b, ix_t, *ls)


def mla_decode_args(q, kv_cache, block_table, seq_lens, out, *, sm_scale, q_scale=1.0, kv_scale=1.0,
                    spec_mask=None, backend="auto", num_splits=0, indices=None, topk_length=None, lse=None,
                    attn_sink=None, ptr=_data_ptr):
    """Checks every argument and returns the fields of XqajitMlaDecodeArgs as
    (pointers, shapes and strides, scales and the sparse/extra-output tail, q's
    device index). Raises ArgumentError naming the argument."""
    sm_scale = _sm_scale(sm_scale)
    require_tensor(_OP, "q", q)
    qs, qst = q.shape, q.stride()
    if len(qs) == 4:
        batch, q_len, heads, d = qs
        dims = (0, 1, 2)
    elif len(qs) == 3:
        batch, heads, d = qs
        q_len, dims = 1, (0, 0, 1)
    else:
        fail(_OP, "q", f"has shape {tuple(qs)}: expected [batch, q_len, num_heads, {QK_DIM}] or "
                       f"[batch, num_heads, {QK_DIM}]")
    if d != QK_DIM:
        fail(_OP, "q", f"has {d} values per head: MLA decode takes {QK_DIM} (512 latent + 64 rope)")
    q_str = strides_for(_OP, "q", qs, qst, dims)
    if len(qs) == 3:
        q_str[1] = q_str[2] * heads  # no token axis: any stride past the heads
    input_code = dtype_code(_OP, "q", q, (BF16, FP8))
    device = q.get_device()

    require_tensor(_OP, "kv_cache", kv_cache)
    ks = kv_cache.shape
    if len(ks) == 4 and ks[2] == 1:  # FlashMLA's [num_pages, page_size, 1, 576]
        kv_dims = (0, 1)
    elif len(ks) == 3:
        kv_dims = (0, 1)
    else:
        fail(_OP, "kv_cache", f"has shape {tuple(ks)}: expected [num_pages, page_size, {QK_DIM}] "
                              f"(or [num_pages, page_size, 1, {QK_DIM}]; {FP8DS_ROW_BYTES} bytes for fp8-with-scales)")
    kv_code = _kv_code(kv_cache, input_code)
    same_device(_OP, "kv_cache", kv_cache, device)
    kv_str = strides_for(_OP, "kv_cache", ks, kv_cache.stride(), kv_dims)
    num_pages, page_size = ks[0], ks[1]

    if indices is None:
        bts, max_pages = paged_table(_OP, block_table, seq_lens, batch, device)
    else:  # sparse: the index lists address the cache, no table, no lengths
        for name, t in (("block_table", block_table), ("seq_lens", seq_lens), ("spec_mask", spec_mask)):
            if t is not None:
                fail(_OP, name, "must be None with indices (sparse MLA: topk_length limits the lists)")
        bts, max_pages = (0,), 0

    require_tensor(_OP, "out", out)
    want = (*qs[:-1], V_DIM)
    if tuple(out.shape) != want:
        fail(_OP, "out", f"has shape {tuple(out.shape)}: expected {want} (q's shape with {V_DIM} values per head)")
    if out.dtype != torch.bfloat16:
        fail(_OP, "out", f"has dtype {out.dtype}: MLA decode writes torch.bfloat16")
    same_device(_OP, "out", out, device)
    o_str = strides_for(_OP, "out", out.shape, out.stride(), dims)
    if len(qs) == 3:
        o_str[1] = o_str[2] * heads

    backend_code = BACKENDS.get(backend)
    if backend_code is None:
        fail(_OP, "backend", f"= {backend!r}: allowed 'auto', 'portable', 'hopper'")
    q_scale, q_scale_ptr = scale_arg(_OP, "q_scale", q_scale, device)
    kv_scale, kv_scale_ptr = scale_arg(_OP, "kv_scale", kv_scale, device)
    mask_ptr = optional_ptr(_OP, "spec_mask", spec_mask, device, _MASK_DTYPES, batch * q_len, ptr)
    tail = _sparse_tail(indices, topk_length, lse, attn_sink, batch, q_len, heads, device, ptr)
    table_ptrs = (0, 0) if indices is not None else (ptr(block_table), ptr(seq_lens))
    ptrs = (ptr(q), ptr(out), ptr(kv_cache), *table_ptrs, mask_ptr, q_scale_ptr, kv_scale_ptr)
    mid = (q_str[0], q_str[1], q_str[2], o_str[0], o_str[1], o_str[2], kv_str[0], kv_str[1],
           bts[0] if batch > 1 else max_pages,
           input_code, kv_code, batch, q_len, heads, page_size, num_pages, max_pages, backend_code,
           int(num_splits), 0, 1)
    return ptrs, mid, (sm_scale, q_scale, kv_scale, *tail), device


_LAUNCHER = Launcher(_OP, MLA_DECODE_ARGS, "xqajit_mla_decode")


def launch(ptrs, mid, scales, device: int, workspace: Optional[torch.Tensor], engine: int = 0) -> None:
    """Packs XqajitMlaDecodeArgs and launches on the current stream of `device`;
    grows the default workspace when the launch needs more."""
    require_cuda(_OP, device)
    _LAUNCHER.launch(ptrs, mid, scales, device, workspace, engine, current_stream(device))


def _new_out(q: torch.Tensor) -> torch.Tensor:
    if not isinstance(q, torch.Tensor):
        require_tensor(_OP, "q", q)
    return torch.empty((*q.shape[:-1], V_DIM), dtype=torch.bfloat16, device=q.device)


def mla_decode(q: torch.Tensor, kv_cache: torch.Tensor, block_table: Optional[torch.Tensor] = None,
               seq_lens: Optional[torch.Tensor] = None, *, sm_scale: float, out: Optional[torch.Tensor] = None,
               q_scale=1.0, kv_scale=1.0, spec_mask: Optional[torch.Tensor] = None,
               workspace: Optional[torch.Tensor] = None, backend: str = "auto", num_splits: int = 0, engine=None,
               indices: Optional[torch.Tensor] = None, topk_length: Optional[torch.Tensor] = None,
               return_lse: bool = False, lse: Optional[torch.Tensor] = None,
               attn_sink: Optional[torch.Tensor] = None):
    """MLA decode of `q` over a paged latent cache, on the current torch stream.

    q: [batch, q_len, H, 576] or [batch, H, 576], bf16 or fp8 e4m3 (H 16/32/64/128,
    q_len 1-4). kv_cache: [num_pages, page_size, 576] (or [..., 1, 576]) latent rows,
    bf16 or fp8 (page_size 32/64); K is the whole row, V its first 512 values. With a
    bf16 q the cache may also hold DeepSeek-V3.2's fp8-with-scales rows (FlashMLA's
    is_fp8_kvcache layout): uint8 or float8_e4m3fn [num_pages, page_size, 656], each row
    512 e4m3 latent values, 4 float32 scales (one per 128 values) and 64 bf16 rope values;
    its row strides must be multiples of 16 bytes (both kernels run it).
    block_table: int32 [batch, max_pages]; seq_lens: int32 [batch], the keys of each
    request including its q_len new ones (0 gives zeros). sm_scale: the softmax
    scale, required (DeepSeek-V3: 1/sqrt(192), not 1/sqrt(576)). q_scale, kv_scale:
    dequantisation scales of fp8 inputs, floats or 1-element float32 CUDA tensors
    (read at launch: graph-replay safe); logits = q.k * sm_scale * q_scale *
    kv_scale and out = softmax.V * kv_scale. spec_mask: int32/uint32 [batch, q_len]
    packed bits over the last q_len keys (None: causal). Returns `out`, bf16
    [..., 512] (allocated when None). Raises ArgumentError naming a bad argument.

    Sparse MLA (DSA, DeepSeek-V3.2): pass `indices`, int32 [batch, q_len, topk] cache
    slots `page * page_size + offset` (-1, or any slot past the cache, is skipped),
    instead of block_table and seq_lens; `topk_length` (int32 [batch]) keeps the
    first entries of each request's lists. A row with no valid slot gives zeros.
    return_lse: also return the log-sum-exp, float32 [batch, q_len, H] (natural
    log of the sum of exp of the scaled logits; +inf for a row that saw no key),
    as `(out, lse)`; `lse` may be given (any strides, e.g. a transposed view of
    FlashMLA's [batch, H, q_len]). attn_sink: float32 [H]; out is scaled by
    exp(lse) / (exp(lse) + exp(sink)). These calls trace to a custom op of their own
    (mla_decode_extras) under torch.compile; eager, they take the same C fast path as
    the dense calls.
    """
    if out is None:
        out = _new_out(q)
    handle = 0 if engine is None else engine.handle
    if indices is not None or topk_length is not None or return_lse or lse is not None or attn_sink is not None:
        return _mla_decode_extended(q, kv_cache, block_table, seq_lens, out, sm_scale, q_scale, kv_scale, spec_mask,
                                    workspace, backend, num_splits, handle, indices, topk_length, return_lse, lse,
                                    attn_sink)
    if _is_compiling():
        torch.ops.xqajit.mla_decode(out, q, kv_cache, block_table, seq_lens, workspace, spec_mask,
                                    _sm_scale(sm_scale), *_op_scales(q_scale, kv_scale), backend, int(num_splits),
                                    handle)
        return out
    if _fast_call is not None:
        # launch_eager's C fast path, inlined: one Python frame less on the hot path.
        status = _fast_call(OP_MLA, q, kv_cache, block_table, seq_lens, out, sm_scale, q_scale, kv_scale, spec_mask,
                            workspace, backend, num_splits, handle)
        if not status:
            return out
        if status > 0 and status != _library.NEED_WORKSPACE:
            _library.raise_last_error(status)
    _run_and_register((q, kv_cache, block_table, seq_lens, out, sm_scale, q_scale, kv_scale, spec_mask, workspace,
                       backend, num_splits, handle))
    return out


def _mla_decode_extended(q, kv_cache, block_table, seq_lens, out, sm_scale, q_scale, kv_scale, spec_mask, workspace,
                         backend, num_splits, handle, indices, topk_length, return_lse, lse, attn_sink):
    """mla_decode() with indices, topk_length, lse or attn_sink: returns out, or (out, lse)
    where lse is asked for (allocated [batch, q_len, H] when only return_lse is set)."""
    if lse is None and return_lse:
        require_tensor(_OP, "q", q)
        lse = new_lse(q)
    if _is_compiling():
        torch.ops.xqajit.mla_decode_extras(out, q, kv_cache, block_table, seq_lens, workspace, spec_mask,
                                           _sm_scale(sm_scale), *_op_scales(q_scale, kv_scale), backend,
                                           int(num_splits), handle, indices, topk_length, lse, attn_sink)
    else:
        launch_eager((q, kv_cache, block_table, seq_lens, out, sm_scale, q_scale, kv_scale, spec_mask, workspace,
                      backend, num_splits, handle, indices, topk_length, lse, attn_sink))
    return out if lse is None else (out, lse)


def launch_eager(args) -> None:
    """An eager call; args as the C fast path keys them: mla_decode()'s 13 (q, kv_cache, block_table,
    seq_lens, out, sm_scale, q_scale, kv_scale, spec_mask, workspace, backend, num_splits, engine
    handle), then the EXTRAS (indices, topk_length, lse, attn_sink) for the extended calls.
    Metadata checked before takes the C fast path; anything else is checked (_run_and_register)."""
    if _fast_call is not None and _fast.launched(_fast_call(OP_MLA, *args)):
        return
    _run_and_register(args)


def _run_and_register(args) -> None:
    """The Python path of an eager call (args as launch_eager takes them): the checks, cached by
    metadata, and the launch; then the checked call is registered with the C fast path."""
    checked = _run(*args[:13], args[13:] or None)
    if _fast_call is not None:
        _register_fast(args, *checked)


def _register_fast(args, mid, device, tail) -> None:
    """Registers a checked call with the C fast path (args as launch_eager takes them; tail: the
    struct's TAIL_FIELDS with zero pointers). An optional tensor that is absent is not patched:
    its pointer stays NULL, and its None is part of the key."""
    off = MLA_DECODE_ARGS.offset
    patches = [(_fast.STREAM, 0, off("stream"), 0), (_fast.PTR, 0, off("q"), 0), (_fast.PTR, 4, off("out"), 0),
               (_fast.PTR, 1, off("kv_cache"), 0), (_fast.F32, 5, off("sm_scale"), 0)]
    optional = ((2, "block_table"), (3, "seq_lens"), (8, "spec_mask"), *zip(range(13, len(args)), EXTRAS))
    patches += [(_fast.PTR, arg, off(field), 0) for arg, field in optional if args[arg] is not None]
    _fast.scale_patch(patches, 6, args[6], off("q_scale"), off("q_scale_ptr"))
    _fast.scale_patch(patches, 7, args[7], off("kv_scale"), off("kv_scale_ptr"))
    _fast.workspace_patch(patches, 9, args[9], off("workspace"))
    buf = bytearray(_SIZE)
    _PACK(buf, 0, _SIZE, args[12], 0, *(0,) * 8, 0, 0, 0, *mid, 0.0, 1.0, 1.0, *tail)
    _fast.register(_fast.OP_MLA, bytes(buf), patches, device, args)


# Metadata of a call's arguments -> (shapes and strides, device, TAIL_FIELDS with zero pointers).
_CHECKED = CheckedCalls()


def _run(q, kv_cache, block_table, seq_lens, out, sm_scale, q_scale, kv_scale, spec_mask, workspace, backend,
         num_splits, handle, extras=None):
    """The eager launch behind mla_decode() and the custom ops: checks cached by the
    arguments' metadata, as gqa._run does. extras: the EXTRAS of an extended call (None
    for a dense call). Returns what was checked: (shapes and strides, device,
    TAIL_FIELDS with zero pointers)."""
    try:
        key = (q.shape, q.stride(), q.dtype, q.get_device(), kv_cache.shape, kv_cache.stride(), kv_cache.dtype,
               kv_cache.get_device(), _meta(block_table), _meta(seq_lens),
               out.shape, out.stride(), out.dtype, out.get_device(),
               type(q_scale) if type(q_scale) is float else _meta(q_scale) if isinstance(q_scale, torch.Tensor)
               else type(q_scale),
               type(kv_scale) if type(kv_scale) is float else _meta(kv_scale) if isinstance(kv_scale, torch.Tensor)
               else type(kv_scale),
               type(sm_scale), sm_scale > 0 if type(sm_scale) is float else None,
               None if spec_mask is None else _meta(spec_mask), backend, num_splits,
               None if extras is None else tuple(map(_meta, extras)))
        hit = _CHECKED.get(key)
    except (AttributeError, TypeError):  # not tensors, or unhashable: mla_decode_args says which argument
        key = hit = None
    if hit is None:
        indices, topk_length, lse, attn_sink = extras or _NO_EXTRAS
        ptrs, mid, scales, device = mla_decode_args(q, kv_cache, block_table, seq_lens, out, sm_scale=sm_scale,
                                                    q_scale=q_scale, kv_scale=kv_scale, spec_mask=spec_mask,
                                                    backend=backend, num_splits=num_splits, indices=indices,
                                                    topk_length=topk_length, lse=lse, attn_sink=attn_sink)
        checked = (mid, device, (scales[3], *_NO_POINTERS, *scales[8:]))
        _CHECKED.remember(key, checked)
        launch(ptrs, mid, scales, device, workspace, handle)
        return checked
    mid, device, tail = hit
    q_s, q_sp = _scale(q_scale)
    kv_s, kv_sp = _scale(kv_scale)
    ptrs = (q.data_ptr(), out.data_ptr(), kv_cache.data_ptr(), 0 if block_table is None else block_table.data_ptr(),
            0 if seq_lens is None else seq_lens.data_ptr(), 0 if spec_mask is None else spec_mask.data_ptr(), q_sp,
            kv_sp)
    if extras is not None:
        tail = (tail[0], *[0 if t is None else t.data_ptr() for t in extras], *tail[5:])
    scales = (float(sm_scale), q_s, kv_s, *tail)
    if workspace is None and device >= 0 and _LAUNCHER.launch_default(ptrs, mid, scales, device, handle,
                                                                      current_stream(device)):
        return hit
    launch(ptrs, mid, scales, device, workspace, handle)
    return hit


def mla_decode_spec(q: torch.Tensor, kv_cache: torch.Tensor, *, indices: Optional[torch.Tensor] = None,
                    backend: str = "auto", arch: Optional[str] = None):
    """The kernel spec mla_decode() runs for these tensors (sparse with `indices`), for
    xqajit.prewarm(): on `arch`, or q's GPU's best arch. Tensors may be CPU or meta tensors."""
    from ..spec import device_arch, spec

    require_tensor(_OP, "q", q)
    require_tensor(_OP, "kv_cache", kv_cache)
    if q.dim() not in (3, 4) or q.shape[-1] != QK_DIM:
        fail(_OP, "q", f"has shape {tuple(q.shape)}: expected [batch, q_len, num_heads, {QK_DIM}]")
    input_code = dtype_code(_OP, "q", q, (BF16, FP8))
    kv_code = _kv_code(kv_cache, input_code)
    if backend not in BACKENDS:
        fail(_OP, "backend", f"= {backend!r}: allowed 'auto', 'portable', 'hopper'")
    if arch is None:
        require_cuda(_OP, q.get_device())
        arch = device_arch(q.get_device())
    fields = dict(kind="mla", input=DTYPE_NAME[input_code], kv=DTYPE_NAME[kv_code], output="bf16", head_dim=QK_DIM,
                  page_size=kv_cache.shape[1], group=q.shape[-2], q_len=q.shape[1] if q.dim() == 4 else 1, arch=arch,
                  sparse=int(indices is not None), **({} if backend == "auto" else {"backend": backend}))
    return spec(**fields)


def _op_scales(q_scale, kv_scale):
    """Scales as the custom op takes them: (tensor or None, float) per scale."""
    def split(v):
        return (v, 1.0) if isinstance(v, torch.Tensor) else (None, float(v))
    return (*split(q_scale), *split(kv_scale))


def validate(q, kv_cache, block_table=None, seq_lens=None, *, sm_scale, out=None, **kw):
    """Every check mla_decode() makes, Python's and the library's (xqajit::validate),
    without a GPU and without launching. Tensors may live on the CPU."""
    if out is None:
        out = _new_out(q)
    ptrs, mid, scales, _ = mla_decode_args(q, kv_cache, block_table, seq_lens, out, sm_scale=sm_scale, **kw)
    buf, addr = MLA_DECODE_ARGS.buffer()
    _PACK(buf, 0, _SIZE, 0, 0, *ptrs, 0, 0, 0, *mid, *scales)
    status = _library.library().xqajit_mla_decode_validate(addr)
    if status:
        _library.raise_last_error(status)


# --- the custom ops torch.compile traces (and CUDA graphs capture) ------------------
# mla_decode and mla_decode_extras share their implementations: mla_decode_extras's schema
# takes optional block_table / seq_lens, and the EXTRAS after the engine.


def _mla_op(out, q, kv_cache, block_table, seq_lens, workspace, spec_mask, sm_scale, q_scale_t, q_scale,
            kv_scale_t, kv_scale, backend, num_splits, engine, *extras) -> None:
    _run(q, kv_cache, block_table, seq_lens, out, sm_scale, q_scale if q_scale_t is None else q_scale_t,
         kv_scale if kv_scale_t is None else kv_scale_t, spec_mask, workspace, backend, num_splits, engine,
         extras or None)


def _mla_fake(out, q, kv_cache, block_table, seq_lens, workspace, spec_mask, sm_scale, q_scale_t, q_scale,
              kv_scale_t, kv_scale, backend, num_splits, engine, *extras) -> None:
    mla_decode_args(q, kv_cache, block_table, seq_lens, out, sm_scale=sm_scale, spec_mask=spec_mask,
                    backend=backend, num_splits=num_splits, ptr=_no_ptr, **dict(zip(EXTRAS, extras)))


_MLA_SCHEMA = ("(Tensor(a!) out, Tensor q, Tensor kv_cache, Tensor{opt} block_table, Tensor{opt} seq_lens, "
               "Tensor(b!)? workspace, Tensor? spec_mask, float sm_scale, Tensor? q_scale_t, float q_scale, "
               "Tensor? kv_scale_t, float kv_scale, str backend, int num_splits, int engine")
register("mla_decode", _MLA_SCHEMA.format(opt="") + ") -> ()", _mla_op, _mla_fake)
register("mla_decode_extras", _MLA_SCHEMA.format(opt="?") + ", Tensor? indices, Tensor? topk_length, "
         "Tensor(c!)? lse, Tensor? attn_sink) -> ()", _mla_op, _mla_fake)

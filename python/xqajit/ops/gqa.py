"""xqajit.decode: GQA/MHA decode attention over a paged KV cache, on torch tensors.

Three ways in, one launcher:
  decode(...)                  eager: checks, packs XqajitDecodeArgs, calls the C ABI (a few us);
  torch.ops.xqajit.decode      the custom op torch.compile traces (fake impl: checks only),
  torch.ops.xqajit.decode_lse  and its twin for the calls with an lse output (one more, mutated, tensor);
  decode_args(...)             the packed values without launching (tests, dry runs).
"""

from __future__ import annotations

from typing import Optional

import torch

from .. import _library
from .._tensors import (BF16, DTYPE_CODE, DTYPE_NAME, FP8, FP16, current_stream, dtype_code, fail, lse_arg, new_lse,
                        optional_ptr, paged_table, require_cuda, require_tensor, same_device, scale_arg, strides_for)
from . import _fast
from ._abi import DECODE_ARGS
from ._fast import OP_DECODE
from ._fast import call as _fast_call
from ._launch import CheckedCalls, Launcher
from ._launch import data_ptr as _data_ptr
from ._launch import meta as _meta
from ._launch import no_ptr as _no_ptr
from ._launch import scale_value as _scale
from ._register import register

_OP = "decode"
_is_compiling = torch.compiler.is_compiling  # dynamo folds it to True while tracing
_PACK = DECODE_ARGS.packer.pack_into
_SIZE = DECODE_ARGS.size
_SPEC_MASK_DTYPES = (torch.int32, torch.uint32) if hasattr(torch, "uint32") else (torch.int32,)
_LAYOUTS = {"NHD": (1, 2), "HND": (2, 1)}  # dims of (token, head) in a 4-D K/V cache


def decode_args(q, k_cache, v_cache, block_table, seq_lens, out, *, q_scale=1.0, kv_scale=1.0,
                rcp_out_scale=1.0, sliding_window=0, sinks=None, spec_mask=None, kv_layout="NHD",
                num_splits=0, lse=None, ptr=_data_ptr):
    """Checks every argument and returns the fields of XqajitDecodeArgs as
    (pointers, shapes and strides, scales and the lse tail, q's device index). `v_cache`
    None: `k_cache` is the combined [num_pages, 2, ...] cache. Raises ArgumentError
    naming the argument."""
    require_tensor(_OP, "q", q)
    qs, qst = q.shape, q.stride()
    if len(qs) == 4:
        batch, q_len, hq, d = qs
        q_str = strides_for(_OP, "q", qs, qst, (0, 1, 2))
    elif len(qs) == 3:
        batch, hq, d = qs
        q_len = 1
        q_str = strides_for(_OP, "q", qs, qst, (0, 0, 1))
        q_str[1] = q_str[2] * hq  # no token axis: any stride past the heads
    else:
        fail(_OP, "q", f"has shape {tuple(qs)}: expected [batch, q_len, num_q_heads, head_dim] or "
                       "[batch, num_q_heads, head_dim]")
    input_code = dtype_code(_OP, "q", q, (FP16, BF16))
    device = q.get_device()

    dims = _LAYOUTS.get(kv_layout)
    if dims is None:
        fail(_OP, "kv_layout", f"= {kv_layout!r}: allowed 'NHD' ([pages, page_size, heads, dim]) or 'HND'")
    combined = v_cache is None
    require_tensor(_OP, "kv_cache" if combined else "k_cache", k_cache)
    if combined:
        ks, kst = k_cache.shape, k_cache.stride()
        if len(ks) != 5 or ks[1] != 2:
            fail(_OP, "kv_cache", f"has shape {tuple(ks)}: expected [num_pages, 2, page_size, num_kv_heads, "
                                  "head_dim] (HND: [num_pages, 2, num_kv_heads, page_size, head_dim])")
        kv_code = dtype_code(_OP, "kv_cache", k_cache, (input_code, FP8))
        same_device(_OP, "kv_cache", k_cache, device)
        k_str = strides_for(_OP, "kv_cache", ks, kst, (0, dims[0] + 1, dims[1] + 1))
        v_str = k_str
        num_pages, page_size, hkv, kd = ks[0], ks[dims[0] + 1], ks[dims[1] + 1], ks[4]
        k_ptr = ptr(k_cache)
        v_ptr = k_ptr + kst[1] * k_cache.element_size() if k_ptr else 0
    else:
        require_tensor(_OP, "v_cache", v_cache)
        ks = k_cache.shape
        if len(ks) != 4:
            fail(_OP, "k_cache", f"has shape {tuple(ks)}: expected 4 dims, [num_pages, page_size, num_kv_heads, "
                                 f"head_dim] ({kv_layout})" if kv_layout == "NHD" else
                 f"has shape {tuple(ks)}: expected 4 dims, [num_pages, num_kv_heads, page_size, head_dim] (HND)")
        if v_cache.shape != ks:
            fail(_OP, "v_cache", f"has shape {tuple(v_cache.shape)} but k_cache has {tuple(ks)}")
        kv_code = dtype_code(_OP, "k_cache", k_cache, (input_code, FP8))
        if v_cache.dtype != k_cache.dtype:
            fail(_OP, "v_cache", f"has dtype {v_cache.dtype} but k_cache has {k_cache.dtype}")
        same_device(_OP, "k_cache", k_cache, device)
        same_device(_OP, "v_cache", v_cache, device)
        k_str = strides_for(_OP, "k_cache", ks, k_cache.stride(), (0, dims[0], dims[1]))
        v_str = strides_for(_OP, "v_cache", ks, v_cache.stride(), (0, dims[0], dims[1]))
        num_pages, page_size, hkv, kd = ks[0], ks[dims[0]], ks[dims[1]], ks[3]
        k_ptr, v_ptr = ptr(k_cache), ptr(v_cache)
    kv_name = "kv_cache" if combined else "k_cache"
    if kd != d:
        fail(_OP, kv_name, f"has head_dim {kd} but q has {d}")
    if hkv < 1 or hq % hkv:
        fail(_OP, kv_name, f"has {hkv} KV heads, which does not divide q's {hq} heads "
                           f"(is kv_layout={kv_layout!r} right?)")

    bts, max_pages = paged_table(_OP, block_table, seq_lens, batch, device)

    require_tensor(_OP, "out", out)
    if out.shape != qs:
        fail(_OP, "out", f"has shape {tuple(out.shape)} but q has {tuple(qs)}")
    output_code = dtype_code(_OP, "out", out, (input_code, FP8))
    same_device(_OP, "out", out, device)
    ost = out.stride()
    if len(qs) == 4:
        o_str = strides_for(_OP, "out", qs, ost, (0, 1, 2))
    else:
        o_str = strides_for(_OP, "out", qs, ost, (0, 0, 1))
        o_str[1] = o_str[2] * hq

    q_scale, q_scale_ptr = scale_arg(_OP, "q_scale", q_scale, device)
    kv_scale, kv_scale_ptr = scale_arg(_OP, "kv_scale", kv_scale, device)
    rcp_out_scale, rcp_out_scale_ptr = scale_arg(_OP, "out_scale", rcp_out_scale, device)
    sinks_ptr = optional_ptr(_OP, "sinks", sinks, device, (torch.float32,), hq, ptr)
    mask_ptr = optional_ptr(_OP, "spec_mask", spec_mask, device, _SPEC_MASK_DTYPES,
                            batch * q_len * ((q_len + 31) // 32), ptr)
    ptrs = (ptr(q), ptr(out), k_ptr, v_ptr, ptr(block_table), ptr(seq_lens), sinks_ptr, mask_ptr,
            q_scale_ptr, kv_scale_ptr, rcp_out_scale_ptr)
    mid = (q_str[0], q_str[1], q_str[2], o_str[0], o_str[1], o_str[2],
           k_str[0], k_str[1], k_str[2], v_str[0], v_str[1], v_str[2],
           bts[0] if batch > 1 else max_pages,
           input_code, kv_code, output_code, batch, q_len, hq, hkv, d, page_size, num_pages, max_pages,
           int(sliding_window), int(num_splits), 0, 1)
    lse_ptr, ls = lse_arg(_OP, lse, batch, q_len, hq, "num_q_heads", device, ptr)
    return ptrs, mid, (q_scale, kv_scale, rcp_out_scale, lse_ptr, *ls), device


def DTYPE_CODE_OF(dtype: torch.dtype) -> int:  # noqa: N802
    if dtype not in DTYPE_CODE:
        fail(_OP, "out_dtype", f"= {dtype}: allowed torch.float16, torch.bfloat16, torch.float8_e4m3fn")
    return DTYPE_CODE[dtype]


_LAUNCHER = Launcher(_OP, DECODE_ARGS, "xqajit_decode")


def launch(ptrs, mid, scales, device: int, workspace: Optional[torch.Tensor], engine: int = 0) -> None:
    """Packs XqajitDecodeArgs and launches on the current stream of `device`; grows
    the default workspace when the launch needs more (an explicit one never is)."""
    require_cuda(_OP, device)
    _LAUNCHER.launch(ptrs, mid, scales, device, workspace, engine, current_stream(device))


def _output_dtype(q: torch.Tensor, out_scale) -> torch.dtype:
    return torch.float8_e4m3fn if out_scale is not None else q.dtype


def _rcp(out_scale):
    """The kernel takes the reciprocal output scale (fp8 output only)."""
    if out_scale is None:
        return 1.0
    if isinstance(out_scale, torch.Tensor):
        return torch.reciprocal(out_scale) if out_scale.dtype == torch.float32 else out_scale
    return 1.0 / float(out_scale)


def decode(q: torch.Tensor, k_cache: Optional[torch.Tensor] = None, v_cache: Optional[torch.Tensor] = None,
           block_table: Optional[torch.Tensor] = None, seq_lens: Optional[torch.Tensor] = None, *,
           kv_cache: Optional[torch.Tensor] = None, out: Optional[torch.Tensor] = None, kv_scale=1.0, q_scale=1.0,
           out_scale=None, sliding_window: int = 0, sinks: Optional[torch.Tensor] = None,
           spec_mask: Optional[torch.Tensor] = None, workspace: Optional[torch.Tensor] = None,
           kv_layout: str = "NHD", num_splits: int = 0, engine=None, return_lse: bool = False,
           lse: Optional[torch.Tensor] = None):
    """Decode attention of `q` over a paged KV cache, on the current torch stream.

    q: [batch, q_len, Hq, D] or [batch, Hq, D], fp16/bf16. Caches: `k_cache`/`v_cache`
    [num_pages, page_size, Hkv, D] (any strides: an HND-stored cache can be passed
    as a transposed view, or with kv_layout="HND" as [num_pages, Hkv, page_size, D]),
    or `kv_cache` [num_pages, 2, page_size, Hkv, D]; q's dtype or fp8 e4m3 (uint8
    accepted as its bytes). block_table: int32 [batch, max_pages]; seq_lens: int32
    [batch] (0 gives zeros). Scales: floats or 1-element float32 CUDA tensors (read
    at launch: graph-replay safe). out_scale: fp8 output, out = attention / out_scale.
    spec_mask: int32/uint32 [batch, q_len, ceil(q_len/32)], needed when q_len > 1.
    Returns `out` (allocated when None). Raises ArgumentError naming a bad argument.
    return_lse: also return the log-sum-exp, float32 [batch, q_len, Hq] ([batch, Hq]
    for a 3-D q): the natural log of the sum of exp of each row's scaled logits (the
    sink not included; +inf for a row that saw no key), to merge this attention with
    another piece's; as `(out, lse)`. `lse` may be given (any strides). These calls
    trace to a custom op of their own (decode_lse) under torch.compile; eager, they take
    the same C fast path as the other calls.
    """
    if out is None:
        out = torch.empty(q.shape, dtype=_output_dtype(q, out_scale), device=q.device)
    handle = 0 if engine is None else engine.handle
    if return_lse or lse is not None:
        return _decode_with_lse(q, k_cache, v_cache, block_table, seq_lens, kv_cache, out, q_scale, kv_scale,
                                out_scale, sliding_window, sinks, spec_mask, workspace, kv_layout, num_splits, handle,
                                lse)
    compiling = _is_compiling()
    if _fast_call is not None and not compiling:
        # launch_eager's C fast path, inlined: one Python frame less on the hot path.
        status = _fast_call(OP_DECODE, q, k_cache, v_cache, block_table, seq_lens, kv_cache, out, q_scale, kv_scale,
                            out_scale, sliding_window, sinks, spec_mask, workspace, kv_layout, num_splits, handle)
        if not status:
            return out
        if status > 0 and status != _library.NEED_WORKSPACE:
            _library.raise_last_error(status)
    if compiling:
        torch.ops.xqajit.decode(out, q, _one_cache_form(k_cache, v_cache, kv_cache), v_cache, block_table, seq_lens,
                                workspace, sinks, spec_mask, *_op_scales(q_scale, kv_scale, out_scale),
                                int(sliding_window), kv_layout, int(num_splits), handle)
        return out
    _run_and_register((q, k_cache, v_cache, block_table, seq_lens, kv_cache, out, q_scale, kv_scale, out_scale,
                       sliding_window, sinks, spec_mask, workspace, kv_layout, num_splits, handle))
    return out


def _decode_with_lse(q, k_cache, v_cache, block_table, seq_lens, kv_cache, out, q_scale, kv_scale, out_scale,
                     sliding_window, sinks, spec_mask, workspace, kv_layout, num_splits, handle, lse):
    """decode() with the lse output: returns (out, lse), lse allocated [batch, q_len, Hq] when None."""
    k_or_kv = _one_cache_form(k_cache, v_cache, kv_cache)
    if lse is None:
        require_tensor(_OP, "q", q)
        lse = new_lse(q)
    if _is_compiling():
        torch.ops.xqajit.decode_lse(out, q, k_or_kv, v_cache, block_table, seq_lens, workspace, sinks, spec_mask,
                                    *_op_scales(q_scale, kv_scale, out_scale), int(sliding_window), kv_layout,
                                    int(num_splits), handle, lse)
    else:
        launch_eager((q, k_cache, v_cache, block_table, seq_lens, kv_cache, out, q_scale, kv_scale, out_scale,
                      sliding_window, sinks, spec_mask, workspace, kv_layout, num_splits, handle, lse))
    return out, lse


def launch_eager(args) -> None:
    """An eager call; args as the C fast path keys them: decode()'s 17 (q, k_cache, v_cache, block_table,
    seq_lens, kv_cache, out, q_scale, kv_scale, out_scale, sliding_window, sinks, spec_mask, workspace,
    kv_layout, num_splits, engine handle), then lse for the calls with an lse output. Metadata checked before
    takes the C fast path; anything else is checked (_run_and_register)."""
    if _fast_call is not None and _fast.launched(_fast_call(OP_DECODE, *args)):
        return
    _run_and_register(args)


def _run_and_register(args) -> None:
    """The Python path of an eager call (args as launch_eager takes them): the checks, cached by
    metadata, and the launch; then the checked call is registered with the C fast path."""
    (q, k_cache, v_cache, block_table, seq_lens, kv_cache, out, q_scale, kv_scale, out_scale, sliding_window, sinks,
     spec_mask, workspace, kv_layout, num_splits, handle) = args[:17]
    checked = _run(q, _one_cache_form(k_cache, v_cache, kv_cache), v_cache, block_table, seq_lens, out, q_scale,
                   kv_scale, out_scale, sliding_window, sinks, spec_mask, workspace, kv_layout, num_splits, handle,
                   *args[17:])
    if _fast_call is not None:
        _register_fast(args, *checked)


def _one_cache_form(k_cache, v_cache, kv_cache):
    """The K cache decode() reads: the combined kv_cache, or k_cache beside v_cache (never both forms)."""
    if kv_cache is not None:
        if k_cache is not None or v_cache is not None:
            fail(_OP, "kv_cache", "was given with k_cache/v_cache: pass either the combined cache or both halves")
        return kv_cache
    if k_cache is None or v_cache is None:
        fail(_OP, "k_cache" if k_cache is None else "v_cache", "is missing: pass k_cache and v_cache, or kv_cache=")
    return k_cache


def _register_fast(args, mid, device, v_offset, lse_strides) -> None:
    """Registers a checked call with the C fast path (args as launch_eager takes them). An optional
    tensor that is absent is not patched: its pointer stays NULL, and its None is part of the key."""
    q_scale, kv_scale, out_scale, workspace = args[7], args[8], args[9], args[13]
    if isinstance(out_scale, torch.Tensor):
        return  # its reciprocal is a torch op per call: the Python path keeps it
    combined = args[5] is not None
    off = DECODE_ARGS.offset
    patches = [(_fast.STREAM, 0, off("stream"), 0), (_fast.PTR, 0, off("q"), 0), (_fast.PTR, 6, off("out"), 0),
               (_fast.PTR, 5 if combined else 1, off("k_cache"), 0),
               (_fast.PTR, 5, off("v_cache"), v_offset) if combined else (_fast.PTR, 2, off("v_cache"), 0),
               (_fast.PTR, 3, off("block_table"), 0), (_fast.PTR, 4, off("seq_lens"), 0)]
    patches += [(_fast.PTR, arg, off(field), 0) for arg, field in ((11, "sinks"), (12, "spec_mask"), (17, "lse"))
                if arg < len(args) and args[arg] is not None]
    _fast.scale_patch(patches, 7, q_scale, off("q_scale"), off("q_scale_ptr"))
    _fast.scale_patch(patches, 8, kv_scale, off("kv_scale"), off("kv_scale_ptr"))
    if out_scale is not None:
        patches.append((_fast.RCP_F32, 9, off("rcp_out_scale"), 0))
    _fast.workspace_patch(patches, 13, workspace, off("workspace"))
    buf = bytearray(_SIZE)
    _PACK(buf, 0, _SIZE, args[16], 0, *(0,) * 11, 0, 0, 0, *mid, 1.0, 1.0, 1.0, 0, *lse_strides)
    _fast.register(_fast.OP_DECODE, bytes(buf), patches, device, args)


def _run(q, k_cache, v_cache, block_table, seq_lens, out, q_scale, kv_scale, out_scale, sliding_window, sinks,
         spec_mask, workspace, kv_layout, num_splits, handle, lse=None):
    """The eager launch behind decode() and the custom ops (the Python path; lse: the calls
    with an lse output). The checks depend on metadata alone: a call whose metadata was seen before reuses
    their result and only reads pointers and scales. Returns what was checked:
    (shapes and strides, device, v - k offset, lse strides)."""
    try:
        key = (q.shape, q.stride(), q.dtype, q.get_device(), k_cache.shape, k_cache.stride(), k_cache.dtype,
               k_cache.get_device(), None if v_cache is None else (v_cache.shape, v_cache.stride(), v_cache.dtype,
               v_cache.get_device()), block_table.shape, block_table.stride(), block_table.dtype,
               block_table.get_device(), seq_lens.shape, seq_lens.stride(), seq_lens.dtype, seq_lens.get_device(),
               out.shape, out.stride(), out.dtype, out.get_device(),
               type(q_scale) if type(q_scale) is float else _scale_meta(q_scale),
               type(kv_scale) if type(kv_scale) is float else _scale_meta(kv_scale),
               None if out_scale is None else _scale_meta(out_scale),
               None if sinks is None else _meta(sinks), None if spec_mask is None else _meta(spec_mask),
               sliding_window, kv_layout, num_splits, None if lse is None else _meta(lse))
        hit = _CHECKED.get(key)
    except (AttributeError, TypeError):  # not tensors, or unhashable: decode_args says which argument
        key = hit = None
    rcp = 1.0 if out_scale is None else _rcp(out_scale)  # keeps a reciprocal tensor alive until the launch
    if hit is None:
        ptrs, mid, scales, device = decode_args(q, k_cache, v_cache, block_table, seq_lens, out, q_scale=q_scale,
                                                kv_scale=kv_scale, rcp_out_scale=rcp, sliding_window=sliding_window,
                                                sinks=sinks, spec_mask=spec_mask, kv_layout=kv_layout,
                                                num_splits=num_splits, lse=lse)
        checked = (mid, device, ptrs[3] - ptrs[2], scales[4:])
        _CHECKED.remember(key, checked)
        launch(ptrs, mid, scales, device, workspace, handle)
        return checked
    mid, device, v_offset, lse_strides = hit
    k_ptr = k_cache.data_ptr()
    q_s, q_sp = (q_scale, 0) if type(q_scale) is float else _scale(q_scale)
    kv_s, kv_sp = (kv_scale, 0) if type(kv_scale) is float else _scale(kv_scale)
    rcp_s, rcp_sp = (rcp, 0) if type(rcp) is float else _scale(rcp)
    ptrs = (q.data_ptr(), out.data_ptr(), k_ptr, k_ptr + v_offset if v_cache is None else v_cache.data_ptr(),
            block_table.data_ptr(), seq_lens.data_ptr(), 0 if sinks is None else sinks.data_ptr(),
            0 if spec_mask is None else spec_mask.data_ptr(), q_sp, kv_sp, rcp_sp)
    scales = (q_s, kv_s, rcp_s, 0 if lse is None else lse.data_ptr(), *lse_strides)
    if workspace is None and device >= 0 and _LAUNCHER.launch_default(ptrs, mid, scales, device, handle,
                                                                      current_stream(device)):
        return hit
    launch(ptrs, mid, scales, device, workspace, handle)
    return hit


# Metadata of a call's arguments -> (shapes and strides, device, v - k offset, lse strides).
_CHECKED = CheckedCalls()


def _scale_meta(s):
    return _meta(s) if isinstance(s, torch.Tensor) else type(s)


def decode_spec(q: torch.Tensor, k_cache: Optional[torch.Tensor] = None, *, kv_cache: Optional[torch.Tensor] = None,
                out_dtype: Optional[torch.dtype] = None, sliding_window: int = 0, kv_layout: str = "NHD",
                arch: Optional[str] = None):
    """The kernel spec decode() runs for these tensors, for xqajit.prewarm(): on
    `arch`, or on the best arch of q's GPU. Tensors may be CPU or meta tensors."""
    from ..spec import device_arch, spec

    cache = kv_cache if kv_cache is not None else k_cache
    require_tensor(_OP, "kv_cache" if kv_cache is not None else "k_cache", cache)
    dims = _LAYOUTS.get(kv_layout)
    if dims is None:
        fail(_OP, "kv_layout", f"= {kv_layout!r}: allowed 'NHD' or 'HND'")
    shape = cache.shape[2:] if kv_cache is not None else cache.shape[1:]
    input_code = dtype_code(_OP, "q", q, (FP16, BF16))
    kv_code = dtype_code(_OP, "k_cache", cache, (input_code, FP8))
    output_code = input_code if out_dtype is None else DTYPE_CODE_OF(out_dtype)
    q_len = q.shape[1] if q.dim() == 4 else 1
    if arch is None:
        require_cuda(_OP, q.get_device())
        arch = device_arch(q.get_device())
    return spec(kind="gqa", input=DTYPE_NAME[input_code], kv=DTYPE_NAME[kv_code], output=DTYPE_NAME[output_code],
                head_dim=q.shape[-1], page_size=shape[dims[0] - 1], group=q.shape[-2] // shape[dims[1] - 1],
                q_len=q_len, sliding_window=int(sliding_window > 0), arch=arch)


def _op_scales(q_scale, kv_scale, out_scale):
    """Scales as the custom op takes them: (tensor or None, float) per scale."""
    def split(v, default):
        if v is None:
            return None, default
        return (v, default) if isinstance(v, torch.Tensor) else (None, float(v))
    return (*split(q_scale, 1.0), *split(kv_scale, 1.0), *split(out_scale, 0.0))


def validate(q, k_cache=None, v_cache=None, block_table=None, seq_lens=None, *, kv_cache=None, out=None, **kw):
    """Every check decode() makes, Python's and the library's (xqajit::validate),
    without a GPU and without launching. Tensors may live on the CPU."""
    if kv_cache is not None:
        k_cache, v_cache = kv_cache, None
    if out is None:
        out = torch.empty(q.shape, dtype=_output_dtype(q, kw.get("out_scale")), device=q.device)
    kw["rcp_out_scale"] = _rcp(kw.pop("out_scale", None))
    ptrs, mid, scales, _ = decode_args(q, k_cache, v_cache, block_table, seq_lens, out, **kw)
    buf, addr = DECODE_ARGS.buffer()
    _PACK(buf, 0, _SIZE, 0, 0, *ptrs, 0, 0, 0, *mid, *scales)
    status = _library.library().xqajit_decode_validate(addr)
    if status:
        _library.raise_last_error(status)


# --- the custom ops torch.compile traces (and CUDA graphs capture) ------------------
# decode and decode_lse share their implementations: decode_lse's schema has one more
# argument, the lse it writes.


def _decode_op(out, q, k_cache, v_cache, block_table, seq_lens, workspace, sinks, spec_mask, q_scale_t, q_scale,
               kv_scale_t, kv_scale, out_scale_t, out_scale, sliding_window, kv_layout, num_splits, engine,
               lse=None) -> None:
    _run(q, k_cache, v_cache, block_table, seq_lens, out, q_scale if q_scale_t is None else q_scale_t,
         kv_scale if kv_scale_t is None else kv_scale_t, out_scale_t if out_scale_t is not None else (out_scale or None),
         sliding_window, sinks, spec_mask, workspace, kv_layout, num_splits, engine, lse)


def _decode_fake(out, q, k_cache, v_cache, block_table, seq_lens, workspace, sinks, spec_mask, q_scale_t, q_scale,
                 kv_scale_t, kv_scale, out_scale_t, out_scale, sliding_window, kv_layout, num_splits, engine,
                 lse=None) -> None:
    # Shapes, dtypes, strides and devices are checked while tracing; pointers and
    # scale tensors only exist at run time.
    decode_args(q, k_cache, v_cache, block_table, seq_lens, out, sliding_window=sliding_window, sinks=sinks,
                spec_mask=spec_mask, kv_layout=kv_layout, num_splits=num_splits, lse=lse, ptr=_no_ptr)


_DECODE_SCHEMA = ("(Tensor(a!) out, Tensor q, Tensor k_cache, Tensor? v_cache, Tensor block_table, Tensor seq_lens, "
                  "Tensor(b!)? workspace, Tensor? sinks, Tensor? spec_mask, Tensor? q_scale_t, float q_scale, "
                  "Tensor? kv_scale_t, float kv_scale, Tensor? out_scale_t, float out_scale, int sliding_window, "
                  "str kv_layout, int num_splits, int engine")
register("decode", _DECODE_SCHEMA + ") -> ()", _decode_op, _decode_fake)
register("decode_lse", _DECODE_SCHEMA + ", Tensor(c!) lse) -> ()", _decode_op, _decode_fake)

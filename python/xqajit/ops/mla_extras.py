"""Sparse MLA (DSA) and mla_decode's optional outputs (lse, attention sinks): the
eager launch, and the torch custom op torch.ops.xqajit.mla_decode_extras that
torch.compile traces and CUDA graphs capture (mla_decode's dense calls keep their own
op: ops/mla.py). Eager, these calls take mla.py's paths with the four tensors as
more arguments (mla.EXTRAS): the C fast path for metadata checked before, else the
checks (cached by metadata, which of the four are given included) and the launch."""

from __future__ import annotations

import torch

from .._tensors import new_lse, require_tensor
from ._launch import no_ptr as _no_ptr
from ._register import register
from .mla import _OP, _op_scales, _run, _sm_scale, launch_eager, mla_decode_args

_is_compiling = torch.compiler.is_compiling  # dynamo folds it to True while tracing


def run_extended(q, kv_cache, block_table, seq_lens, out, sm_scale, q_scale, kv_scale, spec_mask, workspace,
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


def _op(out, q, kv_cache, block_table, seq_lens, workspace, spec_mask, sm_scale, q_scale_t, q_scale, kv_scale_t,
        kv_scale, backend, num_splits, engine, indices, topk_length, lse, attn_sink) -> None:
    _run(q, kv_cache, block_table, seq_lens, out, sm_scale, q_scale if q_scale_t is None else q_scale_t,
         kv_scale if kv_scale_t is None else kv_scale_t, spec_mask, workspace, backend, num_splits, engine,
         (indices, topk_length, lse, attn_sink))


def _fake(out, q, kv_cache, block_table, seq_lens, workspace, spec_mask, sm_scale, q_scale_t, q_scale, kv_scale_t,
          kv_scale, backend, num_splits, engine, indices, topk_length, lse, attn_sink) -> None:
    mla_decode_args(q, kv_cache, block_table, seq_lens, out, sm_scale=sm_scale, spec_mask=spec_mask,
                    backend=backend, num_splits=num_splits, indices=indices, topk_length=topk_length, lse=lse,
                    attn_sink=attn_sink, ptr=_no_ptr)


register("mla_decode_extras",
         "(Tensor(a!) out, Tensor q, Tensor kv_cache, Tensor? block_table, Tensor? seq_lens, Tensor(b!)? workspace, "
         "Tensor? spec_mask, float sm_scale, Tensor? q_scale_t, float q_scale, Tensor? kv_scale_t, float kv_scale, "
         "str backend, int num_splits, int engine, Tensor? indices, Tensor? topk_length, Tensor(c!)? lse, "
         "Tensor? attn_sink) -> ()",
         _op, _fake)

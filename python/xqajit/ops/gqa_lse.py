"""decode() with its log-sum-exp output (`return_lse` / `lse=`): the eager launch, and the
torch custom op torch.ops.xqajit.decode_lse that torch.compile traces and CUDA graphs
capture (decode()'s other calls keep their own op: ops/gqa.py). Eager, these calls take
gqa.py's paths with lse as one more argument: the C fast path for metadata checked
before, else the checks (cached by metadata, lse's included) and the launch."""

from __future__ import annotations

import torch

from .._tensors import new_lse, require_tensor
from ._launch import no_ptr as _no_ptr
from ._register import register
from .gqa import _OP, _one_cache_form, _op_scales, _run, decode_args, launch_eager

_is_compiling = torch.compiler.is_compiling  # dynamo folds it to True while tracing


def run_with_lse(q, k_cache, v_cache, block_table, seq_lens, kv_cache, out, q_scale, kv_scale, out_scale,
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


def _op(out, q, k_cache, v_cache, block_table, seq_lens, workspace, sinks, spec_mask, q_scale_t, q_scale, kv_scale_t,
        kv_scale, out_scale_t, out_scale, sliding_window, kv_layout, num_splits, engine, lse) -> None:
    _run(q, k_cache, v_cache, block_table, seq_lens, out, q_scale if q_scale_t is None else q_scale_t,
         kv_scale if kv_scale_t is None else kv_scale_t,
         out_scale_t if out_scale_t is not None else (out_scale or None), sliding_window, sinks, spec_mask, workspace,
         kv_layout, num_splits, engine, lse)


def _fake(out, q, k_cache, v_cache, block_table, seq_lens, workspace, sinks, spec_mask, q_scale_t, q_scale,
          kv_scale_t, kv_scale, out_scale_t, out_scale, sliding_window, kv_layout, num_splits, engine, lse) -> None:
    decode_args(q, k_cache, v_cache, block_table, seq_lens, out, sliding_window=sliding_window, sinks=sinks,
                spec_mask=spec_mask, kv_layout=kv_layout, num_splits=num_splits, lse=lse, ptr=_no_ptr)


register("decode_lse", "(Tensor(a!) out, Tensor q, Tensor k_cache, Tensor? v_cache, Tensor block_table, "
                       "Tensor seq_lens, Tensor(b!)? workspace, Tensor? sinks, Tensor? spec_mask, Tensor? q_scale_t, "
                       "float q_scale, Tensor? kv_scale_t, float kv_scale, Tensor? out_scale_t, float out_scale, "
                       "int sliding_window, str kv_layout, int num_splits, int engine, Tensor(c!) lse) -> ()",
         _op, _fake)

"""FlashMLA-compatible decode API over xqajit.mla_decode (docs/DSA.md has the mapping).

A FlashMLA user switches by changing one import:

    from xqajit.flash_mla import get_mla_metadata, flash_mla_with_kvcache

The two functions take the arguments of FlashMLA's public Python API
(flash_mla/flash_mla_interface.py in deepseek-ai/FlashMLA) and return what it returns:
`(out, lse)`, out bf16 [batch, s_q, h_q, 512], lse float32 [batch, h_q, s_q] (the natural
log of the sum of exp of the scaled logits, +inf for a row that saw no key). Dense
(block_table + cache_seqlens) and sparse (indices, topk_length) decode, attention sinks,
over a bf16 cache or (is_fp8_kvcache=True) DeepSeek-V3.2's fp8-with-scales cache: 656 bytes
a token, 512 e4m3 latent values, 4 float32 scales (one per 128 values), 64 bf16 rope values.
An argument xqajit has no equivalent for raises ArgumentError naming it.
"""

from __future__ import annotations

import dataclasses
from typing import Optional, Tuple

import torch

from ._tensors import fail
from .ops.mla import FP8DS_ROW_BYTES, QK_DIM, V_DIM
from .ops.mla import mla_decode as _mla_decode

_OP = "flash_mla_with_kvcache"


@dataclasses.dataclass(frozen=True)
class _CallShape:
    """What a metadata object is bound to by its first call; a later call must match it.
    (h_k other than 1 and the extra cache are refused before this is built, so they are not kept.)"""
    b: int
    s_q: int
    h_q: int
    page_block_size: int
    causal: bool
    is_fp8_kvcache: bool
    topk: Optional[int]


@dataclasses.dataclass
class FlashMLASchedMeta:
    """What get_mla_metadata() returns. xqajit plans each launch from the shapes (no device-side
    schedule), so this only binds to the first call's shapes and checks later calls against
    them, as FlashMLA's does. The attribute names are FlashMLA's, for code that reads them;
    the two tensors are always None here."""

    have_initialized: bool = False
    config: Optional[_CallShape] = None
    tile_scheduler_metadata: Optional[torch.Tensor] = None
    num_splits: Optional[torch.Tensor] = None


def get_mla_metadata(*args, **kwargs) -> Tuple[FlashMLASchedMeta, None]:
    """An empty FlashMLASchedMeta (filled by the first flash_mla_with_kvcache call), and
    None; any arguments are accepted and ignored, as FlashMLA's current API does."""
    return FlashMLASchedMeta(), None


_causal_masks = {}  # (batch, s_q, device) -> int32 [batch, s_q] every draft visible


def _all_visible_mask(batch: int, s_q: int, device: torch.device) -> torch.Tensor:
    """causal=False with s_q > 1: every query token sees all the new keys (xqajit's default is causal)."""
    key = (batch, s_q, str(device))
    mask = _causal_masks.get(key)
    if mask is None:
        mask = torch.full((batch, s_q), (1 << s_q) - 1, dtype=torch.int32, device=device)
        if len(_causal_masks) < 64:
            _causal_masks[key] = mask
    return mask


def _unsupported(name: str, value, why: str) -> None:
    if value is not None:
        fail(_OP, name, why)


_FP8_CACHE_DTYPES = (torch.float8_e4m3fn, torch.uint8)


def _check_cache_format(k_cache: torch.Tensor, is_fp8_kvcache: bool) -> None:
    """is_fp8_kvcache must agree with k_cache: 656-byte fp8-with-scales rows, or 576 bf16 values."""
    fp8_rows = k_cache.shape[-1] == FP8DS_ROW_BYTES and k_cache.dtype in _FP8_CACHE_DTYPES
    if is_fp8_kvcache and not fp8_rows:
        fail(_OP, "k_cache", f"is {k_cache.dtype} with {k_cache.shape[-1]} values per row: with is_fp8_kvcache=True "
                             f"it must hold {FP8DS_ROW_BYTES}-byte fp8-with-scales rows (torch.float8_e4m3fn or "
                             "torch.uint8: 512 e4m3, 4 float32 scales, 64 bf16 rope)")
    if not is_fp8_kvcache and (fp8_rows or k_cache.dtype != torch.bfloat16):
        fail(_OP, "is_fp8_kvcache", f"= False but k_cache is {k_cache.dtype} with {k_cache.shape[-1]} values per "
                                    f"row: pass is_fp8_kvcache=True for a {FP8DS_ROW_BYTES}-byte fp8-with-scales "
                                    f"cache, or a bf16 cache of {QK_DIM} values")


def flash_mla_with_kvcache(q: torch.Tensor, k_cache: torch.Tensor, block_table: Optional[torch.Tensor],
                           cache_seqlens: Optional[torch.Tensor], head_dim_v: int,
                           tile_scheduler_metadata: FlashMLASchedMeta, num_splits: None = None,
                           softmax_scale: Optional[float] = None, causal: bool = False,
                           is_fp8_kvcache: bool = False, indices: Optional[torch.Tensor] = None,
                           attn_sink: Optional[torch.Tensor] = None, extra_k_cache: Optional[torch.Tensor] = None,
                           extra_indices_in_kvcache: Optional[torch.Tensor] = None,
                           topk_length: Optional[torch.Tensor] = None,
                           extra_topk_length: Optional[torch.Tensor] = None) -> Tuple[torch.Tensor, torch.Tensor]:
    """FlashMLA's flash_mla_with_kvcache on xqajit's MLA kernels.

    q: [batch, s_q, h_q, 576] bf16; k_cache: [num_blocks, page_block_size, 1, 576] bf16, or
    with is_fp8_kvcache=True [num_blocks, page_block_size, 1, 656] float8_e4m3fn (or uint8)
    fp8-with-scales rows (row strides multiples of 16 bytes); dense: block_table int32
    [batch, max_blocks] and cache_seqlens int32 [batch]; sparse:
    indices int32 [batch, s_q, topk] (block * page_block_size + offset, -1 skips) and
    optional topk_length int32 [batch]; attn_sink float32 [h_q]. Returns (out, lse):
    out bf16 [batch, s_q, h_q, 512], lse float32 [batch, h_q, s_q].
    """
    meta = tile_scheduler_metadata
    if not isinstance(meta, FlashMLASchedMeta):
        fail(_OP, "tile_scheduler_metadata", f"must be the FlashMLASchedMeta of xqajit.flash_mla.get_mla_metadata(), "
                                             f"got {type(meta).__name__}")
    _unsupported("num_splits", num_splits, "must be None (as in FlashMLA: the split count is planned per launch)")
    _unsupported("extra_k_cache", extra_k_cache, "is not supported by xqajit (a second cache attended beside "
                                                 "k_cache): gather both into one cache and one index list")
    _unsupported("extra_indices_in_kvcache", extra_indices_in_kvcache, "is not supported by xqajit (see extra_k_cache)")
    _unsupported("extra_topk_length", extra_topk_length, "is not supported by xqajit (see extra_k_cache)")
    if head_dim_v != V_DIM:
        fail(_OP, "head_dim_v", f"= {head_dim_v}: must be {V_DIM}")
    if not isinstance(q, torch.Tensor) or q.dim() != 4:
        fail(_OP, "q", f"must be a [batch, s_q, h_q, {QK_DIM}] tensor")
    if not isinstance(k_cache, torch.Tensor) or k_cache.dim() != 4:
        fail(_OP, "k_cache", f"must be a [num_blocks, page_block_size, h_k, {QK_DIM}] tensor")
    if k_cache.shape[2] != 1:
        fail(_OP, "k_cache", f"has h_k = {k_cache.shape[2]}: MLA has one latent head (h_k = 1)")
    _check_cache_format(k_cache, bool(is_fp8_kvcache))
    sparse = indices is not None
    topk = indices.shape[-1] if sparse else None
    config = _CallShape(q.shape[0], q.shape[1], q.shape[2], k_cache.shape[1], causal, bool(is_fp8_kvcache), topk)
    if not meta.have_initialized:
        if sparse and causal:
            fail(_OP, "causal", "must be False with indices (sparse attention has no causal mask)")
        meta.have_initialized = True
        meta.config = config
    elif meta.config != config:
        diff = [f.name for f in dataclasses.fields(config) if getattr(config, f.name) != getattr(meta.config, f.name)]
        fail(_OP, "tile_scheduler_metadata", f"was initialised for other arguments ({', '.join(diff)} differ): "
                                             "use one get_mla_metadata() per configuration, as with FlashMLA")
    if softmax_scale is None:
        softmax_scale = q.shape[-1] ** (-0.5)  # FlashMLA's default (DeepSeek models pass their own)

    batch, s_q, h_q = q.shape[0], q.shape[1], q.shape[2]
    lse = torch.empty((batch, h_q, s_q), dtype=torch.float32, device=q.device)
    out = torch.empty((batch, s_q, h_q, V_DIM), dtype=torch.bfloat16, device=q.device)
    if sparse:
        out, _ = _mla_decode(q, k_cache, None, None, sm_scale=softmax_scale, out=out, indices=indices,
                             topk_length=topk_length, lse=lse.transpose(1, 2), attn_sink=attn_sink)
        return out, lse
    if topk_length is not None:
        fail(_OP, "topk_length", "must be None for dense attention (it limits sparse index lists)")
    if block_table is None or cache_seqlens is None:
        fail(_OP, "block_table" if block_table is None else "cache_seqlens",
             "must be given for dense attention (FlashMLA's rule too)")
    mask = None if causal or s_q == 1 else _all_visible_mask(batch, s_q, q.device)
    out, _ = _mla_decode(q, k_cache, block_table, cache_seqlens, sm_scale=softmax_scale, out=out, spec_mask=mask,
                         lse=lse.transpose(1, 2), attn_sink=attn_sink)
    return out, lse

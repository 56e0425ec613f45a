"""Float64 reference of paged decode attention on gathered pages, with the same
semantics as the C++ reference (tests/support/reference.cpp): scales, sliding
window, speculative-decoding mask, sinks, and zeros for a request with no key."""

import math

import torch


def gather(cache: torch.Tensor, block_table_row: torch.Tensor, length: int) -> torch.Tensor:
    """[length, Hkv, D] keys of one request from a logical-NHD [pages, page_size, Hkv, D] cache."""
    page_size = cache.shape[1]
    pages = block_table_row[: (length + page_size - 1) // page_size].long()
    return cache[pages].reshape(-1, cache.shape[2], cache.shape[3])[:length]


def to_f64(t: torch.Tensor) -> torch.Tensor:
    if t.dtype == torch.uint8:
        t = t.view(torch.float8_e4m3fn)
    return t.to(torch.float64)


def reference_decode(q, k, v, block_table, seq_lens, *, q_scale=1.0, kv_scale=1.0, rcp_out_scale=1.0,
                     sliding_window=0, sinks=None, spec_mask=None, fp8_kv=False, fp8_out=False, return_lse=False):
    """q: [B, Q, Hq, D]; k, v: [pages, page_size, Hkv, D] (any strides). Returns float64 [B, Q, Hq, D]
    (and with return_lse, float64 [B, Q, Hq]: ln of the sum of exp of each row's scaled logits,
    +inf for a row that sees no key, the sink not included)."""
    B, Q, Hq, D = q.shape
    Hkv = k.shape[2]
    group = Hq // Hkv
    kv_s = kv_scale if fp8_kv else 1.0
    qk_scale = q_scale * kv_s / math.sqrt(D)
    out_scale = kv_s * (rcp_out_scale if fp8_out else 1.0)
    out = torch.zeros(B, Q, Hq, D, dtype=torch.float64, device=q.device)
    lse = torch.full((B, Q, Hq), float("inf"), dtype=torch.float64, device=q.device)
    lens = seq_lens.tolist()
    for b in range(B):
        L = max(0, min(lens[b], block_table.shape[1] * k.shape[1]))
        if L == 0:
            continue
        kb = to_f64(gather(k, block_table[b], L)).repeat_interleave(group, dim=1)  # [L, Hq, D]
        vb = to_f64(gather(v, block_table[b], L)).repeat_interleave(group, dim=1)
        qb = to_f64(q[b])  # [Q, Hq, D]
        scores = torch.einsum("thd,lhd->htl", qb, kb) * qk_scale  # [Hq, Q, L]
        visible = torch.ones(Q, L, dtype=torch.bool, device=q.device)
        pos = torch.arange(L - Q, L, device=q.device)[:, None]
        j = torch.arange(L, device=q.device)[None, :]
        if sliding_window > 0:
            visible &= j >= pos - sliding_window + 1
        if Q > 1:
            words = spec_mask[b].long()  # [Q, words]
            bit = (j - (L - Q)).clamp(min=0).expand(Q, L)
            draft_bits = (words.gather(1, bit // 32) >> (bit % 32)) & 1
            visible &= (j < L - Q) | (draft_bits == 1)
        scores = scores.masked_fill(~visible[None], float("-inf"))
        m = scores.amax(dim=-1, keepdim=True)  # [Hq, Q, 1]
        any_visible = torch.isfinite(m)
        m = torch.where(any_visible, m, torch.zeros_like(m))
        w = torch.exp(scores - m)
        denom = w.sum(-1, keepdim=True)
        lse[b] = torch.where(any_visible, m + torch.log(denom), torch.full_like(m, float("inf")))[..., 0].T
        if sinks is not None:
            denom = denom + torch.exp(sinks.to(torch.float64)[:, None, None] - m)
        o = torch.einsum("htl,lhd->thd", w / denom, vb) * out_scale
        out[b] = torch.where(any_visible.permute(1, 0, 2), o, torch.zeros_like(o))
    return (out, lse) if return_lse else out

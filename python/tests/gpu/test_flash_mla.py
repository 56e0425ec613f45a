"""xqajit.flash_mla (FlashMLA's API) and xqajit.mla_decode's sparse / LSE / sink arguments on
the GPU, against a float64 reference written here through FlashMLA's conventions: dense
(block_table + cache_seqlens, causal or not) and sparse (indices with -1 and out-of-range
entries, duplicates, all-invalid rows, topk_length), lse [batch, h_q, s_q] (+inf for a row
with no key), attn_sink (out * exp(lse) / (exp(lse) + exp(sink))). NaN in every cache slot
no request uses and in the outputs before the launch; a CUDA graph replayed with new indices."""

import math

import pytest
import torch

import xqajit
from xqajit import flash_mla

QK, V = 576, 512
TOLERANCE = 2e-2


def reference(q, kv, keys, sm_scale, sink=None):
    """q [B, s_q, H, 576]; kv [slots, 576]; keys[b][t]: the slot list of token t (a slot may
    repeat). Returns out float64 [B, s_q, H, 512] and lse [B, H, s_q]."""
    B, S, H, _ = q.shape
    out = torch.zeros(B, S, H, V, dtype=torch.float64, device=q.device)
    lse = torch.full((B, H, S), math.inf, dtype=torch.float64, device=q.device)
    for b in range(B):
        for t in range(S):
            slots = keys[b][t]
            if len(slots) == 0:
                continue
            rows = kv[torch.tensor(slots, device=q.device)].to(torch.float64)
            s = (q[b, t].to(torch.float64) @ rows.T) * sm_scale  # [H, n]
            row_lse = torch.logsumexp(s, dim=-1)
            o = torch.softmax(s, dim=-1) @ rows[:, :V]
            if sink is not None:
                o = o / (1 + torch.exp(sink.to(torch.float64) - row_lse))[:, None]
            out[b, t], lse[b, :, t] = o, row_lse
    return out, lse


def check(out, lse, want, want_lse):
    assert torch.isfinite(out.float()).all()
    got = out.to(torch.float64)
    err = ((got - want).norm() / want.norm().clamp_min(1e-30)).item() if want.norm() > 0 else got.norm().item()
    assert err < TOLERANCE, err
    empty = torch.isinf(want_lse)
    assert torch.equal(torch.isinf(lse) & (lse > 0), empty)
    assert torch.allclose(lse[~empty].to(torch.float64), want_lse[~empty], atol=5e-3, rtol=1e-3)


def random_cache(pages, page, used, g):
    """[pages, page, 1, 576] bf16, NaN in every slot not in `used`."""
    kv = torch.full((pages * page, QK), float("nan"))
    idx = torch.tensor(sorted(used), dtype=torch.long)
    kv[idx] = torch.randn(len(idx), QK, generator=g)
    return kv.bfloat16().view(pages, page, 1, QK).cuda()


def random_index_lists(g, B, s_q, topk, slots, lengths):
    """Index lists [B, s_q, topk] into `slots` cache slots with -1s, out-of-range entries,
    duplicates shared between requests and a row with no valid entry; topk_length [B] when
    `lengths`; the valid slots."""
    idx = torch.randint(0, slots, (B, s_q, topk), generator=g, dtype=torch.int32)
    r = torch.rand(B, s_q, topk, generator=g)
    idx[r < 0.1] = -1
    idx[(r >= 0.1) & (r < 0.13)] = slots + 5  # out of range: skipped
    idx[(r >= 0.13) & (r < 0.2)] = idx[0, 0, 0]  # duplicates, shared between requests
    idx[B - 1, 0] = -1  # a row with no valid entry
    n = torch.randint(0, topk + 1, (B,), generator=g, dtype=torch.int32) if lengths else None
    return idx, n, idx[(idx >= 0) & (idx < slots)].tolist()


@pytest.mark.parametrize("h_q,s_q,topk,sinks,lengths", [(128, 2, 2048, False, False), (16, 1, 512, True, True),
                                                         (64, 2, 100, True, False), (32, 4, 64, False, True)])
def test_sparse_matches_reference(h_q, s_q, topk, sinks, lengths):
    g = torch.Generator().manual_seed(h_q * 7 + topk)
    B, P, pages = 3, 64, 40
    slots = pages * P
    idx, n, valid = random_index_lists(g, B, s_q, topk, slots, lengths)
    kv = random_cache(pages, P, set(valid), g)
    q = torch.randn(B, s_q, h_q, QK, generator=g).bfloat16().cuda()
    sink = (torch.rand(h_q, generator=g) * 4 - 2).cuda() if sinks else None
    sm = 192 ** -0.5
    meta, _ = flash_mla.get_mla_metadata()
    out, lse = flash_mla.flash_mla_with_kvcache(q, kv, None, None, 512, meta, softmax_scale=sm,
                                                indices=idx.cuda(), topk_length=None if n is None else n.cuda(),
                                                attn_sink=sink)
    keys = [[[s for k, s in enumerate(idx[b, t].tolist()) if 0 <= s < slots and (n is None or k < n[b])]
             for t in range(s_q)] for b in range(B)]
    want, want_lse = reference(q, kv.view(-1, QK), keys, sm, sink)
    assert out.shape == (B, s_q, h_q, V) and lse.shape == (B, h_q, s_q)
    check(out, lse, want, want_lse)
    # xqajit.mla_decode's own spelling gives the same, lse as [B, s_q, H].
    out2, lse2 = xqajit.mla_decode(q, kv, indices=idx.cuda(), topk_length=None if n is None else n.cuda(),
                                   sm_scale=sm, return_lse=True, attn_sink=sink)
    assert torch.equal(out2, out) and torch.equal(lse2.transpose(1, 2), lse)


@pytest.mark.parametrize("causal,s_q", [(True, 2), (False, 2), (False, 1)])
def test_dense_matches_reference(causal, s_q):
    g = torch.Generator().manual_seed(11 + s_q)
    B, H, P = 3, 64, 64
    lens = [700, 0, 130]
    max_pages = 12
    table = torch.randperm(B * max_pages, generator=g).to(torch.int32).view(B, max_pages)
    used = {int(table[b, j // P]) * P + j % P for b in range(B) for j in range(lens[b])}
    kv = random_cache(B * max_pages, P, used, g)
    q = torch.randn(B, s_q, H, QK, generator=g).bfloat16().cuda()
    meta, _ = flash_mla.get_mla_metadata()
    out, lse = flash_mla.flash_mla_with_kvcache(q, kv, table.cuda(), torch.tensor(lens, dtype=torch.int32).cuda(),
                                                512, meta, causal=causal)
    keys = [[[int(table[b, j // P]) * P + j % P for j in range(lens[b])
              if not causal or j <= lens[b] - s_q + t] for t in range(s_q)] for b in range(B)]
    want, want_lse = reference(q, kv.view(-1, QK), keys, QK ** -0.5)
    check(out, lse, want, want_lse)


def test_sparse_graph_replays_with_new_indices():
    g = torch.Generator().manual_seed(5)
    B, s_q, H, topk, pages, P = 2, 2, 64, 256, 30, 64
    kv = random_cache(pages, P, set(range(pages * P)), g)
    q = torch.randn(B, s_q, H, QK, generator=g).bfloat16().cuda()
    idx = torch.zeros(B, s_q, topk, dtype=torch.int32, device="cuda")
    n = torch.zeros(B, dtype=torch.int32, device="cuda")
    out = torch.empty(B, s_q, H, V, dtype=torch.bfloat16, device="cuda")
    lse = torch.empty(B, s_q, H, device="cuda")
    sm = 192 ** -0.5
    xqajit.mla_decode(q, kv, indices=idx, topk_length=n, sm_scale=sm, out=out, lse=lse)  # loads the kernel
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        xqajit.mla_decode(q, kv, indices=idx, topk_length=n, sm_scale=sm, out=out, lse=lse)
    for _ in range(3):
        new = torch.randint(-1, pages * P, (B, s_q, topk), generator=g, dtype=torch.int32)
        lengths = torch.randint(0, topk + 1, (B,), generator=g, dtype=torch.int32)
        idx.copy_(new)
        n.copy_(lengths)
        out.fill_(float("nan"))
        graph.replay()
        torch.cuda.synchronize()
        keys = [[[s for k, s in enumerate(new[b, t].tolist()) if s >= 0 and k < lengths[b]] for t in range(s_q)]
                for b in range(B)]
        want, want_lse = reference(q, kv.view(-1, QK), keys, sm)
        check(out, lse.transpose(1, 2), want, want_lse)


# --- the fp8-with-scales cache (is_fp8_kvcache=True, DeepSeek-V3.2's 656-byte rows) ---
# Built the way FlashMLA's tests/quant.py describes the format: per row, 512 e4m3 values
# quantised in 4 tiles of 128 with a power-of-two scale (amax / 448 rounded up to 2^k), the
# 4 float32 scales, then the 64 rope values as bf16; pages padded by one row. `jitter` > 0
# multiplies the scales by random factors in [1, 1 + jitter) (any float scale, more e4m3
# subnormals). The reference reads the same bytes back: e4m3 x scale rounded to bf16.

def quantize_fp8ds(kv, g, jitter=0.0):
    """kv bf16 [pages, page, 576] (NaN rows stay NaN) -> float8_e4m3fn [pages, page, 1, 656]."""
    pages, page, _ = kv.shape
    raw = torch.empty(pages, page + 1, 656, dtype=torch.uint8, device=kv.device)[:, :page]
    nope = kv[..., :V].float().view(pages, page, 4, 128)
    scale = torch.pow(2, torch.clamp_min(nope.abs().amax(-1) / 448.0, 1e-4).log2().ceil())
    if jitter:
        scale = scale * (1 + jitter * torch.rand(scale.shape, generator=g)).to(scale.device)
    raw[..., :V] = (nope / scale[..., None]).view(pages, page, V).to(torch.float8_e4m3fn).view(torch.uint8)
    raw[..., V:V + 16].view(torch.float32)[:] = scale
    raw[..., V + 16:].view(torch.bfloat16)[:] = kv[..., V:]
    return raw.view(torch.float8_e4m3fn).unsqueeze(2)


def dequantize_fp8ds(cache, scale_bf16=False):
    """[pages, page, 1, 656] -> float64 [pages * page, 576]: what the cache means. `scale_bf16`:
    each scale rounded to bf16 first, as FlashMLA's sm90 sparse decode and the hopper kernel's
    sparse CTAs of 32 rows or more multiply (m100; the same for power-of-two scales)."""
    raw = cache.view(torch.uint8).squeeze(2).reshape(-1, 656)
    nope = raw[:, :V].view(torch.float8_e4m3fn).float().view(-1, 4, 128)
    scale = raw[:, V:V + 16].contiguous().view(torch.float32)
    if scale_bf16:
        scale = scale.bfloat16().float()
    latent = (nope * scale[..., None]).view(-1, V).bfloat16().to(torch.float64)
    rope = raw[:, V + 16:].contiguous().view(torch.bfloat16).to(torch.float64)
    return torch.cat([latent, rope], dim=-1)


@pytest.mark.parametrize("h_q,s_q,topk,sinks,lengths,jitter", [(128, 2, 2048, False, False, 0.0),
                                                                (64, 1, 512, True, True, 0.0),
                                                                (16, 2, 100, True, False, 1.0),
                                                                (32, 3, 64, False, True, 3.0)])
def test_fp8_kvcache_sparse_matches_reference(h_q, s_q, topk, sinks, lengths, jitter):
    g = torch.Generator().manual_seed(h_q * 13 + topk)
    B, P, pages = 3, 64, 40
    slots = pages * P
    idx, n, valid = random_index_lists(g, B, s_q, topk, slots, lengths)
    cache = quantize_fp8ds(random_cache(pages, P, set(valid), g).squeeze(2), g, jitter)  # NaN where unused
    q = torch.randn(B, s_q, h_q, QK, generator=g).bfloat16().cuda()
    sink = (torch.rand(h_q, generator=g) * 4 - 2).cuda() if sinks else None
    sm = 192 ** -0.5
    meta, _ = flash_mla.get_mla_metadata()
    out, lse = flash_mla.flash_mla_with_kvcache(q, cache, None, None, 512, meta, softmax_scale=sm,
                                                is_fp8_kvcache=True, indices=idx.cuda(),
                                                topk_length=None if n is None else n.cuda(), attn_sink=sink)
    keys = [[[s for k, s in enumerate(idx[b, t].tolist()) if 0 <= s < slots and (n is None or k < n[b])]
             for t in range(s_q)] for b in range(B)]
    producer = torch.cuda.get_device_capability()[0] == 9 and h_q >= 32  # hopper's 32+-row sparse CTAs
    want, want_lse = reference(q, dequantize_fp8ds(cache, scale_bf16=producer), keys, sm, sink)
    assert out.shape == (B, s_q, h_q, V) and lse.shape == (B, h_q, s_q)
    check(out, lse, want, want_lse)
    # xqajit.mla_decode takes the same cache as raw bytes too.
    out2, lse2 = xqajit.mla_decode(q, cache.view(torch.uint8).squeeze(2), indices=idx.cuda(),
                                   topk_length=None if n is None else n.cuda(), sm_scale=sm, return_lse=True,
                                   attn_sink=sink)
    assert torch.equal(out2, out) and torch.equal(lse2.transpose(1, 2), lse)


@pytest.mark.parametrize("causal,s_q,jitter", [(True, 2, 0.0), (False, 2, 2.0), (False, 1, 0.0)])
def test_fp8_kvcache_dense_matches_reference(causal, s_q, jitter):
    g = torch.Generator().manual_seed(23 + s_q)
    B, H, P = 3, 16, 64
    lens = [900, 0, 131]
    max_pages = 15
    table = torch.randperm(B * max_pages, generator=g).to(torch.int32).view(B, max_pages)
    used = {int(table[b, j // P]) * P + j % P for b in range(B) for j in range(lens[b])}
    cache = quantize_fp8ds(random_cache(B * max_pages, P, used, g).squeeze(2), g, jitter)
    q = torch.randn(B, s_q, H, QK, generator=g).bfloat16().cuda()
    meta, _ = flash_mla.get_mla_metadata()
    seqlens = torch.tensor(lens, dtype=torch.int32).cuda()
    out, lse = flash_mla.flash_mla_with_kvcache(q, cache, table.cuda(), seqlens, 512, meta, causal=causal,
                                                is_fp8_kvcache=True)
    keys = [[[int(table[b, j // P]) * P + j % P for j in range(lens[b])
              if not causal or j <= lens[b] - s_q + t] for t in range(s_q)] for b in range(B)]
    want, want_lse = reference(q, dequantize_fp8ds(cache), keys, QK ** -0.5)
    check(out, lse, want, want_lse)
    # A second call on the same metadata (FlashMLA's reuse) gives the same answer.
    out2, lse2 = flash_mla.flash_mla_with_kvcache(q, cache, table.cuda(), seqlens, 512, meta, causal=causal,
                                                  is_fp8_kvcache=True)
    assert torch.equal(out2, out) and torch.equal(lse2, lse)

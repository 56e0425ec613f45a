"""A random MLA decode problem on the GPU and its float64 reference, with the
semantics of include/xqajit/ops/mla_decode.hpp and tests/support/mla_reference.cpp:
K = the whole 576-value latent row, V = its first 512 values; logits = q.k *
sm_scale * q_scale * kv_scale; out = softmax.V * kv_scale; the last q_len keys
are the new tokens, masked causally or by spec_mask bits; a request with no key
gives zeros. Every cache slot no request uses holds NaN."""

from dataclasses import dataclass

import torch

from problem import PagedCase, fill_live_slots, shuffled_table

QK, V = 576, 512
FP8 = torch.float8_e4m3fn


@dataclass
class MlaCase(PagedCase):
    heads: int = 16
    sm_scale: float = 192 ** -0.5
    q_scale: float = 1.0
    explicit_mask: bool = False
    backend: str = "auto"
    cache_4d: bool = False   # FlashMLA's [pages, page_size, 1, 576]
    padded: bool = False     # rows of 640 values, heads of 608: every stride explicit
    num_splits: int = 0


def make_mla_problem(c: MlaCase, seed: int = 0, device="cuda"):
    g = torch.Generator(device="cpu").manual_seed(seed)
    B, H, P, Q = len(c.seq_lens), c.heads, c.page_size, c.q_len
    max_pages = max(1, max((L + P - 1) // P for L in c.seq_lens))
    table, num_pages = shuffled_table(B, max_pages, g)
    row = 640 if c.padded else QK
    kv = torch.full((num_pages, P, row), float("nan"))
    fill_live_slots(kv[..., :QK], table, c.seq_lens, g)
    q = torch.randn(B, Q, H, 608 if c.padded else QK, generator=g)
    if c.dtype == FP8 or c.kv_dtype == FP8:
        kv, q = kv.clamp(-4, 4), q.clamp(-4, 4)
    kv = kv.to(c.kv_dtype).to(device)[..., :QK]
    q = q.to(c.dtype).to(device)[..., :QK]
    p = dict(q=q, kv=kv, block_table=table.to(device),
             seq_lens=torch.tensor(c.seq_lens, dtype=torch.int32, device=device), spec_mask=None)
    if Q > 1 and c.explicit_mask:  # causal with random holes, the diagonal always on
        words = torch.zeros(B, Q, dtype=torch.int32)
        for b in range(B):
            for t in range(Q):
                bits = [j for j in range(t + 1) if j == t or torch.rand(1, generator=g).item() < 0.6]
                words[b, t] = sum(1 << j for j in bits)
        p["spec_mask"] = words.to(device)
    return p


def mla_kwargs(c: MlaCase, p: dict) -> dict:
    """The xqajit.mla_decode call of a problem."""
    scale = (lambda x: torch.tensor([x], device=p["q"].device)) if c.scale_tensors else (lambda x: x)
    q = p["q"][:, 0] if c.q3d else p["q"]
    kv = p["kv"].unsqueeze(2) if c.cache_4d else p["kv"]
    return dict(q=q, kv_cache=kv, block_table=p["block_table"], seq_lens=p["seq_lens"], sm_scale=c.sm_scale,
                q_scale=scale(c.q_scale), kv_scale=scale(c.kv_scale), spec_mask=p["spec_mask"], backend=c.backend,
                num_splits=c.num_splits)


def reference_mla(q, kv, block_table, seq_lens, *, sm_scale, q_scale=1.0, kv_scale=1.0, spec_mask=None):
    """q [B, Q, H, 576], kv [pages, page_size, 576] (any strides). Returns float64 [B, Q, H, 512]."""
    B, Q, H, _ = q.shape
    P = kv.shape[1]
    out = torch.zeros(B, Q, H, V, dtype=torch.float64, device=q.device)
    lens = seq_lens.tolist()
    logit_scale = sm_scale * q_scale * kv_scale
    for b in range(B):
        L = max(0, min(lens[b], block_table.shape[1] * P))
        if L == 0:
            continue
        pages = block_table[b, : (L + P - 1) // P].long()
        rows = kv[pages].reshape(-1, QK)[:L].to(torch.float64)  # [L, 576]
        scores = torch.einsum("thd,ld->thl", q[b].to(torch.float64), rows) * logit_scale  # [Q, H, L]
        j = torch.arange(L, device=q.device)[None, :]
        t = torch.arange(Q, device=q.device)[:, None]
        bit = j - (L - Q)
        if spec_mask is not None:
            words = spec_mask[b].long()[:, None]  # [Q, 1]
            visible = (bit < 0) | (((words >> bit.clamp(min=0)) & 1) == 1)
        else:
            visible = bit <= t
        scores = scores.masked_fill(~visible[:, None, :], float("-inf"))
        m = scores.amax(-1, keepdim=True)
        seen = torch.isfinite(m)
        w = torch.exp(scores - torch.where(seen, m, torch.zeros_like(m)))
        o = torch.einsum("thl,ld->thd", w / w.sum(-1, keepdim=True), rows[:, :V]) * kv_scale
        out[b] = torch.where(seen, o, torch.zeros_like(o))
    return out


def relative_error(got: torch.Tensor, want: torch.Tensor) -> float:
    """sqrt(sum (got - want)^2 / sum want^2), as tests/support/reference.cpp computes it."""
    den = want.pow(2).sum().item()
    num = (got - want).pow(2).sum().item()
    return (num / den) ** 0.5 if den else (0.0 if num == 0 else float("inf"))

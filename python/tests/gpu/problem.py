"""A random paged decode problem on the GPU: each request owns its own pages
(shuffled), and every slot no request uses holds NaN, so a masked key that
leaks into the output shows. PagedCase, shuffled_table and fill_live_slots are
what every op's problem shares (mla_problem.py)."""

from dataclasses import dataclass, field

import torch


@dataclass
class PagedCase:
    """The fields every op's case has (keyword arguments only)."""
    dtype: torch.dtype = torch.bfloat16
    kv_dtype: torch.dtype = torch.bfloat16
    page_size: int = 64
    q_len: int = 1
    seq_lens: list = field(default_factory=lambda: [100])
    kv_scale: float = 1.0
    scale_tensors: bool = False  # scales as one-element device tensors
    q3d: bool = False            # q without its q_len axis


@dataclass
class Case(PagedCase):
    head_dim: int = 128
    group: int = 8
    num_kv_heads: int = 2
    layout: str = "NHD"  # NHD | HND (a transposed view) | HND_NAMED (kv_layout="HND") | COMBINED
    window: int = 0
    sinks: bool = False
    out_scale: float = 0.0  # > 0: fp8 output
    extra_pages: int = 1


def shuffled_table(batch: int, max_pages: int, g):
    """[batch, max_pages] int32 page ids, each request its own pages of a shuffled pool
    with 3 pages to spare; returns (table, pages in the pool)."""
    num_pages = batch * max_pages + 3
    perm = torch.randperm(num_pages, generator=g)
    return perm[: batch * max_pages].reshape(batch, max_pages).to(torch.int32), num_pages


def fill_live_slots(cache, table, seq_lens, g):
    """Random normal values in every slot a request uses of cache [pages, page_size, ...]
    (a view writes through); the other slots keep what they hold (NaN)."""
    P = cache.shape[1]
    for b, L in enumerate(seq_lens):
        for j in range((L + P - 1) // P):
            n = min(P, L - j * P)
            cache[table[b, j], :n] = torch.randn(n, *cache.shape[2:], generator=g)


def make_problem(c: Case, seed: int = 0, device="cuda"):
    g = torch.Generator(device="cpu").manual_seed(seed)
    B, Hkv, D, P, Q = len(c.seq_lens), c.num_kv_heads, c.head_dim, c.page_size, c.q_len
    Hq = Hkv * c.group
    max_pages = max((L + P - 1) // P for L in c.seq_lens) + c.extra_pages
    table, num_pages = shuffled_table(B, max_pages, g)

    def cache():
        x = torch.full((num_pages, P, Hkv, D), float("nan"))
        fill_live_slots(x, table, c.seq_lens, g)
        if c.kv_dtype in (torch.float8_e4m3fn, torch.uint8):
            x = x.clamp(-4, 4).to(torch.float8_e4m3fn)
            return x.view(torch.uint8) if c.kv_dtype == torch.uint8 else x
        return x.to(c.kv_dtype)

    k, v = cache().to(device), cache().to(device)
    q = torch.randn(B, Q, Hq, D, generator=g).to(c.dtype).to(device)
    p = dict(q=q, k=k, v=v, block_table=table.to(device),
             seq_lens=torch.tensor(c.seq_lens, dtype=torch.int32, device=device))
    p["sinks"] = torch.randn(Hq, generator=g).to(device) if c.sinks else None
    if Q > 1:  # causal over the drafts
        rows = [(1 << (t + 1)) - 1 for t in range(Q)]
        p["spec_mask"] = torch.tensor(rows, dtype=torch.int32).repeat(B, 1).reshape(B, Q, 1).to(device)
    else:
        p["spec_mask"] = None
    return p


def decode_kwargs(c: Case, p: dict) -> dict:
    """The xqajit.decode call of a problem, in the case's layout."""
    k, v = p["k"], p["v"]
    kw = dict(block_table=p["block_table"], seq_lens=p["seq_lens"], sinks=p["sinks"], spec_mask=p["spec_mask"],
              sliding_window=c.window)
    if c.layout == "HND":
        kw.update(k_cache=k.transpose(1, 2).contiguous().transpose(1, 2), v_cache=v.transpose(1, 2).contiguous().transpose(1, 2))
    elif c.layout == "HND_NAMED":
        kw.update(k_cache=k.transpose(1, 2).contiguous(), v_cache=v.transpose(1, 2).contiguous(), kv_layout="HND")
    elif c.layout == "COMBINED":
        kw.update(kv_cache=torch.stack([k, v], dim=1))
    else:
        kw.update(k_cache=k, v_cache=v)
    scale = (lambda x: torch.tensor([x], device=k.device)) if c.scale_tensors else (lambda x: x)
    kw["kv_scale"] = scale(c.kv_scale)
    if c.out_scale:
        kw["out_scale"] = scale(c.out_scale)
    return kw

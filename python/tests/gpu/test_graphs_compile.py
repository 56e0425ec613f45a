"""torch.compile(fullgraph=True) of a decode step, and a CUDA graph captured with
torch and replayed with changed sequence lengths and scales."""

import torch

import xqajit
from capture import assert_compiled_matches_eager, captured, replays
from problem import Case, make_problem
from reference import reference_decode


def test_torch_compile_fullgraph_matches_eager():
    p = make_problem(Case(seq_lens=[300, 1000], num_kv_heads=2, group=8))
    w = torch.randn(128, 128, device="cuda").bfloat16()

    def step(x, k, v, bt, sl, kv_scale):
        q = (x @ w).view(x.shape[0], 1, 16, 128)
        return xqajit.decode(q, k, v, bt, sl, kv_scale=kv_scale).sum(dim=2)

    x = torch.randn(2, 16, 128, device="cuda").bfloat16()  # [batch, heads, dim]

    def run(fn):
        return fn(x, p["k"], p["v"], p["block_table"], p["seq_lens"], 1.0)

    assert_compiled_matches_eager(step, run)


def test_cuda_graph_replays_with_new_lengths_and_scales():
    # Every slot of the first 2000 keys is live, so any shorter length is a valid replay.
    case = Case(seq_lens=[2000] * 4, kv_dtype=torch.float8_e4m3fn, num_kv_heads=4, group=4)
    p = make_problem(case)
    q, k, v, bt = p["q"], p["k"], p["v"], p["block_table"]
    lens = p["seq_lens"].clone()
    kv_scale = torch.tensor([0.5], device="cuda")
    out = torch.empty_like(q)

    def step():
        xqajit.decode(q, k, v, bt, lens, kv_scale=kv_scale, out=out)

    graph = captured(step)
    rounds = [([2000, 64, 0, 700], 0.5), ([1, 2000, 300, 0], 1.25), ([0, 0, 0, 5], 2.0)]
    for scale in replays(graph, lens, kv_scale, rounds):
        ref = reference_decode(q, k, v, bt, lens.cpu(), kv_scale=scale, fp8_kv=True)
        torch.testing.assert_close(out.double(), ref, atol=2e-2, rtol=2e-2)


def test_torch_compile_sparse_mla_with_lse_and_sinks_matches_eager():
    g = torch.Generator().manual_seed(31)
    B, s_q, H, pages, P = 2, 2, 64, 16, 64
    kv = (torch.randn(pages, P, 576, generator=g) * 0.5).bfloat16().cuda()
    idx = torch.randint(-1, pages * P, (B, s_q, 256), generator=g, dtype=torch.int32).cuda()
    lengths = torch.tensor([200, 256], dtype=torch.int32).cuda()
    sink = (torch.rand(H, generator=g) * 2 - 1).cuda()
    w = (torch.randn(576, 576, generator=g) * 0.05).bfloat16().cuda()
    x = torch.randn(B, s_q, H, 576, generator=g).bfloat16().cuda()

    def step(x, kv, idx, lengths, sink):
        out, lse = xqajit.mla_decode(x @ w, kv, indices=idx, topk_length=lengths, sm_scale=192 ** -0.5,
                                     return_lse=True, attn_sink=sink)
        return out.float().sum(dim=-1) + lse

    assert_compiled_matches_eager(step, lambda fn: fn(x, kv, idx, lengths, sink))


def test_torch_compile_decode_with_lse_matches_eager():
    p = make_problem(Case(seq_lens=[300, 1000], num_kv_heads=2, group=8))
    w = torch.randn(128, 128, device="cuda").bfloat16()
    sinks = torch.rand(16, device="cuda") - 0.5

    def step(x, k, v, bt, sl):
        q = (x @ w).view(x.shape[0], 1, 16, 128)
        out, lse = xqajit.decode(q, k, v, bt, sl, sinks=sinks, return_lse=True)
        return out.float().sum(dim=-1) + lse

    x = torch.randn(2, 16, 128, device="cuda").bfloat16()
    assert_compiled_matches_eager(step, lambda fn: fn(x, p["k"], p["v"], p["block_table"], p["seq_lens"]))

"""xqajit.decode on random cases against a float64 reference on gathered pages,
and against torch's scaled_dot_product_attention."""

import pytest
import torch

import xqajit
from problem import Case, decode_kwargs, make_problem
from reference import reference_decode

FP8 = torch.float8_e4m3fn
CASES = {
    "bf16-nhd-g8": Case(seq_lens=[1, 100, 1000]),
    "fp16-hnd-view-g4-d64-p16": Case(dtype=torch.float16, kv_dtype=torch.float16, head_dim=64, page_size=16, group=4,
                                     layout="HND", seq_lens=[37, 300]),
    "bf16-hnd-named-p32": Case(layout="HND_NAMED", page_size=32, seq_lens=[65, 7]),
    "bf16-combined-d256-g2": Case(head_dim=256, group=2, layout="COMBINED", seq_lens=[500, 64]),
    "bf16-fp8kv-scale-tensor": Case(kv_dtype=FP8, kv_scale=0.7, scale_tensors=True, seq_lens=[200, 33]),
    "fp16-uint8kv-fp8out": Case(dtype=torch.float16, kv_dtype=torch.uint8, kv_scale=0.5, out_scale=0.25,
                                seq_lens=[128, 90]),
    "bf16-window-sinks": Case(window=50, sinks=True, seq_lens=[40, 400]),
    "bf16-spec-q3": Case(q_len=3, seq_lens=[20, 150]),
    "bf16-zero-length": Case(seq_lens=[0, 70, 0]),
    "bf16-long-splits": Case(seq_lens=[8192], num_kv_heads=8, group=4),
    "bf16-mha-3d-q": Case(group=1, num_kv_heads=8, q3d=True, seq_lens=[129, 1]),
}


def check(case: Case, seed=0):
    p = make_problem(case, seed)
    kw = decode_kwargs(case, p)
    q = p["q"][:, 0] if case.q3d else p["q"]
    out = xqajit.decode(q, **kw)
    assert out.shape == q.shape
    fp8_kv = case.kv_dtype in (FP8, torch.uint8)
    ref = reference_decode(p["q"], p["k"], p["v"], p["block_table"], p["seq_lens"], kv_scale=case.kv_scale,
                           rcp_out_scale=1 / case.out_scale if case.out_scale else 1.0, sliding_window=case.window,
                           sinks=p["sinks"], spec_mask=p["spec_mask"], fp8_kv=fp8_kv, fp8_out=bool(case.out_scale))
    got = out.unsqueeze(1) if case.q3d else out
    got = got.to(torch.float64)
    assert torch.isfinite(got).all(), "NaN or inf in the output: a masked or unused slot leaked"
    tol = dict(atol=0.08, rtol=0.13) if case.out_scale else dict(atol=2e-2, rtol=2e-2)
    torch.testing.assert_close(got, ref, **tol)


@pytest.mark.parametrize("name", CASES)
def test_against_float64_reference(name):
    check(CASES[name])


def test_random_shapes_against_reference():
    gen = torch.Generator().manual_seed(1)
    for i in range(12):
        pick = lambda xs: xs[torch.randint(len(xs), (1,), generator=gen).item()]  # noqa: E731
        case = Case(dtype=pick([torch.bfloat16, torch.float16]), head_dim=pick([64, 128, 256]),
                    page_size=pick([16, 32, 64, 128]), group=pick([1, 2, 4, 8]), num_kv_heads=pick([1, 2, 4]),
                    seq_lens=[int(torch.randint(0, 3000, (1,), generator=gen)) for _ in range(pick([1, 2, 5]))])
        case.kv_dtype = pick([case.dtype, FP8])
        check(case, seed=i)


def test_against_sdpa_on_gathered_pages():
    case = Case(seq_lens=[777] * 4, num_kv_heads=8, group=4)
    p = make_problem(case)
    out = xqajit.decode(p["q"][:, 0], p["k"], p["v"], p["block_table"], p["seq_lens"])
    L = case.seq_lens[0]
    pages = p["block_table"][:, : (L + 63) // 64].long()
    k = p["k"][pages].flatten(1, 2)[:, :L].transpose(1, 2)  # [B, Hkv, L, D]
    v = p["v"][pages].flatten(1, 2)[:, :L].transpose(1, 2)
    ref = torch.nn.functional.scaled_dot_product_attention(p["q"].transpose(1, 2), k, v, enable_gqa=True)
    torch.testing.assert_close(out, ref[:, :, 0], atol=2e-2, rtol=2e-2)


def test_out_argument_and_strided_q():
    case = Case(seq_lens=[300, 5])
    p = make_problem(case)
    wide = torch.randn(2, 1, 16, 256, device="cuda").bfloat16()
    q = wide[..., :128]  # head stride 256: rows still contiguous
    q.copy_(p["q"])
    out = torch.full((2, 1, 16, 128), float("nan"), device="cuda").bfloat16()
    r = xqajit.decode(q, p["k"], p["v"], p["block_table"], p["seq_lens"], out=out)
    assert r is out
    ref = reference_decode(p["q"], p["k"], p["v"], p["block_table"], p["seq_lens"])
    torch.testing.assert_close(out.double(), ref, atol=2e-2, rtol=2e-2)


def test_mixed_devices_are_refused_before_launch():
    p = make_problem(Case())
    with pytest.raises(xqajit.ArgumentError, match="seq_lens is on cpu but q is on cuda:0"):
        xqajit.decode(p["q"], p["k"], p["v"], p["block_table"], p["seq_lens"].cpu())
    with pytest.raises(xqajit.ArgumentError, match="kv_scale is on cpu"):
        xqajit.decode(p["q"], p["k"], p["v"], p["block_table"], p["seq_lens"], kv_scale=torch.ones(1))


def test_workspace_helper_and_explicit_workspace():
    case = Case(seq_lens=[8192], num_kv_heads=8, group=4)
    p = make_problem(case)
    ws = xqajit.workspace("cuda", 1 << 20)
    assert ws.dtype == torch.uint8 and ws.numel() >= 1 << 20 and ws.data_ptr() % 256 == 0
    assert xqajit.workspace() is xqajit.workspace(0)
    tiny = torch.zeros(256, dtype=torch.uint8, device="cuda")
    with pytest.raises(xqajit.ArgumentError, match="workspace has 256 bytes but this launch needs"):
        xqajit.decode(p["q"], p["k"], p["v"], p["block_table"], p["seq_lens"], workspace=tiny, num_splits=8)
    mine = torch.zeros(64 << 20, dtype=torch.uint8, device="cuda")
    a = xqajit.decode(p["q"], p["k"], p["v"], p["block_table"], p["seq_lens"], workspace=mine, num_splits=8)
    b = xqajit.decode(p["q"], p["k"], p["v"], p["block_table"], p["seq_lens"], num_splits=1)
    torch.testing.assert_close(a, b, atol=1e-2, rtol=1e-2)


def test_prewarm_then_spec_from_tensors():
    p = make_problem(Case(seq_lens=[10]))
    spec = xqajit.decode_spec(p["q"], p["k"])
    assert spec.fields["arch"] == xqajit.device_arch(0)
    # One result per kernel the launch may pick (both GQA backends for a bf16 cache at
    # head_dim 128 on sm_90a: hopper where it splits), all compiled.
    results = xqajit.prewarm([spec])
    assert [r.name for r in results] == list(spec.kernels)
    assert all(r.ok for r in results), [r.error for r in results]


@pytest.mark.parametrize("name", ["bf16-nhd-g8", "bf16-window-sinks", "bf16-spec-q3", "bf16-zero-length",
                                  "bf16-long-splits", "bf16-fp8kv-scale-tensor", "bf16-mha-3d-q"])
def test_lse_against_float64_reference(name):
    """return_lse: the log-sum-exp of each row's scaled logits (+inf for a row with no key),
    in the default [B, q_len, Hq] layout and written through a [B, Hq, q_len] view."""
    case = CASES[name]
    p = make_problem(case, 3)
    kw = decode_kwargs(case, p)
    q = p["q"][:, 0] if case.q3d else p["q"]
    fp8_kv = case.kv_dtype in (FP8, torch.uint8)
    ref, ref_lse = reference_decode(p["q"], p["k"], p["v"], p["block_table"], p["seq_lens"], kv_scale=case.kv_scale,
                                    sliding_window=case.window, sinks=p["sinks"], spec_mask=p["spec_mask"],
                                    fp8_kv=fp8_kv, return_lse=True)
    out, lse = xqajit.decode(q, **kw, return_lse=True)
    assert lse.dtype == torch.float32 and lse.shape == q.shape[:-1]
    got_lse = lse.unsqueeze(1) if case.q3d else lse
    torch.testing.assert_close(got_lse.to(torch.float64), ref_lse, atol=5e-3, rtol=1e-3)
    got = out.unsqueeze(1) if case.q3d else out
    torch.testing.assert_close(got.to(torch.float64), ref, atol=2e-2, rtol=2e-2)
    if not case.q3d:  # FlashMLA's softmax_lse layout, [B, Hq, q_len], as a view
        B, Q, H = ref_lse.shape
        flash = torch.full((B, H, Q), float("nan"), device=q.device)
        out2, same = xqajit.decode(q, **kw, lse=flash.transpose(1, 2))
        assert same.data_ptr() == flash.data_ptr()
        torch.testing.assert_close(flash.transpose(1, 2).to(torch.float64), ref_lse, atol=5e-3, rtol=1e-3)


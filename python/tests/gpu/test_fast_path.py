"""The eager calls with optional tensors take the dense calls' fast paths (ops/_fast.py):
once a call's metadata was checked, a later call with the same metadata skips the checks.
Its result must be the checked call's, bit for bit (the same kernel on the same inputs):
sparse MLA with lengths, lse and sinks; GQA decode with sinks, a spec mask and lse. Each on
the C fast path (when built) and on the Python path's cached checks."""

import pytest
import torch

import xqajit
from arg_checks import count_arg_checks
from problem import Case, make_problem
from xqajit.ops import _fast, gqa, mla


def forget_checked_calls():
    _fast.module and _fast.module.clear()
    gqa._CHECKED.clear()
    mla._CHECKED.clear()


@pytest.fixture(params=["c", "python"])
def path(request, monkeypatch):
    """(which path the second call takes, the list of checks the calls ran)."""
    if request.param == "c" and _fast.call is None:
        pytest.skip(f"the C fast path is off: {_fast.status}")
    if request.param == "python":
        monkeypatch.setattr(gqa, "_fast_call", None)
        monkeypatch.setattr(mla, "_fast_call", None)
    checks = count_arg_checks(monkeypatch)
    forget_checked_calls()
    yield request.param, checks
    forget_checked_calls()


def hits():
    return _fast.module.stats()[1] if _fast.module else 0


def assert_fast_equals_checked(path, call):
    """call(): one launch into new NaN-filled outputs, which it returns. The first call is
    checked; the second, of the same metadata, must run no check and give the same bits."""
    kind, checks = path
    checked = call()
    assert len(checks) == 1
    before = hits()
    fast = call()
    torch.cuda.synchronize()
    assert len(checks) == 1, f"the second call was checked again: {checks}"
    if kind == "c":
        assert hits() == before + 1, "the second call missed the C fast path"
    for got, want in zip(fast, checked):
        assert not torch.isnan(want).any()
        assert torch.equal(got, want)


def test_sparse_mla_with_lengths_lse_and_sink(path):
    g = torch.Generator().manual_seed(31)
    B, s_q, H, pages, P, topk = 2, 2, 64, 16, 64, 256
    kv = (torch.randn(pages, P, 576, generator=g) * 0.5).bfloat16().cuda()
    q = torch.randn(B, s_q, H, 576, generator=g).bfloat16().cuda()
    idx = torch.randint(-1, pages * P, (B, s_q, topk), generator=g, dtype=torch.int32).cuda()
    lengths = torch.tensor([200, 256], dtype=torch.int32).cuda()
    sink = (torch.rand(H, generator=g) * 2 - 1).cuda()

    def call():
        out = torch.full((B, s_q, H, 512), float("nan"), dtype=torch.bfloat16, device="cuda")
        lse = torch.full((B, H, s_q), float("nan"), device="cuda").transpose(1, 2)  # FlashMLA's layout, a view
        xqajit.mla_decode(q, kv, indices=idx, topk_length=lengths, sm_scale=192 ** -0.5, out=out, lse=lse,
                          attn_sink=sink)
        return out, lse

    assert_fast_equals_checked(path, call)


def test_gqa_decode_with_sinks_mask_and_lse(path):
    p = make_problem(Case(seq_lens=[300, 1000], q_len=2, num_kv_heads=2, group=8, sinks=True))
    q = p["q"]

    def call():
        out = torch.full_like(q, float("nan"))
        lse = torch.full(q.shape[:-1], float("nan"), device="cuda")
        xqajit.decode(q, p["k"], p["v"], p["block_table"], p["seq_lens"], sinks=p["sinks"], spec_mask=p["spec_mask"],
                      out=out, lse=lse)
        return out, lse

    assert_fast_equals_checked(path, call)

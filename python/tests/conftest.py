"""Shared by the CPU and GPU suites: a small, valid decode problem's tensors."""

import pytest

torch = pytest.importorskip("torch")


def make_inputs(device="cpu", batch=2, hq=8, hkv=2, d=128, page=16, pages=6, max_pages=3, q_len=0,
                dtype=None, kv_dtype=None):
    """Tensors of a valid decode call (q_len=0: 3-D q). Values are random; on the
    CPU they only feed the argument checks."""
    dtype = dtype or torch.bfloat16
    kv_dtype = kv_dtype or dtype
    shape = (batch, q_len, hq, d) if q_len else (batch, hq, d)
    q = torch.randn(shape, device=device).to(dtype)
    k = torch.randn(pages, page, hkv, d, device=device).to(kv_dtype)
    v = torch.randn(pages, page, hkv, d, device=device).to(kv_dtype)
    bt = torch.arange(batch * max_pages, dtype=torch.int32, device=device).reshape(batch, max_pages) % pages
    sl = torch.full((batch,), page * max_pages - 3, dtype=torch.int32, device=device)
    return q, k, v, bt, sl


@pytest.fixture
def inputs():
    return make_inputs()


def make_mla_inputs(device="cpu", batch=2, heads=16, page=64, pages=10, max_pages=3, q_len=0, dtype=None,
                    kv_dtype=None):
    """Tensors of a valid mla_decode call (q_len=0: 3-D q): q [B, (q_len,) H, 576],
    latent cache [pages, page, 576], block_table, seq_lens."""
    dtype = dtype or torch.bfloat16
    kv_dtype = kv_dtype or dtype
    shape = (batch, q_len, heads, 576) if q_len else (batch, heads, 576)
    q = torch.randn(shape, device=device).to(dtype)
    kv = torch.randn(pages, page, 576, device=device).to(kv_dtype)
    bt = torch.arange(batch * max_pages, dtype=torch.int32, device=device).reshape(batch, max_pages) % pages
    sl = torch.full((batch,), page * max_pages - 5, dtype=torch.int32, device=device)
    return q, kv, bt, sl


@pytest.fixture
def mla_inputs():
    return make_mla_inputs()

"""Every argument check of xqajit.decode, on CPU tensors: each bad argument is
refused with a message naming it, before anything launches. `validate_decode`
runs the same checks plus the library's (xqajit::validate) without a GPU."""

import pytest
import torch

import xqajit
from conftest import make_inputs
from xqajit.ops import gqa


def refused(match, *args, **kw):
    with pytest.raises(xqajit.ArgumentError, match=match):
        xqajit.validate_decode(*args, **kw)


def test_valid_inputs_pass_python_and_library_checks(inputs):
    xqajit.validate_decode(*inputs)
    q, k, v, bt, sl = make_inputs(q_len=1)
    xqajit.validate_decode(q, k, v, bt, sl)


def test_a_cpu_tensor_is_refused_before_launch(inputs):
    with pytest.raises(xqajit.ArgumentError, match="q is a CPU tensor"):
        xqajit.decode(*inputs)


@pytest.mark.parametrize("name,bad,match", [
    ("q", lambda t: t.float(), r"q has dtype torch.float32: allowed torch.bfloat16, torch.float16"),
    ("q", lambda t: t[0], r"q has shape \(8, 128\)"),
    ("q", lambda t: torch.randn(2, 8, 256).bfloat16()[..., ::2], r"q has stride 2 in its last \(head_dim\)"),
    ("k", lambda t: t.half(), r"k_cache has dtype torch.float16: allowed"),
    ("k", lambda t: t[0], r"k_cache has shape \(16, 2, 128\): expected 4 dims"),
    ("k", lambda t: torch.randn(6, 16, 2, 256).bfloat16()[..., ::2], r"k_cache has stride 2 in its last"),
    ("v", lambda t: t[:5], r"v_cache has shape \(5, 16, 2, 128\) but k_cache has"),
    ("v", lambda t: t.to(torch.float8_e4m3fn), r"v_cache has dtype torch.float8_e4m3fn but k_cache has"),
    ("bt", lambda t: t.long(), r"block_table must be int32 \[batch=2, max_pages_per_seq\]"),
    ("bt", lambda t: t[:1], r"block_table must be int32 \[batch=2"),
    ("bt", lambda t: torch.zeros(2, 6, dtype=torch.int32)[:, ::2], r"block_table must have contiguous rows"),
    ("sl", lambda t: t.long(), r"seq_lens must be a contiguous int32 \[batch=2\]"),
    ("sl", lambda t: t[:1], r"seq_lens must be a contiguous int32"),
    ("sl", lambda t: torch.zeros(4, dtype=torch.int32)[::2], r"seq_lens must be a contiguous int32"),
])
def test_bad_tensor_is_named(inputs, name, bad, match):
    args = dict(zip(("q", "k", "v", "bt", "sl"), inputs))
    args[name] = bad(args[name])
    refused(match, args["q"], args["k"], args["v"], args["bt"], args["sl"])


def test_not_a_tensor_is_named(inputs):
    q, k, v, bt, sl = inputs
    refused("seq_lens must be a torch.Tensor, got list", q, k, v, bt, [1, 2])
    refused("k_cache is missing", q, None, v, bt, sl) if False else None
    with pytest.raises(xqajit.ArgumentError, match="k_cache is missing"):
        xqajit.decode(q, None, v, bt, sl)


def test_heads_and_head_dim_must_agree(inputs):
    q, k, v, bt, sl = inputs
    refused(r"k_cache has 3 KV heads, which does not divide q's 8", q, k[:, :, :1].expand(6, 16, 3, 128),
            v[:, :, :1].expand(6, 16, 3, 128), bt, sl)
    q64 = torch.randn(2, 8, 64).bfloat16()
    refused("k_cache has head_dim 128 but q has 64", q64, k, v, bt, sl)


def test_out_is_checked(inputs):
    q, k, v, bt, sl = inputs
    refused(r"out has shape \(2, 8, 64\) but q has", q, k, v, bt, sl, out=torch.empty(2, 8, 64).bfloat16())
    refused("out has dtype torch.float16", q, k, v, bt, sl, out=torch.empty(2, 8, 128).half())


def test_scales(inputs):
    q, k, v, bt, sl = inputs
    xqajit.validate_decode(q, k, v, bt, sl, kv_scale=torch.ones(1), q_scale=2)
    refused("kv_scale as a tensor must be float32 with one element", q, k, v, bt, sl, kv_scale=torch.ones(2))
    refused("q_scale as a tensor must be float32", q, k, v, bt, sl, q_scale=torch.ones(1, dtype=torch.float64))
    refused("kv_scale must be a float or a 1-element float32 CUDA tensor", q, k, v, bt, sl, kv_scale="1")


def test_sinks_and_spec_mask(inputs):
    q, k, v, bt, sl = inputs
    xqajit.validate_decode(q, k, v, bt, sl, sinks=torch.zeros(8))
    refused(r"sinks must be contiguous with 8 elements", q, k, v, bt, sl, sinks=torch.zeros(4))
    refused(r"sinks has dtype torch.bfloat16", q, k, v, bt, sl, sinks=torch.zeros(8).bfloat16())
    q2, k2, v2, bt2, sl2 = make_inputs(q_len=2)
    # The library's own check: q_len > 1 needs a mask.
    refused("spec_mask is null but q_len = 2", q2, k2, v2, bt2, sl2)
    mask = torch.tensor([1, 3], dtype=torch.int32).repeat(2, 1).reshape(2, 2, 1)
    xqajit.validate_decode(q2, k2, v2, bt2, sl2, spec_mask=mask)
    refused(r"spec_mask must be contiguous with 4 elements", q2, k2, v2, bt2, sl2, spec_mask=mask[:1])


def test_library_checks_arrive_as_argument_errors(inputs):
    q, k, v, bt, sl = make_inputs(d=96, page=16)
    refused(r"decode: head_dim = 96: allowed 64, 128, 256", q, k, v, bt, sl)
    q, k, v, bt, sl = make_inputs(page=8)
    refused(r"decode: page_size = 8: allowed 16, 32, 64, 128", q, k, v, bt, sl)
    q, k, v, bt, sl = inputs
    padded = torch.zeros(2, 8, 132).bfloat16()[..., :128]  # head stride 132: not a multiple of 16 bytes
    refused(r"q_stride_head = 132 must be a multiple of 8 elements", padded, k, v, bt, sl)
    refused("sliding_window = -1 must be >= 0", q, k, v, bt, sl, sliding_window=-1)
    refused(r"num_splits = 65: allowed 0 \(automatic\) to 64", q, k, v, bt, sl, num_splits=65)


def test_layouts_from_strides(inputs):
    q, k, v, bt, sl = inputs
    ptrs, mid, _, _ = gqa.decode_args(q, k, v, bt, sl, torch.empty_like(q))
    k_nhd = mid[6:9]
    assert k_nhd == (16 * 2 * 128, 2 * 128, 128)
    # An HND-stored cache as a transposed view: the same logical shape, HND strides.
    k_hnd, v_hnd = (t.transpose(1, 2).contiguous().transpose(1, 2) for t in (k, v))
    _, mid, _, _ = gqa.decode_args(q, k_hnd, v_hnd, bt, sl, torch.empty_like(q))
    assert mid[6:9] == (16 * 2 * 128, 128, 16 * 128)
    # ...or stored HND and named so.
    k_h, v_h = (t.transpose(1, 2).contiguous() for t in (k, v))
    _, mid2, _, _ = gqa.decode_args(q, k_h, v_h, bt, sl, torch.empty_like(q), kv_layout="HND")
    assert mid2 == mid
    xqajit.validate_decode(q, k_h, v_h, bt, sl, kv_layout="HND")
    refused("kv_layout = 'NDH'", q, k, v, bt, sl, kv_layout="NDH")


def test_combined_kv_cache(inputs):
    q, k, v, bt, sl = inputs
    kv = torch.stack([k, v], dim=1)  # [pages, 2, page_size, H, D]
    ptrs, mid, _, _ = gqa.decode_args(q, kv, None, bt, sl, torch.empty_like(q))
    assert ptrs[3] - ptrs[2] == kv.stride(1) * kv.element_size()
    assert mid[6:9] == (2 * 16 * 2 * 128, 2 * 128, 128) and mid[9:12] == mid[6:9]
    xqajit.validate_decode(q, kv_cache=kv, block_table=bt, seq_lens=sl)
    refused(r"kv_cache has shape \(6, 16, 2, 128\)", q, kv_cache=k, block_table=bt, seq_lens=sl)
    with pytest.raises(xqajit.ArgumentError, match="kv_cache was given with k_cache"):
        xqajit.decode(q, k, v, bt, sl, kv_cache=kv)


def test_fp8_cache_and_output(inputs):
    q, k, v, bt, sl = inputs
    k8, v8 = k.to(torch.float8_e4m3fn), v.to(torch.float8_e4m3fn)
    xqajit.validate_decode(q, k8, v8, bt, sl, kv_scale=0.5)
    xqajit.validate_decode(q, k8.view(torch.uint8), v8.view(torch.uint8), bt, sl)  # vLLM's uint8 bytes
    xqajit.validate_decode(q, k8, v8, bt, sl, out_scale=2.0)  # fp8 output
    refused("output = fp8 needs an fp8 KV cache", q, k, v, bt, sl, out_scale=2.0)


def test_meta_tensors_are_checked_too():
    q, k, v, bt, sl = make_inputs(device="meta")
    gqa.decode_args(q, k, v, bt, sl, torch.empty_like(q), ptr=gqa._no_ptr)
    with pytest.raises(xqajit.ArgumentError, match="block_table must be int32"):
        gqa.decode_args(q, k, v, bt.long(), sl, torch.empty_like(q), ptr=gqa._no_ptr)


def test_lse_output_is_checked(inputs):
    q, k, v, bt, sl = inputs  # q [B, Hq, D]: lse [B, Hq] or [B, 1, Hq]
    B, H = q.shape[:2]
    xqajit.validate_decode(q, k, v, bt, sl, lse=torch.empty(B, H))
    xqajit.validate_decode(q, k, v, bt, sl, lse=torch.empty(B, 1, H))
    xqajit.validate_decode(q, k, v, bt, sl, lse=torch.empty(H, B).t())  # any strides
    refused(r"lse must be float32 \[batch=2, q_len=1, num_q_heads=8\]", q, k, v, bt, sl,
            lse=torch.empty(B, H, dtype=torch.float16))
    refused(r"lse must be float32 \[batch=2, q_len=1, num_q_heads=8\]", q, k, v, bt, sl, lse=torch.empty(B, H + 1))

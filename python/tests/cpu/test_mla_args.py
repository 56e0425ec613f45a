"""Every argument check of xqajit.mla_decode, on CPU and meta tensors: each bad
argument is refused with a message naming it, before anything launches.
`validate_mla_decode` runs the same checks plus the library's (xqajit::validate)."""

import pytest
import torch

import xqajit
from conftest import make_mla_inputs
from xqajit.ops import mla

SM = 192 ** -0.5  # DeepSeek-V3's softmax scale


def refused(match, *args, sm_scale=SM, **kw):
    with pytest.raises(xqajit.ArgumentError, match=match):
        xqajit.validate_mla_decode(*args, sm_scale=sm_scale, **kw)


def test_valid_inputs_pass_python_and_library_checks(mla_inputs):
    xqajit.validate_mla_decode(*mla_inputs, sm_scale=SM)
    xqajit.validate_mla_decode(*make_mla_inputs(q_len=3, heads=128, page=32), sm_scale=SM)
    q, kv, bt, sl = mla_inputs
    xqajit.validate_mla_decode(q, kv.unsqueeze(2), bt, sl, sm_scale=SM)  # FlashMLA's [pages, page, 1, 576]


def test_sm_scale_is_required_and_checked(mla_inputs):
    with pytest.raises(TypeError, match="sm_scale"):
        xqajit.mla_decode(*mla_inputs)
    refused(r"sm_scale = 0.0 must be > 0", *mla_inputs, sm_scale=0.0)
    refused(r"sm_scale must be a Python float", *mla_inputs, sm_scale=torch.ones(1))
    refused(r"sm_scale must be a Python float", *mla_inputs, sm_scale=None)
    refused(r"sm_scale = 2000000 must be a positive softmax scale", *mla_inputs, sm_scale=2e6)  # the library's


def test_a_cpu_tensor_is_refused_before_launch(mla_inputs):
    with pytest.raises(xqajit.ArgumentError, match="q is a CPU tensor"):
        xqajit.mla_decode(*mla_inputs, sm_scale=SM)


@pytest.mark.parametrize("name,bad,match", [
    ("q", lambda t: t.float(), r"q has dtype torch.float32: allowed torch.bfloat16, torch.float8_e4m3fn"),
    ("q", lambda t: t.half(), r"q has dtype torch.float16: allowed"),
    ("q", lambda t: t[0], r"q has shape \(16, 576\): expected \[batch, q_len, num_heads, 576\]"),
    ("q", lambda t: t[..., :512], r"q has 512 values per head: MLA decode takes 576"),
    ("q", lambda t: torch.randn(2, 16, 1152).bfloat16()[..., ::2], r"q has stride 2 in its last"),
    ("kv", lambda t: t[0], r"kv_cache has shape \(64, 576\): expected \[num_pages, page_size, 576\]"),
    ("kv", lambda t: t.unsqueeze(2).expand(10, 64, 2, 576), r"kv_cache has shape \(10, 64, 2, 576\)"),
    ("kv", lambda t: t[..., :512], r"kv_cache has 512 values per row: MLA decode takes 576"),
    ("kv", lambda t: t.half(), r"kv_cache has dtype torch.float16: allowed"),
    ("kv", lambda t: torch.randn(10, 64, 1152).bfloat16()[..., ::2], r"kv_cache has stride 2 in its last"),
    ("bt", lambda t: t.long(), r"block_table must be int32 \[batch=2, max_pages_per_seq\]"),
    ("bt", lambda t: t[:1], r"block_table must be int32 \[batch=2"),
    ("bt", lambda t: torch.zeros(2, 6, dtype=torch.int32)[:, ::2], r"block_table must have contiguous rows"),
    ("sl", lambda t: t.long(), r"seq_lens must be a contiguous int32 \[batch=2\]"),
    ("sl", lambda t: [1, 2], r"seq_lens must be a torch.Tensor, got list"),
])
def test_bad_tensor_is_named(mla_inputs, name, bad, match):
    args = dict(zip(("q", "kv", "bt", "sl"), mla_inputs))
    args[name] = bad(args[name])
    refused(match, args["q"], args["kv"], args["bt"], args["sl"])


def test_dtype_combinations(mla_inputs):
    q, kv, bt, sl = mla_inputs
    f8 = torch.float8_e4m3fn
    xqajit.validate_mla_decode(q, kv.to(f8), bt, sl, sm_scale=SM, kv_scale=0.5)  # bf16 Q, fp8 cache
    xqajit.validate_mla_decode(q.to(f8), kv.to(f8), bt, sl, sm_scale=SM, q_scale=0.3, kv_scale=0.5)
    xqajit.validate_mla_decode(q, kv.to(f8).view(torch.uint8), bt, sl, sm_scale=SM)  # fp8 bytes as uint8
    refused(r"kv_cache has dtype torch.bfloat16: allowed torch.float8_e4m3fn", q.to(f8), kv, bt, sl)


def test_out_is_checked(mla_inputs):
    q, kv, bt, sl = mla_inputs
    refused(r"out has shape \(2, 16, 576\): expected \(2, 16, 512\)", q, kv, bt, sl, out=torch.empty_like(q))
    refused(r"out has dtype torch.float16: MLA decode writes torch.bfloat16", q, kv, bt, sl,
            out=torch.empty(2, 16, 512).half())
    refused(r"out has stride 2 in its last", q, kv, bt, sl, out=torch.empty(2, 16, 1024).bfloat16()[..., ::2])
    out = torch.empty(2, 16, 512).bfloat16()
    xqajit.validate_mla_decode(q, kv, bt, sl, sm_scale=SM, out=out)


def test_scales_mask_and_backend(mla_inputs):
    q, kv, bt, sl = mla_inputs
    xqajit.validate_mla_decode(q, kv, bt, sl, sm_scale=SM, kv_scale=torch.ones(1), q_scale=2)
    refused("kv_scale as a tensor must be float32 with one element", q, kv, bt, sl, kv_scale=torch.ones(2))
    refused("q_scale must be a float or a 1-element float32 CUDA tensor", q, kv, bt, sl, q_scale="1")
    q3, kv3, bt3, sl3 = make_mla_inputs(q_len=3)
    mask = torch.tensor([1, 3, 7], dtype=torch.int32).repeat(2, 1)  # causal, [B, q_len]
    xqajit.validate_mla_decode(q3, kv3, bt3, sl3, sm_scale=SM, spec_mask=mask)
    xqajit.validate_mla_decode(q3, kv3, bt3, sl3, sm_scale=SM)  # no mask: causal
    refused(r"spec_mask must be contiguous with 6 elements", q3, kv3, bt3, sl3, spec_mask=mask[:1])
    refused(r"spec_mask has dtype torch.int64", q3, kv3, bt3, sl3, spec_mask=mask.long())
    refused(r"backend = 'fast': allowed 'auto', 'portable', 'hopper'", q, kv, bt, sl, backend="fast")
    xqajit.validate_mla_decode(q, kv, bt, sl, sm_scale=SM, backend="portable")


def test_library_checks_arrive_as_argument_errors():
    refused(r"mla_decode: num_heads = 8: allowed 16, 32, 64, 128", *make_mla_inputs(heads=8))
    refused(r"mla_decode: page_size = 16: allowed 32, 64", *make_mla_inputs(page=16))
    refused(r"mla_decode: q_len = 5: allowed 1 to 4", *make_mla_inputs(q_len=5))
    q, kv, bt, sl = make_mla_inputs()
    padded = torch.zeros(10, 64, 580).bfloat16()[..., :576]  # row stride 580: not a multiple of 16 bytes
    refused(r"kv_stride_token = 580", q, padded, bt, sl)
    refused(r"num_splits = 65: allowed 0 \(automatic\) to 64", q, kv, bt, sl, num_splits=65)


def test_strides_and_views(mla_inputs):
    q, kv, bt, sl = mla_inputs
    ptrs, mid, scales, device = mla.mla_decode_args(q, kv, bt, sl, torch.empty(2, 16, 512).bfloat16(), sm_scale=SM)
    assert mid[:9] == (16 * 576, 16 * 576, 576, 16 * 512, 16 * 512, 512, 64 * 576, 576, 3)
    assert scales[:3] == (pytest.approx(SM), 1.0, 1.0) and device == -1
    assert scales[3:] == (0,) * len(mla.TAIL_FIELDS)  # no sparse lists, no lse, no sinks
    # A latent cache inside a larger pool (rows padded to 640 values): its strides travel.
    pool = torch.zeros(10, 64, 640).bfloat16()
    _, mid, _, _ = mla.mla_decode_args(q, pool[..., :576], bt, sl, torch.empty(2, 16, 512).bfloat16(), sm_scale=SM)
    assert mid[6:8] == (64 * 640, 640)
    xqajit.validate_mla_decode(q, pool[..., :576], bt, sl, sm_scale=SM)


def test_meta_tensors_are_checked_too():
    q, kv, bt, sl = make_mla_inputs(device="meta", q_len=2)
    out = torch.empty(2, 2, 16, 512, dtype=torch.bfloat16, device="meta")
    mla.mla_decode_args(q, kv, bt, sl, out, sm_scale=SM, ptr=mla._no_ptr)
    with pytest.raises(xqajit.ArgumentError, match="block_table must be int32"):
        mla.mla_decode_args(q, kv, bt.long(), sl, out, sm_scale=SM, ptr=mla._no_ptr)


def test_spec_for_prewarm(mla_inputs):
    q, kv, _, _ = mla_inputs
    s = xqajit.mla_decode_spec(q, kv.to(torch.float8_e4m3fn), arch="sm_90a")  # auto: hopper on sm_90a
    assert s.name.startswith("mla_bf16_kvfp8_obf16_d576_p64_g16_q1") and s.name.endswith("hopper_sm90a")
    s = xqajit.mla_decode_spec(q, kv.to(torch.float8_e4m3fn), arch="sm_90a", backend="portable")
    assert s.name.endswith("portable_sm90")
    s = xqajit.mla_decode_spec(q, kv, arch="sm_120a")
    assert "portable" in s.name
    s = xqajit.mla_decode_spec(q, kv, arch="sm_90a", backend="portable")
    assert "portable" in s.name

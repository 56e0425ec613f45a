"""Sparse MLA (DSA) and the LSE / sink arguments of xqajit.mla_decode, and the
xqajit.flash_mla compatibility module, on CPU tensors: every bad argument is refused
with a message naming it, before anything launches (docs/DSA.md)."""

import pytest
import torch

import xqajit
from conftest import make_mla_inputs
from xqajit import flash_mla

SM = 192 ** -0.5


def sparse_inputs(batch=2, q_len=2, heads=16, topk=128, pages=10):
    q, kv, _, _ = make_mla_inputs(batch=batch, heads=heads, q_len=q_len, pages=pages)
    idx = torch.randint(-1, pages * 64, (batch, q_len, topk), dtype=torch.int32)
    return q, kv, idx


def refused(match, *args, **kw):
    with pytest.raises(xqajit.ArgumentError, match=match):
        xqajit.validate_mla_decode(*args, sm_scale=SM, **kw)


def test_sparse_inputs_pass_python_and_library_checks():
    q, kv, idx = sparse_inputs()
    xqajit.validate_mla_decode(q, kv, indices=idx, sm_scale=SM)
    xqajit.validate_mla_decode(q, kv, indices=idx, topk_length=torch.tensor([5, 500], dtype=torch.int32),
                               lse=torch.empty(2, 2, 16), attn_sink=torch.zeros(16), sm_scale=SM)
    # FlashMLA's lse layout [batch, heads, q_len] as a transposed view; padded index lists.
    xqajit.validate_mla_decode(q, kv, indices=torch.zeros(2, 2, 200, dtype=torch.int32)[..., :128],
                               lse=torch.empty(2, 16, 2).transpose(1, 2), sm_scale=SM)
    # q without a token axis takes [batch, topk] lists.
    q3, kv3, _, _ = make_mla_inputs()
    xqajit.validate_mla_decode(q3, kv3, indices=torch.zeros(2, 64, dtype=torch.int32), sm_scale=SM)


def test_dense_calls_take_lse_and_sinks():
    q, kv, bt, sl = make_mla_inputs(q_len=2)
    xqajit.validate_mla_decode(q, kv, bt, sl, lse=torch.empty(2, 2, 16), attn_sink=torch.zeros(16), sm_scale=SM)


@pytest.mark.parametrize("kw,match", [
    (dict(block_table="bt"), r"block_table must be None with indices"),
    (dict(seq_lens="sl"), r"seq_lens must be None with indices"),
    (dict(indices=torch.zeros(2, 2, 64, dtype=torch.int64)), r"indices must be int32 \[batch=2, q_len=2, topk\]"),
    (dict(indices=torch.zeros(2, 3, 64, dtype=torch.int32)), r"indices must be int32"),
    (dict(indices=torch.zeros(2, 2, 128, dtype=torch.int32)[..., ::2]), r"indices must have contiguous lists"),
    (dict(topk_length=torch.zeros(3, dtype=torch.int32)), r"topk_length must be contiguous with 2 elements"),
    (dict(topk_length=torch.zeros(2, dtype=torch.int64)), r"topk_length has dtype torch.int64"),
    (dict(lse=torch.empty(2, 16, 2)), r"lse must be float32 \[batch=2, q_len=2, num_heads=16\]"),
    (dict(lse=torch.empty(2, 2, 16, dtype=torch.float64)), r"lse must be float32"),
    (dict(attn_sink=torch.zeros(8)), r"attn_sink must be contiguous with 16 elements"),
])
def test_bad_sparse_argument_is_named(kw, match):
    q, kv, idx = sparse_inputs()
    _, _, bt, sl = make_mla_inputs(q_len=2)
    args = dict(indices=idx)
    named = {"bt": bt, "sl": sl}
    args.update({k: named[v] if isinstance(v, str) else v for k, v in kw.items()})
    refused(match, q, kv, **args)


def test_the_library_bounds_sparse_shapes():
    q, kv, _ = sparse_inputs()
    refused(r"indices has topk = 0 entries per list", q, kv, indices=torch.zeros(2, 2, 0, dtype=torch.int32))
    # The library's own bound, through the C ABI.
    refused(r"mla_decode: topk = 1048577: allowed 1 to 1048576", q, kv,
            indices=torch.zeros(2, 2, (1 << 20) + 1, dtype=torch.int32))


def test_topk_length_needs_indices():
    q, kv, bt, sl = make_mla_inputs(q_len=2)
    refused(r"topk_length is given without indices", q, kv, bt, sl, topk_length=torch.zeros(2, dtype=torch.int32))


def test_mla_decode_with_new_arguments_refuses_cpu_tensors():
    q, kv, idx = sparse_inputs()
    with pytest.raises(xqajit.ArgumentError, match="q is a CPU tensor"):
        xqajit.mla_decode(q, kv, indices=idx, sm_scale=SM, return_lse=True)


# --- the fp8-with-scales cache (DeepSeek-V3.2, kv=fp8ds): 656-byte rows ---


def fp8ds_cache(pages=10, page=64, pad_rows=0, dtype=torch.uint8, row_bytes=656):
    """An fp8-with-scales cache; pad_rows > 0 pads each page as FlashMLA's quantiser does."""
    return torch.zeros(pages, page + pad_rows, row_bytes, dtype=dtype)[:, :page]


def test_fp8ds_cache_passes_python_and_library_checks():
    q, _, bt, sl = make_mla_inputs(q_len=2)
    for dt in (torch.uint8, torch.float8_e4m3fn):
        xqajit.validate_mla_decode(q, fp8ds_cache(dtype=dt), bt, sl, sm_scale=SM)
    # FlashMLA's [blocks, block_size, 1, 656] over pages of block_size + 1 rows.
    xqajit.validate_mla_decode(q, fp8ds_cache(pad_rows=1).unsqueeze(2), bt, sl, sm_scale=SM)
    qs, _, idx = sparse_inputs()
    xqajit.validate_mla_decode(qs, fp8ds_cache(), indices=idx, lse=torch.empty(2, 2, 16), sm_scale=SM)
    # The spec names the cache; auto is the hopper kernel on sm_90a, portable before it.
    s = xqajit.mla_decode_spec(q, fp8ds_cache(), arch="sm_90a")
    assert s.name == "mla_bf16_kvfp8ds_obf16_d576_p64_g16_q2_sw0_t64_hopper_sm90a"
    s = xqajit.mla_decode_spec(q, fp8ds_cache(), arch="sm_89")
    assert s.name == "mla_bf16_kvfp8ds_obf16_d576_p64_g16_q2_sw0_t32_portable_sm89"
    # Sparse below 64 heads with two query tokens: the hopper kernel too, a CTA a query token
    # (its rows share one index list).
    s = xqajit.mla_decode_spec(qs, fp8ds_cache(), indices=idx, arch="sm_90a", backend="hopper")
    assert s.name == "mla_bf16_kvfp8ds_obf16_d576_p64_g16_q2_sw0_t64_sparse_hopper_sm90a"
    assert xqajit.mla_decode_spec(qs, fp8ds_cache(), indices=idx, arch="sm_90a").fields["backend"] == "hopper"


@pytest.mark.parametrize("make,match", [
    (lambda q: (q.to(torch.float8_e4m3fn), fp8ds_cache()),
     r"kv_cache is an fp8-with-scales cache \(656-byte rows\): it needs a bf16 q, got fp8"),
    (lambda q: (q, fp8ds_cache(dtype=torch.bfloat16)), r"kv_cache has 656 values per row of dtype torch.bfloat16"),
    (lambda q: (q, fp8ds_cache(row_bytes=664)[..., :656]), r"kv_stride_token = 664 must be a multiple of 16"),
    (lambda q: (q, fp8ds_cache(row_bytes=600)), r"kv_cache has 600 values per row: MLA decode takes 576 \(or"),
])
def test_bad_fp8ds_cache_is_named(make, match):
    q, _, bt, sl = make_mla_inputs(q_len=2)
    q, kv = make(q)
    refused(match, q, kv, bt, sl)


# --- xqajit.flash_mla: FlashMLA's API ---


def flash_args(batch=2, s_q=2, heads=16, topk=None):
    q, kv, bt, sl = make_mla_inputs(batch=batch, heads=heads, q_len=s_q)
    kw = dict(q=q, k_cache=kv.unsqueeze(2), block_table=bt, cache_seqlens=sl, head_dim_v=512,
              tile_scheduler_metadata=flash_mla.get_mla_metadata()[0], softmax_scale=SM)
    if topk:
        kw.update(block_table=None, cache_seqlens=None,
                  indices=torch.zeros(batch, s_q, topk, dtype=torch.int32))
    return kw


def test_get_mla_metadata_takes_any_arguments():
    meta, none = flash_mla.get_mla_metadata(torch.zeros(2, dtype=torch.int32), 16, 1, num_heads_k=1)
    assert none is None and isinstance(meta, flash_mla.FlashMLASchedMeta) and not meta.have_initialized


@pytest.mark.parametrize("kw,match", [
    (dict(num_splits=4), r"num_splits must be None"),
    (dict(extra_k_cache=torch.zeros(1)), r"extra_k_cache is not supported"),
    (dict(extra_indices_in_kvcache=torch.zeros(1)), r"extra_indices_in_kvcache is not supported"),
    (dict(extra_topk_length=torch.zeros(1)), r"extra_topk_length is not supported"),
    (dict(head_dim_v=576), r"head_dim_v = 576: must be 512"),
    (dict(is_fp8_kvcache=True), r"k_cache is torch.bfloat16 with 576 values per row: with is_fp8_kvcache=True"),
    (dict(tile_scheduler_metadata=None), r"tile_scheduler_metadata must be the FlashMLASchedMeta"),
    (dict(topk_length=torch.zeros(2, dtype=torch.int32)), r"topk_length must be None for dense"),
    (dict(block_table=None), r"block_table must be given for dense attention"),
])
def test_flash_mla_names_what_it_cannot_take(kw, match):
    args = flash_args()
    args.update(kw)
    with pytest.raises(xqajit.ArgumentError, match=match):
        flash_mla.flash_mla_with_kvcache(**args)


def test_flash_mla_takes_the_fp8_with_scales_cache():
    for topk in (None, 64):  # dense and sparse
        args = flash_args(topk=topk)
        args["k_cache"] = fp8ds_cache(pad_rows=1, dtype=torch.float8_e4m3fn).unsqueeze(2)
        # Past every check of the arguments: the CPU tensors are what stops it.
        with pytest.raises(xqajit.ArgumentError, match="q is a CPU tensor"):
            flash_mla.flash_mla_with_kvcache(**args, is_fp8_kvcache=True)
        with pytest.raises(xqajit.ArgumentError, match=r"is_fp8_kvcache = False but k_cache is torch.float8_e4m3fn "
                                                       r"with 656 values per row"):
            flash_mla.flash_mla_with_kvcache(**dict(args, tile_scheduler_metadata=flash_mla.get_mla_metadata()[0]))
        # The metadata records the cache format, as FlashMLA's does.
        bf16 = flash_args(topk=topk)
        bf16["tile_scheduler_metadata"] = args["tile_scheduler_metadata"]
        with pytest.raises(xqajit.ArgumentError, match=r"initialised for other arguments \(is_fp8_kvcache differ"):
            flash_mla.flash_mla_with_kvcache(**bf16)


def test_flash_mla_sparse_refuses_causal_and_checks_its_metadata():
    args = flash_args(topk=64)
    with pytest.raises(xqajit.ArgumentError, match="causal must be False with indices"):
        flash_mla.flash_mla_with_kvcache(**args, causal=True)
    # The first call records the configuration (then fails: CPU tensors); a call with other
    # shapes on the same metadata is refused, as FlashMLA refuses it.
    with pytest.raises(xqajit.ArgumentError, match="q is a CPU tensor"):
        flash_mla.flash_mla_with_kvcache(**args)
    other = flash_args(topk=128)
    other["tile_scheduler_metadata"] = args["tile_scheduler_metadata"]
    with pytest.raises(xqajit.ArgumentError, match=r"initialised for other arguments \(topk differ"):
        flash_mla.flash_mla_with_kvcache(**other)

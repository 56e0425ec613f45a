"""The eager hot paths on the CPU, the launch replaced by the library's argument
check (as in benchmarks/overhead.py --cpu-stand-in), everything else as on a GPU:
the C fast path (xqajit/_fastcall*.c, when built) and the Python path (ctypes,
checks cached by metadata) it falls back to."""

import ctypes

import pytest
import torch

import xqajit
from arg_checks import count_arg_checks
from conftest import make_inputs, make_mla_inputs
from xqajit.ops import _fast, gqa, mla

FAST = pytest.mark.skipif(_fast.call is None, reason=f"the C fast path is off: {_fast.status}")


@pytest.fixture(params=["fast", "python"])
def stand_in(request, monkeypatch):
    """Launches go to xqajit_{mla_,}decode_validate; yields the list of Python-path launches."""
    if request.param == "fast" and _fast.call is None:
        pytest.skip(f"the C fast path is off: {_fast.status}")
    lib = xqajit._library.library()
    calls = []

    def check_only(name):
        def launch(addr):
            calls.append(addr)
            return getattr(lib, name + "_validate")(addr)
        return launch

    monkeypatch.setattr(gqa, "require_cuda", lambda op, device: None)
    monkeypatch.setattr(mla, "require_cuda", lambda op, device: None)
    monkeypatch.setattr(gqa, "current_stream", lambda device: 0)
    monkeypatch.setattr(mla, "current_stream", lambda device: 0)
    monkeypatch.setattr(lib, "xqajit_decode", check_only("xqajit_decode"))
    monkeypatch.setattr(lib, "xqajit_mla_decode", check_only("xqajit_mla_decode"))
    if request.param == "python":
        monkeypatch.setattr(gqa, "_fast_call", None)
        monkeypatch.setattr(mla, "_fast_call", None)
    else:
        _fast.set_function(_fast.OP_DECODE, _fast.function_address("xqajit_decode_validate"))
        _fast.set_function(_fast.OP_MLA, _fast.function_address("xqajit_mla_decode_validate"))
    _fast.module and _fast.module.clear()
    gqa._CHECKED.clear()
    mla._CHECKED.clear()
    yield calls
    _fast.set_function(_fast.OP_DECODE, None)
    _fast.set_function(_fast.OP_MLA, None)
    _fast.module and _fast.module.clear()
    gqa._CHECKED.clear()
    mla._CHECKED.clear()


def as_if_on_cuda0():
    """Python-path cache entries claim device 0, so that hits take its inlined launch."""
    for checked in (gqa._CHECKED, mla._CHECKED):
        for key, (mid, _, *rest) in list(checked.items()):
            checked[key] = (mid, 0, *rest)


def hits():
    return _fast.module.stats()[1] if _fast.module else 0


def test_second_call_hits_a_cache_and_still_reaches_the_library(stand_in):
    q, k, v, bt, sl = make_inputs()
    out = torch.empty_like(q)
    assert xqajit.decode(q, k, v, bt, sl, out=out) is out
    assert len(gqa._CHECKED) == 1 and len(stand_in) == 1
    as_if_on_cuda0()
    before = hits()
    q2 = q.clone()  # new pointers, same metadata: a hit
    assert xqajit.decode(q2, k, v, bt, sl, out=out, kv_scale=0.5) is out
    assert len(gqa._CHECKED) == 1
    assert len(stand_in) == 2 or hits() == before + 1  # the Python path, or the C one


def test_changed_metadata_is_checked_again(stand_in):
    q, k, v, bt, sl = make_inputs()
    xqajit.decode(q, k, v, bt, sl)
    with pytest.raises(xqajit.ArgumentError, match="block_table must be int32"):
        xqajit.decode(q, k, v, bt.long(), sl)
    with pytest.raises(xqajit.ArgumentError, match="kv_scale must be a float"):
        xqajit.decode(q, k, v, bt, sl, kv_scale="2")
    with pytest.raises(xqajit.ArgumentError, match=r"k_cache has shape \(6, 16, 128\)"):
        xqajit.decode(q, k[:, :, 0], v[:, :, 0], bt, sl)
    with pytest.raises(xqajit.ArgumentError, match="kv_cache was given with k_cache"):
        xqajit.decode(q, k, v, bt, sl, kv_cache=torch.stack([k, v], 1))


def test_pointers_of_a_hit_are_checked_by_the_library(stand_in):
    q, k, v, bt, sl = make_inputs()
    xqajit.decode(q, k, v, bt, sl)
    as_if_on_cuda0()
    # Same shape and strides, but q starts 2 bytes into its storage: not 16-byte aligned.
    base = torch.empty(q.numel() + 8, dtype=q.dtype)
    shifted = base[1:1 + q.numel()].view(q.shape)
    with pytest.raises(xqajit.ArgumentError, match="q .* is not 16-byte aligned"):
        xqajit.decode(shifted, k, v, bt, sl)


def test_combined_cache_hit_keeps_the_v_offset(stand_in):
    q, k, v, bt, sl = make_inputs()
    kv = torch.stack([k, v], dim=1)
    xqajit.decode(q, kv_cache=kv, block_table=bt, seq_lens=sl)
    ((mid, device, v_offset, _),) = gqa._CHECKED.values()
    assert v_offset == kv.stride(1) * kv.element_size()
    xqajit.decode(q, kv_cache=kv.clone(), block_table=bt, seq_lens=sl)


def test_library_errors_of_a_hit_are_raised(stand_in):
    q, k, v, bt, sl = make_inputs()
    xqajit.decode(q, k, v, bt, sl, sliding_window=0)
    with pytest.raises(xqajit.ArgumentError, match="sliding_window = -1 must be >= 0"):
        xqajit.decode(q, k, v, bt, sl, sliding_window=-1)
    with pytest.raises(xqajit.ArgumentError, match="sliding_window = -1 must be >= 0"):
        xqajit.decode(q, k, v, bt, sl, sliding_window=-1)  # keyed by value: checked again, same error


def test_arguments_the_c_path_cannot_patch_stay_on_the_python_path(stand_in):
    q, k, v, bt, sl = make_inputs()
    for _ in range(2):
        xqajit.decode(q, k, v, bt, sl, q_scale=True, kv_scale=torch.tensor(0.5).numpy()[()])  # bool, numpy scalar
    assert len(stand_in) == 2  # both calls took the Python path, neither raised


def test_mla_hits_and_errors(stand_in):
    q, kv, bt, sl = make_mla_inputs()
    out = torch.empty(2, 16, 512).bfloat16()
    assert xqajit.mla_decode(q, kv, bt, sl, sm_scale=0.1, out=out) is out
    before = hits()
    xqajit.mla_decode(q.clone(), kv, bt, sl, sm_scale=0.2, out=out, kv_scale=2.0)
    assert len(stand_in) == 2 or hits() == before + 1
    # sm_scale's value is not part of the key: the library refuses a bad one on a hit.
    with pytest.raises(xqajit.ArgumentError, match="sm_scale = -1"):
        xqajit.mla_decode(q, kv, bt, sl, sm_scale=-1.0, out=out)


@FAST
def test_fast_path_patches_every_field(monkeypatch):
    """What the C path packs equals what the Python path packs, field for field."""
    captured = {}
    lib = xqajit._library.library()
    monkeypatch.setattr(gqa, "require_cuda", lambda op, device: None)
    monkeypatch.setattr(gqa, "current_stream", lambda device: 0)
    q, k, v, bt, sl = make_inputs(q_len=2)
    mask = torch.tensor([1, 3], dtype=torch.int32).repeat(2, 1).reshape(2, 2, 1)
    kv_scale = torch.ones(1)
    kw = dict(sinks=torch.zeros(8), spec_mask=mask, kv_scale=kv_scale, q_scale=0.25, sliding_window=7)
    # Pack on the Python path, then call the C path with new tensors of the same metadata.
    _fast.module.clear()
    out = torch.empty_like(q)
    ptrs, mid, scales, _ = gqa.decode_args(q, k, v, bt, sl, out, **{**kw, "rcp_out_scale": 1.0})
    buf = bytearray(gqa._SIZE)
    gqa._PACK(buf, 0, gqa._SIZE, 0, 0, *ptrs, 0, 0, 0, *mid, *scales)
    captured["python"] = bytes(buf)
    size = gqa._SIZE

    @ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p)
    def record(addr):
        captured["c"] = ctypes.string_at(addr, size)
        return 0

    _fast.set_function(_fast.OP_DECODE, ctypes.cast(record, ctypes.c_void_p).value)
    try:
        monkeypatch.setattr(lib, "xqajit_decode", lambda addr: 0)
        xqajit.decode(q, k, v, bt, sl, out=out, **kw)  # the Python path; registers
        assert xqajit.decode(q, k, v, bt, sl, out=out, **kw) is out  # the C path
    finally:
        _fast.set_function(_fast.OP_DECODE, None)
        _fast.module.clear()
        gqa._CHECKED.clear()
    assert captured["c"] == captured["python"]


# --- the calls with optional tensors: GQA's lse, sparse MLA, MLA's lse and sinks ---

SM = 192 ** -0.5


@pytest.fixture
def checks(monkeypatch):
    """The names of the full argument checks (decode_args, mla_decode_args) eager calls ran."""
    return count_arg_checks(monkeypatch)


def sparse_call():
    """(q, kv, keyword arguments) of a sparse MLA call with lengths, a given lse and sinks."""
    q, kv, _, _ = make_mla_inputs(q_len=2)
    kw = dict(indices=torch.randint(-1, 640, (2, 2, 128), dtype=torch.int32),
              topk_length=torch.tensor([5, 100], dtype=torch.int32), lse=torch.empty(2, 2, 16),
              attn_sink=torch.zeros(16), out=torch.empty(2, 2, 16, 512).bfloat16(), sm_scale=SM)
    return q, kv, kw


def renewed(kw):
    """The same arguments in new tensors of the same metadata (new pointers)."""
    return {k: v.clone() if isinstance(v, torch.Tensor) else v for k, v in kw.items()}


def reached_the_library_unchecked(stand_in, checks, launches, c_hits, checked):
    """The last call ran no Python checks and still reached the library: through the C
    fast path where it is on, else through the Python path's cache."""
    assert len(checks) == checked
    if mla._fast_call is not None:
        assert hits() == c_hits + 1 and len(stand_in) == launches
    else:
        assert len(stand_in) == launches + 1


def test_sparse_mla_with_lse_and_sink_is_checked_once(stand_in, checks):
    q, kv, kw = sparse_call()
    out, lse = xqajit.mla_decode(q, kv, **{**kw, "lse": None}, return_lse=True)  # lse allocated
    assert out is kw["out"] and lse.shape == (2, 2, 16)
    assert checks == ["mla_decode_args"] and len(stand_in) == 1
    as_if_on_cuda0()
    launches, c_hits = len(stand_in), hits()
    again = renewed(kw)  # a given lse of the allocated one's metadata: the same key
    assert xqajit.mla_decode(q.clone(), kv, **{**again, "sm_scale": 0.2})[1] is again["lse"]
    reached_the_library_unchecked(stand_in, checks, launches, c_hits, 1)
    # The library still sees every value: a bad sm_scale on a hit is refused.
    with pytest.raises(xqajit.ArgumentError, match="sm_scale = -1"):
        xqajit.mla_decode(q, kv, **{**kw, "sm_scale": -1.0})


def test_gqa_with_lse_is_checked_once(stand_in, checks):
    q, k, v, bt, sl = make_inputs(q_len=2)
    mask = torch.tensor([1, 3], dtype=torch.int32).repeat(2, 1).reshape(2, 2, 1)
    kw = dict(sinks=torch.zeros(8), spec_mask=mask, out=torch.empty_like(q))
    out, lse = xqajit.decode(q, k, v, bt, sl, **kw, return_lse=True)
    assert out is kw["out"] and lse.shape == (2, 2, 8)
    assert checks == ["decode_args"] and len(stand_in) == 1
    as_if_on_cuda0()
    launches, c_hits = len(stand_in), hits()
    lse2 = torch.empty(2, 2, 8)
    assert xqajit.decode(q.clone(), k, v, bt, sl, **renewed(kw), lse=lse2, kv_scale=0.5)[1] is lse2
    reached_the_library_unchecked(stand_in, checks, launches, c_hits, 1)


def test_another_set_of_optional_tensors_is_another_key(stand_in, checks):
    q, kv, kw = sparse_call()
    _, _, bt, sl = make_mla_inputs(q_len=2)
    flash_lse = torch.empty(2, 16, 2).transpose(1, 2)  # FlashMLA's layout as a view: other strides
    mla_calls = [kw, {**kw, "attn_sink": None}, {**kw, "topk_length": None}, {**kw, "lse": None},
                 {**kw, "lse": flash_lse}, {**kw, "indices": None, "topk_length": None, "block_table": bt,
                                            "seq_lens": sl}]
    gq, k, v, gbt, gsl = make_inputs()
    gqa_calls = [dict(lse=torch.empty(2, 8)), dict(lse=torch.empty(2, 8), sinks=torch.zeros(8)), dict(),
                 dict(lse=torch.empty(8, 2).t())]
    for _ in range(2):  # the second round: every one of them seen before, none checked again
        for call in mla_calls:
            xqajit.mla_decode(q, kv, **call)
        xqajit.mla_decode(q, kv, bt, sl, sm_scale=SM, out=kw["out"])  # dense: no optional tensor
        for call in gqa_calls:
            xqajit.decode(gq, k, v, gbt, gsl, **call)
        assert len(checks) == len(mla_calls) + 1 + len(gqa_calls)
    assert len(mla._CHECKED) == len(mla_calls) + 1 and len(gqa._CHECKED) == len(gqa_calls)


@pytest.mark.parametrize("change,match", [
    (dict(indices=torch.zeros(2, 2, 128, dtype=torch.int64)), r"indices must be int32 \[batch=2, q_len=2, topk\]"),
    (dict(indices=torch.zeros(2, 2, 256, dtype=torch.int32)[..., ::2]), r"indices must have contiguous lists"),
    (dict(topk_length=torch.zeros(3, dtype=torch.int32)), r"topk_length must be contiguous with 2 elements"),
    (dict(topk_length=torch.zeros(2, dtype=torch.int64)), r"topk_length has dtype torch.int64"),
    (dict(lse=torch.empty(2, 16, 2)), r"lse must be float32 \[batch=2, q_len=2, num_heads=16\]"),
    (dict(lse=torch.empty(2, 2, 16, dtype=torch.float64)), r"lse must be float32"),
    (dict(attn_sink=torch.zeros(8)), r"attn_sink must be contiguous with 16 elements"),
    (dict(attn_sink=torch.zeros(16, dtype=torch.float16)), r"attn_sink has dtype torch.float16"),
    (dict(block_table=torch.zeros(2, 3, dtype=torch.int32)), r"block_table must be None with indices"),
    (dict(indices=None, block_table=torch.zeros(2, 3, dtype=torch.int32),
          seq_lens=torch.full((2,), 9, dtype=torch.int32)), r"topk_length is given without indices"),
])
def test_sparse_mla_refuses_a_bad_call_after_good_ones(stand_in, change, match):
    q, kv, kw = sparse_call()
    for _ in range(2):  # checked, then registered (C) or cached (Python)
        xqajit.mla_decode(q, kv, **kw)
    for _ in range(2):  # refused every time: a refusal is never cached
        with pytest.raises(xqajit.ArgumentError, match=match):
            xqajit.mla_decode(q, kv, **{**kw, **change})


@pytest.mark.parametrize("change,match", [
    (dict(lse=torch.empty(2, 8, dtype=torch.float16)), r"lse must be float32 \[batch=2, q_len=1, num_q_heads=8\]"),
    (dict(lse=torch.empty(2, 4)), r"lse must be float32"),
    (dict(sinks=torch.zeros(4)), r"sinks must be contiguous with 8 elements"),
    (dict(kv_cache=torch.zeros(6, 2, 16, 2, 128).bfloat16()), r"kv_cache was given with k_cache"),
])
def test_gqa_with_lse_refuses_a_bad_call_after_good_ones(stand_in, change, match):
    q, k, v, bt, sl = make_inputs()
    kw = dict(lse=torch.empty(2, 8), sinks=torch.zeros(8))
    for _ in range(2):
        xqajit.decode(q, k, v, bt, sl, **kw)
    for _ in range(2):
        with pytest.raises(xqajit.ArgumentError, match=match):
            xqajit.decode(q, k, v, bt, sl, **{**kw, **change})


def packed_for_the_library(path, monkeypatch, op, entry, size, call):
    """The args struct the library is handed by call()'s second run (the first is checked
    and registered): by the C fast path ("c") or by the Python path's cached checks."""
    lib = xqajit._library.library()
    seen = []

    def record(addr):
        seen.append(ctypes.string_at(addr, size))
        return 0

    for module in (gqa, mla):
        monkeypatch.setattr(module, "require_cuda", lambda op, device: None)
        monkeypatch.setattr(module, "current_stream", lambda device: 0)
        if path == "python":
            monkeypatch.setattr(module, "_fast_call", None)
    monkeypatch.setattr(lib, entry, record)
    c_record = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p)(record)
    _fast.module and _fast.module.clear()
    _fast.set_function(op, ctypes.cast(c_record, ctypes.c_void_p).value)
    try:
        call()
        as_if_on_cuda0()  # the Python path's hit then takes its inlined launch
        before = hits()
        call()
        assert path == "python" or hits() == before + 1
    finally:
        _fast.set_function(op, None)
        _fast.module and _fast.module.clear()
        gqa._CHECKED.clear()
        mla._CHECKED.clear()
    return seen[-1]


def reference_struct(pack, size, fields) -> bytes:
    """The struct as the checks pack it: (pointers, shapes and strides, scales) of *_args."""
    ptrs, mid, scales, _ = fields
    buf = bytearray(size)
    pack(buf, 0, size, 0, 0, *ptrs, 0, 0, 0, *mid, *scales)
    return bytes(buf)


@pytest.mark.parametrize("path", ["c", "python"])
def test_sparse_mla_hit_packs_what_the_checks_pack(path, monkeypatch):
    if path == "c" and _fast.call is None:
        pytest.skip(f"the C fast path is off: {_fast.status}")
    q, kv, kw = sparse_call()
    kw.update(q=q, kv_cache=kv, kv_scale=torch.ones(1), q_scale=0.5)
    first, second = renewed(kw), {**renewed(kw), "sm_scale": 0.3}  # every pointer differs
    calls = iter((first, second))
    got = packed_for_the_library(path, monkeypatch, _fast.OP_MLA, "xqajit_mla_decode", mla._SIZE,
                                 lambda: xqajit.mla_decode(**next(calls)))
    want = reference_struct(mla._PACK, mla._SIZE, mla.mla_decode_args(block_table=None, seq_lens=None, **second))
    assert got == want


@pytest.mark.parametrize("path", ["c", "python"])
def test_gqa_lse_hit_packs_what_the_checks_pack(path, monkeypatch):
    if path == "c" and _fast.call is None:
        pytest.skip(f"the C fast path is off: {_fast.status}")
    q, k, v, bt, sl = make_inputs(q_len=2)
    mask = torch.tensor([1, 3], dtype=torch.int32).repeat(2, 1).reshape(2, 2, 1)
    kw = dict(q=q, k_cache=k, v_cache=v, block_table=bt, seq_lens=sl, out=torch.empty_like(q), sinks=torch.zeros(8),
              spec_mask=mask, kv_scale=torch.ones(1), q_scale=0.25, sliding_window=7,
              lse=torch.empty(2, 8, 2).transpose(1, 2))
    first, second = renewed(kw), {**renewed(kw), "q_scale": 0.5}
    calls = iter((first, second))
    got = packed_for_the_library(path, monkeypatch, _fast.OP_DECODE, "xqajit_decode", gqa._SIZE,
                                 lambda: xqajit.decode(**next(calls)))
    want = reference_struct(gqa._PACK, gqa._SIZE, gqa.decode_args(**second, rcp_out_scale=1.0))
    assert got == want

"""The eager hot paths on the CPU, the launch replaced by the library's argument
check (as in benchmarks/overhead.py --cpu-stand-in), everything else as on a GPU:
the C fast path (xqajit/_fastcall*.c, when built) and the Python path (ctypes,
checks cached by metadata) it falls back to."""

import ctypes

import pytest
import torch

import xqajit
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
    for key, (mid, _, off) in list(gqa._CHECKED.items()):
        gqa._CHECKED[key] = (mid, 0, off)


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
    ((mid, device, v_offset),) = gqa._CHECKED.values()
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

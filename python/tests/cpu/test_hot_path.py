"""The eager hot path (checks cached by metadata, inlined launch) on the CPU:
the launch is replaced by the library's argument check, as in
benchmarks/overhead.py --cpu-stand-in, so everything else runs as on a GPU."""

import pytest
import torch

import xqajit
from conftest import make_inputs
from xqajit.ops import gqa


@pytest.fixture
def stand_in(monkeypatch):
    lib = xqajit._library.library()
    calls = []

    def check_only(addr):
        calls.append(addr)
        return lib.xqajit_decode_validate(addr)

    monkeypatch.setattr(gqa, "require_cuda", lambda op, device: None)
    monkeypatch.setattr(gqa, "current_stream", lambda device: 0)
    monkeypatch.setattr(lib, "xqajit_decode", check_only)
    gqa._CHECKED.clear()
    yield calls
    gqa._CHECKED.clear()


def as_if_on_cuda0():
    """Cached entries claim device 0, so that hits take the inlined launch path."""
    for key, (mid, _, off) in list(gqa._CHECKED.items()):
        gqa._CHECKED[key] = (mid, 0, off)


def test_second_call_hits_the_cache_and_still_reaches_the_library(stand_in):
    q, k, v, bt, sl = make_inputs()
    out = torch.empty_like(q)
    assert xqajit.decode(q, k, v, bt, sl, out=out) is out
    assert len(gqa._CHECKED) == 1 and len(stand_in) == 1
    as_if_on_cuda0()
    q2 = q.clone()  # new pointers, same metadata: a hit
    xqajit.decode(q2, k, v, bt, sl, out=out, kv_scale=0.5)
    assert len(gqa._CHECKED) == 1 and len(stand_in) == 2


def test_changed_metadata_is_checked_again(stand_in):
    q, k, v, bt, sl = make_inputs()
    xqajit.decode(q, k, v, bt, sl)
    with pytest.raises(xqajit.ArgumentError, match="block_table must be int32"):
        xqajit.decode(q, k, v, bt.long(), sl)
    with pytest.raises(xqajit.ArgumentError, match="kv_scale must be a float"):
        xqajit.decode(q, k, v, bt, sl, kv_scale="2")


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

"""spec(), prewarm() and Engine through Python (NVRTC from the toolkit; no GPU)."""

import pytest

import xqajit

FIELDS = dict(input="bf16", kv="fp8", head_dim=128, page_size=64, group=8, arch="sm_90a")


def test_spec_by_fields_and_by_name_round_trip():
    s = xqajit.spec(**FIELDS)
    assert s.name.startswith("gqa_bf16_kvfp8_obf16_d128_p64_g8_q1_sw0_") and s.name.endswith("_sm90a")
    assert "-DHEAD_GRP_SIZE=8" in s.flags
    assert s.fields["kv"] == "fp8"
    assert xqajit.spec(s.name) == s
    assert xqajit.spec("input=bf16 kv=fp8 head_dim=128 page_size=64 group=8 arch=sm_90a") == s


def test_auto_spec_lists_and_prewarms_every_kernel_its_launch_may_pick(tmp_path):
    # bf16 activations over an fp8 cache on sm_90a: decode() runs the hopper backend
    # there, so prewarming the (auto) spec compiles both backends' kernels.
    s = xqajit.spec(**FIELDS)
    assert len(s.kernels) == 2 and s.kernels[0] == s.name and s.kernels[1].endswith("_hopper_sm90a")
    assert xqajit.spec(s.name).kernels == (s.name,)  # a canonical name pins one kernel
    # A bf16 cache at head_dim 128: hopper where the launch splits, portable otherwise
    # (both listed); at head_dim 256 hopper for one query token, portable only for more.
    assert len(xqajit.spec(**dict(FIELDS, kv="bf16")).kernels) == 2
    assert len(xqajit.spec(**dict(FIELDS, kv="bf16", head_dim=256)).kernels) == 2
    d256_spec_dec = xqajit.spec(**dict(FIELDS, kv="bf16", head_dim=256, q_len=2))
    assert d256_spec_dec.kernels == (d256_spec_dec.name,)
    engine = xqajit.Engine(cache_dir=tmp_path, log_level="error")
    results = engine.prewarm(s, jobs=1)
    assert [r.name for r in results] == list(s.kernels)
    assert all(r.ok for r in results), results


def test_spec_error_names_field_value_and_allowed():
    with pytest.raises(xqajit.SpecError) as e:
        xqajit.spec(input="fp32", arch="sm_90a")
    assert (e.value.field, e.value.value) == ("input", "fp32")
    assert "bf16" in e.value.allowed and "input=fp32" in str(e.value)
    assert isinstance(e.value, ValueError) and isinstance(e.value, xqajit.XqajitError)


def test_spec_without_arch_takes_the_gpus_or_asks_for_one():
    try:
        s = xqajit.spec(input="bf16")
    except xqajit.SpecError as e:  # no GPU here
        assert e.field == "arch"
    else:
        assert s.fields["arch"] == xqajit.device_arch(0)


def test_decode_spec_from_tensors(inputs):
    q, k, v, bt, sl = inputs
    s = xqajit.decode_spec(q, k, arch="sm_90a")
    assert s.fields["group"] == "4" and s.fields["page_size"] == "16" and s.fields["input"] == "bf16"
    hnd = xqajit.decode_spec(q, k.transpose(1, 2).contiguous(), kv_layout="HND", arch="sm_90a")
    assert hnd == s


def test_prewarm_compiles_then_finds_in_memory(tmp_path):
    engine = xqajit.Engine(cache_dir=tmp_path, log_level="error")
    spec = xqajit.spec(input="fp16", head_dim=64, page_size=16, group=1, arch="sm_90a")
    first = engine.prewarm([spec, dict(input="fp32", arch="sm_90a")], jobs=1)
    assert first[0].ok and first[0].source == "compiled", first[0]
    assert not first[1].ok and "input" in first[1].error
    again = engine.prewarm(spec.name)
    assert again[0].ok and again[0].source == "memory"
    fresh = xqajit.Engine(cache_dir=tmp_path).compile(spec)
    assert fresh["source"] == "disk" and fresh["cubin_bytes"] > 0
    stats = engine.stats()
    assert stats["compiles"] == 1 and stats["memory_hits"] >= 1 and stats["cache_dir"] == str(tmp_path)


def test_no_compile_engine_raises_not_available(tmp_path):
    engine = xqajit.Engine(cache_dir=tmp_path, no_compile=True)
    with pytest.raises(xqajit.NotAvailableError):
        engine.compile(dict(input="bf16", arch="sm_90a"))


def test_compile_error_carries_log_and_options(tmp_path):
    templates = tmp_path / "templates"
    templates.mkdir()
    (templates / "gqa_decode.cu").write_text(
        'extern "C" __global__ void xqajit_gqa_decode(int* o) { o[0] = undeclared_thing; }\n')
    engine = xqajit.Engine(cache_dir=tmp_path / "cache", template_dir=templates, log_level="off")
    with pytest.raises(xqajit.CompileError) as e:
        engine.compile(dict(input="bf16", group=2, arch="sm_90a"))
    assert "undeclared_thing" in e.value.log and "undeclared_thing" in str(e.value)
    assert "-arch=sm_90a" in e.value.options and e.value.spec_name.startswith("gqa_bf16")


def test_unknown_engine_option_is_refused():
    with pytest.raises(TypeError):
        xqajit.Engine(cache_size=1)

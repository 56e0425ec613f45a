"""torch.compile(fullgraph=True) traces through the custom op on CPU tensors:
the fake implementation runs the checks at trace time, and the op reaches the
eager checks at run time (which refuse CPU tensors: the launch itself is GPU-only)."""

import pytest
import torch

import xqajit
from conftest import make_inputs, make_mla_inputs


def step(q, k, v, bt, sl, kv_scale):
    return xqajit.decode(q * 2, k, v, bt, sl, kv_scale=kv_scale, q_scale=0.5) + 1


def test_fullgraph_trace_has_one_graph_with_the_op():
    from torch._dynamo.testing import CompileCounterWithBackend

    torch._dynamo.reset()
    counter = CompileCounterWithBackend("aot_eager")
    compiled = torch.compile(step, fullgraph=True, backend=counter)
    with pytest.raises(xqajit.ArgumentError, match="q is a CPU tensor"):
        compiled(*make_inputs(), torch.ones(1))
    assert counter.frame_count == 1
    code = counter.graphs[0].code
    assert "torch.ops.xqajit.decode" in code and ".item()" not in code


def test_fake_impl_checks_at_trace_time():
    torch._dynamo.reset()
    q, k, v, bt, sl = make_inputs()
    compiled = torch.compile(step, fullgraph=True, backend="aot_eager")
    with pytest.raises(Exception, match="block_table must be int32"):
        compiled(q, k, v, bt.long(), sl, 1.0)


def test_fake_impl_checks_sinks_at_trace_time():
    # decode and decode_lse share one fake, which checks sinks and spec_mask too: a bad sinks
    # fails the trace (dynamo wraps the fake's error), not the eager call after it.
    from torch._dynamo.exc import TorchRuntimeError

    def f(q, k, v, bt, sl, sinks):
        return xqajit.decode(q, k, v, bt, sl, sinks=sinks)

    torch._dynamo.reset()
    q, k, v, bt, sl = make_inputs()
    with pytest.raises(TorchRuntimeError, match="sinks"):
        torch.compile(f, fullgraph=True, backend="aot_eager")(q, k, v, bt, sl, torch.zeros(q.shape[-2],
                                                                                         dtype=torch.float16))
    torch._dynamo.reset()
    with pytest.raises(xqajit.ArgumentError, match="CPU tensor"):
        torch.compile(f, fullgraph=True, backend="aot_eager")(q, k, v, bt, sl, torch.zeros(q.shape[-2]))


def test_combined_cache_and_out_under_compile():
    from torch._dynamo.testing import CompileCounterWithBackend

    torch._dynamo.reset()
    q, k, v, bt, sl = make_inputs()
    kv = torch.stack([k, v], dim=1)
    out = torch.empty_like(q)

    def f(q, kv, bt, sl, out):
        return xqajit.decode(q, block_table=bt, seq_lens=sl, kv_cache=kv, out=out)

    counter = CompileCounterWithBackend("aot_eager")
    with pytest.raises(xqajit.ArgumentError, match="CPU tensor"):
        torch.compile(f, fullgraph=True, backend=counter)(q, kv, bt, sl, out)
    assert counter.frame_count == 1


def mla_step(q, kv, bt, sl, kv_scale):
    return xqajit.mla_decode(q * 2, kv, bt, sl, sm_scale=0.07, kv_scale=kv_scale, q_scale=0.5) + 1


def test_mla_fullgraph_trace_has_one_graph_with_the_op():
    from torch._dynamo.testing import CompileCounterWithBackend

    torch._dynamo.reset()
    counter = CompileCounterWithBackend("aot_eager")
    compiled = torch.compile(mla_step, fullgraph=True, backend=counter)
    with pytest.raises(xqajit.ArgumentError, match="q is a CPU tensor"):
        compiled(*make_mla_inputs(q_len=2), torch.ones(1))
    assert counter.frame_count == 1
    code = counter.graphs[0].code
    assert "torch.ops.xqajit.mla_decode" in code and ".item()" not in code


def test_mla_fake_impl_checks_at_trace_time():
    torch._dynamo.reset()
    q, kv, bt, sl = make_mla_inputs()
    compiled = torch.compile(mla_step, fullgraph=True, backend="aot_eager")
    with pytest.raises(Exception, match="kv_cache has 512 values per row"):
        compiled(q, kv[..., :512], bt, sl, 1.0)
    mask = torch.ones(2, 1, dtype=torch.int64)

    def with_mask(q, kv, bt, sl, mask):
        return xqajit.mla_decode(q, kv, bt, sl, sm_scale=0.07, spec_mask=mask)

    with pytest.raises(Exception, match="spec_mask has dtype torch.int64"):
        torch.compile(with_mask, fullgraph=True, backend="aot_eager")(q, kv, bt, sl, mask)


def test_sparse_mla_and_lse_trace_into_one_graph():
    from torch._dynamo.testing import CompileCounterWithBackend

    q, kv, _, _ = make_mla_inputs(q_len=2)
    idx = torch.zeros(2, 2, 64, dtype=torch.int32)
    sink = torch.zeros(q.shape[-2])

    def f(q, kv, idx, sink):
        out, lse = xqajit.mla_decode(q * 2, kv, indices=idx, sm_scale=0.07, return_lse=True, attn_sink=sink)
        return out + 1, lse * 2

    torch._dynamo.reset()
    counter = CompileCounterWithBackend("aot_eager")
    with pytest.raises(xqajit.ArgumentError, match="q is a CPU tensor"):
        torch.compile(f, fullgraph=True, backend=counter)(q, kv, idx, sink)
    assert counter.frame_count == 1
    code = counter.graphs[0].code
    assert "torch.ops.xqajit.mla_decode_extras" in code and ".item()" not in code
    # The fake implementation checks the sparse arguments at trace time.
    torch._dynamo.reset()
    with pytest.raises(Exception, match="indices must be int32"):
        torch.compile(f, fullgraph=True, backend="aot_eager")(q, kv, idx.long(), sink)


def test_decode_lse_traces_into_one_graph():
    from torch._dynamo.testing import CompileCounterWithBackend

    def f(q, k, v, bt, sl, sinks):
        out, lse = xqajit.decode(q * 2, k, v, bt, sl, sinks=sinks, return_lse=True)
        return out + 1, lse - 1

    q, k, v, bt, sl = make_inputs()
    sinks = torch.zeros(q.shape[-2])
    torch._dynamo.reset()
    counter = CompileCounterWithBackend("aot_eager")
    with pytest.raises(xqajit.ArgumentError, match="q is a CPU tensor"):
        torch.compile(f, fullgraph=True, backend=counter)(q, k, v, bt, sl, sinks)
    assert counter.frame_count == 1
    code = counter.graphs[0].code
    assert "torch.ops.xqajit.decode_lse" in code and ".item()" not in code
    torch._dynamo.reset()
    with pytest.raises(Exception, match="block_table must be int32"):
        torch.compile(f, fullgraph=True, backend="aot_eager")(q, k, v, bt.long(), sl, sinks)

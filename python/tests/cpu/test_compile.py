"""torch.compile(fullgraph=True) traces through the custom op on CPU tensors:
the fake implementation runs the checks at trace time, and the op reaches the
eager checks at run time (which refuse CPU tensors: the launch itself is GPU-only)."""

import pytest
import torch

import xqajit
from conftest import make_inputs


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

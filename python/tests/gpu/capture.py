"""What every op's graph tests share: torch.compile(fullgraph=True) of a step against
eager, and a step captured into a CUDA graph that is replayed with new sequence
lengths and scales written into the tensors it captured."""

import torch


def assert_compiled_matches_eager(step, run):
    """run(fn) calls fn with the step's inputs; the compiled step must match the eager one."""
    torch._dynamo.reset()
    compiled = torch.compile(step, fullgraph=True)
    torch.testing.assert_close(run(compiled), run(step), atol=2e-2, rtol=2e-2)


def captured(step):
    """step() run once on a side stream (loads the kernel, sizes the workspace), then
    captured: nothing compiles or allocates during the capture."""
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        step()
    torch.cuda.current_stream().wait_stream(s)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        step()
    return graph


def replays(graph, lens, scale, rounds):
    """For each (new lengths, scale value): writes them into the captured `lens` and
    `scale` tensors, replays, waits, and yields the scale value for the check."""
    for new_lens, value in rounds:
        lens.copy_(torch.tensor(new_lens, dtype=torch.int32))
        scale.fill_(value)
        graph.replay()
        torch.cuda.synchronize()
        yield value

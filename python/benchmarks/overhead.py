"""Per-call host overhead of xqajit.decode with warm kernels (GPU host).

Each way of calling is timed over bursts of calls shorter than the launch queue
(the host never waits for the GPU), with a sync between bursts; per call =
burst time / burst length, median over bursts. A B=1 problem with a short
sequence keeps each kernel short. Ways:
  direct      xqajit.decode(..., out=out)               (eager: cached checks, ctypes, C++ decode, launch)
  custom_op   torch.ops.xqajit.decode(...)              (torch's dispatcher in front of the same path)
  compiled    a torch.compile'd function calling decode (dynamo guards + the op)
  c_only      xqajit_decode on a packed struct         (C++ decode + cuLaunchKernelEx, no Python work)
  torch_add   torch.add(x, 1, out=y)                    (a torch kernel launch, for scale)

    python benchmarks/overhead.py [--json FILE]
    python benchmarks/overhead.py --cpu-stand-in   # no GPU: the Python side only (see measure_cpu_stand_in)
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

import torch

import xqajit
from xqajit.ops import gqa


def per_call_us(fn, burst=200, bursts=30) -> float:
    for _ in range(3):
        fn()
    torch.cuda.synchronize()
    samples = []
    for _ in range(bursts):
        t0 = time.perf_counter()
        for _ in range(burst):
            fn()
        samples.append((time.perf_counter() - t0) / burst * 1e6)
        torch.cuda.synchronize()
    return statistics.median(samples)


def measure() -> dict:
    dev = "cuda"
    B, Hq, Hkv, D, P, L = 1, 32, 8, 128, 64, 256
    q = torch.randn(B, 1, Hq, D, device=dev).bfloat16()
    k = torch.randn(16, P, Hkv, D, device=dev).bfloat16()
    v = torch.randn_like(k)
    bt = torch.arange(8, dtype=torch.int32, device=dev).view(1, 8)
    sl = torch.tensor([L], dtype=torch.int32, device=dev)
    out = torch.empty_like(q)
    xqajit.decode(q, k, v, bt, sl, out=out)  # compiles or loads the kernel
    torch.cuda.synchronize()

    results = {}
    results["direct"] = per_call_us(lambda: xqajit.decode(q, k, v, bt, sl, out=out))
    op = torch.ops.xqajit.decode.default
    results["custom_op"] = per_call_us(
        lambda: op(out, q, k, v, bt, sl, None, None, None, None, 1.0, None, 1.0, None, 0.0, 0, "NHD", 0, 0))

    def step(q, k, v, bt, sl, out):
        return xqajit.decode(q, k, v, bt, sl, out=out)

    compiled = torch.compile(step, fullgraph=True)
    results["compiled"] = per_call_us(lambda: compiled(q, k, v, bt, sl, out))

    ptrs, mid, scales, device = gqa.decode_args(q, k, v, bt, sl, out)
    buf, addr = gqa.DECODE_ARGS.buffer()
    gqa._PACK(buf, 0, gqa._SIZE, 0, torch.cuda.current_stream().cuda_stream, *ptrs, 0, 0, 0, *mid, *scales)
    lib = xqajit._library.library()
    results["c_only"] = per_call_us(lambda: lib.xqajit_decode(addr))
    x, y = torch.randn(1024, device=dev), torch.empty(1024, device=dev)
    results["torch_add"] = per_call_us(lambda: torch.add(x, 1, out=y))

    # Kernel time of this problem (graph of 50 launches), to show what the overhead is hidden behind.
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        for _ in range(50):
            xqajit.decode(q, k, v, bt, sl, out=out)
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    g.replay()
    start.record()
    for _ in range(10):
        g.replay()
    end.record()
    torch.cuda.synchronize()
    results["kernel_in_graph"] = start.elapsed_time(end) * 1e3 / 500
    return results


def measure_cpu_stand_in(repeat=15, number=5000) -> dict:
    """The Python side of a decode call without a GPU: CPU tensors, the launch
    replaced by xqajit_decode_validate (the C ABI round trip and the library's
    argument checks, no plan and no cuLaunchKernelEx), the stream read by 0.
    Everything else (cached checks, pointer reads, packing, ctypes) is what a
    GPU call runs. Median over `repeat` runs of `number` calls."""
    import timeit

    lib = xqajit._library.library()
    saved = (gqa.require_cuda, gqa.current_stream, lib.xqajit_decode)
    gqa.require_cuda, gqa.current_stream, lib.xqajit_decode = (lambda op, d: None), (lambda d: 0), lib.xqajit_decode_validate
    try:
        q = torch.randn(1, 1, 32, 128).bfloat16()
        k = torch.randn(16, 64, 8, 128).bfloat16()
        v = torch.randn_like(k)
        bt = torch.arange(8, dtype=torch.int32).view(1, 8)
        sl = torch.tensor([256], dtype=torch.int32)
        out = torch.empty_like(q)
        xqajit.decode(q, k, v, bt, sl, out=out)
        for key, (mid, _, off) in list(gqa._CHECKED.items()):
            gqa._CHECKED[key] = (mid, 0, off)  # as if on cuda:0: the inlined launch path
        op = torch.ops.xqajit.decode.default
        ways = {
            "direct": lambda: xqajit.decode(q, k, v, bt, sl, out=out),
            "custom_op": lambda: op(out, q, k, v, bt, sl, None, None, None, None, 1.0, None, 1.0, None, 0.0, 0,
                                    "NHD", 0, 0),
            "first_call_checks": lambda: gqa.decode_args(q, k, v, bt, sl, out),
            "ctypes_empty_call": lib.xqajit_c_abi_version,
        }
        return {name: statistics.median(timeit.repeat(fn, number=number, repeat=repeat)) / number * 1e6
                for name, fn in ways.items()}
    finally:
        gqa.require_cuda, gqa.current_stream, lib.xqajit_decode = saved
        gqa._CHECKED.clear()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--json")
    ap.add_argument("--cpu-stand-in", action="store_true")
    args = ap.parse_args()
    if args.cpu_stand_in:
        for name, us in measure_cpu_stand_in().items():
            print(f"{name:18s} {us:7.2f} us/call (CPU stand-in: no launch)")
        return
    r = measure()
    for name, us in r.items():
        print(f"{name:16s} {us:7.2f} us/call")
    verdict = "MET" if r["direct"] <= 5.0 else "MISSED"
    print(f"target: direct decode <= 5 us per call: {verdict} ({r['direct']:.2f} us)")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({**r, "device": torch.cuda.get_device_name(), "torch": torch.__version__}, f, indent=1)


if __name__ == "__main__":
    main()

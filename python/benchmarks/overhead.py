"""Per-call host overhead of xqajit.decode with warm kernels (GPU host).

Each way of calling is timed over bursts of calls shorter than the launch queue
(the host never waits for the GPU), with a sync between bursts; per call =
burst time / burst length, median over bursts. A B=1 problem with a short
sequence keeps each kernel short. Ways:
  direct      xqajit.decode(..., out=out)               (eager: the C fast path, C++ decode, launch)
  direct_python  the same with the C fast path off      (cached checks in Python, ctypes, C++ decode, launch)
  mla_direct  xqajit.mla_decode(..., out=out)           (B=1, H=16, 256 keys; the C fast path)
  custom_op   torch.ops.xqajit.decode(...)              (torch's dispatcher in front of the Python path)
  compiled    a torch.compile'd function calling decode (dynamo guards + the op)
  fast_call_raw  _fastcall.call(...) without decode()'s Python frame
  c_only      xqajit_decode on a packed struct         (C++ decode + cuLaunchKernelEx; ctypes, no other Python work)
  c_only_no_pdl  the same with programmatic dependent launch off
  c_validate  xqajit_decode_validate on the same struct (the C ABI round trip and xqajit::validate, no launch)
  torch_add   torch.add(x, 1, out=y)                    (a torch kernel launch, for scale)

    python benchmarks/overhead.py [--json FILE]
    python benchmarks/overhead.py --cpu-stand-in   # no GPU: the Python side only (see measure_cpu_stand_in)
    python benchmarks/overhead.py --c-only         # xqajit_decode alone, for A/B of libxqajit builds
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

import torch

import xqajit
from xqajit.ops import _launch, gqa


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
    saved, gqa._fast_call = gqa._fast_call, None
    results["direct_python"] = per_call_us(lambda: xqajit.decode(q, k, v, bt, sl, out=out))
    gqa._fast_call = saved
    mq = torch.randn(1, 1, 16, 576, device=dev).bfloat16()
    mkv = torch.randn(8, 64, 576, device=dev).bfloat16()
    mbt = torch.arange(4, dtype=torch.int32, device=dev).view(1, 4)
    mout = torch.empty(1, 1, 16, 512, device=dev).bfloat16()
    xqajit.mla_decode(mq, mkv, mbt, sl, sm_scale=0.0722, out=mout)
    torch.cuda.synchronize()
    results["mla_direct"] = per_call_us(lambda: xqajit.mla_decode(mq, mkv, mbt, sl, sm_scale=0.0722, out=mout))
    op = torch.ops.xqajit.decode.default
    results["custom_op"] = per_call_us(
        lambda: op(out, q, k, v, bt, sl, None, None, None, None, 1.0, None, 1.0, None, 0.0, 0, "NHD", 0, 0))

    def step(q, k, v, bt, sl, out):
        return xqajit.decode(q, k, v, bt, sl, out=out)

    compiled = torch.compile(step, fullgraph=True)
    results["compiled"] = per_call_us(lambda: compiled(q, k, v, bt, sl, out))

    ptrs, mid, scales, device = gqa.decode_args(q, k, v, bt, sl, out)
    buf, addr = gqa.DECODE_ARGS.buffer()
    ws_ptr, ws_bytes = _launch._DEFAULT_WS.get(device, (0, 0))  # as direct calls pass it (this B=1 shape splits)
    gqa._PACK(buf, 0, gqa._SIZE, 0, torch.cuda.current_stream().cuda_stream, *ptrs, ws_ptr, ws_bytes, 0, *mid, *scales)
    lib = xqajit._library.library()
    status = lib.xqajit_decode(addr)
    assert status == 0, f"c_only would time a failing call (status {status}: {lib.xqajit_last_error()})"
    results["c_only"] = per_call_us(lambda: lib.xqajit_decode(addr))
    results["c_validate"] = per_call_us(lambda: lib.xqajit_decode_validate(addr))
    no_pdl = gqa.DECODE_ARGS.offset("programmatic_dependent_launch")
    buf[no_pdl:no_pdl + 4] = (0).to_bytes(4, "little")
    results["c_only_no_pdl"] = per_call_us(lambda: lib.xqajit_decode(addr))
    from xqajit.ops import _fast

    if _fast.call is not None:
        call = _fast.call
        results["fast_call_raw"] = per_call_us(
            lambda: call(_fast.OP_DECODE, q, k, v, bt, sl, None, out, 1.0, 1.0, None, 0, None, None, None, "NHD", 0, 0))
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


def measure_c_only() -> dict:
    """xqajit_decode alone (ctypes on a packed struct, PDL on and off), for A/B runs
    of two builds of libxqajit (XQAJIT_LIBRARY) on the same problem as measure()."""
    dev = "cuda"
    q = torch.randn(1, 1, 32, 128, device=dev).bfloat16()
    k = torch.randn(16, 64, 8, 128, device=dev).bfloat16()
    v = torch.randn_like(k)
    bt = torch.arange(8, dtype=torch.int32, device=dev).view(1, 8)
    sl = torch.tensor([256], dtype=torch.int32, device=dev)
    out = torch.empty_like(q)
    xqajit.decode(q, k, v, bt, sl, out=out)
    torch.cuda.synchronize()
    ptrs, mid, scales, device = gqa.decode_args(q, k, v, bt, sl, out)
    buf, addr = gqa.DECODE_ARGS.buffer()
    ws_ptr, ws_bytes = _launch._DEFAULT_WS.get(device, (0, 0))
    gqa._PACK(buf, 0, gqa._SIZE, 0, torch.cuda.current_stream().cuda_stream, *ptrs, ws_ptr, ws_bytes, 0, *mid, *scales)
    lib = xqajit._library.library()
    assert lib.xqajit_decode(addr) == 0, lib.xqajit_last_error()
    r = {"c_only": per_call_us(lambda: lib.xqajit_decode(addr))}
    no_pdl = gqa.DECODE_ARGS.offset("programmatic_dependent_launch")
    buf[no_pdl:no_pdl + 4] = (0).to_bytes(4, "little")
    r["c_only_no_pdl"] = per_call_us(lambda: lib.xqajit_decode(addr))
    r["direct"] = per_call_us(lambda: xqajit.decode(q, k, v, bt, sl, out=out))
    return r


def measure_cpu_stand_in(repeat=15, number=5000) -> dict:
    """The host side of a decode call without a GPU: CPU tensors, the launch
    replaced by xqajit_decode_validate (the C ABI round trip and the library's
    argument checks: everything xqajit_decode does before its plan, kernel lookup
    and cuLaunchKernelEx), the stream read as 0. Everything else (the C fast path
    or the Python path's cached checks, pointer reads, packing, ctypes) is what a
    GPU call runs. Median over `repeat` runs of `number` calls."""
    import timeit

    from xqajit.ops import _fast

    lib = xqajit._library.library()
    saved = (gqa.require_cuda, gqa.current_stream, lib.xqajit_decode, gqa._fast_call)
    gqa.require_cuda, gqa.current_stream, lib.xqajit_decode = (lambda op, d: None), (lambda d: 0), lib.xqajit_decode_validate
    if _fast.call is not None:
        _fast.set_function(_fast.OP_DECODE, _fast.function_address("xqajit_decode_validate"))
    try:
        q = torch.randn(1, 1, 32, 128).bfloat16()
        k = torch.randn(16, 64, 8, 128).bfloat16()
        v = torch.randn_like(k)
        bt = torch.arange(8, dtype=torch.int32).view(1, 8)
        sl = torch.tensor([256], dtype=torch.int32)
        out = torch.empty_like(q)
        buf, addr = gqa.DECODE_ARGS.buffer()
        ptrs, mid, scales, _ = gqa.decode_args(q, k, v, bt, sl, out)
        gqa._PACK(buf, 0, gqa._SIZE, 0, 0, *ptrs, 0, 0, 0, *mid, *scales)
        validate = lib.xqajit_decode_validate
        op = torch.ops.xqajit.decode.default
        ways = {}

        def median_us(fn):
            return statistics.median(timeit.repeat(fn, number=number, repeat=repeat)) / number * 1e6

        timed = {}
        if _fast.call is not None:
            fast = lambda: xqajit.decode(q, k, v, bt, sl, out=out)  # noqa: E731
            fast()  # checks once, registers with the C path
            timed["direct (C fast path)"] = median_us(fast)  # timed now: decode() reads _fast_call per call
        gqa._fast_call = None
        xqajit.decode(q, k, v, bt, sl, out=out)
        for key, (m, _, *rest) in list(gqa._CHECKED.items()):
            gqa._CHECKED[key] = (m, 0, *rest)  # as if on cuda:0: the inlined launch path
        ways["direct (Python path)"] = lambda: xqajit.decode(q, k, v, bt, sl, out=out)
        ways["custom_op"] = lambda: op(out, q, k, v, bt, sl, None, None, None, None, 1.0, None, 1.0, None, 0.0, 0,
                                       "NHD", 0, 0)
        ways["first_call_checks"] = lambda: gqa.decode_args(q, k, v, bt, sl, out)
        ways["validate_only (ctypes)"] = lambda: validate(addr)
        ways["ctypes_empty_call"] = lib.xqajit_c_abi_version
        ways["torch.add(out=)"] = lambda: torch.add(sl, 1, out=sl)
        return {**timed, **{name: median_us(fn) for name, fn in ways.items()}}
    finally:
        gqa.require_cuda, gqa.current_stream, lib.xqajit_decode, gqa._fast_call = saved
        if _fast.call is not None:
            _fast.set_function(_fast.OP_DECODE, None)
            _fast.module.clear()
        gqa._CHECKED.clear()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--json")
    ap.add_argument("--cpu-stand-in", action="store_true")
    ap.add_argument("--c-only", action="store_true", help="only xqajit_decode's own cost (A/B of library builds)")
    args = ap.parse_args()
    if args.c_only:
        lib = xqajit._library.library()._name
        print(" ".join(f"{k} {v:.2f}" for k, v in measure_c_only().items()), "us/call;", lib)
        return
    if args.cpu_stand_in:
        for name, us in measure_cpu_stand_in().items():
            print(f"{name:24s} {us:7.2f} us/call (CPU stand-in: no launch)")
        return
    r = measure()
    for name, us in r.items():
        print(f"{name:16s} {us:7.2f} us/call")
    from xqajit.ops import _fast

    print(f"C fast path: {_fast.status}")
    verdict = "MET" if r["direct"] <= 5.0 else "MISSED"
    print(f"target: direct decode <= 5 us per call: {verdict} ({r['direct']:.2f} us)")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({**r, "device": torch.cuda.get_device_name(), "torch": torch.__version__,
                       "fast_path": _fast.status}, f, indent=1)


if __name__ == "__main__":
    main()

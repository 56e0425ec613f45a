"""xqajit.decode next to the peers installed on this GPU host, on the same tensors.

Peers: PyTorch SDPA on cuDNN and on FlashAttention (contiguous K/V, enable_gqa,
as ../shared/peers/decode_peers.py runs them), and FlashInfer's paged decode when
`import flashinfer` works. xqajit and FlashInfer read the same K/V as pages of 64
tokens (NHD), SDPA reads it contiguous. Times: triton's do_bench median (GPU
time, host overhead hidden behind the queue), microseconds.

    python benchmarks/compare.py [--shapes B:L,...] [--json FILE]
"""

from __future__ import annotations

import argparse
import json

import torch
import torch.nn.functional as F

import xqajit

try:
    from triton.testing import do_bench
except ImportError:  # pragma: no cover - triton ships with CUDA torch
    do_bench = None


def bench_us(fn) -> float:
    fn()
    torch.cuda.synchronize()
    if do_bench is not None:
        return do_bench(fn, warmup=25, rep=200, return_mode="median") * 1e3
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(100):
        fn()
    end.record()
    torch.cuda.synchronize()
    return start.elapsed_time(end) * 10


def flashinfer_decode(q, k_pages, v_pages, B, pages_per_seq, L, Hq, Hk, D, P):
    import flashinfer  # noqa: F401

    ws = torch.empty(128 << 20, dtype=torch.uint8, device="cuda")
    wrapper = flashinfer.BatchDecodeWithPagedKVCacheWrapper(ws, "NHD")
    indptr = torch.arange(0, B + 1, dtype=torch.int32, device="cuda") * pages_per_seq
    indices = torch.arange(B * pages_per_seq, dtype=torch.int32, device="cuda")
    last = torch.full((B,), L - (pages_per_seq - 1) * P, dtype=torch.int32, device="cuda")
    wrapper.plan(indptr, indices, last, Hq, Hk, D, P, q_data_type=q.dtype, kv_data_type=k_pages.dtype)
    return lambda: wrapper.run(q, (k_pages, v_pages))


def row(B: int, L: int, Hq=32, Hk=8, D=128, P=64, dtype=torch.bfloat16) -> dict:
    q = torch.randn(B, Hq, D, dtype=dtype, device="cuda")
    k = torch.randn(B, Hk, L, D, dtype=dtype, device="cuda")
    v = torch.randn(B, Hk, L, D, dtype=dtype, device="cuda")
    nbytes = 2 * k.numel() * k.element_size()
    pages_per_seq = L // P
    as_pages = lambda t: t.transpose(1, 2).reshape(B * pages_per_seq, P, Hk, D).contiguous()  # noqa: E731
    k_pages, v_pages = as_pages(k), as_pages(v)
    bt = torch.arange(B * pages_per_seq, dtype=torch.int32, device="cuda").view(B, pages_per_seq)
    sl = torch.full((B,), L, dtype=torch.int32, device="cuda")
    out = torch.empty_like(q)
    r = dict(B=B, L=L, Hq=Hq, Hk=Hk, D=D, page_size=P, dtype=str(dtype).replace("torch.", ""), bytes=nbytes)

    ours = lambda: xqajit.decode(q, k_pages, v_pages, bt, sl, out=out)  # noqa: E731
    r["xqajit_us"] = bench_us(ours)
    ref = F.scaled_dot_product_attention(q.unsqueeze(2), k, v, enable_gqa=True)[:, :, 0]
    r["xqajit_max_abs_diff_vs_sdpa"] = float((out.float() - ref.float()).abs().max())
    qs = q.unsqueeze(2)
    for name, backend in [("cudnn", torch.nn.attention.SDPBackend.CUDNN_ATTENTION),
                          ("flash", torch.nn.attention.SDPBackend.FLASH_ATTENTION)]:
        try:
            with torch.nn.attention.sdpa_kernel(backend):
                r[f"sdpa_{name}_us"] = bench_us(lambda: F.scaled_dot_product_attention(qs, k, v, enable_gqa=True))
        except Exception as e:  # a backend may refuse a shape
            r[f"sdpa_{name}_error"] = str(e).splitlines()[0][:120]
    try:
        r["flashinfer_us"] = bench_us(flashinfer_decode(q, k_pages, v_pages, B, pages_per_seq, L, Hq, Hk, D, P))
    except ImportError:
        r["flashinfer"] = "not installed"
    except Exception as e:
        r["flashinfer_error"] = str(e).splitlines()[0][:120]
    for key in [k for k in r if k.endswith("_us")]:
        r[key.replace("_us", "_GBps")] = nbytes / (r[key] * 1e-6) / 1e9
    return r


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--shapes", default="1:8192,1:65536,16:4096,64:4096,128:8192,256:2048")
    ap.add_argument("--json")
    args = ap.parse_args()
    rows = []
    print(f"{'B':>4} {'L':>6} {'xqajit':>9} {'cuDNN':>9} {'flash':>9} {'flashinfer':>10}  (us; max|xqajit-sdpa|)")
    for item in args.shapes.split(","):
        B, L = (int(x) for x in item.split(":"))
        r = row(B, L)
        rows.append(r)
        cell = lambda k: f"{r[k]:9.1f}" if k in r else f"{'-':>9}"  # noqa: E731
        print(f"{B:>4} {L:>6} {cell('xqajit_us')} {cell('sdpa_cudnn_us')} {cell('sdpa_flash_us')} "
              f"{cell('flashinfer_us'):>10}  {r['xqajit_max_abs_diff_vs_sdpa']:.3g}")
        torch.cuda.empty_cache()
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"device": torch.cuda.get_device_name(), "torch": torch.__version__, "rows": rows}, f, indent=1)


if __name__ == "__main__":
    main()

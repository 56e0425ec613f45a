"""xqajit.decode next to the peers installed on this GPU host, on the same tensors.

Peers: PyTorch SDPA on cuDNN and on FlashAttention (contiguous K/V, enable_gqa,
as ../shared/peers/decode_peers.py runs them), and FlashInfer's paged decode when
`import flashinfer` works. xqajit and FlashInfer read the same K/V as pages of 64
tokens (NHD), SDPA reads it contiguous. Times: triton's do_bench median (GPU
time, host overhead hidden behind the queue), microseconds.

MLA (--mla-shapes): xqajit.mla_decode (H=128, bf16, pages of 64 latent rows of
576) next to PyTorch's two batched matmuls on the same rows stored contiguous
(scores = q.K^T, softmax, . V with V the first 512 values of each row).

    python benchmarks/compare.py [--shapes B:L,...] [--mla-shapes B:L,...] [--json FILE]
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


def mla_row(B: int, L: int, H=128, P=64, dtype=torch.bfloat16) -> dict:
    sm_scale = 192 ** -0.5
    q = torch.randn(B, H, 576, dtype=dtype, device="cuda")
    kv = torch.randn(B, L, 576, dtype=dtype, device="cuda")
    pages = kv.view(B * (L // P), P, 576)
    bt = torch.arange(B * (L // P), dtype=torch.int32, device="cuda").view(B, L // P)
    sl = torch.full((B,), L, dtype=torch.int32, device="cuda")
    out = torch.empty(B, H, 512, dtype=dtype, device="cuda")
    r = dict(B=B, L=L, H=H, page_size=P, dtype=str(dtype).replace("torch.", ""), bytes=kv.numel() * kv.element_size())
    r["xqajit_us"] = bench_us(lambda: xqajit.mla_decode(q, pages, bt, sl, sm_scale=sm_scale, out=out))

    def two_bmm():
        s = torch.bmm(q, kv.transpose(1, 2)).float() * sm_scale
        return torch.bmm(torch.softmax(s, dim=-1).to(dtype), kv[:, :, :512])

    r["torch_two_bmm_us"] = bench_us(two_bmm)
    r["xqajit_max_abs_diff_vs_two_bmm"] = float((out.float() - two_bmm().float()).abs().max())
    for key in [k for k in r if k.endswith("_us")]:
        r[key.replace("_us", "_GBps")] = r["bytes"] / (r[key] * 1e-6) / 1e9
    return r


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--shapes", default="1:8192,1:65536,16:4096,64:4096,128:8192,256:2048")
    ap.add_argument("--mla-shapes", default="1:8192,64:4096,128:4096")
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
    mla_rows = []
    if args.mla_shapes:
        print(f"MLA H=128 bf16: {'B':>4} {'L':>6} {'xqajit':>9} {'two-bmm':>9}  (us; max|xqajit-two_bmm|)")
        for item in args.mla_shapes.split(","):
            B, L = (int(x) for x in item.split(":"))
            r = mla_row(B, L)
            mla_rows.append(r)
            print(f"               {B:>4} {L:>6} {r['xqajit_us']:9.1f} {r['torch_two_bmm_us']:9.1f}  "
                  f"{r['xqajit_max_abs_diff_vs_two_bmm']:.3g}")
            torch.cuda.empty_cache()
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"device": torch.cuda.get_device_name(), "torch": torch.__version__, "rows": rows,
                       "mla_rows": mla_rows}, f, indent=1)


if __name__ == "__main__":
    main()

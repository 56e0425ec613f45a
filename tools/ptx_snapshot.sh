#!/usr/bin/env bash
# PTX fingerprints of a broad set of kernel specs: one "NAME SHA256" line per spec, sorted.
#
# Why: a restructure of kernel_templates/ (a kernel split into headers, a helper moved)
# changes the template hash and so every cache key, but must not change one instruction.
# Run it before and after and diff the two outputs:
#
#   tools/ptx_snapshot.sh build/tools/xqajit > /tmp/ptx_before.txt
#   ... edit kernel_templates/ ...
#   tools/ptx_snapshot.sh build/tools/xqajit > /tmp/ptx_after.txt
#   diff /tmp/ptx_before.txt /tmp/ptx_after.txt && echo PTX identical
#
# The flags come from the library's own builder (`xqajit spec --json`), the options are
# Compiler::options_for's with -arch=compute_XX instead of sm_XX (PTX instead of SASS), and
# every file under the template folder is a named header, as the embedded set is.
# Needs python3 and libnvrtc (LIBNVRTC overrides the search); no GPU. PTX_DUMP=DIR also
# writes each kernel's PTX to DIR/NAME.ptx (to diff a kernel whose hash moved);
# PTX_ONLY=SUBSTRING keeps the kernels whose FIELD=VALUE list contains it.
set -euo pipefail
cli=${1:?usage: tools/ptx_snapshot.sh PATH/TO/xqajit [TEMPLATE_DIR] [JOBS]}
templates=${2:-$(cd "$(dirname "$0")/.." && pwd)/kernel_templates}
jobs=${3:-2}
exec python3 - "$cli" "$templates" "$jobs" <<'PY'
import ctypes, ctypes.util, hashlib, itertools, json, os, subprocess, sys
from multiprocessing import Pool

cli, template_dir, jobs = sys.argv[1], sys.argv[2], int(sys.argv[3])

def specs():
    """FIELD=VALUE lists: every backend and dtype path, the shapes the tests and presets use."""
    out = []
    # GQA, both backends on sm_90a; portable also on sm_80 and sm_120a.
    for backend, arch in [("portable", "sm_80"), ("portable", "sm_90a"), ("portable", "sm_120a"),
                          ("hopper", "sm_90a")]:
        kvs = ["same"] if arch == "sm_80" else ["same", "fp8"]
        for inp, kv, d, g in itertools.product(["fp16", "bf16"], kvs, [64, 128, 256], [1, 4, 8, 16]):
            s = [f"kind=gqa", f"backend={backend}", f"arch={arch}", f"input={inp}",
                 f"head_dim={d}", f"group={g}", "page_size=64"]
            if kv == "fp8": s.append("kv=fp8")
            out.append(s)
        # The less common paths: speculative decoding, sliding window, fp8 output, tiles, rows.
        base = [f"kind=gqa", f"backend={backend}", f"arch={arch}", "input=bf16", "head_dim=128"]
        out.append(base + ["group=8", "q_len=2", "page_size=16"])
        out.append(base + ["group=4", "q_len=4", "page_size=32"])
        out.append(base + ["group=8", "q_len=8", "page_size=128"])
        out.append(base + ["group=8", "sliding_window=1", "page_size=64"])
        out.append(base + ["group=32", "page_size=64"])
        out.append(base + ["group=64", "q_len=1", "page_size=64"])
        if arch != "sm_80":
            out.append(base + ["group=8", "kv=fp8", "output=fp8", "page_size=64"])
            out.append(base + ["group=8", "kv=fp8", "q_len=4", "sliding_window=1", "page_size=16"])
        for tile in ([64, 128] if backend == "hopper" else [16, 32, 64, 128]):
            out.append(base + ["group=8", f"kv_tile={tile}", "page_size=64"])
        if backend == "hopper":
            for rows in [8, 16, 32, 64]:
                out.append(base + ["group=16", "q_len=4", f"cta_rows={rows}", "page_size=64"])
    # MLA, both backends, every dtype mix, heads and q_len of the serving preset.
    for backend, inp, kv, h, q, page in itertools.product(
            ["portable", "hopper"], ["bf16", "fp8"], ["bf16", "fp8"], [16, 128], [1, 2], [64]):
        if inp == "fp8" and kv != "fp8": continue
        out.append(["kind=mla", f"backend={backend}", "arch=sm_90a", f"input={inp}", f"kv={kv}",
                    f"group={h}", f"q_len={q}", f"page_size={page}"])
    # Sparse MLA (DSA, issue 31): the portable kernel's gathered-row path.
    for kv, h, q in itertools.product(["bf16", "fp8"], [16, 128], [1, 2]):
        out.append(["kind=mla", "sparse=1", "backend=portable", "arch=sm_90a", "input=bf16", f"kv={kv}",
                    f"group={h}", f"q_len={q}", "page_size=64"])
    # The fp8-with-scales cache (kv=fp8ds, DeepSeek-V3.2), dense and sparse, portable only.
    for sparse, h, q in itertools.product([0, 1], [16, 128], [1, 2]):
        out.append(["kind=mla", f"sparse={sparse}", "backend=portable", "arch=sm_90a", "input=bf16", "kv=fp8ds",
                    f"group={h}", f"q_len={q}", "page_size=64"])
    out.append(["kind=mla", "backend=portable", "arch=sm_120a", "input=bf16", "group=32", "page_size=32"])
    out.append(["kind=mla", "backend=portable", "arch=sm_80", "input=bf16", "group=64", "page_size=64"])
    return out

def main_file(kind, backend):
    if kind == "gqa": return "gqa_decode_hopper.cu" if backend == "hopper" else "gqa_decode.cu"
    return "mla_decode_hopper.cu" if backend == "hopper" else "mla_decode_portable.cu"

def load_templates():
    files = {}
    for root, _, names in os.walk(template_dir):
        for n in names:
            if n.endswith((".cuh", ".cu", ".h")):
                p = os.path.join(root, n)
                files[os.path.relpath(p, template_dir).replace(os.sep, "/")] = open(p, "rb").read()
    return files

def nvrtc():
    path = os.environ.get("LIBNVRTC")
    for cand in ([path] if path else []) + ["libnvrtc.so", "/usr/local/cuda/lib64/libnvrtc.so",
                                           ctypes.util.find_library("nvrtc")]:
        if not cand: continue
        try: return ctypes.CDLL(cand)
        except OSError: pass
    sys.exit("ptx_snapshot: cannot load libnvrtc (set LIBNVRTC)")

def ptx_of(args):
    info = json.loads(subprocess.run([cli, "--json", "spec", *args], check=True,
                                     capture_output=True, text=True).stdout)
    name, fields = info["name"], info["fields"]
    arch = fields["arch"].replace("sm_", "compute_")
    opts = ["-std=c++17", f"-arch={arch}", "-default-device", "-DXQAJIT_NVRTC=1", *info["flags"]]
    files = load_templates()
    main = main_file(fields["kind"], fields["backend"])
    headers = [(k, v) for k, v in sorted(files.items()) if k != main]
    lib = nvrtc()
    prog = ctypes.c_void_p()
    arr = lambda xs: (ctypes.c_char_p * len(xs))(*xs)
    rc = lib.nvrtcCreateProgram(ctypes.byref(prog), files[main], main.encode(), len(headers),
                                arr([v for _, v in headers]), arr([k.encode() for k, _ in headers]))
    assert rc == 0, (name, "create", rc)
    rc = lib.nvrtcCompileProgram(prog, len(opts), arr([o.encode() for o in opts]))
    if rc != 0:
        size = ctypes.c_size_t(); lib.nvrtcGetProgramLogSize(prog, ctypes.byref(size))
        log = ctypes.create_string_buffer(size.value); lib.nvrtcGetProgramLog(prog, log)
        return f"{name} COMPILE-ERROR {hashlib.sha256(log.value).hexdigest()[:16]}"
    size = ctypes.c_size_t(); lib.nvrtcGetPTXSize(prog, ctypes.byref(size))
    buf = ctypes.create_string_buffer(size.value); lib.nvrtcGetPTX(prog, buf)
    lib.nvrtcDestroyProgram(ctypes.byref(prog))
    if os.environ.get("PTX_DUMP"):
        os.makedirs(os.environ["PTX_DUMP"], exist_ok=True)
        with open(os.path.join(os.environ["PTX_DUMP"], name + ".ptx"), "wb") as f:
            f.write(buf.value)
    return f"{name} {hashlib.sha256(buf.raw).hexdigest()}"

if __name__ == "__main__":
    with Pool(jobs) as pool:
        only = os.environ.get("PTX_ONLY", "")
        lines = pool.map(ptx_of, [s for s in specs() if only in " ".join(s)])
    for line in sorted(set(lines)):
        print(line)
    print(f"ptx_snapshot: {len(set(lines))} distinct kernels", file=sys.stderr)
PY

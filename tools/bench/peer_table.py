"""Prints the peers' rows of one op from .peers/decode_peers.py's JSON (run_<op>_gpu.sh's
last table): `python3 tools/bench/peer_table.py gqa|mla PEERS_JSON`."""

import json
import sys


def gqa(d):
    print("peers copy GB/s:", round(d.get("copy_GBps", d.get("copy_bandwidth_GBps", 0)), 1) if isinstance(d, dict) else "")
    rows = d.get("rows", d.get("results", d)) if isinstance(d, dict) else d
    for r in rows:
        if isinstance(r, dict) and r.get("kind") == "gqa":
            print(r["B"], r["L"], r["Hq"], r["Hk"], r["D"], r.get("dtype"), "cudnn_us", round(r.get("cudnn_us", -1), 1),
                  "flash_us", round(r.get("flash_us", -1), 1))


def mla(d):
    for r in d["rows"]:
        print(f'H={r["H"]} B={r["B"]} L={r["L"]}: {r["torch_bmm_us"]:.1f} us, {r["torch_bmm_TFLOPs"]:.0f} TFLOP/s')


if __name__ == "__main__":
    {"gqa": gqa, "mla": mla}[sys.argv[1]](json.load(open(sys.argv[2])))

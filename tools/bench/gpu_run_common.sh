# Sourced by tools/bench/run_<op>_gpu.sh (one device command per op): the environment
# every op's run shares, and the peers step. Set BIN (the packed binaries) before sourcing.
set -u
OUT=${OUT:-/tmp/out}
export LD_LIBRARY_PATH=$PWD/$BIN:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
export XQAJIT_CACHE_DIR=${XQAJIT_CACHE_DIR:-/tmp/xqajit-cache}
mkdir -p "$OUT"

# run_peers SHAPES_JSON NAME: .peers/decode_peers.py on the same shapes (same card, same
# clocks) into $OUT/NAME.json and $OUT/NAME.txt; skipped with NO_PEERS=1 or without .peers.
run_peers() {
  if [ -f .peers/decode_peers.py ] && [ -z "${NO_PEERS:-}" ]; then
    PYTHONUNBUFFERED=1 timeout 150 python3 .peers/decode_peers.py --shapes "$1" \
      --out "$OUT/$2.json" > "$OUT/$2.txt" 2>&1
    echo "peers exit: $?" >> "$OUT/$2.txt"
  fi
}

# print_peers KIND NAME TITLE: the peers' table of $OUT/NAME.json (tools/bench/peer_table.py),
# else the tail of their log.
print_peers() {
  [ -n "${NO_PEERS:-}" ] && return 0  # skipped: nothing ran, nothing to print
  echo "===== $3"
  python3 "$(dirname "${BASH_SOURCE[0]}")/peer_table.py" "$1" "$OUT/$2.json" 2>/dev/null || tail -5 "$OUT/$2.txt"
}

#!/usr/bin/env bash
# The adversary's floods (issue 44; see README.md): absent ids drawn three ways — uniform
# (each new), zipf (skew 1.0 over a million ids: floods repeat) and replay (false positives
# found by probing, replayed) — against plain sled, the filter with its false-positive
# memory (the default) and the filter without it, on the same files, in interleaved rounds.
#   flood/adversary.sh [STORE_DIR] [ITEMS] [SECONDS] [ROUNDS] [CONNECTIONS]
# Prints one line per run, then the medians per shape and mode. The page cache is not
# dropped (no root needed): the store reads are the figure that matters here.
set -euo pipefail
cd "$(dirname "$0")/.."
store=${1:-target/flood-adversary}
items=${2:-200000}
seconds=${3:-3}
rounds=${4:-3}
conns=${5:-4}
port=18091
cargo build --quiet --release -p bloomsled-flood
bin=target/release
[ -d "$store" ] || "$bin/flood-service" load "$store" "$items" 200 >/dev/null
"$bin/flood-service" false-positives "$store" 100 >"$store.fps"
start() { # mode -> pid of the service, once it serves
  "$bin/flood-service" serve "$store" "127.0.0.1:$port" "$1" 32 >"$store.$1.log" 2>&1 &
  pid=$!
  for _ in $(seq 600); do grep -q serving "$store.$1.log" && return; sleep 0.05; done
  echo "the service did not start" >&2; kill "$pid"; exit 1
}
out="$store.results"
: >"$out"
for round in $(seq "$rounds"); do
  for shape in uniform zipf "replay:$store.fps"; do
    for mode in sled filter filter-nomemory; do
      start "$mode"
      r=$("$bin/flood-load" "127.0.0.1:$port" "$items" "$seconds" 100000000 "$conns" 90 "$shape" | tr '\n' ' ')
      kill -INT "$pid"; wait "$pid" || true
      echo "round $round  ${shape%%:*}  $mode  $r" | tee -a "$out"
    done
  done
done
python3 - "$out" <<'PY'
import re, statistics, sys
rows = {}
for line in open(sys.argv[1]):
    f = line.split()
    key = (f[2], f[3])
    g = lambda pat: float(re.search(pat, line).group(1))
    rows.setdefault(key, []).append((g(r"req/s (\d+)"), g(r"p99 (\d+) us"), g(r"store reads/s (\d+)")))
print("| absent ids | service | requests/s | p99 | store reads/s |")
print("|---|---|---:|---:|---:|")
for shape in ["uniform", "zipf", "replay"]:
    for mode in ["sled", "filter", "filter-nomemory"]:
        v = rows.get((shape, mode))
        if not v:
            continue
        med = lambda i: statistics.median(x[i] for x in v)
        print(f"| {shape} | {mode} | {med(0):,.0f} | {med(1):,.0f} us | {med(2):,.0f} |")
PY

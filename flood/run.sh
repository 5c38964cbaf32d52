#!/usr/bin/env bash
# The cold-store flood (see README.md). Needs root (drops the page cache before each run).
#   flood/run.sh [STORE_DIR] [ITEMS] [SECONDS]
# Loads STORE_DIR once (ITEMS items of 200 B; sled's cache in the service is 32 MiB), then:
# for the filter and for plain sled on the same files, page cache dropped, a fresh service
# flooded for SECONDS; then the service with the filter killed with kill -9 mid-flood and
# restarted at once. Loopback only; every run is bounded in time and requests.
set -euo pipefail
cd "$(dirname "$0")/.."
store=${1:-target/flood-store}
items=${2:-2000000}
seconds=${3:-10}
port=18090
cargo build --quiet --release -p bloomsled-flood
bin=target/release
[ -d "$store" ] || "$bin/flood-service" load "$store" "$items" 200
drop_caches() { sync; echo 3 >/proc/sys/vm/drop_caches; }
start() { # mode -> pid of the service, once it serves
  "$bin/flood-service" serve "$store" "127.0.0.1:$port" "$1" 32 >"$store.$1.log" 2>&1 &
  pid=$!
  for _ in $(seq 600); do grep -q serving "$store.$1.log" && return; sleep 0.05; done
  echo "the service did not start" >&2; kill "$pid"; exit 1
}
# sled's first open after the process that wrote the store replays its log and reads the
# whole store (1.1-1.3 GB at 2M items): whichever mode opened first would pay it. Opened
# once here, untimed, so that both measured opens find the same files.
start sled
kill -INT "$pid"; wait "$pid" || true
for mode in filter sled; do
  drop_caches
  start "$mode"
  echo "== $mode, page cache dropped: $(cat "$store.$mode.log")"
  "$bin/flood-load" "127.0.0.1:$port" "$items" "$seconds" 5000000 16 90
  kill -INT "$pid"; wait "$pid" || true
done
drop_caches
start filter
echo "== filter, kill -9 after $((seconds / 2)) s of a $((2 * seconds)) s flood, restarted at once"
"$bin/flood-load" "127.0.0.1:$port" "$items" "$((2 * seconds))" 5000000 16 90 &
load=$!
sleep "$((seconds / 2))"
kill -9 "$pid"; wait "$pid" 2>/dev/null || true
t0=$(date +%s.%N)
start filter
echo "restarted: $(cat "$store.filter.log") ($(python3 -c "import time; print(round(time.time() - $t0, 3))") s after the kill, as seen by this script)"
wait "$load"
kill -INT "$pid"; wait "$pid" || true

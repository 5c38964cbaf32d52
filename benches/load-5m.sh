#!/usr/bin/env bash
# Issue 46's apply_batch goal at 5M keys: two sled 0.34 stores of 5M keys do not fit in one
# 24 GB process side by side, so each store is loaded alone, in a fresh process, bloomsled
# (persistent, default settings but expected_items) and plain sled alternating, ROUNDS pairs
# (default 3). Prints each run's keys/s; compare the medians (benches/load.rs prints the
# per-slice rates).
set -euo pipefail
cd "$(dirname "$0")/.."
rounds=${ROUNDS:-3}
cargo bench --bench load --no-run
for r in $(seq 1 "$rounds"); do
  order="bloomsled sled"
  [ $((r % 2)) -eq 0 ] && order="sled bloomsled"
  for which in $order; do
    BLOOMSLED_LOAD_KEYS=${BLOOMSLED_LOAD_KEYS:-5000000} BLOOMSLED_LOAD_VARIANTS=persistent \
      BLOOMSLED_LOAD_ONLY=$which cargo bench --bench load 2>/dev/null | grep "alone"
  done
done

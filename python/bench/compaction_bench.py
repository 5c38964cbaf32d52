"""How long a compaction of BloomDupeFilter's pending log holds up the crawl.

The log of a crawl with ``JOBDIR`` holds one record per pending request (a pickled
request, about 300 bytes) plus done records; it is compacted when done records make up
half of it, so a compaction reads the whole log and rewrites the frontier: time that
grows with the frontier. This bench builds such a log (``-n`` requests, three in four of
them done), then, while a compaction runs, a loop stands in for the reactor: it appends
one new request every millisecond (what ``request_seen`` does, under the filter's lock)
and records the longest gap between two of its turns. Two modes, each on a fresh copy of
the same log, in alternating order, ``--rounds`` times:

* ``inline``: the compaction runs in the reactor's own thread (``PendingLog.compact``,
  what the tick did before), so the loop waits for all of it;
* ``thread``: the tick's way now (``begin_compaction`` under the lock, ``run`` in a thread,
  ``install`` under the lock once it is done).

    python bench/compaction_bench.py -n 1000000 --rounds 3

Prints one JSON line per round and the medians: the compaction's wall time and the
longest stall of the loop, for each mode.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import pickle
import shutil
import statistics
import tempfile
import threading
import time
from pathlib import Path

from bloomsled import FingerprintSet
from bloomsled._journal import PendingLog

WIDTH = 20


def fp(i: int) -> bytes:
    return hashlib.sha1(b"req-%d" % i).digest()


def payload(i: int) -> bytes:
    url = f"https://shop{i % 997}.example.com/category/{i % 131}/item-{i}.html?ref=list"
    return pickle.dumps({"url": url, "method": "GET", "headers": {}, "meta": {"depth": 3}, "priority": 0})


def build(folder: Path, n: int) -> None:
    log = PendingLog(folder, WIDTH)
    seen = FingerprintSet(str(folder / "seen"), expected_items=2 * n, width=WIDTH)
    for i in range(n):
        log.append_add(fp(i), payload(i))
        seen.add(fp(i))
    for i in range(n):
        if i % 4:
            log.append_done(fp(i))
    log.close()
    seen.close()


def run(template: Path, mode: str, n: int) -> dict[str, float]:
    work = Path(tempfile.mkdtemp(prefix="bloomsled-compaction-"))
    try:
        shutil.copytree(template, work / "store")
        folder = work / "store"
        log = PendingLog(folder, WIDTH)
        seen = FingerprintSet(str(folder / "seen"), expected_items=2 * n, width=WIDTH)
        log.adds, log.dones = n, n - n // 4  # the counters a running filter keeps
        lock = threading.Lock()
        i = n
        longest = 0.0

        def turn() -> None:
            nonlocal i
            with lock:
                log.append_add(fp(i), payload(i))
                seen.add(fp(i))
            i += 1

        start = time.perf_counter()
        last = start
        if mode == "inline":
            # The reactor's turn that runs the tick: nothing else runs until it returns.
            with lock:
                log.compact(seen, add_to_seen=False)
            now = time.perf_counter()
            longest = now - last
            turn()
        else:
            with lock:
                job = log.begin_compaction(seen)
            worker = threading.Thread(target=job.run)
            worker.start()
            while worker.is_alive():
                turn()
                now = time.perf_counter()
                longest = max(longest, now - last)
                last = now
                time.sleep(0.001)
            with lock:
                job.install()
            now = time.perf_counter()
            longest = max(longest, now - last)
        elapsed = now - start
        appended = i - n
        log.close()
        seen.close()
        return {"compaction_s": elapsed, "longest_stall_s": longest, "appended_meanwhile": appended}
    finally:
        shutil.rmtree(work, ignore_errors=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("-n", type=int, default=1_000_000, help="requests in the log")
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()
    template = Path(tempfile.mkdtemp(prefix="bloomsled-compaction-template-"))
    try:
        build(template, args.n)
        size = (template / "pending.log").stat().st_size
        print(f"# log: {args.n} requests, {size / 2**20:.0f} MiB")
        results: dict[str, list[dict[str, float]]] = {"inline": [], "thread": []}
        for r in range(args.rounds):
            for mode in (("inline", "thread") if r % 2 == 0 else ("thread", "inline")):
                res = run(template, mode, args.n)
                results[mode].append(res)
                print(json.dumps({"round": r, "mode": mode, **res}), flush=True)
        for mode, rs in results.items():
            print(
                json.dumps(
                    {
                        "mode": mode,
                        "median_compaction_s": statistics.median(x["compaction_s"] for x in rs),
                        "median_longest_stall_s": statistics.median(x["longest_stall_s"] for x in rs),
                    }
                )
            )
    finally:
        shutil.rmtree(template, ignore_errors=True)


if __name__ == "__main__":
    main()

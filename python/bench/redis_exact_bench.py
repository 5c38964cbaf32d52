"""Redis memory per fingerprint and check-and-add rate of the shared dupefilter's modes.

Contenders, each on its own fresh private redis-server (no persistence), loaded with N
Scrapy-style fingerprints (SHA-1 digests, 20 bytes):

* ``exact``: ``RedisBloomDupeFilter``'s default, ``SharedFilter.add_exact`` (a Bloom filter
  sized for N at 1%, plus the exact record: listpack hashes of the digests' bytes);
* ``bloom``: ``BLOOMSLED_REDIS_EXACT = False``, ``SharedFilter.add`` (the Bloom filter alone,
  not exact);
* ``set``: scrapy-redis's ``RFPDupeFilter`` layout, reproduced with redis-py: one Redis SET
  of 40-character hex digests, ``SADD`` per request (``request_seen`` is ``sadd(...) == 0``).

Memory is ``INFO memory`` ``used_memory`` after the load minus before (the filter's own
keys only). The rate is what ``request_seen`` pays: one call, one round trip, per request,
for 5 rounds of ``--calls`` new fingerprints and 5 of fingerprints already present,
median of the rounds; ``batch`` is the load's own rate (8,192 per pipeline).

    python bench/redis_exact_bench.py -n 1000000      # needs redis-server and redis-py
"""

from __future__ import annotations

import argparse
import hashlib
import json
import shutil
import socket
import statistics
import subprocess
import tempfile
import time

import redis

import bloomsled

BATCH = 8192


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Server:
    def __init__(self) -> None:
        self.dir = tempfile.mkdtemp(prefix="bloomsled-bench-redis-")
        self.port = free_port()
        exe = shutil.which("redis-server")
        if exe is None:
            raise SystemExit("redis-server is not installed")
        self.proc = subprocess.Popen(
            [exe, "--port", str(self.port), "--bind", "127.0.0.1", "--save", "",
             "--appendonly", "no", "--dir", self.dir],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        self.url = f"redis://127.0.0.1:{self.port}/0"
        self.client = redis.Redis(host="127.0.0.1", port=self.port)
        for _ in range(200):
            try:
                self.client.ping()
                return
            except redis.ConnectionError:
                time.sleep(0.05)
        raise SystemExit("redis-server did not start")

    def used(self) -> int:
        return int(self.client.info("memory")["used_memory"])

    def close(self) -> None:
        self.proc.kill()
        self.proc.wait()
        shutil.rmtree(self.dir, ignore_errors=True)


def fingerprints(start: int, n: int) -> list[bytes]:
    return [hashlib.sha1(f"https://example.com/item/{i}".encode()).digest()
            for i in range(start, start + n)]


def rounds(call, keys: list[bytes], calls: int, expect: bool) -> tuple[float, int]:
    """Median calls per second over 5 rounds of `calls` one-request calls, and how many
    answers were not `expect` (the Bloom filter's false positives)."""
    rates = []
    wrong = 0
    for r in range(5):
        chunk = keys[r * calls:(r + 1) * calls]
        t = time.perf_counter()
        for k in chunk:
            wrong += call(k) is not expect
        rates.append(len(chunk) / (time.perf_counter() - t))
    return statistics.median(rates), wrong


def run(mode: str, n: int, calls: int) -> dict:
    s = Server()
    try:
        before = s.used()
        loaded = fingerprints(0, n)
        t = time.perf_counter()
        if mode == "set":
            key = "crawl:dupefilter"
            for i in range(0, n, BATCH):
                p = s.client.pipeline(transaction=False)
                for fp in loaded[i:i + BATCH]:
                    p.sadd(key, fp.hex())
                assert all(p.execute())

            def call(fp: bytes) -> bool:  # True if new, as request_seen's "not seen"
                return s.client.sadd(key, fp.hex()) == 1
        else:
            f = bloomsled.SharedFilter.create("bench", s.url, expected_items=n, fpr=0.01)
            add_many = f.add_exact_many if mode == "exact" else f.add_many
            for i in range(0, n, BATCH):
                got = add_many(loaded[i:i + BATCH])
                if mode == "exact":
                    assert all(got)
            call = f.add_exact if mode == "exact" else f.add
        load_s = time.perf_counter() - t
        used = s.used() - before
        new_rate, dropped = rounds(call, fingerprints(n, 5 * calls), calls, True)
        # Present fingerprints: spread over the loaded ones.
        step = max(1, n // (5 * calls))
        present = loaded[::step][:5 * calls]
        dup_rate, missed = rounds(call, present, calls, False)
        assert missed == 0, f"{mode}: {missed} present fingerprints answered new"
        assert mode == "bloom" or dropped == 0, f"{mode}: {dropped} new answered present"
        return {
            "mode": mode,
            "n": n,
            "redis_bytes": used,
            "bytes_per_fp": used / n,
            "load_per_s": n / load_s,
            "new_per_s": new_rate,
            "present_per_s": dup_rate,
            "new_dropped": dropped,
            "new_calls": 5 * calls,
        }
    finally:
        s.close()


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("-n", type=int, default=1_000_000)
    ap.add_argument("--calls", type=int, default=4_000)
    ap.add_argument("-c", "--contenders", default="set,exact,bloom")
    ap.add_argument("--json")
    a = ap.parse_args()
    results = [run(m, a.n, a.calls) for m in a.contenders.split(",")]
    base = next((r for r in results if r["mode"] == "set"), None)
    print(f"{'mode':6} {'Redis MiB':>10} {'B/fp':>7} {'vs set':>7} {'load/s':>10} "
          f"{'new/s':>8} {'present/s':>10} {'new dropped':>12}")
    for r in results:
        ratio = r["redis_bytes"] / base["redis_bytes"] if base else float("nan")
        print(f"{r['mode']:6} {r['redis_bytes'] / 2**20:10.1f} {r['bytes_per_fp']:7.1f} "
              f"{ratio:7.3f} {r['load_per_s']:10,.0f} {r['new_per_s']:8,.0f} "
              f"{r['present_per_s']:10,.0f} {r['new_dropped']:6}/{r['new_calls']}")
    if a.json:
        with open(a.json, "w") as out:
            json.dump(results, out, indent=2)


if __name__ == "__main__":
    main()

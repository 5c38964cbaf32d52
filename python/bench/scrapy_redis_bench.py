"""A two-process crawl under scrapy-redis's scheduler, and the migration from its set.

Crawl: a private redis-server (no persistence) per contender, the tests' generated site
(python/tests/conftest.py: every page links to the next, to itself, to page 0 and to 8
random pages, one link twice) served by a threaded HTTP server in this process, and two
python/tests/scrapy_redis_spider.py processes started at once, sharing scrapy-redis's
request queue (``SCHEDULER = "scrapy_redis.scheduler.Scheduler"``, ``SCHEDULER_PERSIST``
on, so the filter is still in Redis to be measured; ``CONCURRENT_REQUESTS`` 32 each).
Contenders: ``rfp`` (scrapy-redis's ``RFPDupeFilter``: a Redis set of hex SHA-1) and
``bloom`` (``bloomsled.scrapy.RedisBloomDupeFilter``, exact, sized for the site). Every
page must be fetched exactly once, or the run fails. Reported: pages per second (wall,
both spiders), each spider's peak RSS and CPU (``wait4``), and the dupefilter's Redis
memory per fingerprint: ``MEMORY USAGE ... SAMPLES 0`` summed over its keys (the set, or
every ``bloomsled:{<key>*`` key), and ``INFO memory`` ``used_memory`` at the end minus
before the crawl (the queue is empty by then).

Migration (``--migrate N``): a fresh redis-server, a scrapy-redis set of N fingerprints
(hex SHA-1, loaded with pipelined ``SADD``), ``bloomsled.scrapy_redis_migrate.migrate``
into a filter sized for N: fingerprints per second; ``used_memory`` with the set alone, with
set and filter, and with the filter alone (after ``DEL`` of the set); then every one of
the N is checked present in the filter.

    python python/bench/scrapy_redis_bench.py --pages 100000 --migrate 1000000
"""

from __future__ import annotations

import argparse
import hashlib
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import redis

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "tests"))

from conftest import Site  # noqa: E402

SPIDER = HERE.parent / "tests" / "scrapy_redis_spider.py"
CONTENDERS = {
    "rfp": {"DUPEFILTER_CLASS": "scrapy_redis.dupefilter.RFPDupeFilter"},
    "bloom": {"DUPEFILTER_CLASS": "bloomsled.scrapy.RedisBloomDupeFilter"},
}
FILTER_KEY = "site:bloomsled-dupefilter"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Server:
    def __init__(self) -> None:
        exe = shutil.which("redis-server")
        if exe is None:
            raise SystemExit("redis-server is not installed")
        self.dir = tempfile.mkdtemp(prefix="bloomsled-bench-redis-")
        self.port = free_port()
        self.proc = subprocess.Popen(
            [exe, "--port", str(self.port), "--bind", "127.0.0.1", "--save", "",
             "--appendonly", "no", "--dir", self.dir],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )
        self.url = f"redis://127.0.0.1:{self.port}/0"
        self.client = redis.Redis(host="127.0.0.1", port=self.port)
        deadline = time.time() + 10
        while True:
            try:
                self.client.ping()
                return
            except redis.ConnectionError:
                if time.time() > deadline:
                    raise
                time.sleep(0.05)

    def used(self) -> int:
        return int(self.client.info("memory")["used_memory"])

    def usage(self, pattern: str) -> tuple[int, int]:
        """(bytes, keys) of every key matching `pattern`, exactly (SAMPLES 0)."""
        total = n = 0
        for k in self.client.scan_iter(match=pattern, count=10_000):
            total += int(self.client.memory_usage(k, samples=0) or 0)
            n += 1
        return total, n

    def close(self) -> None:
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait()
        shutil.rmtree(self.dir, ignore_errors=True)


def crawl(site: Site, name: str, pages: int) -> dict[str, Any]:
    server = Server()
    tmp = tempfile.mkdtemp(prefix=f"scrapy-redis-bench-{name}-")
    try:
        site.reset()
        before = server.used()
        settings = dict(CONTENDERS[name])
        settings.update(
            REDIS_URL=server.url, SCHEDULER_PERSIST=True, BLOOMSLED_EXPECTED_ITEMS=pages,
            CONCURRENT_REQUESTS=32, CONCURRENT_REQUESTS_PER_DOMAIN=32, LOG_LEVEL="INFO",
            LOGSTATS_INTERVAL=60, IDLE_WAIT=3,
        )
        args = [f"{k}={v}" for k, v in settings.items()]
        t0 = time.perf_counter()
        procs = []
        for i in range(2):
            out = open(os.path.join(tmp, f"log{i}"), "wb")
            procs.append((subprocess.Popen([sys.executable, str(SPIDER), site.url + "/p/0", *args],
                                           stdout=out, stderr=subprocess.STDOUT), out))
        spiders = []
        for i, (p, out) in enumerate(procs):
            _, status, usage = os.wait4(p.pid, 0)
            out.close()
            log = Path(tmp, f"log{i}").read_text(errors="replace")
            if os.waitstatus_to_exitcode(status) != 0 or "Spider closed (finished)" not in log:
                sys.exit(f"{name} spider {i}:\n" + log[-3000:])
            spiders.append({"rss_mb": usage.ru_maxrss / 1024,
                            "cpu_s": usage.ru_utime + usage.ru_stime})
        wall = time.perf_counter() - t0
        hits = site.snapshot()
        if set(hits) != site.all_paths() or any(n != 1 for n in hits.values()):
            sys.exit(f"{name}: {len(hits)} pages fetched, {sum(hits.values())} fetches")
        if name == "rfp":
            mem, keys = server.usage("site:dupefilter")
            fps = int(server.client.scard("site:dupefilter"))
        else:
            # The config record, the shards' bits, the exact record's buckets.
            mem, keys = server.usage(f"bloomsled:{{{FILTER_KEY}*")
            fps = pages  # every page is one request, no other URL is linked
        return {
            "contender": name, "pages": pages, "seconds": wall, "pages_per_s": pages / wall,
            "spiders": spiders, "fingerprints": fps, "df_bytes": mem, "df_keys": keys,
            "used_delta": server.used() - before,
        }
    finally:
        server.close()
        shutil.rmtree(tmp, ignore_errors=True)


def migration(n: int, batch: int) -> dict[str, Any]:
    from bloomsled import SharedFilter
    from bloomsled.scrapy_redis_migrate import migrate

    server = Server()
    try:
        c = server.client
        empty = server.used()
        fps = [hashlib.sha1(b"https://example.com/%d" % i).hexdigest() for i in range(n)]
        for i in range(0, n, 10_000):
            c.sadd("site:dupefilter", *fps[i:i + 10_000])
        with_set = server.used()
        set_usage = int(c.memory_usage("site:dupefilter", samples=0) or 0)
        out = migrate(server.url, "site:dupefilter", FILTER_KEY, expected_items=n, batch=batch)
        both = server.used()
        filter_usage, _ = server.usage(f"bloomsled:{{{FILTER_KEY}*")
        c.delete("site:dupefilter")  # DEL, not UNLINK: freed before used_memory is read
        filter_only = server.used()
        f = SharedFilter.open(FILTER_KEY, server.url)
        for i in range(0, n, 100_000):
            chunk = [bytes.fromhex(h) for h in fps[i:i + 100_000]]
            if not all(f.contains_many(chunk)):
                sys.exit(f"migration: a fingerprint of {i}..{i + 100_000} is not in the filter")
        if any(f.add_exact_many([bytes.fromhex(h) for h in fps[:100_000]])):
            sys.exit("migration: a migrated fingerprint is new to the exact record")
        return {
            "n": n, "seconds": out["seconds"], "rate": out["rate"], "added": out["added"],
            "set_bytes": with_set - empty, "set_usage": set_usage,
            "set_and_filter": both - empty, "filter_bytes": filter_only - empty,
            "filter_usage": filter_usage,
        }
    finally:
        server.close()


def mib(b: float) -> str:
    return f"{b / 2**20:.1f} MiB"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--pages", type=int, default=100_000, help="0: no crawl")
    ap.add_argument("-c", "--contenders", default=",".join(CONTENDERS))
    ap.add_argument("--migrate", type=int, default=1_000_000, help="0: no migration")
    ap.add_argument("--batch", type=int, default=10_000)
    args = ap.parse_args()
    if args.pages:
        site = Site(args.pages)
        try:
            rows = [crawl(site, name, args.pages) for name in args.contenders.split(",")]
        finally:
            site.close()
        print("| contender | pages | pages/s (2 spiders) | spider peak RSS | spider CPU "
              "| dupefilter in Redis | bytes / fingerprint | used_memory Δ |")
        print("|---|---:|---:|---:|---:|---:|---:|---:|")
        for r in rows:
            rss = " / ".join(f"{s['rss_mb']:.0f}" for s in r["spiders"])
            cpu = " / ".join(f"{s['cpu_s']:.0f}" for s in r["spiders"])
            print(f"| {r['contender']} | {r['pages']:,} | {r['pages_per_s']:.0f} | {rss} MiB "
                  f"| {cpu} s | {mib(r['df_bytes'])} ({r['df_keys']} keys) "
                  f"| {r['df_bytes'] / r['fingerprints']:.1f} | {mib(r['used_delta'])} |")
    if args.migrate:
        m = migration(args.migrate, args.batch)
        print()
        print(f"migration of {m['n']:,} fingerprints (batch {args.batch:,}): {m['seconds']:.1f} s, "
              f"{m['rate']:,.0f} fingerprints/s")
        print(f"used_memory: set alone {mib(m['set_bytes'])} "
              f"({m['set_bytes'] / m['n']:.1f} B/fp; MEMORY USAGE {mib(m['set_usage'])}), "
              f"set + filter {mib(m['set_and_filter'])}, filter alone after DEL of the set "
              f"{mib(m['filter_bytes'])} ({m['filter_bytes'] / m['n']:.1f} B/fp, "
              f"{m['filter_bytes'] / m['set_bytes']:.3f} of the set; MEMORY USAGE of its "
              f"keys {mib(m['filter_usage'])}, {m['filter_usage'] / m['n']:.1f} B/fp)")


if __name__ == "__main__":
    main()

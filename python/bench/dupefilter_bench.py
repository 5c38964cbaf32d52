"""Per-request cost and peak memory of Scrapy dupefilters, and contains_many vs a loop.

Each contender runs in its own subprocess (so ``ru_maxrss`` is its own peak) and is fed
real ``scrapy.Request`` objects through the dupefilter pattern it implements: the
fingerprint (Scrapy's default ``RequestFingerprinter``) is part of the measured cost. The
Request objects themselves are built outside the timed region, in chunks of 10,000.

Costs are CPU time of the contender's process (``time.process_time``: every thread, sled's
background flusher included), which a loaded machine disturbs far less than wall time;
wall times are in the JSON too. Phases per contender: ``new`` feeds N distinct requests (each is new: the filter grows to
N fingerprints), ``dup`` then feeds 200,000 requests seen before (they must all be
filtered). Peak RSS is taken at the end, baseline RSS (interpreter + Scrapy + one chunk of
requests) before the first request; at most one chunk of requests is alive at any time, so
the harness adds little above the baseline (``fp_only`` shows how much).

    python bench/dupefilter_bench.py -n 1000000            # every contender that installs
    python bench/dupefilter_bench.py -n 10000000 -c bloom,rfp

Every 1,000,000 new requests (``BENCH_PROGRESS``) each contender prints its figures so far
(``# {"progress": ...}``: cost per new request, peak RSS, disk), so that a long run stopped
early still tells where it was.

Contenders: ``fp_only`` (no filter: the fingerprint alone, the floor of cost and memory
that every contender pays), ``rfp`` Scrapy's RFPDupeFilter (a Python set), ``bloom``
bloomsled.scrapy.BloomDupeFilter (store in a temporary folder), ``rfp_jobdir`` and
``bloom_jobdir``: the two through Scrapy's own ``Scheduler`` with ``JOBDIR``, as a
resumable crawl runs them (``enqueue_request``: the dupefilter, then Scrapy's disk queue,
which holds the frontier on disk for both; BloomDupeFilter's log of pending requests is
open and written), disk being the whole JOBDIR; ``rbloom``, ``pybloom_live``,
``redis_setbit`` (the scrapy-redis-bloomfilter pattern: k GETBITs then k SETBITs per
fingerprint, pipelined, on a private redis-server; its Redis memory is reported apart).
``contains_many`` compares ``Filter.contains_many`` and ``Tree.contains_many`` with a Python
loop of ``in``.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import resource
import shutil
import socket
import subprocess
import sys
import tempfile
import time

CHUNK = 10_000
#: Every this many new requests, a contender reports its figures so far (printed at once
#: by the parent, as ``# {"progress": ...}``).
PROGRESS = int(os.environ.get("BENCH_PROGRESS", 1_000_000))
DUPS = 200_000
ALL = ["fp_only", "rfp", "bloom", "rfp_jobdir", "bloom_jobdir", "rbloom", "pybloom_live", "redis_setbit"]


def rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


def url(i: int) -> str:
    return f"https://shop{i % 997}.example.com/category/{i % 131}/item-{i}.html?ref=list&page={i % 50}"


def requests_for(indices):
    from scrapy import Request

    return [Request(url(i)) for i in indices]


# -- contenders: each returns (request_seen, close) ----------------------------------------


def make_fp_only(n, tmp):
    """No filter: Scrapy's fingerprint alone, the harness's own cost and memory (a floor)."""
    from scrapy.utils.request import RequestFingerprinter

    fper = RequestFingerprinter()

    def seen(request):
        fper.fingerprint(request)
        return False

    return seen, lambda: None


def make_rfp(n, tmp):
    from scrapy.dupefilters import RFPDupeFilter

    df = RFPDupeFilter()
    return df.request_seen, lambda: df.close("finished")


def _scheduler(tmp, dupefilter: str):
    """Scrapy's own Scheduler with JOBDIR, as a resumable crawl runs it: each request goes
    through ``enqueue_request`` (the dupefilter, then Scrapy's disk queue, which keeps the
    frontier on disk for both contenders)."""
    from scrapy import Spider
    from scrapy.core.scheduler import Scheduler
    from scrapy.utils.test import get_crawler

    crawler = get_crawler(
        Spider,
        {
            "JOBDIR": tmp,
            "DUPEFILTER_CLASS": dupefilter,
            "BLOOMSLED_EXPECTED_ITEMS": int(os.environ["BENCH_N"]),
            "LOG_ENABLED": False,
        },
    )
    from scrapy.core.engine import ExecutionEngine

    spider = Spider.from_crawler(crawler, "bench")
    crawler.spider = spider
    # The default priority queue asks the engine's downloader for its slots.
    crawler.engine = ExecutionEngine(crawler, lambda _: None)
    sched = Scheduler.from_crawler(crawler)
    sched.open(spider)

    def seen(request):
        return not sched.enqueue_request(request)

    return seen, lambda: sched.close("finished")


def make_rfp_jobdir(n, tmp):
    return _scheduler(tmp, "scrapy.dupefilters.RFPDupeFilter")


def _bloom_options() -> dict:
    return {}


def make_bloom(n, tmp):
    from bloomsled.scrapy import BloomDupeFilter

    df = BloomDupeFilter(None, expected_items=n, **_bloom_options())
    return df.request_seen, lambda: df.close("finished")


def make_bloom_jobdir(n, tmp):
    return _scheduler(tmp, "bloomsled.scrapy.BloomDupeFilter")


def make_rbloom(n, tmp):
    from rbloom import Bloom
    from scrapy.utils.request import RequestFingerprinter

    fper = RequestFingerprinter()

    def h(fp: bytes) -> int:
        return int.from_bytes(fp[:16], "big", signed=True)

    bf = Bloom(n, 0.01, h)

    def seen(request):
        fp = fper.fingerprint(request)
        if fp in bf:
            return True
        bf.add(fp)
        return False

    return seen, lambda: None


def make_pybloom_live(n, tmp):
    from pybloom_live import BloomFilter
    from scrapy.utils.request import RequestFingerprinter

    fper = RequestFingerprinter()
    bf = BloomFilter(capacity=n, error_rate=0.01)

    def seen(request):
        return bf.add(fper.fingerprint(request))  # True if it was already there

    return seen, lambda: None


def make_redis_setbit(n, tmp):
    """scrapy-redis-bloomfilter's pattern: 2^30 bits, 6 seeded hashes of the fingerprint."""
    import redis
    from scrapy.utils.request import RequestFingerprinter

    port = int(os.environ["BENCH_REDIS_PORT"])
    r = redis.Redis(host="127.0.0.1", port=port)
    fper = RequestFingerprinter()
    m = 1 << 30
    seeds = [5, 7, 11, 13, 31, 37]

    def offsets(fp: bytes):
        hexfp = fp.hex()
        out = []
        for seed in seeds:  # scrapy-redis-bloomfilter's SimpleHash over the hex digest
            ret = 0
            for ch in hexfp:
                ret += seed * ret + ord(ch)
            out.append((m - 1) & ret)
        return out

    def seen(request):
        offs = offsets(fper.fingerprint(request))
        p = r.pipeline(transaction=False)
        for o in offs:
            p.getbit("bench:bloom", o)
        if all(p.execute()):
            return True
        p = r.pipeline(transaction=False)
        for o in offs:
            p.setbit("bench:bloom", o, 1)
        p.execute()
        return False

    def close():
        info = r.info("memory")
        print(json.dumps({"redis_used_memory_mb": info["used_memory"] / 2**20}), file=sys.stderr)

    return seen, close


def run_one(name: str, n: int) -> dict:
    import scrapy  # noqa: F401  (imported before the baseline)

    tmp = tempfile.mkdtemp(prefix=f"bench-{name}-")
    os.environ["BENCH_N"] = str(n)
    try:
        seen, close = globals()[f"make_{name}"](n, tmp)
        # At most one chunk of requests is alive at a time (the baseline holds one), so
        # the peak measures the contender, not the harness: `reqs = None` before the next
        # chunk is built, and the seen phase's indices are a range, not a list.
        reqs = requests_for(range(0, min(CHUNK, n)))
        base = rss_mb()
        t_new = c_new = 0.0
        filtered = 0
        for start in range(0, n, CHUNK):
            if start > 0:
                reqs = None
                reqs = requests_for(range(start, min(start + CHUNK, n)))
            t0, c0 = time.perf_counter(), time.process_time()
            for r in reqs:
                if seen(r):
                    filtered += 1
            t_new += time.perf_counter() - t0
            c_new += time.process_time() - c0
            done = min(start + CHUNK, n)
            if done % PROGRESS == 0 and done < n:
                # A run stopped early (a 10M run on a busy machine) still leaves figures.
                progress = {"progress": name, "requests": done, "new_ns": c_new / done * 1e9,
                            "peak_rss_mb": rss_mb(), "disk_mb": dir_mb(tmp)}
                print(json.dumps(progress), file=sys.stderr, flush=True)
        t_dup = c_dup = 0.0
        dups = 0
        step = max(1, n // DUPS)
        indices = range(0, n, step)[:DUPS]
        for start in range(0, len(indices), CHUNK):
            reqs = None
            reqs = requests_for(indices[start : start + CHUNK])
            t0, c0 = time.perf_counter(), time.process_time()
            for r in reqs:
                if seen(r):
                    dups += 1
            t_dup += time.perf_counter() - t0
            c_dup += time.process_time() - c0
        reqs = None
        close()
        disk = dir_mb(tmp)
        # Of which: the dupefilter's own files (bloomsled's store, or RFPDupeFilter's
        # requests.seen); the rest of a JOBDIR is Scrapy's queue, the same for both.
        own = dir_mb(os.path.join(tmp, "bloomsled-dupefilter"))
        if os.path.exists(os.path.join(tmp, "requests.seen")):
            own += os.path.getsize(os.path.join(tmp, "requests.seen")) / 2**20
        return {
            "contender": name,
            "n": n,
            "new_ns": c_new / n * 1e9,
            "dup_ns": c_dup / len(indices) * 1e9,
            "new_wall_ns": t_new / n * 1e9,
            "dup_wall_ns": t_dup / len(indices) * 1e9,
            "false_positives_of_new": filtered,
            "dups_filtered": dups / len(indices),
            "baseline_rss_mb": base,
            "peak_rss_mb": rss_mb(),
            "disk_mb": disk,
            "filter_disk_mb": own,
        }
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def dir_mb(path: str) -> float:
    total = 0
    for root, _, files in os.walk(path):
        for f in files:
            try:
                total += os.path.getsize(os.path.join(root, f))
            except OSError:
                pass
    return total / 2**20


def contains_many_bench(n: int) -> dict:
    import bloomsled

    keys = [hashlib.sha1(str(i).encode()).digest() for i in range(n)]
    absent = [hashlib.sha1(f"x{i}".encode()).digest() for i in range(n)]
    f = bloomsled.Filter(n, 0.01)
    f.update(keys)
    out = {"n": n}
    for label, probe in (("present", keys), ("absent", absent)):
        t0 = time.perf_counter()
        a = f.contains_many(probe)
        t1 = time.perf_counter()
        b = [k in f for k in probe]
        t2 = time.perf_counter()
        assert a == b
        out[f"filter_{label}_many_ns"] = (t1 - t0) / n * 1e9
        out[f"filter_{label}_loop_ns"] = (t2 - t1) / n * 1e9
    tmp = tempfile.mkdtemp(prefix="bench-tree-")
    try:
        with bloomsled.Db(os.path.join(tmp, "db"), expected_items=n) as db:
            db.insert_many([(k, b"") for k in keys])
            sample = absent[: min(n, 1_000_000)]
            t0 = time.perf_counter()
            a = db.contains_many(sample)
            t1 = time.perf_counter()
            b = [k in db for k in sample]
            t2 = time.perf_counter()
            assert a == b
            out["tree_absent_many_ns"] = (t1 - t0) / len(sample) * 1e9
            out["tree_absent_loop_ns"] = (t2 - t1) / len(sample) * 1e9
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return out


def available(name: str) -> bool:
    mod = {"rbloom": "rbloom", "pybloom_live": "pybloom_live", "redis_setbit": "redis"}.get(name)
    if mod is not None:
        try:
            __import__(mod)
        except ImportError:
            return False
    if name == "redis_setbit" and shutil.which("redis-server") is None:
        return False
    return True


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("-n", type=int, default=1_000_000, help="fingerprints per contender")
    ap.add_argument("-c", "--contenders", default=",".join(ALL + ["contains_many"]))
    ap.add_argument("--run", help=argparse.SUPPRESS)
    ap.add_argument("--json", help="also write the results to this file")
    args = ap.parse_args()
    if args.run:
        res = contains_many_bench(args.n) if args.run == "contains_many" else run_one(args.run, args.n)
        print(json.dumps(res))
        return
    results = []
    for name in args.contenders.split(","):
        if name != "contains_many" and not available(name):
            print(f"# {name}: not installed, skipped", flush=True)
            continue
        env = dict(os.environ)
        redis_proc = None
        if name == "redis_setbit":
            port = free_port()
            env["BENCH_REDIS_PORT"] = str(port)
            redis_proc = subprocess.Popen(
                ["redis-server", "--port", str(port), "--bind", "127.0.0.1", "--save", "",
                 "--appendonly", "no"],
                stdout=subprocess.DEVNULL,
            )
            time.sleep(0.5)
        err: list[str] = []
        try:
            p = subprocess.Popen(
                [sys.executable, __file__, "--run", name, "-n", str(args.n)],
                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
            )
            assert p.stderr is not None and p.stdout is not None
            for line in p.stderr:
                if line.startswith('{"progress"'):
                    print("# " + line.strip(), flush=True)
                else:
                    err.append(line)
            out = p.stdout.read()
            p.wait()
        finally:
            if redis_proc is not None:
                redis_proc.kill()
                redis_proc.wait()
        if p.returncode != 0:
            print(f"# {name}: failed\n{''.join(err)[-2000:]}", flush=True)
            continue
        res = json.loads(out.strip().splitlines()[-1])
        for line in err:
            if line.startswith("{"):
                res.update(json.loads(line))
        results.append(res)
        print(json.dumps(res), flush=True)
    print_table(results)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=1)


def print_table(results: list) -> None:
    rows = [r for r in results if "contender" in r]
    rfp = next((r for r in rows if r["contender"] == "rfp"), None)
    print()
    print("| contender | fingerprints | new request (CPU) | seen request (CPU) | vs RFP (new) | peak RSS | vs RFP (RSS) | disk (the filter's own) |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|")
    for r in rows:
        # The _jobdir rows are compared with rfp_jobdir, the others with rfp.
        base = rfp
        if r["contender"].endswith("_jobdir"):
            base = next((x for x in rows if x["contender"] == "rfp_jobdir"), None)
        vs = f"{r['new_ns'] / base['new_ns']:.2f}x" if base else "-"
        vr = f"{r['peak_rss_mb'] / base['peak_rss_mb']:.3f}" if base else "-"
        own = f" ({r['filter_disk_mb']:.0f} MiB)" if r.get("filter_disk_mb") else ""
        extra = f" (+ Redis {r['redis_used_memory_mb']:.0f} MiB)" if "redis_used_memory_mb" in r else ""
        print(
            f"| {r['contender']} | {r['n']:,} | {r['new_ns'] / 1000:.1f} µs | {r['dup_ns'] / 1000:.1f} µs "
            f"| {vs} | {r['peak_rss_mb']:.0f} MiB{extra} | {vr} | {r['disk_mb']:.0f} MiB{own} |"
        )
    for r in results:
        if "filter_present_many_ns" in r:
            print()
            print(f"contains_many vs a loop of `in`, {r['n']:,} keys (ns per key):")
            print("| | contains_many | loop of in | speed-up |")
            print("|---|---:|---:|---:|")
            for label in ("filter_present", "filter_absent", "tree_absent"):
                a, b = r[f"{label}_many_ns"], r[f"{label}_loop_ns"]
                print(f"| {label.replace('_', ' ')} | {a:.0f} | {b:.0f} | {b / a:.1f}x |")


if __name__ == "__main__":
    main()

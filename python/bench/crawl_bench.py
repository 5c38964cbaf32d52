"""A real crawl on loopback with JOBDIR: pages per second and the spider's peak RSS, for
Scrapy's RFPDupeFilter and bloomsled's BloomDupeFilter (with BloomDoneMiddleware).

The site is the tests' generated one (python/tests/conftest.py: every page links to the
next, to itself, to page 0 and to 8 random pages, one link twice), served by a threaded
HTTP server in this process; each crawl is python/tests/crawl_spider.py in its own process
(CONCURRENT_REQUESTS 32), its peak RSS read from wait4(). Every page must be fetched exactly
once, or the run fails.

    python python/bench/crawl_bench.py --pages 100000
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "tests"))

from conftest import Site, crawl_cmd  # noqa: E402

CONTENDERS = {
    "rfp_jobdir": {"DUPEFILTER_CLASS": "scrapy.dupefilters.RFPDupeFilter"},
    "bloom_jobdir": {},  # crawl_spider.py's defaults: BloomDupeFilter + BloomDoneMiddleware
}


def crawl(site: Site, name: str, pages: int) -> dict:
    tmp = tempfile.mkdtemp(prefix=f"crawl-bench-{name}-")
    try:
        site.reset()
        settings = dict(CONTENDERS[name])
        settings.update(
            JOBDIR=os.path.join(tmp, "job"),
            BLOOMSLED_EXPECTED_ITEMS=pages,
            LOG_LEVEL="WARNING",
        )
        t0 = time.perf_counter()
        with open(os.path.join(tmp, "log"), "wb") as out:
            p = subprocess.Popen(crawl_cmd(site.url, **settings), stdout=out, stderr=subprocess.STDOUT)
            _, status, usage = os.wait4(p.pid, 0)
        wall = time.perf_counter() - t0
        p.returncode = os.waitstatus_to_exitcode(status)
        if p.returncode != 0:
            sys.exit(Path(tmp, "log").read_text()[-3000:])
        hits = site.snapshot()
        if set(hits) != site.all_paths() or any(n != 1 for n in hits.values()):
            sys.exit(f"{name}: {len(hits)} pages fetched, {sum(hits.values())} fetches")
        return {
            "contender": name,
            "pages": pages,
            "seconds": wall,
            "pages_per_s": pages / wall,
            "peak_rss_mb": usage.ru_maxrss / 1024,
            "cpu_s": usage.ru_utime + usage.ru_stime,
        }
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--pages", type=int, default=100_000)
    ap.add_argument("-c", "--contenders", default=",".join(CONTENDERS))
    args = ap.parse_args()
    site = Site(args.pages)
    try:
        rows = [crawl(site, name, args.pages) for name in args.contenders.split(",")]
    finally:
        site.close()
    print("| contender | pages | pages/s | spider CPU | peak RSS |")
    print("|---|---:|---:|---:|---:|")
    for r in rows:
        print(
            f"| {r['contender']} | {r['pages']:,} | {r['pages_per_s']:.0f} | {r['cpu_s']:.0f} s "
            f"| {r['peak_rss_mb']:.0f} MiB |"
        )


if __name__ == "__main__":
    main()

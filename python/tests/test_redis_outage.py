"""RedisBloomDupeFilter while Redis goes away: real spiders, a real redis-server stopped
and restarted with its data, requests counted at the HTTP server.

The site is a tree: each page is linked from its parent only (the other links are
duplicates), so one request dropped is a page, and its whole subtree, never fetched.
"""

from __future__ import annotations

import re
import subprocess
import time
from pathlib import Path

import pytest

from conftest import Site, crawl_cmd, in_ci

if not in_ci():  # under CI=true a missing Scrapy fails the suite
    pytest.importorskip("scrapy")

REDIS_DF = "bloomsled.scrapy.RedisBloomDupeFilter"
PAGES = 600


def close_reason(log: str) -> str:
    m = re.search(r"Spider closed \(([^)]*)\)", log)
    assert m, "the spider did not close: " + log[-3000:]
    return m.group(1)


def start_spiders(site: Site, redis_url: str, tmp_path: Path, **settings) -> list:
    """Two spider processes sharing one filter, starting at pages 1 and 2, whose subtrees
    are theirs (each fetches its start page whatever the filter says, as Scrapy's start
    requests do); every other request goes through the shared filter, which splits the
    rest of the tree (reached through the links to the root) between them."""
    base = dict(
        DUPEFILTER_CLASS=REDIS_DF,
        BLOOMSLED_REDIS_URL=redis_url,
        BLOOMSLED_EXPECTED_ITEMS=100_000,
        START_DONT_FILTER=1,
        CONCURRENT_REQUESTS=8,
        CONCURRENT_REQUESTS_PER_DOMAIN=8,
        RETRY_ENABLED=False,  # a failed page must show as unfetched, not be retried late
    )
    base.update(settings)
    procs = []
    for i, start in enumerate(("/p/1", "/p/2")):
        log = open(tmp_path / f"spider{i}.log", "wb")
        p = subprocess.Popen(
            crawl_cmd(site.url, start=start, **base), stdout=log, stderr=subprocess.STDOUT
        )
        procs.append((p, log, tmp_path / f"spider{i}.log"))
    return procs


def wait_all(procs, timeout: float = 300) -> list[str]:
    logs = []
    for p, log, path in procs:
        assert p.wait(timeout=timeout) == 0, path.read_text(errors="replace")[-3000:]
        log.close()
        logs.append(path.read_text(errors="replace"))
    return logs


def wait_fetched(site: Site, n: int, procs, timeout: float = 120) -> int:
    """Waits until `n` pages were fetched; returns how many spiders are still running (a
    spider whose frontier the other claimed first may be done already)."""
    deadline = time.time() + timeout
    while site.fetched() < n:
        assert time.time() < deadline, "the crawl did not get going"
        assert any(p.poll() is None for p, _, _ in procs), "the crawl ended early"
        time.sleep(0.01)
    running = sum(p.poll() is None for p, _, _ in procs)
    assert running >= 1, "the crawl ended before Redis was stopped"
    return running


@pytest.mark.parametrize(
    "outage,how,exact",
    [(1.0, "shutdown", True), (5.0, "stop", True), (1.0, "stop", False)],
    ids=["1s-clean-shutdown", "5s-kill9-aof", "1s-kill9-aof-bloom-only"],
)
def test_no_request_dropped_while_redis_restarts_with_its_data(
    persistent_redis, tmp_path, outage, how, exact
):
    site = Site(PAGES, tree=3, delay=0.05)
    try:
        procs = start_spiders(
            site, persistent_redis.url, tmp_path, BLOOMSLED_REDIS_EXACT=exact
        )
        running = wait_fetched(site, PAGES // 6, procs)
        before = site.fetched()
        getattr(persistent_redis, how)()
        time.sleep(outage)
        persistent_redis.start()  # same port and folder: the data is reloaded
        logs = wait_all(procs)
        hits = site.snapshot()
    finally:
        site.close()
    assert before < PAGES, "Redis was stopped after the crawl had ended"
    reasons = [close_reason(log) for log in logs]
    missing = site.all_paths() - set(hits)
    twice = sorted(p for p, n in hits.items() if n > 1)
    print(
        f"outage {outage}s ({how}, exact={exact}) after {before} pages, "
        f"{running} spiders running: "
        f"{len(hits)} of {PAGES} fetched, "
        f"{len(twice)} fetched twice {twice[:10]}, reasons {reasons}, "
        f"unknown outcomes {[log.count('its answer is unknown') for log in logs]}"
    )
    assert reasons == ["finished", "finished"]
    assert not missing, f"{len(missing)} pages never fetched: {sorted(missing)[:10]}"
    for log in logs:
        assert "Task exception was never retrieved" not in log
    # Pages 1 and 2 are fetched as start pages (unfiltered) and again through the root's
    # links; any other second fetch is an add whose answer was lost with the connection
    # (let through rather than dropped).
    unknown = sum(log.count("its answer is unknown") for log in logs)
    assert len(set(twice) - {"/p/1", "/p/2"}) <= unknown, twice


def test_redis_gone_past_the_retry_limit_closes_the_spider(persistent_redis, tmp_path):
    site = Site(PAGES, tree=3, delay=0.05)
    try:
        procs = start_spiders(
            site, persistent_redis.url, tmp_path, BLOOMSLED_REDIS_RETRY_SECONDS=3
        )
        running = wait_fetched(site, PAGES // 6, procs)
        persistent_redis.stop()  # and never back
        logs = wait_all(procs)
    finally:
        site.close()
    # A spider still running when Redis went away closes with the new reason; one that
    # had finished its share before ended `finished` without meeting the outage.
    reasons = [close_reason(log) for log in logs]
    print(f"{running} spiders running when Redis went away for good; reasons {reasons}")
    assert "bloomsled_redis_unavailable" in reasons, reasons
    assert set(reasons) <= {"finished", "bloomsled_redis_unavailable"}, reasons
    for log in logs:
        assert "Task exception was never retrieved" not in log
        errors = [line for line in log.splitlines() if "ERROR" in line and "Redis" in line]
        if close_reason(log) == "finished":
            assert not errors, "a spider that met the outage ended `finished`"
            continue
        assert errors, "no ERROR naming Redis:\n" + log[-3000:]
        assert "BLOOMSLED_REDIS_RETRY_SECONDS (3.0 s)" in errors[0], errors[0]

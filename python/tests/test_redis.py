"""SharedFilter and RedisBloomDupeFilter against a private redis-server."""

from __future__ import annotations

import re
import subprocess
import time

import pytest

from conftest import Site, crawl_cmd

import bloomsled

REDIS_DF = "bloomsled.scrapy.RedisBloomDupeFilter"


def test_shared_filter_round_trip_and_lost(redis_server):
    f = bloomsled.SharedFilter.create("t:urls", redis_server.url, expected_items=10_000, fpr=0.01)
    assert f.add("https://example.com/") is True
    assert f.add(b"https://example.com/") is False
    assert "https://example.com/" in f
    assert f.add_many(["a", "b", "a"]) == [True, True, False]
    assert f.contains_many(["a", "zz", "b"]) == [True, False, True]
    g = bloomsled.SharedFilter.open("t:urls", redis_server.url)
    assert "a" in g and g.stats()["capacity"] == 10_000
    with pytest.raises(bloomsled.ShapeMismatch):
        bloomsled.SharedFilter.create("t:urls", redis_server.url, expected_items=99, fpr=0.01)
    with pytest.raises(bloomsled.SharedFilterNotFound):
        bloomsled.SharedFilter.open("t:none", redis_server.url)
    redis_server.restart_empty()
    for call in (lambda: "a" in f, lambda: f.add("c"), lambda: f.contains_many(["a"])):
        with pytest.raises(bloomsled.SharedFilterLost):
            call()
    assert issubclass(bloomsled.SharedFilterLost, bloomsled.Error)


def test_shared_filter_unreachable_is_an_error():
    with pytest.raises(bloomsled.RedisError):
        bloomsled.SharedFilter.open("x", "redis://127.0.0.1:1/0")


def test_unreachable_redis_without_a_crawler_raises_once_and_logs_once(caplog):
    """Built by ``from_settings`` (no crawler, no spider to close): a Redis that cannot be
    reached is raised from ``request_seen``, with one ERROR naming it, not a second one
    calling it a refusal."""
    from scrapy import Request
    from scrapy.settings import Settings

    from bloomsled.scrapy import RedisBloomDupeFilter

    df = RedisBloomDupeFilter.from_settings(Settings({
        "BLOOMSLED_REDIS_URL": "redis://127.0.0.1:1/0",
        "BLOOMSLED_REDIS_RETRY_SECONDS": 0.2,
    }))
    with caplog.at_level("ERROR", logger="bloomsled"), pytest.raises(bloomsled.RedisError):
        df.request_seen(Request("https://example.com/"))
    errors = [r.getMessage() for r in caplog.records if r.levelname == "ERROR"]
    assert len(errors) == 1 and "stayed unavailable" in errors[0], errors


def _project_scheduler() -> type:
    """A project's own subclass of scrapy-redis's scheduler, as Scrapy accepts in SCHEDULER
    (a class, or its path in the project's package)."""
    from scrapy_redis.scheduler import Scheduler

    return type("ProjectScheduler", (Scheduler,), {"__module__": "myproject.scheduling"})


@pytest.mark.parametrize("settings, kept", [
    ({}, False),
    ({"JOBDIR": "job"}, True),
    ({"SCHEDULER": "scrapy_redis.scheduler.Scheduler", "SCHEDULER_PERSIST": True}, True),
    ({"SCHEDULER": "scrapy_redis.scheduler.Scheduler", "SCHEDULER_PERSIST": False}, False),
    ({"SCHEDULER": "project", "SCHEDULER_PERSIST": True}, True),
])
def test_a_lost_filter_answers_by_whether_the_queue_outlives_the_close(
    redis_server, tmp_path, settings, kept
):
    """Redis restarted empty under a crawl: the request that meets the loss, and every one
    after it, is "not seen" (kept for the resumed crawl) only when the scheduler's queue
    outlives the close; otherwise the close discards it anyway, and "seen" keeps the engine
    from fetching pages again before the close lands."""
    from scrapy import Request
    from scrapy.utils.test import get_crawler

    # Scrapy's own test crawler wants a reactor installed before it is built (2.13 raises
    # without one); the default reactor is what a crawl without TWISTED_REACTOR runs.
    from twisted.internet import reactor  # noqa: F401

    from bloomsled.scrapy import RedisBloomDupeFilter

    if "JOBDIR" in settings:
        settings = {**settings, "JOBDIR": str(tmp_path / "job")}
    if settings.get("SCHEDULER") == "project":
        settings = {**settings, "SCHEDULER": _project_scheduler()}
    crawler = get_crawler(settings_dict={
        "BLOOMSLED_REDIS_URL": redis_server.url, "BLOOMSLED_REDIS_RETRY_SECONDS": 1, **settings,
    })
    df = RedisBloomDupeFilter.from_crawler(crawler)
    assert df.request_seen(Request("https://example.com/a")) is False
    assert df.request_seen(Request("https://example.com/a")) is True
    redis_server.restart_empty()
    answers = [df.request_seen(Request(f"https://example.com/{p}")) for p in ("a", "b")]
    assert df.lost and df.stopped
    assert answers == [not kept, not kept], (settings, answers)
    assert crawler.stats.get_value("bloomsled/shared_filter_lost") == 1


def test_two_spiders_share_one_filter(redis_server, tmp_path):
    site = Site(2000)
    try:
        # Each spider fetches its own start page whatever the filter says (as Scrapy's start
        # requests do), so both take part even if one starts late; every other page goes
        # through the shared filter.
        settings = dict(
            DUPEFILTER_CLASS=REDIS_DF, BLOOMSLED_REDIS_URL=redis_server.url, START_DONT_FILTER=1
        )
        logs = [open(tmp_path / f"spider{i}.log", "wb") for i in range(2)]
        procs = [
            subprocess.Popen(
                crawl_cmd(site.url, start=start, **settings), stdout=log, stderr=subprocess.STDOUT
            )
            for start, log in zip(("/p/0", "/p/1000"), logs)
        ]
        for p in procs:
            assert p.wait(timeout=240) == 0
        for log in logs:
            log.close()
        hits = site.snapshot()
        twice = {p: n for p, n in hits.items() if n > 1 and p not in ("/p/0", "/p/1000")}
        assert not twice, f"pages fetched by both spiders: {sorted(twice)[:10]}"
        assert set(hits) == site.all_paths()
        crawled = []
        for i in (0, 1):
            text = (tmp_path / f"spider{i}.log").read_text()
            m = re.search(r"'downloader/response_status_count/200': (\d+)", text)
            crawled.append(int(m.group(1)) if m else 0)
        assert sum(crawled) == site.pages + (hits["/p/0"] - 1) + (hits["/p/1000"] - 1)
        assert all(n > 0 for n in crawled)
        print(f"pages crawled by each spider: {crawled}")
    finally:
        site.close()


def test_redis_restarted_empty_closes_the_spider(redis_server, tmp_path):
    site = Site(3000, delay=0.02)
    try:
        log_path = tmp_path / "spider.log"
        with open(log_path, "wb") as log:
            p = subprocess.Popen(
                crawl_cmd(
                    site.url,
                    DUPEFILTER_CLASS=REDIS_DF,
                    BLOOMSLED_REDIS_URL=redis_server.url,
                    CONCURRENT_REQUESTS=4,
                ),
                stdout=log,
                stderr=subprocess.STDOUT,
            )
            deadline = time.time() + 60
            while site.fetched() < 100 and time.time() < deadline:
                time.sleep(0.02)
            before = site.fetched()
            assert 100 <= before < 1000
            redis_server.restart_empty()
            assert p.wait(timeout=120) == 0
        text = log_path.read_text()
        assert "Closing spider (bloomsled_shared_filter_lost)" in text, text[-3000:]
        assert "was lost in Redis" in text
        assert "'finish_reason': 'bloomsled_shared_filter_lost'" in text
        hits = site.snapshot()
        assert all(n == 1 for n in hits.values()), "no page fetched again"
        assert len(hits) < before + 200, "the spider stopped instead of crawling on"
    finally:
        site.close()

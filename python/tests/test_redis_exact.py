"""RedisBloomDupeFilter's exact mode: two spiders share a Bloom filter far too small for
the site (its answers are mostly "maybe"), and the exact record in Redis still lets every
page through once. The same crawl in Bloom-only mode shows the false positives are real.
Requests are counted at the HTTP server."""

from __future__ import annotations

import pytest

from conftest import Site, in_ci
from test_redis_outage import close_reason, start_spiders, wait_all

if not in_ci():  # under CI=true a missing Scrapy fails the suite
    pytest.importorskip("scrapy")

import bloomsled

PAGES = 300
VARIANTS = 4  # near-duplicate URLs per page: /p/<i>?v=<k>


@pytest.mark.parametrize("exact", [True, False], ids=["exact", "bloom-only"])
def test_exact_shared_crawl_skips_no_page(redis_server, tmp_path, exact):
    site = Site(PAGES, tree=3, variants=VARIANTS)
    try:
        # Sized for 100 fingerprints at a 30% false-positive rate, fed 1,500.
        procs = start_spiders(
            site,
            redis_server.url,
            tmp_path,
            BLOOMSLED_EXPECTED_ITEMS=100,
            BLOOMSLED_FPR=0.3,
            BLOOMSLED_REDIS_EXACT=exact,
        )
        logs = wait_all(procs)
        hits = site.snapshot()
    finally:
        site.close()
    assert [close_reason(log) for log in logs] == ["finished", "finished"]
    missing = site.all_paths() - set(hits)
    twice = sorted(set(p for p, n in hits.items() if n > 1) - {"/p/1", "/p/2"})
    print(
        f"exact={exact}: {len(hits)} of {len(site.all_paths())} URLs fetched, "
        f"{len(missing)} skipped, {len(twice)} fetched twice"
    )
    if exact:
        assert not missing, f"{len(missing)} pages skipped: {sorted(missing)[:10]}"
        assert not twice, twice  # of two spiders meeting a URL, exactly one fetched it
    else:
        # The filter alone drops new requests as false positives: the test's filter is
        # small enough that this certainly happens.
        assert len(missing) > 100, len(missing)


def test_exact_add_is_exact_and_atomic(redis_server):
    f = bloomsled.SharedFilter.create("t:exact", redis_server.url, expected_items=10, fpr=0.5)
    fps = [bytes([i % 256, i // 256]) * 10 for i in range(3_000)]
    assert f.add_exact_many(fps) == [True] * 3_000
    assert f.add_exact_many(fps) == [False] * 3_000
    assert f.add_exact(fps[7]) is False
    assert f.add_exact(b"\xff" * 20) is True
    assert f.add_exact(b"\xff" * 20) is False

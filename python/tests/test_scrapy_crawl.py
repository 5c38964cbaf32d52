"""Real Scrapy crawls (subprocesses) against a generated site on 127.0.0.1."""

from __future__ import annotations

import signal
import subprocess
import time
from pathlib import Path

import pytest

from conftest import crawl_cmd, in_ci, run_crawl

if not in_ci():  # under CI=true a missing Scrapy fails the suite
    pytest.importorskip("scrapy")

from bloomsled.scrapy import STORE_DIR, read_store  # noqa: E402


def done_paths(site, jobdir: Path) -> tuple[set[str], set[str]]:
    """(done, pending) pages in the dupefilter's store: done means recorded."""
    from scrapy import Request
    from scrapy.utils.request import RequestFingerprinter

    fper = RequestFingerprinter()
    by_fp = {fper.fingerprint(Request(site.url + p)): p for p in site.all_paths()}
    done, pending = read_store(str(jobdir / STORE_DIR))
    unknown = [fp.hex() for fp in done | pending if fp not in by_fp]
    assert not unknown, f"unknown fingerprints {unknown[:5]}"
    return {by_fp[fp] for fp in done}, {by_fp[fp] for fp in pending}


def test_crawl_fetches_every_page_exactly_once(site, tmp_path):
    log = run_crawl(site.url, tmp_path / "crawl.log")
    hits = site.snapshot()
    assert set(hits) == site.all_paths(), "every page reached"
    twice = {p: n for p, n in hits.items() if n != 1}
    assert not twice, f"pages fetched more than once: {sorted(twice)[:10]}"
    assert "dupefilter/filtered" in log


def test_crawl_with_jobdir_fetches_every_page_exactly_once(site, tmp_path):
    jobdir = tmp_path / "job"
    run_crawl(site.url, tmp_path / "crawl.log", JOBDIR=str(jobdir))
    hits = site.snapshot()
    assert set(hits) == site.all_paths()
    assert all(n == 1 for n in hits.values())
    done, pending = done_paths(site, jobdir)
    assert done == site.all_paths() and not pending


def interrupted_then_resumed(site, tmp_path, sig: int) -> tuple[set, set, set, set]:
    jobdir = tmp_path / "job"
    log1 = tmp_path / "run1.log"
    with open(log1, "wb") as out:
        p = subprocess.Popen(
            crawl_cmd(site.url, JOBDIR=str(jobdir)), stdout=out, stderr=subprocess.STDOUT
        )
        deadline = time.time() + 120
        while site.fetched() < site.pages // 2 and time.time() < deadline:
            if p.poll() is not None:
                break
            time.sleep(0.01)
        assert p.poll() is None, "the first run ended before it was interrupted"
        p.send_signal(sig)
        p.wait(timeout=120)
    first = site.snapshot()
    assert len(first) < site.pages, "interrupted halfway, not at the end"
    done, pending = done_paths(site, jobdir)
    assert done <= set(first), "a page recorded as done was fetched"
    site.reset()
    run_crawl(site.url, tmp_path / "run2.log", JOBDIR=str(jobdir))
    second = site.snapshot()
    return set(first), set(second), done, pending


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGKILL], ids=["sigint", "kill9"])
def test_interrupted_crawl_resumes_without_refetching(site, tmp_path, sig):
    first, second, done, pending = interrupted_then_resumed(site, tmp_path, sig)
    refetched_recorded = done & second
    assert not refetched_recorded, f"recorded pages fetched again: {sorted(refetched_recorded)[:10]}"
    missing = site.all_paths() - first - second
    assert not missing, f"pages never reached: {sorted(missing)[:10]}"
    again = first & second
    print(
        f"{signal.Signals(sig).name}: run 1 fetched {len(first)}, recorded {len(done)} done "
        f"+ {len(pending)} pending; run 2 fetched {len(second)}, of which {len(again)} "
        f"fetched by run 1 too (in flight, not recorded)"
    )
    if sig == signal.SIGINT:
        # A graceful stop finishes every callback: everything fetched is recorded.
        assert done == first and not again
    assert all(n == 1 for n in site.snapshot().values()), "run 2 fetched a page twice"


def test_dupefilter_reopens_with_its_saved_filter(tmp_path):
    from scrapy import Request

    from bloomsled.scrapy import BloomDupeFilter

    reqs = [Request(f"http://127.0.0.1/p/{i}") for i in range(3_000)]
    df = BloomDupeFilter(str(tmp_path), expected_items=10_000)
    assert not any(df.request_seen(r) for r in reqs)
    assert all(df.request_seen(r) for r in reqs)
    df.close("finished")
    # Clean close: the saved filter is loaded, nothing is forgotten.
    df = BloomDupeFilter(str(tmp_path), expected_items=10_000)
    assert df.done is not None and df.db is None  # no journal without a crawler: no sled
    assert df.done.stats()["filter_rebuilt"] is False
    assert all(df.request_seen(r) for r in reqs)
    new = Request("http://127.0.0.1/new")
    assert not df.request_seen(new)
    # Not closed (as after a crash): the clean mark was cleared at open, so the filter is
    # rebuilt from the files and still knows every fingerprint, the new one included.
    df.done.sync()
    df.done = None  # released without a clean close
    df = BloomDupeFilter(str(tmp_path), expected_items=10_000)
    assert df.done is not None and df.done.stats()["filter_rebuilt"] is True
    assert all(df.request_seen(r) for r in reqs + [new])
    df.close("finished")
    done, pending = read_store(str(tmp_path / STORE_DIR))
    assert len(done) == 3_001 and not pending


def test_dupefilter_without_jobdir_opens_no_sled_and_removes_its_folder():
    from scrapy import Request

    from bloomsled.scrapy import BloomDupeFilter

    df = BloomDupeFilter(None, expected_items=1_000)
    assert df.db is None, "no journal without JOBDIR: sled must not be opened"
    folder = Path(df.path)
    assert (folder / "done").is_dir()
    reqs = [Request(f"http://127.0.0.1/q/{i}") for i in range(500)]
    assert [df.request_seen(r) for r in reqs] == [False] * 500
    assert all(df.request_seen(r) for r in reqs)
    df.close("finished")
    assert not folder.exists(), "the temporary store was left behind"

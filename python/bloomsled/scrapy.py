"""Scrapy dupefilters backed by bloomsled.

Swap one line of ``settings.py``::

    DUPEFILTER_CLASS = "bloomsled.scrapy.BloomDupeFilter"

``BloomDupeFilter`` is exact: a Bloom filter answers new fingerprints, a
``bloomsled.FingerprintSet`` on disk confirms the rest, so no request is ever dropped as a
false positive. Its memory is the filter (about 1.2 bytes per expected item at 1%) and a
small index, not a Python set of every fingerprint: the fingerprints themselves live in
files read through the OS page cache.

``RedisBloomDupeFilter`` shares one Bloom filter between many spider processes through
Redis or Redis Cluster; a lost filter closes the spider with an error instead of letting
every request through again.

Durability with ``JOBDIR`` (what survives ``kill -9``)
=======================================================

The store is the folder ``JOBDIR/bloomsled-dupefilter``. It holds:

* ``done/``: the *done* fingerprints, a ``bloomsled.FingerprintSet`` (sorted runs, a
  write-ahead log, and a Bloom filter in memory that answers new fingerprints without a
  read; saved at a clean close, rebuilt from the files after a crash);
* ``journal/``: a bloomsled ``Db`` with one key per *pending* request (accepted, not yet
  done), holding the pickled request. It is written by one atomic insert-if-absent (sled's
  compare-and-swap) when ``request_seen`` accepts the request: of two racers exactly one
  sees "new".

A request is seen if it is done or pending. It becomes *done* ("recorded") only when all of
this has happened, in this order: its response was received; the spider's callback for it
has finished (so every request it yielded went through ``request_seen`` and is journaled);
a flush made those journal entries durable; its fingerprint was added to the done set and
the set synced; and then its journal entry was removed. This runs every
``BLOOMSLED_COMMIT_INTERVAL`` seconds (1 s) and at close. So, after any crash:

* a done request was fetched and its children are durably journaled or done: it is never
  fetched again, and nothing it linked to is lost;
* a pending request is fetched (again) on resume: at restart the journal is the frontier.
  Scrapy's own disk queue is only consistent after a clean close, and its requests are all
  in the journal anyway, so the filter sets ``JOBDIR/requests.queue`` aside (renamed, never
  deleted) and re-schedules every pending request itself;
* a request accepted less than ``BLOOMSLED_FLUSH_MS`` (500 ms) before the crash may be
  unknown after it: then its parent was not done yet (a parent is marked done only after a
  flush that covers its children's journal entries), so the parent is fetched again and
  finds it again.

A flush per request would cost a millisecond-scale fsync per request; this costs a few
fsyncs per second. What a crash can cost is re-fetching the requests in flight during the
last second, never a request that was recorded, and never a page left unreached.

Without ``JOBDIR`` the done set lives in a temporary folder removed at close, and there is
no journal (nothing can resume), so no sled database is opened at all.
"""

from __future__ import annotations

import hashlib
import logging
import pickle
import shutil
import tempfile
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any, Optional

from scrapy import signals
from scrapy.dupefilters import BaseDupeFilter
from scrapy.utils.job import job_dir
from scrapy.utils.request import RequestFingerprinter, referer_str

from . import (
    Db,
    FingerprintSet,
    RedisError,
    RedisOutcomeUnknownError,
    SharedFilter,
    SharedFilterLost,
)

if TYPE_CHECKING:
    from scrapy.crawler import Crawler
    from scrapy.http import Request
    from scrapy.spiders import Spider

__all__ = ["BloomDupeFilter", "RedisBloomDupeFilter"]

logger = logging.getLogger(__name__)

#: Folder of the store under ``JOBDIR``.
STORE_DIR = "bloomsled-dupefilter"
DEFAULT_EXPECTED_ITEMS = 10_000_000
DEFAULT_FPR = 0.01
DEFAULT_CACHE_BYTES = 32 * 1024 * 1024
DEFAULT_FLUSH_MS = 500
DEFAULT_COMMIT_INTERVAL = 1.0
#: Reason a spider is closed with when its shared filter was lost.
SHARED_FILTER_LOST_REASON = "bloomsled_shared_filter_lost"
#: Reason a spider is closed with when Redis stayed unavailable past
#: ``BLOOMSLED_REDIS_RETRY_SECONDS``.
REDIS_UNAVAILABLE_REASON = "bloomsled_redis_unavailable"
#: How long a call to Redis keeps retrying (holding the engine) before the spider is closed.
DEFAULT_REDIS_RETRY_SECONDS = 60.0

_PENDING = b"P"
#: Key prefix of the journal's entries (one per pending request).
_JOURNAL = b"p"
#: Sub-folders of the store: the done fingerprints (a FingerprintSet), the journal (a Db).
DONE_DIR = "done"
JOURNAL_DIR = "journal"
#: Fingerprints are kept at this width (Scrapy's are SHA-1 digests; others are hashed).
FP_WIDTH = 20


def read_store(path: str) -> tuple[set[bytes], set[bytes]]:
    """(done fingerprints, pending fingerprints) of a closed BloomDupeFilter store: for
    inspection and tests. After a crash one fingerprint may be in both (its journal entry
    is removed after it is done): it is fetched again, so count it as pending."""
    done: set[bytes] = set()
    pending: set[bytes] = set()
    if Path(path, DONE_DIR).exists():
        with FingerprintSet(str(Path(path, DONE_DIR)), width=FP_WIDTH) as fps:
            done = set(fps.members())
    if Path(path, JOURNAL_DIR).exists():
        with Db(str(Path(path, JOURNAL_DIR))) as db:
            pending = {k[len(_JOURNAL) :] for k, _ in db.items(prefix=_JOURNAL)}
    return done - pending, pending


class _DupeLog:
    """``log()`` exactly as Scrapy's ``RFPDupeFilter`` does it (``DUPEFILTER_DEBUG``)."""

    debug: bool
    logdupes: bool

    def _init_common(self, fingerprinter: Any, debug: bool, crawler: Optional[Crawler]) -> None:
        """What both dupefilters set up alike, as ``RFPDupeFilter.__init__`` does."""
        self.fingerprinter = fingerprinter or RequestFingerprinter()
        self.debug = debug
        self.logdupes = True
        self.crawler = crawler

    def log(self, request: Request, spider: Spider) -> None:
        if self.debug:
            msg = "Filtered duplicate request: %(request)s (referer: %(referer)s)"
            args = {"request": request, "referer": referer_str(request)}
            logger.debug(msg, args, extra={"spider": spider})
        elif self.logdupes:
            msg = (
                "Filtered duplicate request: %(request)s"
                " - no more duplicates will be shown"
                " (see DUPEFILTER_DEBUG to show all duplicates)"
            )
            logger.debug(msg, {"request": request}, extra={"spider": spider})
            self.logdupes = False
        spider.crawler.stats.inc_value("dupefilter/filtered")


class BloomDupeFilter(_DupeLog, BaseDupeFilter):
    """Exact duplicate filter: bloomsled's Bloom filter in front of a FingerprintSet.

    Settings: ``BLOOMSLED_EXPECTED_ITEMS`` (10,000,000: the filter's sizing),
    ``BLOOMSLED_FPR`` (0.01), ``BLOOMSLED_CACHE_BYTES`` (32 MiB of sled cache for the
    journal, with ``JOBDIR``), ``BLOOMSLED_FLUSH_MS`` (500: the journal's flush period),
    ``BLOOMSLED_COMMIT_INTERVAL`` (1.0 s), ``DUPEFILTER_DEBUG``, ``JOBDIR``.
    """

    def __init__(
        self,
        path: Optional[str] = None,
        debug: bool = False,
        *,
        fingerprinter: Any = None,
        expected_items: int = DEFAULT_EXPECTED_ITEMS,
        fpr: float = DEFAULT_FPR,
        cache_bytes: int = DEFAULT_CACHE_BYTES,
        flush_ms: int = DEFAULT_FLUSH_MS,
        commit_interval: float = DEFAULT_COMMIT_INTERVAL,
        crawler: Optional[Crawler] = None,
    ) -> None:
        self._init_common(fingerprinter, debug, crawler)
        self.commit_interval = commit_interval
        self._tmpdir: Optional[str] = None
        if path:
            store = Path(path, STORE_DIR)
        else:
            self._tmpdir = tempfile.mkdtemp(prefix="bloomsled-dupefilter-")
            store = Path(self._tmpdir, "db")
        self.path = str(store)
        if (store / "conf").exists() and not (store / DONE_DIR).exists():
            logger.warning(
                "bloomsled: %s was written by an older BloomDupeFilter (a sled store at "
                "its root); it is left untouched and not read: this crawl starts afresh",
                store,
            )
        # The journal needs a JOBDIR (something to resume) and a crawler (to re-schedule).
        self.journal = bool(path) and crawler is not None
        self.done: Optional[FingerprintSet] = FingerprintSet(
            str(store / DONE_DIR),
            expected_items=max(1, expected_items),
            fpr=fpr,
            width=FP_WIDTH,
        )
        # Without a journal no sled database is opened: sled's memory is not needed.
        self.db: Optional[Db] = None
        if self.journal:
            self.db = Db(
                str(store / JOURNAL_DIR),
                expected_items=max(100_000, expected_items // 4),
                cache_capacity=cache_bytes,
                flush_every_ms=flush_ms,
            )
        self._received: list[tuple[int, Request, bytes]] = []
        self._tick = 0
        self._resume: list[bytes] = []
        self._loop: Any = None
        if self.journal:
            self._resume = self._pending_entries()
            if self._resume:
                self._set_aside_scrapy_queue(path)
            assert crawler is not None
            crawler.signals.connect(self._spider_opened, signal=signals.spider_opened)
            crawler.signals.connect(self._response_received, signal=signals.response_received)

    @classmethod
    def from_crawler(cls, crawler: Crawler) -> BloomDupeFilter:
        s = crawler.settings
        return cls(
            job_dir(s),
            s.getbool("DUPEFILTER_DEBUG"),
            fingerprinter=crawler.request_fingerprinter,
            expected_items=s.getint("BLOOMSLED_EXPECTED_ITEMS", DEFAULT_EXPECTED_ITEMS),
            fpr=s.getfloat("BLOOMSLED_FPR", DEFAULT_FPR),
            cache_bytes=s.getint("BLOOMSLED_CACHE_BYTES", DEFAULT_CACHE_BYTES),
            flush_ms=s.getint("BLOOMSLED_FLUSH_MS", DEFAULT_FLUSH_MS),
            commit_interval=s.getfloat("BLOOMSLED_COMMIT_INTERVAL", DEFAULT_COMMIT_INTERVAL),
            crawler=crawler,
        )

    # -- the filter ----------------------------------------------------------------------

    def _fp(self, request: Request) -> bytes:
        fp = self.fingerprinter.fingerprint(request)
        return fp if len(fp) == FP_WIDTH else hashlib.sha1(fp).digest()

    def request_seen(self, request: Request) -> bool:
        fp = self._fp(request)
        done = self.done
        assert done is not None, "request_seen after close"
        if not self.journal:
            # One call: the filter answers new fingerprints, the set confirms the rest.
            return not done.add(fp)
        # Done? The filter's "no" is certain; its "maybe" is confirmed on disk.
        if fp in done:
            return True
        # Pending, or new: one compare-and-swap journals it unless it is there already
        # (the journal's own filter answers most of these "absent" without a read).
        assert self.db is not None
        if _JOURNAL + fp in self.db:
            return True
        return not self.db.insert_if_absent(_JOURNAL + fp, self._journal_value(request))

    def _journal_value(self, request: Request) -> bytes:
        spider = self.crawler.spider if self.crawler is not None else None
        try:
            return _PENDING + pickle.dumps(request.to_dict(spider=spider), protocol=4)
        except Exception as e:  # a callback that is not a spider method, an unpicklable meta
            logger.warning(
                "bloomsled: %s cannot be journaled (%s); it will not be re-scheduled "
                "after a crash",
                request,
                e,
            )
            return _PENDING

    # -- the journal ---------------------------------------------------------------------

    def _pending_entries(self) -> list[bytes]:
        """Fingerprints of the requests a previous run accepted but did not finish."""
        assert self.db is not None
        return [k[len(_JOURNAL) :] for k, _ in self.db.items(prefix=_JOURNAL)]

    def _set_aside_scrapy_queue(self, jobdir: str) -> None:
        queue = Path(jobdir, "requests.queue")
        if queue.exists():
            aside = queue.with_name(f"requests.queue.set-aside-by-bloomsled-{int(time.time())}")
            queue.rename(aside)
            logger.info(
                "bloomsled: %d pending requests in the journal; Scrapy's queue %s set aside "
                "as %s, the journal re-schedules them",
                len(self._resume),
                queue,
                aside,
            )

    def _spider_opened(self, spider: Spider) -> None:
        from scrapy.utils.request import request_from_dict

        assert self.crawler is not None and self.crawler.engine is not None
        assert self.db is not None
        resumed = 0
        for fp in self._resume:
            value = self.db.get(_JOURNAL + fp)
            if value is None or len(value) <= len(_PENDING):
                continue
            try:
                request = request_from_dict(pickle.loads(value[len(_PENDING) :]), spider=spider)
            except Exception as e:
                logger.error("bloomsled: pending request %s cannot be restored: %s", fp.hex(), e)
                continue
            # Its fingerprint is in the store already: let it past the filter.
            self.crawler.engine.crawl(request.replace(dont_filter=True))
            resumed += 1
        if self._resume:
            logger.info("bloomsled: re-scheduled %d pending requests", resumed)
        self._resume = []
        from twisted.internet import task

        self._loop = task.LoopingCall(self._commit)
        self._loop.start(self.commit_interval, now=False)

    def _response_received(self, response: Any, request: Request, spider: Spider) -> None:
        self._received.append((self._tick, request, self._fp(request)))

    def _in_scraper(self) -> Optional[set[int]]:
        """Ids of the requests whose callbacks have not finished, or None if unknown."""
        try:
            slot = self.crawler.engine.scraper.slot  # type: ignore[union-attr]
            if slot is None:
                return set()
            busy = {id(r) for r in slot.active}
            busy.update(id(entry[1]) for entry in slot.queue)
            return busy
        except AttributeError:
            return None

    def _commit(self, final: bool = False) -> None:
        """Marks done the requests whose callbacks finished, after a flush (see above)."""
        tick = self._tick
        self._tick += 1
        if not self._received:
            return
        busy = set() if final else self._in_scraper()
        if busy is None:  # an unknown Scrapy: only the close can tell callbacks are over
            return
        # A response received during this tick may not have reached the scraper's queue
        # yet: it waits for the next commit.
        finished = [
            fp for t, r, fp in self._received if (final or t < tick) and id(r) not in busy
        ]
        if not finished:
            return
        self._received = [
            e for e in self._received if not ((final or e[0] < tick) and id(e[1]) not in busy)
        ]
        assert self.db is not None and self.done is not None
        self.db.flush()  # every request the finished callbacks yielded is journaled now
        self.done.add_many(finished)
        self.done.sync()  # done, durably
        for fp in finished:
            self.db.remove(_JOURNAL + fp)

    # -- lifecycle -----------------------------------------------------------------------

    def close(self, reason: str) -> None:
        if self._loop is not None and self._loop.running:
            self._loop.stop()
        if self.journal:
            # The scraper is closed before the scheduler: every callback has finished.
            self._commit(final=True)
        if self.done is not None:
            if self._tmpdir is None:
                self.done.close()  # saves the filter: the next open does not rebuild it
            # A temporary store is removed below: dropping the set releases it unsaved.
            self.done = None
        if self.db is not None:
            self.db.close()
        if self._tmpdir is not None:
            shutil.rmtree(self._tmpdir, ignore_errors=True)


class RedisBloomDupeFilter(_DupeLog, BaseDupeFilter):
    """A duplicate filter in Redis shared by every spider process of one crawl.

    Settings: ``BLOOMSLED_REDIS_URL`` (``redis://127.0.0.1:6379/0``; for a cluster, one URL
    or a list of node URLs), ``BLOOMSLED_REDIS_CLUSTER`` (False), ``BLOOMSLED_REDIS_KEY``
    (``"<spider name>:bloomsled-dupefilter"``), ``BLOOMSLED_REDIS_EXACT`` (True),
    ``BLOOMSLED_REDIS_RETRY_SECONDS`` (60), ``BLOOMSLED_EXPECTED_ITEMS``,
    ``BLOOMSLED_FPR``, ``DUPEFILTER_DEBUG``.

    **Exact by default**: a shared Bloom filter in front, and an exact record of every
    fingerprint beside it in Redis (small hashes that Redis keeps as listpacks, about 23
    bytes a fingerprint: ``SharedFilter.add_exact``), which decides "new" with one atomic
    ``HSETNX``: no request is ever dropped as a false positive, and of two spiders meeting
    the same request exactly one crawls it. ``BLOOMSLED_REDIS_EXACT = False`` keeps the
    Bloom filter alone (about 1.2 bytes a fingerprint at 1%, but a false positive
    (``BLOOMSLED_FPR``) drops a request it has never seen). Every spider of one crawl must
    use the same mode: Bloom-only adds are not in the exact record.

    A filter lost in Redis (flushed, evicted, restarted empty) is detected by the first
    request that meets it: the spider is closed with the reason
    ``bloomsled_shared_filter_lost`` and an error is logged, instead of re-crawling
    everything.

    **A Redis error never drops a request.** While Redis is unreachable, restarting (with
    its data) or failing over, each call retries with growing pauses (50 ms doubling up to
    1 s) for ``BLOOMSLED_REDIS_RETRY_SECONDS``; the call holds Scrapy's engine meanwhile (it
    runs in the reactor's thread), so no request goes past the filter unanswered. Past that
    time the spider is closed with the reason ``bloomsled_redis_unavailable`` and an ERROR
    naming Redis: the crawl does not end ``finished`` with requests dropped. An add that
    may have reached Redis just as the connection failed, and whose keys all look present
    afterwards, has an unknown answer: the request is let through (fetched, possibly a
    second time) rather than dropped; the stat ``bloomsled/redis_outcome_unknown`` counts
    these.
    """

    def __init__(
        self,
        url: Any,
        name: Optional[str] = None,
        debug: bool = False,
        *,
        cluster: bool = False,
        fingerprinter: Any = None,
        expected_items: int = DEFAULT_EXPECTED_ITEMS,
        fpr: float = DEFAULT_FPR,
        retry_seconds: float = DEFAULT_REDIS_RETRY_SECONDS,
        exact: bool = True,
        crawler: Optional[Crawler] = None,
    ) -> None:
        self._init_common(fingerprinter, debug, crawler)
        self.exact = exact
        self.url = url
        self.cluster = cluster
        self.name = name
        self.expected_items = expected_items
        self.fpr = fpr
        self.retry_seconds = retry_seconds
        self.filter: Optional[SharedFilter] = None
        self.lost = False
        #: Set once the spider is being closed (filter lost, Redis unavailable): every
        #: later request is refused without asking Redis.
        self.stopped = False

    @classmethod
    def from_crawler(cls, crawler: Crawler) -> RedisBloomDupeFilter:
        s = crawler.settings
        url = s.get("BLOOMSLED_REDIS_URL", "redis://127.0.0.1:6379/0")
        return cls(
            url,
            s.get("BLOOMSLED_REDIS_KEY"),
            s.getbool("DUPEFILTER_DEBUG"),
            cluster=s.getbool("BLOOMSLED_REDIS_CLUSTER", False),
            fingerprinter=crawler.request_fingerprinter,
            expected_items=s.getint("BLOOMSLED_EXPECTED_ITEMS", DEFAULT_EXPECTED_ITEMS),
            fpr=s.getfloat("BLOOMSLED_FPR", DEFAULT_FPR),
            retry_seconds=s.getfloat(
                "BLOOMSLED_REDIS_RETRY_SECONDS", DEFAULT_REDIS_RETRY_SECONDS
            ),
            exact=s.getbool("BLOOMSLED_REDIS_EXACT", True),
            crawler=crawler,
        )

    def open(self) -> None:
        if self.name is None:
            spider = self.crawler.spider if self.crawler is not None else None
            self.name = f"{getattr(spider, 'name', 'scrapy')}:bloomsled-dupefilter"
        try:
            self.filter = SharedFilter.create(
                self.name,
                self.url,
                expected_items=self.expected_items,
                fpr=self.fpr,
                cluster=self.cluster,
                retry_seconds=self.retry_seconds,
            )
        except RedisError as e:
            self._on_unavailable(e)

    def request_seen(self, request: Request) -> bool:
        if self.filter is None and not self.stopped:
            self.open()
        if self.stopped or self.filter is None:
            return True  # the spider is closing: nothing more is scheduled
        fp = self.fingerprinter.fingerprint(request)
        try:
            if self.exact:
                # The exact record buckets fingerprints by their leading bits: a digest.
                if len(fp) != FP_WIDTH:
                    fp = hashlib.sha1(fp).digest()
                return not self.filter.add_exact(fp)
            return not self.filter.add(fp)
        except SharedFilterLost as e:
            self._on_lost(e)
            return True
        except RedisOutcomeUnknownError as e:
            # The add may have run: the key may be ours or another's. Fetching it (maybe a
            # second time) is the answer that loses nothing.
            logger.warning(
                "bloomsled: Redis connection failed during the add of %s and its answer is "
                "unknown (%s); the request is let through rather than dropped",
                request,
                e,
            )
            if self.crawler is not None:
                self.crawler.stats.inc_value("bloomsled/redis_outcome_unknown")
            return False
        except RedisError as e:
            self._on_unavailable(e)
            return True

    def _on_lost(self, error: Exception) -> None:
        self.lost = True
        logger.error(
            "bloomsled: the shared dupefilter %r was lost in Redis (%s); closing the spider "
            "instead of crawling every request again",
            self.name,
            error,
        )
        if self.crawler is not None:
            self.crawler.stats.set_value("bloomsled/shared_filter_lost", 1)
        self._close_spider(SHARED_FILTER_LOST_REASON)

    def _on_unavailable(self, error: Exception) -> None:
        logger.error(
            "bloomsled: Redis at %r stayed unavailable for the shared dupefilter %r past "
            "BLOOMSLED_REDIS_RETRY_SECONDS (%s s): %s; closing the spider (%s) instead of "
            "dropping requests",
            self.url,
            self.name,
            self.retry_seconds,
            error,
            REDIS_UNAVAILABLE_REASON,
        )
        if self.crawler is not None:
            self.crawler.stats.set_value("bloomsled/redis_unavailable", 1)
        self._close_spider(REDIS_UNAVAILABLE_REASON)

    def _close_spider(self, reason: str) -> None:
        """Closes the spider once, with `reason`, from the reactor's next turn (the call
        that found the failure may run inside the engine's own scheduling)."""
        if self.stopped:
            return
        self.stopped = True
        crawler = self.crawler
        if crawler is None:
            return
        from twisted.internet import reactor

        def close() -> None:
            engine = crawler.engine
            if engine is None:
                return
            if hasattr(engine, "close_spider_async"):
                from scrapy.utils.defer import deferred_from_coro

                deferred_from_coro(engine.close_spider_async(reason=reason))
            else:
                engine.close_spider(crawler.spider, reason)

        reactor.callLater(0, close)  # type: ignore[attr-defined]

    def close(self, reason: str) -> None:
        self.filter = None

"""Scrapy dupefilters backed by bloomsled.

Swap one line of ``settings.py``, and for a resumable crawl (``JOBDIR``) add the
middleware that tells the filter when a callback has finished::

    DUPEFILTER_CLASS = "bloomsled.scrapy.BloomDupeFilter"
    SPIDER_MIDDLEWARES = {"bloomsled.scrapy.BloomDoneMiddleware": 0}

or, the same two settings in one line, ``ADDONS = {"bloomsled.scrapy.BloomsledAddon": 0}``.

``BloomDupeFilter`` is exact: a Bloom filter answers new fingerprints, a
``bloomsled.FingerprintSet`` on disk confirms the rest, so no request is ever dropped as a
false positive. Its memory is the filter (about 1.2 bytes per expected item at 1%) and a
small index, not a Python set of every fingerprint, with or without ``JOBDIR``: the
fingerprints and the pending requests live in files read by streaming or through the OS
page cache.

``RedisBloomDupeFilter`` shares one Bloom filter between many spider processes through
Redis or Redis Cluster; a lost filter closes the spider with an error instead of letting
every request through again. It is also scrapy-redis's ``DUPEFILTER_CLASS`` (under
``scrapy_redis.scheduler.Scheduler``), and ``bloomsled.scrapy_redis_migrate`` moves a
scrapy-redis crawl's fingerprint set into it.

Durability with ``JOBDIR`` (what survives a crash)
===================================================

The store is the folder ``JOBDIR/bloomsled-dupefilter``. It holds:

* ``seen/``: every accepted fingerprint (pending or done), a ``bloomsled.FingerprintSet``.
  ``request_seen`` answers from it alone;
* ``pending.log``: an append-only, CRC-checked log (``bloomsled._journal``): one record
  per accepted request (its fingerprint and the pickled request), one per request done.
  Compacted when done records make up half of it (and at open): the done fingerprints
  move to ``done.fps``, the pending requests are rewritten. During a crawl a thread of
  its own does that (time that grows with the frontier) while requests are appended;
  only the swap, which copies the records appended meanwhile, holds the reactor;
* ``state``: whether the store was closed cleanly, and the boot it was opened in.

A request is accepted by appending its record (one ``write(2)``: in the OS when
``request_seen`` returns) and then adding its fingerprint to ``seen``. It is *done* when
its callback has finished and every request the callback yielded has been through
``request_seen`` (``BloomDoneMiddleware`` sees both, through public Scrapy APIs); its done
record is then appended at once, with no fsync. Every ``BLOOMSLED_COMMIT_INTERVAL`` seconds
(1 s) the log is fsynced once, if it changed. On resume, every pending request is
re-scheduled by the filter itself; Scrapy's own ``JOBDIR/requests.queue`` is only
consistent after a clean close, and its requests are all in the log, so it is set aside
(renamed, never deleted).

What each kind of failure costs:

* **process crash** (``kill -9``, the OOM killer, a container stop): every record was
  handed to the OS, so nothing is lost and the requests fetched again are only those in
  flight: downloaded or downloading, their callbacks not finished (at most about
  ``CONCURRENT_REQUESTS``, plus responses waiting for the scraper). The next open scans
  and compacts the log (time proportional to the log, which is about the frontier) and
  adds its fingerprints to ``seen`` in case the set lost its unsynced tail.
* **power loss, kernel crash** (detected by a boot id that differs and no clean close):
  only the log up to its last fsync is kept, a valid prefix (a torn tail is cut at the
  first record that fails its CRC). A request whose done record was lost is fetched
  again: about one ``BLOOMSLED_COMMIT_INTERVAL`` of crawl. Nothing is lost: a done record
  follows, in the same file, the records of every request its callback yielded. ``seen``
  cannot be trusted (it may hold fingerprints whose records were lost), so it is rebuilt
  from ``done.fps`` and the log: a scan of the whole store.
* **clean close**: nothing is fetched twice.
* **a full disk** (or a quota, an I/O error): once free space under ``JOBDIR`` falls below
  ``BLOOMSLED_MIN_FREE_BYTES`` (64 MiB, checked every commit interval), or a write of the
  store fails, the spider is closed with the reason ``bloomsled_journal_failed`` and an
  ERROR naming the store. A failed append is cut off again (the log stays whole); the
  request met then is not scheduled and the callback that yielded it is not recorded
  done, so a resumed crawl (once there is space) fetches that page again and meets the
  request anew. The store is left "not clean": the next open scans it as after a process
  crash. Nothing is lost. (With the check off, Scrapy's own disk queue may be the first
  to fail: Scrapy then logs errors, and its engine may stop making progress without
  closing; every request is still in the log for a resumed crawl.)

Requests with ``dont_filter`` are not checked against ``seen``; those a callback yields
are journaled (under a random key kept in ``Request.meta["bloomsled_journal_key"]``), so
that they survive a stop as in Scrapy's own queue (start requests are made again by every
run, retries and redirects are covered by their source's record); a redirect
source and a request whose download failed stay pending and are fetched again on resume.

Without ``BloomDoneMiddleware`` the filter cannot tell when a callback has finished: it
warns, and marks requests done only at a clean close (a crash then re-fetches every page
of the run). Without ``JOBDIR`` the seen set lives in a temporary folder removed at
close, and there is no log (nothing can resume).
"""

from __future__ import annotations

import errno
import hashlib
import json
import math
import os
import pickle
import shutil
import tempfile
import threading
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any, Optional

from scrapy import Request, signals
from scrapy.dupefilters import BaseDupeFilter
from scrapy.utils.job import job_dir

from . import Error as BloomsledError
from . import FingerprintSet, _journal
from ._done import BloomDoneMiddleware, BloomsledAddon, _DoneTracker, _tracker
from ._journal import ADD, Compaction, PendingLog, fsync_dir
from ._redis_dupefilter import RedisBloomDupeFilter
from ._scrapy_base import (
    DEFAULT_CACHE_BYTES,
    DEFAULT_COMMIT_INTERVAL,
    DEFAULT_COMPACT_MIN_BYTES,
    DEFAULT_EXPECTED_ITEMS,
    DEFAULT_FLUSH_MS,
    DEFAULT_FPR,
    DEFAULT_MIN_FREE_BYTES,
    DEFAULT_REDIS_RETRY_SECONDS as DEFAULT_REDIS_RETRY_SECONDS,  # re-exported: the Redis filter's default and close reasons
    FP_WIDTH,
    JOURNAL_FAILED_REASON,
    MIDDLEWARE_PATH,
    REDIS_UNAVAILABLE_REASON as REDIS_UNAVAILABLE_REASON,  # re-exported: the Redis filter's default and close reasons
    SEEN_DIR,
    SHARED_FILTER_LOST_REASON as SHARED_FILTER_LOST_REASON,  # re-exported: the Redis filter's default and close reasons
    SHARED_FILTER_REFUSED_REASON as SHARED_FILTER_REFUSED_REASON,  # re-exported: the Redis filter's default and close reasons
    STATE_FILE,
    STORE_DIR,
    _close_spider_later,
    _DupeLog,
    logger,
)

if TYPE_CHECKING:
    from scrapy.crawler import Crawler
    from scrapy.spiders import Spider

__all__ = ["BloomDoneMiddleware", "BloomDupeFilter", "BloomsledAddon", "RedisBloomDupeFilter"]




def _run_compaction(job: Compaction) -> None:
    """A compaction thread's body: a failure is kept in ``job.error`` for the tick that
    installs it (which closes the spider), not printed by the thread."""
    try:
        job.run()
    except BaseException:  # noqa: BLE001 - reported by the tick, from the reactor thread
        pass


def read_store(path: str) -> tuple[set[bytes], set[bytes]]:
    """(done fingerprints, pending fingerprints) of a closed or crashed BloomDupeFilter
    store, read from its log and ``done.fps``: for inspection and tests (this one builds
    Python sets)."""
    done: set[bytes] = set()
    pending: set[bytes] = set()
    if not Path(path, "pending.log").exists():
        return done, pending
    log = PendingLog(Path(path), FP_WIDTH)
    for chunk in log.done_fingerprints():
        done.update(chunk)
    added: set[bytes] = set()
    for kind, fp, _ in log.records():
        (added if kind == ADD else done).add(fp)
    return done, added - done


def _boot_id() -> Optional[str]:
    try:
        return Path("/proc/sys/kernel/random/boot_id").read_text().strip()
    except OSError:
        return None


def _read_state(store: Path) -> Optional[dict[str, Any]]:
    try:
        state = json.loads((store / STATE_FILE).read_text())
        return state if isinstance(state, dict) else None
    except (OSError, ValueError):
        return None


def _write_state(store: Path, clean: bool) -> None:
    tmp = store / (STATE_FILE + ".tmp")
    with open(tmp, "w") as f:
        json.dump({"format": 1, "clean": clean, "boot_id": _boot_id()}, f)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, store / STATE_FILE)
    fsync_dir(store)


_REQUEST_DEFAULTS: Optional[dict[str, Any]] = None

#: ``Request.meta`` key of a journaled ``dont_filter`` request: the random key of its log
#: records (its fingerprint is no key: the request may repeat a request seen before).
#: Copied with the meta to its retries and redirects, whose callbacks then mark it done.
JOURNAL_KEY_META = "bloomsled_journal_key"


def _request_payload(request: Request, spider: Any) -> bytes:
    """The pickled request, without the fields a plain ``Request(url)`` has anyway."""
    global _REQUEST_DEFAULTS
    if _REQUEST_DEFAULTS is None:
        _REQUEST_DEFAULTS = Request("http://localhost/").to_dict()
    d = request.to_dict(spider=spider)
    small = {k: v for k, v in d.items() if k == "url" or _REQUEST_DEFAULTS.get(k, d) != v}
    return pickle.dumps(small, protocol=4)


class BloomDupeFilter(_DupeLog, BaseDupeFilter):
    """Exact duplicate filter: bloomsled's Bloom filter in front of a FingerprintSet.

    Settings: ``BLOOMSLED_EXPECTED_ITEMS`` (10,000,000: the filter's sizing),
    ``BLOOMSLED_FPR`` (0.01), ``BLOOMSLED_COMMIT_INTERVAL`` (1.0 s: the log's fsync
    period, with ``JOBDIR``), ``BLOOMSLED_COMPACT_MIN_BYTES`` (64 MiB),
    ``BLOOMSLED_MIN_FREE_BYTES`` (64 MiB: below this much free space under ``JOBDIR`` the
    spider is closed; 0 turns the check off), ``DUPEFILTER_DEBUG``, ``JOBDIR``.
    ``BLOOMSLED_CACHE_BYTES`` and ``BLOOMSLED_FLUSH_MS`` are accepted and ignored (they
    sized the sled journal of earlier versions).
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
        compact_min_bytes: int = DEFAULT_COMPACT_MIN_BYTES,
        min_free_bytes: int = DEFAULT_MIN_FREE_BYTES,
        crawler: Optional[Crawler] = None,
    ) -> None:
        del cache_bytes, flush_ms  # no sled database any more
        if not (math.isfinite(commit_interval) and commit_interval > 0):
            # Twisted's LoopingCall would fail later, in the spider_opened handler (logged,
            # and the crawl goes on with no fsync, compaction or free-space check), or at 0
            # run them at every turn of the reactor.
            raise ValueError(
                "BLOOMSLED_COMMIT_INTERVAL must be a finite number of seconds above 0, "
                f"got {commit_interval!r}"
            )
        self._init_common(fingerprinter, debug, crawler)
        self.commit_interval = commit_interval
        self.compact_min_bytes = compact_min_bytes
        self.min_free_bytes = min_free_bytes
        self._tmpdir: Optional[str] = None
        if path:
            store = Path(path, STORE_DIR)
        else:
            self._tmpdir = tempfile.mkdtemp(prefix="bloomsled-dupefilter-")
            store = Path(self._tmpdir, "db")
        self.path = str(store)
        self._store = store
        store.mkdir(parents=True, exist_ok=True)
        if not (store / SEEN_DIR).exists() and any(
            (store / old).exists() for old in ("conf", "done", "journal")
        ):
            logger.warning(
                "bloomsled: %s was written by an older BloomDupeFilter (a sled journal); "
                "it is left untouched and not read: this crawl starts afresh",
                store,
            )
        # The log needs a JOBDIR (something to resume) and a crawler (to re-schedule).
        self.journal = bool(path) and crawler is not None
        self._lock = threading.Lock()
        self.pending_log: Optional[PendingLog] = None
        self._resume_end = 0
        self._resume_count = 0
        self._loop: Any = None
        self._received: Optional[list[bytes]] = None  # fallback without the middleware
        #: A compaction running in its own thread (see ``_tick``), and that thread.
        self._compaction: Optional[Compaction] = None
        self._compaction_thread: Optional[threading.Thread] = None
        self._tracker: Optional[_DoneTracker] = None
        #: The error that made the store unwritable (the spider is then being closed).
        self._failed: Optional[Exception] = None
        #: How the store was found at open: fresh, clean, process-crash or power-loss.
        self.recovery = "fresh"
        if self.journal:
            self.recovery = self._judge_state()
            if self.recovery == "power-loss" and (store / SEEN_DIR).exists():
                # Its unsynced members may have outlived the log records behind them.
                aside = store / f"{SEEN_DIR}.distrusted-{int(time.time())}"
                (store / SEEN_DIR).rename(aside)
                shutil.rmtree(aside)
        self.seen: Optional[FingerprintSet] = FingerprintSet(
            str(store / SEEN_DIR),
            expected_items=max(1, expected_items),
            fpr=fpr,
            width=FP_WIDTH,
        )
        if not self.journal:
            return
        assert crawler is not None
        self.pending_log = PendingLog(store, FP_WIDTH)
        if self.recovery == "power-loss":
            for chunk in self.pending_log.done_fingerprints():
                self.seen.add_many(chunk)
        if self.pending_log.size() > len(b"BSPLOG\x00\x01"):
            # Crash-safe on its own; after a crash it also gives `seen` the log's members.
            self._resume_count = self.pending_log.compact(
                self.seen, add_to_seen=self.recovery != "clean"
            )
        # Only now (a crash during a rebuild above must lead to the same rebuild again),
        # and before any new record: the store is open, not clean, in this boot.
        _write_state(store, clean=False)
        self._resume_end = self.pending_log.size()
        if self._resume_count:
            self._set_aside_scrapy_queue(path)  # type: ignore[arg-type]
        self._tracker = _tracker(crawler)
        self._tracker.on_done = self._request_done
        self._tracker.on_unfiltered = self._journal_unfiltered
        crawler.signals.connect(self._spider_opened, signal=signals.spider_opened)

    def _judge_state(self) -> str:
        if not (self._store / "pending.log").exists():
            return "fresh"
        state = _read_state(self._store)
        if state is not None and state.get("clean") is True:
            return "clean"
        boot = _boot_id()
        if state is not None and boot is not None and state.get("boot_id") == boot:
            return "process-crash"
        return "power-loss"

    @classmethod
    def from_crawler(cls, crawler: Crawler) -> BloomDupeFilter:
        s = crawler.settings
        return cls(
            job_dir(s),
            s.getbool("DUPEFILTER_DEBUG"),
            fingerprinter=crawler.request_fingerprinter,
            expected_items=s.getint("BLOOMSLED_EXPECTED_ITEMS", DEFAULT_EXPECTED_ITEMS),
            fpr=s.getfloat("BLOOMSLED_FPR", DEFAULT_FPR),
            commit_interval=s.getfloat("BLOOMSLED_COMMIT_INTERVAL", DEFAULT_COMMIT_INTERVAL),
            compact_min_bytes=s.getint("BLOOMSLED_COMPACT_MIN_BYTES", DEFAULT_COMPACT_MIN_BYTES),
            min_free_bytes=s.getint("BLOOMSLED_MIN_FREE_BYTES", DEFAULT_MIN_FREE_BYTES),
            crawler=crawler,
        )

    # -- the filter ----------------------------------------------------------------------

    def _fp(self, request: Request) -> bytes:
        fp = self.fingerprinter.fingerprint(request)
        return fp if len(fp) == FP_WIDTH else hashlib.sha1(fp).digest()

    def request_seen(self, request: Request) -> bool:
        fp = self._fp(request)
        seen = self.seen
        assert seen is not None, "request_seen after close"
        if self.pending_log is None:
            # One call: the filter answers new fingerprints, the set confirms the rest.
            return not seen.add(fp)
        if self._failed is not None:
            return True  # closing: see below
        with self._lock:
            try:
                # Seen (pending or done)? The filter's "no" is certain, its "maybe" is read.
                if fp in seen:
                    result = True
                else:
                    # A key copied with the meta of a journaled dont_filter request names
                    # that request, not this one (identified by its fingerprint).
                    if JOURNAL_KEY_META in request.meta:
                        del request.meta[JOURNAL_KEY_META]
                    # Journaled first (in the OS when this returns), then seen: a crash
                    # between the two leaves a record whose fingerprint the next open adds.
                    self.pending_log.append_add(fp, self._journal_value(request))
                    seen.add(fp)
                    result = False
            except (OSError, BloomsledError) as e:
                # Not scheduled now, and not settled: the callback that yielded it is
                # never recorded done, so a resumed crawl fetches that page again and
                # meets this request anew (or re-schedules it from the log, if its record
                # was written before `seen` failed). Nothing is lost; the spider closes.
                self._journal_failed(e, request)
                return True
        if self._tracker is not None:
            self._tracker.settled(request)
        return result

    def _journal_unfiltered(self, request: Request) -> bool:
        """Journals a ``dont_filter`` request a callback yielded, under a random key kept
        in its meta (``request_seen`` never sees it, and its fingerprint may be one seen
        before): it is then pending, re-scheduled on resume, until a callback for it (or
        for its retry or redirect) is done. False if it could not be written."""
        log, seen = self.pending_log, self.seen
        if log is None or seen is None or self._failed is not None:
            return False
        with self._lock:
            try:
                key = os.urandom(FP_WIDTH)
                request.meta[JOURNAL_KEY_META] = key
                log.append_add(key, self._journal_value(request))
                seen.add(key)
            except (OSError, BloomsledError) as e:
                self._journal_failed(e, request)
                return False
        return True

    def _journal_value(self, request: Request) -> bytes:
        spider = self.crawler.spider if self.crawler is not None else None
        try:
            payload = _request_payload(request, spider)
            if len(payload) > _journal.MAX_PAYLOAD:  # the log's reader would cut it off
                raise ValueError(f"{len(payload)} bytes pickled, over {_journal.MAX_PAYLOAD}")
            return payload
        except Exception as e:  # a callback that is not a spider method, an unpicklable meta
            logger.warning(
                "bloomsled: %s cannot be journaled (%s); it will not be re-scheduled "
                "after a crash",
                request,
                e,
            )
            return b""

    # -- the log -------------------------------------------------------------------------

    def _set_aside_scrapy_queue(self, jobdir: str) -> None:
        queue = Path(jobdir, "requests.queue")
        if queue.exists():
            aside = queue.with_name(f"requests.queue.set-aside-by-bloomsled-{int(time.time())}")
            queue.rename(aside)
            logger.info(
                "bloomsled: %d pending requests in the journal; Scrapy's queue %s set aside "
                "as %s, the journal re-schedules them",
                self._resume_count,
                queue,
                aside,
            )

    def _spider_opened(self, spider: Spider) -> None:
        from scrapy.utils.request import request_from_dict

        assert self.crawler is not None and self.crawler.engine is not None
        assert self.pending_log is not None and self._tracker is not None
        if not self._tracker.middleware:
            logger.warning(
                "bloomsled: %s is not in SPIDER_MIDDLEWARES: BloomDupeFilter cannot tell "
                "when a callback has finished, so it records requests as done only at a "
                "clean close, and a crash re-fetches every page of this run. Add "
                "SPIDER_MIDDLEWARES = {%r: 0} (or ADDONS = {%r: 0})",
                MIDDLEWARE_PATH,
                MIDDLEWARE_PATH,
                "bloomsled.scrapy.BloomsledAddon",
            )
            self._received = []
            self.crawler.signals.connect(self._response_received, signal=signals.response_received)
        resumed = 0
        if self._resume_count:
            for kind, fp, payload in self.pending_log.records(end=self._resume_end):
                if kind != ADD:
                    continue
                if not payload:
                    logger.error("bloomsled: pending request %s was not journaled", fp.hex())
                    continue
                try:
                    request = request_from_dict(pickle.loads(payload), spider=spider)
                except Exception as e:
                    logger.error("bloomsled: pending request %s cannot be restored: %s", fp.hex(), e)
                    continue
                # Its fingerprint is in the store already: let it past the filter.
                self.crawler.engine.crawl(request.replace(dont_filter=True))
                resumed += 1
            logger.info("bloomsled: re-scheduled %d pending requests", resumed)
        from twisted.internet import task

        self._loop = task.LoopingCall(self._tick)
        self._loop.start(self.commit_interval, now=False)

    def _response_received(self, response: Any, request: Request, spider: Spider) -> None:
        assert self._received is not None
        self._received.append(self._fp(request))

    def _request_done(self, request: Request) -> None:
        """The callback for ``request`` finished and its children are journaled."""
        log = self.pending_log
        if log is None or self.seen is None or self._failed is not None:
            return  # after a failure, what is not recorded done is fetched again
        fp = self._fp(request)
        if request.dont_filter:
            key = request.meta.get(JOURNAL_KEY_META)
            if isinstance(key, bytes) and len(key) == FP_WIDTH:
                fp = key  # journaled under its own key (see _journal_unfiltered)
        with self._lock:
            try:
                if fp in self.seen:  # not a dont_filter request that was never journaled
                    log.append_done(fp)
            except (OSError, BloomsledError) as e:  # it stays pending: fetched again
                self._journal_failed(e, request)

    def _tick(self) -> None:
        """Once per ``BLOOMSLED_COMMIT_INTERVAL``: the log's fsync; a compaction started
        when due (run by a thread: its reading and rewriting of the log, which grows with
        the frontier, never holds up the reactor), or installed once that thread is done."""
        log = self.pending_log
        if log is None or self.seen is None or self._failed is not None:
            return
        with self._lock:
            try:
                log.fsync()
                if self.min_free_bytes > 0:
                    st = os.statvfs(self._store)
                    free = st.f_bavail * st.f_frsize
                    if free < self.min_free_bytes:
                        raise OSError(
                            errno.ENOSPC,
                            f"only {free} bytes free on the JOBDIR's file system, below "
                            f"BLOOMSLED_MIN_FREE_BYTES ({self.min_free_bytes})",
                        )
                self._step_compaction(log)
            except (OSError, BloomsledError) as e:  # the log before it is whole
                self._journal_failed(e, None)

    def _step_compaction(self, log: PendingLog) -> None:
        """Installs a finished compaction, or starts one when due (the caller holds the
        lock of the log's appends)."""
        job, thread = self._compaction, self._compaction_thread
        if job is not None and thread is not None:
            if thread.is_alive():
                return
            self._compaction = self._compaction_thread = None
            try:
                if job.error is not None:
                    raise job.error
                job.install()
            except BaseException:
                job.abort()  # the old log is whole and stays
                raise
            return
        assert self.seen is not None
        size = log.size()
        if size >= self.compact_min_bytes and log.dead_bytes() * 2 >= size:
            job = log.begin_compaction(self.seen)
            thread = threading.Thread(
                target=_run_compaction, args=(job,), name="bloomsled-compaction", daemon=True
            )
            self._compaction, self._compaction_thread = job, thread
            thread.start()

    def _stop_compaction(self) -> None:
        """At close: waits for a running compaction and drops it (the old log is whole;
        the next open compacts)."""
        job, thread = self._compaction, self._compaction_thread
        self._compaction = self._compaction_thread = None
        if job is None or thread is None:
            return
        thread.join()
        job.abort()

    def _journal_failed(self, error: Exception, request: Optional[Request]) -> None:
        """The store cannot be written: an ERROR naming it, and the spider closed with
        ``bloomsled_journal_failed``. Every request accepted before is in the log, and a
        request met since is not scheduled, so the crawl resumes (once there is space)
        without losing one."""
        if self._failed is not None:
            return
        self._failed = error
        logger.error(
            "bloomsled: the dupefilter's store %s cannot be written (%s)%s; closing the "
            "spider (%s): the crawl resumes from this JOBDIR, without losing a request, "
            "once the store can be written again",
            self._store,
            error,
            f" while recording {request}" if request is not None else "",
            JOURNAL_FAILED_REASON,
        )
        crawler = self.crawler
        if crawler is None:
            return
        crawler.stats.set_value("bloomsled/journal_failed", 1)
        _close_spider_later(crawler, JOURNAL_FAILED_REASON)

    # -- lifecycle -----------------------------------------------------------------------

    def close(self, reason: str) -> None:
        if self._loop is not None and self._loop.running:
            self._loop.stop()
        if self._tracker is not None and self._tracker.on_done == self._request_done:
            self._tracker.on_done = None
            self._tracker.on_unfiltered = None
        clean = self._failed is None
        try:
            self._stop_compaction()
            if self.pending_log is not None and self.seen is not None:
                if self._received and clean:
                    # The scraper is closed before the scheduler: every callback has
                    # finished.
                    for fp in self._received:
                        self.pending_log.append_done(fp)
                self._received = []
                self.pending_log.close()  # fsync
            if self.seen is not None:
                if self._tmpdir is None:
                    self.seen.close()  # saves the filter: the next open does not rebuild it
                # A temporary store is removed below: dropping the set releases it unsaved.
                self.seen = None
        except (OSError, BloomsledError) as e:
            clean = False
            self._journal_failed(e, None)
        if self.pending_log is not None:
            # After a failure the store is left "not clean": the next open scans the log
            # and gives `seen` every fingerprint in it, as after a process crash.
            if clean:
                _write_state(self._store, clean=True)
            self.pending_log = None
        if self._tmpdir is not None:
            shutil.rmtree(self._tmpdir, ignore_errors=True)

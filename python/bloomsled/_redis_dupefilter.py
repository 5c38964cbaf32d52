"""``RedisBloomDupeFilter``: a duplicate filter in Redis shared by every spider process of
one crawl. Import it from ``bloomsled.scrapy``."""

from __future__ import annotations

import hashlib
from typing import TYPE_CHECKING, Any, Optional

from scrapy import Request
from scrapy.dupefilters import BaseDupeFilter

from . import RedisError, RedisOutcomeUnknownError, SharedFilter, SharedFilterLost
from ._scrapy_base import (
    DEFAULT_EXPECTED_ITEMS,
    DEFAULT_FPR,
    DEFAULT_REDIS_RETRY_SECONDS,
    FP_WIDTH,
    REDIS_UNAVAILABLE_REASON,
    SHARED_FILTER_LOST_REASON,
    _close_spider_later,
    _DupeLog,
    logger,
)

if TYPE_CHECKING:
    from scrapy.crawler import Crawler


class RedisBloomDupeFilter(_DupeLog, BaseDupeFilter):
    """A duplicate filter in Redis shared by every spider process of one crawl.

    Settings: ``BLOOMSLED_REDIS_URL`` (``redis://127.0.0.1:6379/0``; for a cluster, one URL
    or several node URLs, as a list or separated by commas: give more than one, so that a
    spider can still reach the cluster when the node it was told of is down),
    ``BLOOMSLED_REDIS_CLUSTER`` (False), ``BLOOMSLED_REDIS_KEY``
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
        cluster = s.getbool("BLOOMSLED_REDIS_CLUSTER", False)
        url: Any = s.get("BLOOMSLED_REDIS_URL", "redis://127.0.0.1:6379/0")
        if cluster:
            # A list of node URLs, or one string of them separated by commas (as
            # `-s BLOOMSLED_REDIS_URL=redis://a:7000,redis://b:7000` gives).
            url = s.getlist("BLOOMSLED_REDIS_URL", ["redis://127.0.0.1:6379/0"])
        return cls(
            url,
            s.get("BLOOMSLED_REDIS_KEY"),
            s.getbool("DUPEFILTER_DEBUG"),
            cluster=cluster,
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
        if self.crawler is not None:
            _close_spider_later(self.crawler, reason)

    def close(self, reason: str) -> None:
        self.filter = None

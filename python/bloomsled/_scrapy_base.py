"""What both Scrapy dupefilters of ``bloomsled.scrapy`` share: the settings' defaults, the
close reasons, the duplicate log as Scrapy's ``RFPDupeFilter`` writes it, and closing the
spider from the reactor's next turn. Import them from ``bloomsled.scrapy``."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any, Optional

from scrapy import Request
from scrapy.utils.request import RequestFingerprinter, referer_str

if TYPE_CHECKING:
    from scrapy.crawler import Crawler
    from scrapy.spiders import Spider

#: The dupefilters log under ``bloomsled.scrapy``, wherever their code lives.
logger = logging.getLogger("bloomsled.scrapy")

#: Folder of the store under ``JOBDIR``.
STORE_DIR = "bloomsled-dupefilter"
DEFAULT_EXPECTED_ITEMS = 10_000_000
DEFAULT_FPR = 0.01
#: Kept for compatibility: the store no longer opens a sled database.
DEFAULT_CACHE_BYTES = 32 * 1024 * 1024
DEFAULT_FLUSH_MS = 500
DEFAULT_COMMIT_INTERVAL = 1.0
#: The log is compacted once it is this large and half of it is done requests.
DEFAULT_COMPACT_MIN_BYTES = 64 * 1024 * 1024
#: Below this much free space on the ``JOBDIR``'s file system the spider is closed (checked
#: once per commit interval), before a write fails in Scrapy's own queue or in the log.
DEFAULT_MIN_FREE_BYTES = 64 * 1024 * 1024
#: Reason a spider is closed with when its shared filter was lost.
SHARED_FILTER_LOST_REASON = "bloomsled_shared_filter_lost"
#: Reason a spider is closed with when its shared filter refused to serve it (a filter of
#: another shape under its key, a setting out of range, a damaged record).
SHARED_FILTER_REFUSED_REASON = "bloomsled_shared_filter_refused"
#: Reason a spider is closed with when Redis stayed unavailable past
#: ``BLOOMSLED_REDIS_RETRY_SECONDS``.
REDIS_UNAVAILABLE_REASON = "bloomsled_redis_unavailable"
#: Reason a spider is closed with when the store under ``JOBDIR`` cannot be written (a full
#: disk, a quota, an I/O error).
JOURNAL_FAILED_REASON = "bloomsled_journal_failed"
#: How long a call to Redis keeps retrying (holding the engine) before the spider is closed.
DEFAULT_REDIS_RETRY_SECONDS = 60.0

#: Sub-folder of the store holding every accepted fingerprint.
SEEN_DIR = "seen"
#: The store's state file (clean close, boot id).
STATE_FILE = "state"
#: Fingerprints are kept at this width (Scrapy's are SHA-1 digests; others are hashed).
FP_WIDTH = 20
#: Import path of the middleware, as ``SPIDER_MIDDLEWARES`` names it.
MIDDLEWARE_PATH = "bloomsled.scrapy.BloomDoneMiddleware"


def _close_spider_later(crawler: Crawler, reason: str) -> None:
    """Closes the crawler's spider with `reason`, from the reactor's next turn (the call
    that found the failure may run inside the engine's own scheduling)."""
    from twisted.internet import reactor

    def close() -> None:
        engine = crawler.engine
        if engine is None:
            return
        if hasattr(engine, "close_spider_async"):
            from scrapy.utils.defer import deferred_from_coro

            deferred_from_coro(engine.close_spider_async(reason=reason))
        else:
            engine.close_spider(crawler.spider, reason)  # type: ignore[arg-type]

    reactor.callLater(0, close)  # type: ignore[arg-type]


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

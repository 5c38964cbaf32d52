"""``RedisBloomDupeFilter``: a duplicate filter in Redis shared by every spider process of
one crawl. Import it from ``bloomsled.scrapy``."""

from __future__ import annotations

import hashlib
from typing import TYPE_CHECKING, Any, Optional
from urllib.parse import parse_qsl, quote, unquote, urlencode, urlsplit, urlunsplit

from scrapy import Request
from scrapy.dupefilters import BaseDupeFilter
from scrapy.settings import BaseSettings
from scrapy.utils.misc import load_object

from . import Error as BloomsledError
from . import RedisError, RedisOutcomeUnknownError, SharedFilter, SharedFilterLost
from ._scrapy_base import (
    DEFAULT_EXPECTED_ITEMS,
    DEFAULT_FPR,
    DEFAULT_REDIS_RETRY_SECONDS,
    FP_WIDTH,
    REDIS_UNAVAILABLE_REASON,
    SHARED_FILTER_LOST_REASON,
    SHARED_FILTER_REFUSED_REASON,
    _close_spider_later,
    _DupeLog,
    logger,
)

if TYPE_CHECKING:
    from scrapy.crawler import Crawler
    from scrapy.spiders import Spider


def _shared_kwargs(s: BaseSettings) -> dict[str, Any]:
    """The filter's keyword arguments from the ``BLOOMSLED_*`` settings (for a cluster,
    ``BLOOMSLED_REDIS_URL`` read as a list of node URLs replaces the positional URL)."""
    cluster = s.getbool("BLOOMSLED_REDIS_CLUSTER", False)
    kw: dict[str, Any] = dict(
        cluster=cluster,
        expected_items=s.getint("BLOOMSLED_EXPECTED_ITEMS", DEFAULT_EXPECTED_ITEMS),
        fpr=s.getfloat("BLOOMSLED_FPR", DEFAULT_FPR),
        retry_seconds=s.getfloat("BLOOMSLED_REDIS_RETRY_SECONDS", DEFAULT_REDIS_RETRY_SECONDS),
        exact=s.getbool("BLOOMSLED_REDIS_EXACT", True),
    )
    if cluster:
        # A list of node URLs, or one string of them separated by commas (as
        # `-s BLOOMSLED_REDIS_URL=redis://a:7000,redis://b:7000` gives).
        kw["cluster_urls"] = s.getlist("BLOOMSLED_REDIS_URL", ["redis://127.0.0.1:6379/0"])
    return kw


def scrapy_redis_url(settings: BaseSettings) -> str:
    """The Redis URL scrapy-redis's ``get_redis_from_settings`` connects to: its
    ``REDIS_PARAMS`` (``url``, ``host``, ``port``, ``db``, ``username``, ``password``,
    ``ssl``), overridden by ``REDIS_URL``, ``REDIS_HOST``, ``REDIS_PORT``, ``REDIS_DB``;
    a URL wins over host and port, as in redis-py's ``from_url``, which also takes the
    database and the credentials a URL leaves out from the other parameters (see
    ``_complete_url``). Other parameters (its timeouts, ``redis_cls``) are scrapy-redis's
    client's own and have no meaning here."""
    params: dict[str, Any] = dict(settings.getdict("REDIS_PARAMS"))
    for source, dest in (
        ("REDIS_URL", "url"),
        ("REDIS_HOST", "host"),
        ("REDIS_PORT", "port"),
        ("REDIS_DB", "db"),
    ):
        value = settings.get(source)
        if value:
            params[dest] = value
    if params.get("url"):
        return _complete_url(str(params["url"]), params)
    auth = ""
    if params.get("password"):
        user = quote(str(params.get("username") or ""), safe="")
        auth = f"{user}:{quote(str(params['password']), safe='')}@"
    scheme = "rediss" if params.get("ssl") else "redis"
    host = params.get("host") or "localhost"
    return f"{scheme}://{auth}{host}:{int(params.get('port') or 6379)}/{int(params.get('db') or 0)}"


def _complete_url(url: str, params: dict[str, Any]) -> str:
    """``url`` as redis-py's ``from_url(url, **params)`` reads it, for bloomsled's client:
    the database is the URL's ``?db=``, else its path, else ``params["db"]``; the user
    name and password are the URL's, else those of ``params``. The result names the
    database in its path (bloomsled's client reads no ``?db=`` from a TCP URL)."""
    u = urlsplit(url)
    query = parse_qsl(u.query, keep_blank_values=True)
    query_db = [v for k, v in query if k == "db"]
    if u.scheme == "unix":  # the path is the socket's: both clients read ``?db=``
        if not query_db and params.get("db"):
            return f"{url}{'&' if u.query else '?'}db={int(params['db'])}"
        return url
    if u.scheme not in ("redis", "rediss"):
        return url  # refused by the client, with its own message
    db: Any = params.get("db") or 0
    path = unquote(u.path).replace("/", "")
    if query_db:
        db = query_db[-1]
    elif path.isdigit():  # redis-py ignores a path that is not a number
        db = path
    user = unquote(u.username) if u.username else params.get("username")
    password = unquote(u.password) if u.password else params.get("password")
    auth = ""
    if user or password:
        auth = quote(str(user or ""), safe="")
        auth += f":{quote(str(password), safe='')}" if password else ""
        auth += "@"
    host = u.netloc.rpartition("@")[2]
    rest = urlencode([(k, v) for k, v in query if k != "db"])
    return urlunsplit((u.scheme, auth + host, f"/{int(db)}", rest, u.fragment))


#: For each reason ``RedisBloomDupeFilter`` closes the spider with: its stat, and the
#: ERROR it logs (formatted with the filter's ``name``, ``url``, ``retry_seconds``, the
#: ``error`` and the ``reason``).
_STOPS: dict[str, tuple[str, str]] = {
    SHARED_FILTER_REFUSED_REASON: (
        "bloomsled/shared_filter_refused",
        "bloomsled: the shared dupefilter %(name)r at %(url)r refuses to serve (%(error)s); "
        "closing the spider (%(reason)s) instead of failing every request",
    ),
    SHARED_FILTER_LOST_REASON: (
        "bloomsled/shared_filter_lost",
        "bloomsled: the shared dupefilter %(name)r was lost in Redis (%(error)s); closing "
        "the spider instead of crawling every request again",
    ),
    REDIS_UNAVAILABLE_REASON: (
        "bloomsled/redis_unavailable",
        "bloomsled: Redis at %(url)r stayed unavailable for the shared dupefilter %(name)r "
        "past BLOOMSLED_REDIS_RETRY_SECONDS (%(retry_seconds)s s): %(error)s; closing the "
        "spider (%(reason)s) instead of dropping requests",
    ),
}


class _ScrapyRedisFingerprinter:
    """scrapy-redis's request fingerprint (``RFPDupeFilter.request_fingerprint``: SHA-1 of
    the method, canonical URL and body, without Scrapy's headers field), as the 20-byte
    digest whose hex form is a member of its Redis set: a migrated set and a filter fed
    by spiders agree on every request."""

    def __init__(self) -> None:
        cls = load_object("scrapy_redis.dupefilter.RFPDupeFilter")
        self._hex = cls.request_fingerprint

    def fingerprint(self, request: Request) -> bytes:
        return bytes.fromhex(self._hex(None, request))


def _persisting_scrapy_redis(settings: BaseSettings) -> bool:
    """Whether the crawl's scheduler is scrapy-redis's (or a project's subclass of it) with
    ``SCHEDULER_PERSIST``: its queue outlives the close. True when that cannot be told (the
    class does not load), since "not seen" is the answer that loses no request."""
    if not settings.getbool("SCHEDULER_PERSIST"):
        return False
    try:
        from scrapy_redis import scheduler as redis  # type: ignore[import-untyped]

        scheduler = load_object(settings.get("SCHEDULER"))
    except (ImportError, NameError, ValueError, TypeError):
        return True
    return isinstance(scheduler, type) and issubclass(scheduler, redis.Scheduler)


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

    A filter that refuses to serve (another shape under the key: ``ShapeMismatchError``;
    a setting out of range; a damaged record) raises from ``open`` (Scrapy's scheduler
    opens its dupefilter before the crawl starts, so the crawl does not start), and when
    met later closes the spider with the reason ``bloomsled_shared_filter_refused`` and an
    ERROR: requests are not failed one by one while the crawl goes on.

    **Closing drops nothing.** Once the spider is being closed for any of these reasons,
    the filter has no answer, and every request met from then on (the one that met the
    failure, the links of the responses still in flight) is answered "not seen" without
    being recorded: the scheduler keeps it (scrapy-redis pushes it to its queue, which
    ``SCHEDULER_PERSIST`` keeps; Scrapy's keeps it under ``JOBDIR``), so a resumed crawl
    fetches it, maybe a second time, where "seen" would drop it for good. While Redis is
    down, scrapy-redis's push of such a request fails too, and scrapy-redis reports it.

    **Under scrapy-redis** (``SCHEDULER = "scrapy_redis.scheduler.Scheduler"``), its
    scheduler builds the filter with ``from_spider``; then, where the ``BLOOMSLED_*``
    settings are unset, the Redis is scrapy-redis's (``REDIS_URL``, ``REDIS_HOST`` /
    ``REDIS_PORT`` / ``REDIS_DB``, ``REDIS_PARAMS``), the key is
    ``SCHEDULER_DUPEFILTER_KEY % {"spider": name}`` if that setting is given, and the
    fingerprint is scrapy-redis's own (``BLOOMSLED_SCRAPY_REDIS_FINGERPRINT``, True: the
    one its ``RFPDupeFilter`` stores, so that a migrated set, see
    ``bloomsled.scrapy_redis_migrate``, and this filter agree). Its scheduler never calls
    ``open`` or ``close``: ``from_spider`` (which it calls as it opens, before it pops a
    request) opens the filter, so that a filter that refuses to serve stops the crawl
    before the queue is touched (with ``SCHEDULER_FLUSH_ON_START``, which deletes the
    filter first, the first ``request_seen`` opens it); its handle is dropped with the
    process, which keeps nothing that needs closing. ``clear()``
    (scrapy-redis's ``flush``, at close without ``SCHEDULER_PERSIST`` and at open with
    ``SCHEDULER_FLUSH_ON_START``) deletes the filter and its exact record.
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
        cluster_urls: Optional[list[str]] = None,
    ) -> None:
        self._init_common(fingerprinter, debug, crawler)
        self.exact = exact
        self.url = cluster_urls if cluster_urls is not None else url
        self.cluster = cluster
        self.name = name
        self.expected_items = expected_items
        self.fpr = fpr
        self.retry_seconds = retry_seconds
        self.filter: Optional[SharedFilter] = None
        self.lost = False
        #: Set once the spider is being closed (filter lost, Redis unavailable, a
        #: refusal): every later request is answered "not seen" without asking Redis.
        self.stopped = False
        #: Built by scrapy-redis's scheduler (``from_spider``, ``from_settings``).
        self.scrapy_redis = False

    @classmethod
    def from_crawler(cls, crawler: Crawler) -> RedisBloomDupeFilter:
        s = crawler.settings
        return cls(
            s.get("BLOOMSLED_REDIS_URL", "redis://127.0.0.1:6379/0"),
            s.get("BLOOMSLED_REDIS_KEY"),
            s.getbool("DUPEFILTER_DEBUG"),
            fingerprinter=crawler.request_fingerprinter,
            crawler=crawler,
            **_shared_kwargs(s),
        )

    @classmethod
    def from_spider(cls, spider: Spider) -> RedisBloomDupeFilter:
        """What scrapy-redis's ``Scheduler`` calls (at its ``open``, once the spider
        exists) when ``DUPEFILTER_CLASS`` names this class: the settings of
        ``from_crawler``, then scrapy-redis's where ours are unset (see
        ``_scrapy_redis_defaults``)."""
        crawler = spider.crawler
        df = cls.from_crawler(crawler)
        df._scrapy_redis_defaults(crawler.settings, spider.name, crawler)
        if not crawler.settings.getbool("SCHEDULER_FLUSH_ON_START"):
            # Now, before scrapy-redis's scheduler pops a request: a filter that refuses
            # to serve raises from here, and the crawl does not start.
            df.open()
        return df

    @classmethod
    def from_settings(cls, settings: BaseSettings) -> RedisBloomDupeFilter:
        """For code that builds a dupefilter from settings alone, as scrapy-redis does for
        a class without ``from_spider``. Without a crawler the filter cannot close the
        spider: an unavailable Redis or a lost filter raises from ``request_seen``."""
        df = cls(
            settings.get("BLOOMSLED_REDIS_URL"),
            settings.get("BLOOMSLED_REDIS_KEY"),
            settings.getbool("DUPEFILTER_DEBUG"),
            **_shared_kwargs(settings),
        )
        df._scrapy_redis_defaults(settings, None, None)
        return df

    def _scrapy_redis_defaults(
        self, settings: BaseSettings, spider: Optional[str], crawler: Optional[Crawler]
    ) -> None:
        """Under scrapy-redis: the Redis of its ``REDIS_URL`` / ``REDIS_HOST`` /
        ``REDIS_PORT`` / ``REDIS_DB`` / ``REDIS_PARAMS`` when ``BLOOMSLED_REDIS_URL`` is
        unset; the key ``SCHEDULER_DUPEFILTER_KEY % {"spider": name}`` when that is set and
        ``BLOOMSLED_REDIS_KEY`` is not; its request fingerprint unless
        ``BLOOMSLED_SCRAPY_REDIS_FINGERPRINT`` is False."""
        if settings.get("BLOOMSLED_REDIS_URL") is None and not self.cluster:
            self.url = scrapy_redis_url(settings)
        if settings.get("BLOOMSLED_REDIS_KEY") is None and settings.get("SCHEDULER_DUPEFILTER_KEY"):
            self.name = str(settings.get("SCHEDULER_DUPEFILTER_KEY")) % {
                "spider": spider if spider is not None else "scrapy"
            }
        if settings.getbool("BLOOMSLED_SCRAPY_REDIS_FINGERPRINT", True):
            self.fingerprinter = _ScrapyRedisFingerprinter()
        self.scrapy_redis = True

    def clear(self) -> None:
        """Deletes the filter and its exact record from Redis: what scrapy-redis's
        ``Scheduler.flush`` asks of a dupefilter at close without ``SCHEDULER_PERSIST`` and
        at open with ``SCHEDULER_FLUSH_ON_START``. Retries for
        ``BLOOMSLED_REDIS_RETRY_SECONDS`` while Redis is unavailable, then raises (nothing
        is dropped: the keys stay). Other spiders still using the filter meet a lost filter
        and close with ``bloomsled_shared_filter_lost``."""
        name = self._key()
        self.filter = None
        SharedFilter.destroy(
            name, self.url, self.cluster, retry_seconds=self.retry_seconds
        )
        logger.info("bloomsled: shared dupefilter %r deleted from Redis (clear)", name)

    def _key(self) -> str:
        if self.name is None:
            spider = self.crawler.spider if self.crawler is not None else None
            self.name = f"{getattr(spider, 'name', 'scrapy')}:bloomsled-dupefilter"
        return self.name

    def open(self) -> None:
        try:
            self.filter = SharedFilter.create(
                self._key(),
                self.url,
                expected_items=self.expected_items,
                fpr=self.fpr,
                cluster=self.cluster,
                retry_seconds=self.retry_seconds,
            )
        except RedisError as e:
            self._stop(REDIS_UNAVAILABLE_REASON, e)

    def request_seen(self, request: Request) -> bool:
        if self.filter is None and not self.stopped:
            try:
                self.open()
            except RedisError:
                raise  # open() reported it already (and raised: no spider to close)
            except BloomsledError as e:
                self._stop(SHARED_FILTER_REFUSED_REASON, e)
        if self.stopped or self.filter is None:
            return self._answer_while_closing()
        fp = self.fingerprinter.fingerprint(request)
        try:
            if self.exact:
                # The exact record buckets fingerprints by their leading bits: a digest.
                if len(fp) != FP_WIDTH:
                    fp = hashlib.sha1(fp).digest()
                return not self.filter.add_exact(fp)
            return not self.filter.add(fp)
        except SharedFilterLost as e:
            self.lost = True
            self._stop(SHARED_FILTER_LOST_REASON, e)
            return self._answer_while_closing()
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
            self._stop(REDIS_UNAVAILABLE_REASON, e)
            return self._answer_while_closing()
        except BloomsledError as e:
            self._stop(SHARED_FILTER_REFUSED_REASON, e)
            return self._answer_while_closing()

    def _answer_while_closing(self) -> bool:
        """``request_seen``'s answer while the spider closes and the filter has none. A
        crawl whose scheduler keeps its queue across the close (Scrapy's under ``JOBDIR``,
        scrapy-redis's with ``SCHEDULER_PERSIST``) gets "not seen", claiming nothing: the
        request is queued and the resumed crawl fetches it (maybe a second time) instead of
        losing it. Any other crawl's queue is discarded by the close anyway, and "not seen"
        would only let the engine fetch, before the close lands, pages the filter may have
        seen (after a lost filter, any of them): "seen"."""
        if self.crawler is None:
            return False
        s = self.crawler.settings
        return not (bool(s.get("JOBDIR")) or _persisting_scrapy_redis(s))

    def _stop(self, reason: str, error: Exception) -> None:
        """The filter cannot serve the spider: an ERROR (``_STOPS``' message for
        `reason`), its stat set, and the spider closed with `reason`. Without a crawler
        (``from_settings``) there is no spider to close: `error` is raised, never a silent
        drop."""
        stat, message = _STOPS[reason]
        logger.error(
            message,
            {
                "name": self.name,
                "url": self.url,
                "error": error,
                "reason": reason,
                "retry_seconds": self.retry_seconds,
            },
        )
        if self.crawler is None:
            raise error
        self.crawler.stats.set_value(stat, 1)
        self._close_spider(reason)

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

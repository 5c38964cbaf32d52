"""Knowing when a callback has finished, through public Scrapy APIs:
``BloomDoneMiddleware`` and ``BloomsledAddon``, and the tracker ``BloomDupeFilter`` reads.
Import the public classes from ``bloomsled.scrapy``."""

from __future__ import annotations

import weakref
from typing import TYPE_CHECKING, Any, AsyncIterator, Iterable, Iterator, Optional, cast

from scrapy import Request, signals

from ._scrapy_base import MIDDLEWARE_PATH

if TYPE_CHECKING:
    from scrapy.crawler import Crawler
    from scrapy.http import Response
    from scrapy.settings import BaseSettings

class _Parent:
    """A response whose callback's output is being processed."""

    __slots__ = ("request", "outstanding", "finished")

    def __init__(self, request: Request) -> None:
        self.request = request
        self.outstanding = 0
        self.finished = False


class _DoneTracker:
    """Per crawler: which responses' callbacks have finished with every request they
    yielded through the dupefilter. Shared by the middleware and the dupefilter."""

    def __init__(self) -> None:
        self.children: weakref.WeakKeyDictionary[Request, _Parent] = weakref.WeakKeyDictionary()
        self.on_done: Optional[Any] = None
        #: Journals a ``dont_filter`` request a callback yielded (no ``request_seen``
        #: comes for it); False if it could not be written.
        self.on_unfiltered: Optional[Any] = None
        self.middleware = False

    def adopt(self, parent: _Parent, child: Request) -> None:
        if child not in self.children:
            self.children[child] = parent
            parent.outstanding += 1

    def finish(self, parent: _Parent) -> None:
        parent.finished = True
        if parent.outstanding == 0:
            self._done(parent)

    def settled(self, child: Request) -> None:
        """``child`` went through the dupefilter (journaled or seen), or needs no journal."""
        parent = self.children.pop(child, None)
        if parent is not None:
            parent.outstanding -= 1
            if parent.finished and parent.outstanding == 0:
                self._done(parent)

    def _done(self, parent: _Parent) -> None:
        if self.on_done is not None:
            self.on_done(parent.request)


def child_unfiltered(tracker: _DoneTracker, request: Request) -> Optional[bool]:
    """Journals ``request``, a ``dont_filter`` request, if a callback yielded it: True
    if journaled, False if that failed, None if there was nothing to do."""
    if tracker.on_unfiltered is None or request not in tracker.children:
        return None
    return bool(tracker.on_unfiltered(request))


_TRACKERS: weakref.WeakKeyDictionary[Any, _DoneTracker] = weakref.WeakKeyDictionary()


def _tracker(crawler: Any) -> _DoneTracker:
    t = _TRACKERS.get(crawler)
    if t is None:
        t = _TRACKERS[crawler] = _DoneTracker()
    return t


class BloomDoneMiddleware:
    """Spider middleware that tells ``BloomDupeFilter`` when a request is done: its
    callback (or errback) has finished, and every request it yielded went through the
    dupefilter. Public Scrapy APIs only: ``process_spider_output`` (sync and async)
    wraps the callback's output, the ``request_scheduled`` signal settles children that
    skip the filter (``dont_filter``).

    Install it with an order below every other spider middleware, so that its wrapper is
    the outermost and sees each request as the engine gets it::

        SPIDER_MIDDLEWARES = {"bloomsled.scrapy.BloomDoneMiddleware": 0}
    """

    def __init__(self, crawler: Crawler) -> None:
        self.tracker = _tracker(crawler)
        self.tracker.middleware = True
        #: The output being processed per response (to tell an exception before the
        #: callback from one raised while its output is iterated).
        self._parents: weakref.WeakKeyDictionary[Any, _Parent] = weakref.WeakKeyDictionary()
        #: Outputs that ended normally, finished on the reactor's next turn unless a chain
        #: recovered from an exception reopens them first (see ``_ended``).
        self._ending: dict[int, tuple[Any, _Parent, Any]] = {}
        crawler.signals.connect(self._scheduled, signal=signals.request_scheduled)

    @classmethod
    def from_crawler(cls, crawler: Crawler) -> BloomDoneMiddleware:
        return cls(crawler)

    def _scheduled(self, request: Request, spider: Any = None) -> None:
        if request.dont_filter:  # no request_seen will come for it
            tracker = self.tracker
            # A callback's child is journaled here, before its parent can be done: else it
            # lives only in Scrapy's queue, and is lost with it (set aside on resume,
            # inconsistent after a crash). Start requests are made again by every run,
            # and retries and redirects are covered by their source's record.
            if child_unfiltered(tracker, request) is False:
                return  # not recorded: its parent is never done, and is fetched again
            tracker.settled(request)

    def process_spider_exception(
        self, response: Response, exception: Exception, spider: Any = None
    ) -> None:
        """Called (being outermost) only when no other middleware handled the exception,
        which then ends the response's processing. Raised while the callback's output was
        iterated: the output's wrapper finishes it, once the requests yielded before are
        through. Raised before the callback ran (no errback): it is done now."""
        if response not in self._parents:
            parent = _Parent(response.request)  # type: ignore[arg-type]
            self.tracker.finish(parent)

    def _start(self, response: Response) -> _Parent:
        ending = self._ending.pop(id(response), None)
        if ending is not None and ending[0] is response:
            # Requests another middleware's process_spider_exception returned for this
            # response: they belong to the same processing, not yet finished.
            _, parent, call = ending
            call.cancel()
        else:
            parent = _Parent(response.request)  # type: ignore[arg-type]
        self._parents[response] = parent
        return parent

    def _ended(self, response: Response, parent: _Parent) -> None:
        """The output ended without an exception reaching this wrapper. That is not yet the
        end of the response's processing when an inner layer caught an exception and a
        middleware's ``process_spider_exception`` handled it with requests of its own:
        Scrapy chains those after this output, through this middleware's
        ``process_spider_output`` again, in the same pass of the chain (no reactor turn
        between), and a done record written now would precede their log records (a
        ``kill -9`` in between would lose them). So the parent is finished on the
        reactor's next turn, unless such a chain has reopened it by then."""
        from twisted.internet import reactor

        call = cast(Any, reactor).callLater(0, self._finish_ended, id(response))
        self._ending[id(response)] = (response, parent, call)

    def _finish_ended(self, key: int) -> None:
        ending = self._ending.pop(key, None)
        if ending is not None:
            self.tracker.finish(ending[1])

    def process_spider_output(
        self, response: Response, result: Iterable[Any], spider: Any = None
    ) -> Iterator[Any]:
        parent = self._start(response)
        try:
            for r in result:
                if isinstance(r, Request):
                    self.tracker.adopt(parent, r)
                yield r
        except Exception:
            # No middleware handled it (else it would not reach the outermost wrapper):
            # the callback failed, and its processing is over too.
            self.tracker.finish(parent)
            raise
        # Not in a `finally`: a generator closed unfinished (GeneratorExit) is not done.
        self._ended(response, parent)

    async def process_spider_output_async(
        self, response: Response, result: AsyncIterator[Any], spider: Any = None
    ) -> AsyncIterator[Any]:
        parent = self._start(response)
        try:
            async for r in result:
                if isinstance(r, Request):
                    self.tracker.adopt(parent, r)
                yield r
        except Exception:
            self.tracker.finish(parent)
            raise
        self._ended(response, parent)


class BloomsledAddon:
    """Scrapy add-on: ``ADDONS = {"bloomsled.scrapy.BloomsledAddon": 0}`` sets
    ``DUPEFILTER_CLASS`` to ``BloomDupeFilter`` and installs ``BloomDoneMiddleware``."""

    def update_settings(self, settings: BaseSettings) -> None:
        settings.set("DUPEFILTER_CLASS", "bloomsled.scrapy.BloomDupeFilter", priority="addon")
        settings["SPIDER_MIDDLEWARES"][MIDDLEWARE_PATH] = 0

"""Moves a scrapy-redis crawl's fingerprint set into ``RedisBloomDupeFilter``'s shared filter.

scrapy-redis's ``RFPDupeFilter`` keeps every fingerprint as a 40-character hex SHA-1 member
of one Redis set (``<spider>:dupefilter`` by default). This reads that set with ``SSCAN``,
a batch at a time, and adds each fingerprint to the shared filter and its exact record
(``SharedFilter.add_exact_many``), so that a crawl resumed with
``DUPEFILTER_CLASS = "bloomsled.scrapy.RedisBloomDupeFilter"`` under scrapy-redis's
scheduler (which computes scrapy-redis's fingerprint: ``BLOOMSLED_SCRAPY_REDIS_FINGERPRINT``)
crawls none of the requests the set had seen. Redis keeps serving the crawl meanwhile:
``SSCAN`` holds it for one batch at a time, and the set is read, never changed or deleted
(delete it yourself, ``UNLINK <set>``, once the crawl runs on the filter).

**Resumable.** After each batch is in the filter, the scan's cursor is saved in the hash
``bloomsled:{<filter>}:migration`` (fields ``source``, ``cursor``, ``scanned``, ``added``,
``done``, and the filter's ``incarnation``); a run stopped anywhere (Ctrl-C, a lost
connection) continues from the last saved cursor, adding at most one batch again (adds are
idempotent), unless the filter was deleted (and perhaps made again) since: then what it
held is gone, and the pass starts over. Once a pass has
ended, the next run starts a new full pass: that is the catch-up pass below.

**Ordering.** ``SSCAN`` returns every member present for the whole scan; one added while
it runs may be missed. So either stop the spiders first (``SIGINT``, with
``SCHEDULER_PERSIST = True`` the queue stays in Redis), migrate, and start them with the new
filter; or migrate while the old crawl runs, stop the spiders, run it once more (a new
pass: fingerprints already in the filter are skipped at the filter's speed), then start
them. The filter must have the shape the spiders will ask for: pass the same
``--expected-items`` / ``--fpr`` as their ``BLOOMSLED_EXPECTED_ITEMS`` / ``BLOOMSLED_FPR``
(a different shape is refused by the spiders with ``ShapeMismatchError``, never
reinterpreted), and ``--bloom-only`` if they run with ``BLOOMSLED_REDIS_EXACT = False``.

Usage::

    python -m bloomsled.scrapy_redis_migrate --redis-url redis://127.0.0.1:6379/0 \\
        --spider myspider [--set myspider:dupefilter] \\
        [--filter myspider:bloomsled-dupefilter] [--expected-items 10000000] [--fpr 0.01]

Needs redis-py (installed with scrapy-redis).

Exit status: 0 when the pass is done; 2 for a bad argument (``--expected-items``,
``--batch`` not a positive integer, ``--fpr`` not strictly between 0 and 1, a filter shape
the library refuses, a ``--redis-url`` that does not parse); 1 for a failure while it runs
(Redis unreachable or failing, a filter of another shape under the key, a member of the set
that is not a fingerprint). Either is one line on stderr; after a failure mid-pass the
cursor of the last batch done is saved, and the same command continues from there.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from typing import Any, Callable, NoReturn, Optional

from . import Error as BloomsledError
from . import (
    InvalidConfigError,
    RedisOutcomeUnknownError,
    SharedFilter,
    SharedFilterNotFoundError,
)
from ._scrapy_base import DEFAULT_EXPECTED_ITEMS, DEFAULT_FPR, DEFAULT_REDIS_RETRY_SECONDS

#: Members asked of ``SSCAN`` per batch (its ``COUNT``: a hint, the reply may differ).
DEFAULT_BATCH = 10_000
#: Times one batch is sent again after ``RedisOutcomeUnknownError`` (the adds are
#: idempotent: sending it again only finds what the first send recorded).
BATCH_ATTEMPTS = 5


def state_key(filter_key: str) -> str:
    """The hash that holds a migration's cursor, in the filter's cluster slot."""
    return f"bloomsled:{{{filter_key}}}:migration"


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def _fingerprint(member: Any) -> bytes:
    text = _text(member)
    if len(text) != 40:
        raise ValueError(f"{text!r} is not a scrapy-redis fingerprint (40 hex digits)")
    return bytes.fromhex(text)


def migrate(
    redis_url: str,
    set_key: str,
    filter_key: str,
    *,
    expected_items: int = DEFAULT_EXPECTED_ITEMS,
    fpr: float = DEFAULT_FPR,
    exact: bool = True,
    batch: int = DEFAULT_BATCH,
    retry_seconds: float = DEFAULT_REDIS_RETRY_SECONDS,
    progress: Optional[Callable[[dict[str, Any]], None]] = None,
) -> dict[str, Any]:
    """Adds every fingerprint of scrapy-redis's set ``set_key`` to the shared filter
    ``filter_key`` (created with ``expected_items`` / ``fpr`` if absent), resuming a pass
    that was cut off. Returns ``scanned`` (members read, a member read twice by ``SSCAN``
    counted twice), ``added`` (new to the filter), ``seconds``, ``rate`` (members read per
    second), ``resumed_at`` (the cursor this run started from, 0 for a new pass),
    ``set_members`` (``SCARD`` at the start), and ``used_memory_before`` /
    ``used_memory_after`` (``INFO memory``, bytes). A Redis error is raised, with the
    cursor of the last batch done saved: run it again to continue."""
    import redis

    r = redis.Redis.from_url(redis_url)
    state = state_key(filter_key)
    saved = {_text(k): _text(v) for k, v in r.hgetall(state).items()}
    cursor, scanned, added = 0, 0, 0
    resume = bool(saved) and saved.get("done") == "0" and saved.get("source") == set_key
    if resume and "incarnation" not in saved:  # saved by an earlier version
        try:
            SharedFilter.open(filter_key, redis_url, retry_seconds=retry_seconds)
        except SharedFilterNotFoundError:
            resume = False  # the filter was deleted since: what it held is gone, start over
    f = SharedFilter.create(
        filter_key, redis_url, expected_items=expected_items, fpr=fpr,
        retry_seconds=retry_seconds,
    )
    # Which filter the saved cursor's batches went into: one deleted and made again since
    # (by a spider, by hand) lost them, so the pass starts over.
    incarnation = str(f.stats()["incarnation"])
    if resume and saved.get("incarnation", incarnation) == incarnation:
        cursor, scanned, added = (int(saved[k]) for k in ("cursor", "scanned", "added"))
    resumed_at = cursor
    members = int(r.scard(set_key))
    before = int(r.info("memory")["used_memory"])
    r.hset(state, mapping={"source": set_key, "cursor": cursor, "scanned": scanned,
                           "added": added, "done": 0, "incarnation": incarnation})
    t0 = time.perf_counter()
    run_scanned = 0
    while True:
        cursor, chunk = r.sscan(set_key, cursor, count=batch)
        fps = [_fingerprint(m) for m in chunk]
        if fps:
            for attempt in range(BATCH_ATTEMPTS):
                try:
                    new = f.add_exact_many(fps) if exact else f.add_many(fps)
                    break
                except RedisOutcomeUnknownError:
                    if attempt + 1 == BATCH_ATTEMPTS:
                        raise
            added += sum(new)
            scanned += len(fps)
            run_scanned += len(fps)
        done = int(cursor) == 0
        r.hset(state, mapping={"cursor": int(cursor), "scanned": scanned, "added": added,
                               "done": int(done)})
        if progress is not None:
            progress({"cursor": int(cursor), "scanned": scanned, "added": added})
        if done:
            break
    seconds = time.perf_counter() - t0
    return {
        "set": set_key,
        "filter": filter_key,
        "set_members": members,
        "scanned": scanned,
        "added": added,
        "resumed_at": resumed_at,
        "seconds": seconds,
        "rate": run_scanned / seconds if seconds > 0 else 0.0,
        "used_memory_before": before,
        "used_memory_after": int(r.info("memory")["used_memory"]),
        "filter_redis_bytes": f.stats()["redis_bytes"],
    }


PROG = "python -m bloomsled.scrapy_redis_migrate"


class _Parser(argparse.ArgumentParser):
    """argparse's parser, its errors on one line (without the usage block)."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: error: {message} (see --help)\n")


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be a positive integer, got {text}")
    return value


def _probability(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = 0.0
    if not 0.0 < value < 1.0:  # also refuses nan
        raise argparse.ArgumentTypeError(f"must be strictly between 0 and 1, got {text}")
    return value


def main(argv: Optional[list[str]] = None) -> int:
    p = _Parser(
        prog=PROG,
        description="Copy scrapy-redis's fingerprint set into RedisBloomDupeFilter's filter.",
    )
    p.add_argument("--redis-url", default="redis://127.0.0.1:6379/0")
    p.add_argument("--spider", help="the spider's name: names both keys by default")
    p.add_argument("--set", dest="set_key", help="scrapy-redis's set (<spider>:dupefilter)")
    p.add_argument("--filter", dest="filter_key",
                   help="the filter's key, as the spiders name it (BLOOMSLED_REDIS_KEY, or "
                        "SCHEDULER_DUPEFILTER_KEY; default <spider>:bloomsled-dupefilter)")
    p.add_argument("--expected-items", type=_positive_int, default=DEFAULT_EXPECTED_ITEMS)
    p.add_argument("--fpr", type=_probability, default=DEFAULT_FPR)
    p.add_argument("--bloom-only", action="store_true",
                   help="the spiders run with BLOOMSLED_REDIS_EXACT = False")
    p.add_argument("--batch", type=_positive_int, default=DEFAULT_BATCH)
    p.add_argument("--quiet", action="store_true", help="no progress lines")
    a = p.parse_args(argv)
    if a.set_key is None or a.filter_key is None:
        if a.spider is None:
            p.error("give --spider, or both --set and --filter")
    try:
        import redis
    except ImportError as e:
        print(f"{PROG}: error: needs redis-py (pip install redis): {e}", file=sys.stderr)
        return 1
    try:
        # Parsed as migrate() will, without connecting: a URL that cannot name a server
        # is a bad argument, not a failure.
        redis.Redis.from_url(a.redis_url).close()
    except ValueError as e:
        p.error(f"argument --redis-url: {e}")
    set_key = a.set_key or f"{a.spider}:dupefilter"
    filter_key = a.filter_key or f"{a.spider}:bloomsled-dupefilter"
    last = [0.0]

    def progress(d: dict[str, Any]) -> None:
        now = time.monotonic()
        if not a.quiet and now - last[0] >= 1.0:
            last[0] = now
            print(json.dumps(d), file=sys.stderr, flush=True)

    try:
        out = migrate(
            a.redis_url, set_key, filter_key, expected_items=a.expected_items, fpr=a.fpr,
            exact=not a.bloom_only, batch=a.batch, progress=progress,
        )
    except (InvalidConfigError, OverflowError) as e:  # a shape the filter cannot have
        p.error(f"argument --expected-items/--fpr: {e}")
    except (redis.exceptions.RedisError, BloomsledError, ValueError, OSError) as e:
        print(f"{PROG}: error: {type(e).__name__}: {e}", file=sys.stderr)
        return 1
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""bloomsled: a crash-safe Bloom filter in front of sled, from Python.

``Db``/``Tree`` store keys and values on disk with a Bloom filter in front, so lookups of
absent keys never touch the store, and the filter survives restarts and ``kill -9``.
``Filter`` is the same filter in memory, ``SharedFilter`` the same filter in Redis.
``FingerprintSet`` is an exact set of fixed-width fingerprints (request digests) on disk
whose memory is its filter, not its members.
``bloomsled.scrapy`` holds the Scrapy dupefilters.

Exceptions are named as PEP 8 asks (``...Error``); the names of earlier versions
(``InvalidConfig``, ``ShapeMismatch``, ``SharedFilterLost``, ``SharedFilterNotFound``)
are aliases of the same classes.
"""

from ._bloomsled import (
    ClosedError,
    CorruptError,
    Db,
    Error,
    Filter,
    FingerprintSet,
    InUseError,
    InvalidConfig,
    InvalidConfigError,
    PoisonedError,
    RedisError,
    RedisOutcomeUnknownError,
    ShapeMismatch,
    ShapeMismatchError,
    SharedFilter,
    SharedFilterLost,
    SharedFilterLostError,
    SharedFilterNotFound,
    SharedFilterNotFoundError,
    Tree,
    __version__,
)

__all__ = [
    "ClosedError",
    "CorruptError",
    "Db",
    "Error",
    "Filter",
    "FingerprintSet",
    "InUseError",
    "InvalidConfig",
    "InvalidConfigError",
    "PoisonedError",
    "RedisError",
    "RedisOutcomeUnknownError",
    "ShapeMismatch",
    "ShapeMismatchError",
    "SharedFilter",
    "SharedFilterLost",
    "SharedFilterLostError",
    "SharedFilterNotFound",
    "SharedFilterNotFoundError",
    "Tree",
    "__version__",
]

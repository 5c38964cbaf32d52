//! The crate's error type: what went wrong with Redis or with a shared filter's data, and
//! the core crate's [`bloomsled::Error`] wrapped for what the local filter, its sizing or its
//! hashes reported (as fjall wraps lsm-tree's error: the core knows nothing of Redis).

use bloomsled::DecodeError;

/// Everything that can go wrong with a shared filter, window or classic filter.
///
/// ```
/// use bloomsled_redis::Error;
/// // The core's invalid settings read as this crate's own variant.
/// let e = Error::from(bloomsled::Error::InvalidConfig { what: "k = 0".into() });
/// assert!(matches!(e, Error::InvalidConfig { .. }), "{e}");
/// ```
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// An error of the core crate: a local filter's shape or memory, a classic hash name,
    /// a runtime that shut down under an async call.
    #[error(transparent)]
    Core(bloomsled::Error),

    /// A configuration value is out of its valid range (this crate's settings or the
    /// core's sizing, such as a false-positive rate); `what` names the setting and why.
    #[error("invalid configuration: {what}")]
    InvalidConfig {
        /// The setting and the constraint it broke.
        what: String,
    },

    /// A record in Redis is well-framed but impossible (a bad field, a layout this build
    /// would not produce): nothing was changed.
    #[error("corrupt data: {0}")]
    Corrupt(String),

    /// A record in Redis does not decode as a shared filter's (another magic, another
    /// format version).
    #[error("not a valid shared filter record: {0}")]
    Decode(#[from] DecodeError),

    /// An unexpected bug (an answer count that cannot be): please report it.
    #[error("Unexpected bug has happened: {0}. PLEASE REPORT THIS BUG!")]
    ReportableBug(String),

    /// An error from Redis or the connection to it (refused, dropped, bad URL, wrong type).
    #[error("redis: {0}")]
    Redis(redis::RedisError),

    /// No reply came within the endpoint's `io_timeout` (the sync client as the async one):
    /// the command may or may not have run.
    #[error("redis: timed out: no reply within the endpoint's io_timeout ({0})")]
    Timeout(redis::RedisError),

    /// A write whose answer depends on the state it found (an add's "new") may or may not
    /// have reached Redis before the connection failed, and no lookup could tell which: its
    /// answer is unknown. It was not guessed (a replay would call a new key "present").
    /// The keys may or may not be in the filter now; adding them again is safe, but its
    /// answer says only "possibly present".
    #[error("redis: the outcome of a write is unknown ({why}); its answer was not guessed")]
    RedisOutcomeUnknown {
        /// The connection error that left the outcome unknown.
        why: String,
    },

    /// A shared filter exists under this name with another shape than the one asked for.
    #[error("shared filter {name:?} has another shape: asked for {asked}, Redis holds {found}")]
    RedisShapeMismatch {
        /// The filter's name.
        name: String,
        /// The shape the caller asked for.
        asked: String,
        /// The shape recorded in Redis.
        found: String,
    },

    /// No shared filter of this name exists (no config record), or it is still being created.
    #[error("no shared filter {name:?} in Redis: {why}")]
    SharedFilterNotFound {
        /// The filter's name.
        name: String,
        /// What was found instead.
        why: String,
    },

    /// The shared filter's data is gone or belongs to another incarnation of the filter
    /// (flushed, evicted, expired, restarted empty, failed over to an empty replica,
    /// deleted or recreated). The operation was not answered: nothing can be said about
    /// the keys it asked about.
    #[error("shared filter {name:?} lost at Redis key {key:?}: {why}")]
    SharedFilterLost {
        /// The filter's name.
        name: String,
        /// The Redis key where the loss was seen.
        key: String,
        /// What was found there.
        why: String,
    },
}

impl Error {
    pub(crate) fn config(what: impl Into<String>) -> Self {
        Error::InvalidConfig { what: what.into() }
    }
}

/// The core's errors as this crate's: its invalid configurations and corrupt data read as
/// this crate's own variants of the same name (one match arm for a setting out of range,
/// whichever crate checked it), everything else wrapped in [`Error::Core`].
impl From<bloomsled::Error> for Error {
    fn from(e: bloomsled::Error) -> Self {
        match e {
            bloomsled::Error::InvalidConfig { what } => Error::InvalidConfig { what },
            e => Error::Core(e),
        }
    }
}

/// A reply that did not come within `io_timeout` reads as [`Error::Timeout`] whichever
/// client waited for it (the sync connection's socket timeout surfaces as `WouldBlock`
/// or `TimedOut`, the async one's as `TimedOut`); any other as [`Error::Redis`].
impl From<redis::RedisError> for Error {
    fn from(e: redis::RedisError) -> Self {
        if e.is_timeout() {
            Error::Timeout(e)
        } else {
            Error::Redis(e)
        }
    }
}

/// Result alias used throughout bloomsled-redis.
pub type Result<T, E = Error> = std::result::Result<T, E>;

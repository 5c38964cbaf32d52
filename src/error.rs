//! The crate's one error type.

use std::fmt;

/// Everything that can go wrong in bloomsled.
///
/// Storage errors come from sled unchanged (`Error::Sled`); the other variants say which
/// setting or which bytes were wrong and what was expected instead.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// An error from the underlying sled store.
    #[error("sled: {0}")]
    Sled(#[from] sled::Error),

    /// An I/O error outside sled.
    #[error("I/O: {0}")]
    Io(#[from] std::io::Error),

    /// A configuration value is out of its valid range; `what` names the setting and why.
    #[error("invalid configuration: {what}")]
    InvalidConfig {
        /// The setting and the constraint it broke.
        what: String,
    },

    /// Two filters were combined (`union`) but differ in shape or seed.
    #[error("filters have different shapes: {ours} vs {theirs}")]
    ShapeMismatch {
        /// Shape of the filter being modified.
        ours: FilterShape,
        /// Shape of the other filter.
        theirs: FilterShape,
    },

    /// Serialized bytes do not start with bloomsled's magic: they are not a bloomsled filter.
    #[error("not a bloomsled filter (bad magic {got:02x?})")]
    BadMagic {
        /// The bytes found where the magic should be.
        got: Vec<u8>,
    },

    /// The serialized form was written by a format version this build cannot read.
    #[error("unsupported format version {got} (this build reads version {expected})")]
    UnsupportedVersion {
        /// The version this build reads.
        expected: u32,
        /// The version found.
        got: u32,
    },

    /// The bytes end before the structure they describe.
    #[error("truncated data: needed {needed} bytes, got {got}")]
    Truncated {
        /// Bytes needed.
        needed: u64,
        /// Bytes present.
        got: u64,
    },

    /// A checksum did not match the bytes it covers.
    #[error("checksum mismatch in {what}: expected {expected:#010x}, got {got:#010x}")]
    ChecksumMismatch {
        /// Which part failed.
        what: &'static str,
        /// The stored checksum.
        expected: u32,
        /// The checksum computed over the bytes.
        got: u32,
    },

    /// A tree's snapshot could not be trusted and the database was opened with
    /// `Recovery::Strict`, which forbids rebuilding silently.
    #[error("snapshot of tree {tree:?} rejected: {fault}")]
    SnapshotRejected {
        /// Tree name (lossy UTF-8).
        tree: String,
        /// What failed.
        fault: crate::format::SnapshotFault,
    },

    /// The tree or database was closed or dropped while the operation (a rebuild) ran; the
    /// filter in use is unchanged.
    #[error("closed during the operation: {0}")]
    Closed(String),

    /// Serialized bytes are well-framed but describe an impossible filter.
    #[error("corrupt filter data: {0}")]
    Corrupt(String),

    /// An error from Redis or the connection to it (refused, timed out, bad URL, wrong type).
    #[cfg(feature = "redis")]
    #[error("redis: {0}")]
    Redis(#[from] redis::RedisError),

    /// A shared filter exists under this name with another shape than the one asked for.
    #[cfg(feature = "redis")]
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
    #[cfg(feature = "redis")]
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
    #[cfg(feature = "redis")]
    #[error("shared filter {name:?} lost at Redis key {key:?}: {why}")]
    SharedFilterLost {
        /// The filter's name.
        name: String,
        /// The Redis key where the loss was seen.
        key: String,
        /// What was found there.
        why: String,
    },

    /// A classic (PHP) hash name that is none of the eight `hash::classic::ClassicHash`es.
    #[error(
        "unknown classic hash {name:?}: expected one of BKDR, SDBM, JS, PJW, ELF, DJB, DEK, \
         FNV (optionally with the suffix Hash, any case)"
    )]
    UnknownHash {
        /// The name given.
        name: String,
    },
}

impl Error {
    pub(crate) fn config(what: impl Into<String>) -> Self {
        Error::InvalidConfig { what: what.into() }
    }
}

/// Equality in the manner of `sled::Error`'s, so that sled-style assertions such as
/// `assert_eq!(tree.get(k), Ok(None))` keep compiling after switching to bloomsled: sled and
/// I/O errors compare by sled's rule and by kind, the others by variant and message.
impl PartialEq for Error {
    fn eq(&self, other: &Self) -> bool {
        match (self, other) {
            (Error::Sled(a), Error::Sled(b)) => a == b,
            (Error::Io(a), Error::Io(b)) => a.kind() == b.kind(),
            (a, b) => {
                std::mem::discriminant(a) == std::mem::discriminant(b)
                    && a.to_string() == b.to_string()
            }
        }
    }
}

/// The shape of a filter: what must agree for two filters to be combined.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FilterShape {
    /// Number of 512-bit blocks.
    pub num_blocks: u64,
    /// Number of bits set per key.
    pub num_hashes: u32,
    /// Hash seed.
    pub seed: u64,
}

impl fmt::Display for FilterShape {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} blocks, k={}, seed={:#x}",
            self.num_blocks, self.num_hashes, self.seed
        )
    }
}

/// Result alias used throughout bloomsled.
pub type Result<T, E = Error> = std::result::Result<T, E>;

//! The crate's one error type.

use std::fmt;

use sled::{DiskPtr, IVec};

mod convert;

/// Everything that can go wrong in bloomsled.
///
/// The first five variants are `sled::Error`'s, with sled's payloads, so code written for
/// sled keeps matching after switching the import: an error from sled arrives as the
/// same-named variant (sled's `Io` as [`Error::Io`], like bloomsled's own I/O errors). The
/// other variants say which setting or which bytes were wrong and what was expected
/// instead. Conversions into sled's transaction errors and `std::io::Error` keep the
/// original error (see `From<Error>` below).
///
/// ```
/// # let db = bloomsled::Config::new().temporary(true).open()?;
/// let t = db.open_tree("t")?;
/// db.drop_tree("t")?;
/// match t.get("k") {
///     Err(bloomsled::Error::CollectionNotFound(name)) => assert_eq!(name, "t"),
///     other => panic!("{other:?}"),
/// }
/// # Ok::<(), bloomsled::Error>(())
/// ```
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// sled: the tree no longer exists (it was dropped).
    #[error("Collection {0:?} does not exist")]
    CollectionNotFound(IVec),

    /// sled: the system has been used in an unsupported way (e.g. a sled setting out of
    /// range, or `use_compression` without the `compression` feature).
    #[error("Unsupported: {0}")]
    Unsupported(String),

    /// sled: an unexpected bug in sled.
    #[error("Unexpected bug has happened: {0}. PLEASE REPORT THIS BUG!")]
    ReportableBug(String),

    /// A read or write error with the file system, from sled or from bloomsled's own files.
    #[error("I/O: {0}")]
    Io(#[source] std::io::Error),

    /// sled: corruption was detected in sled's storage file.
    #[error("Read corrupted data at file offset {at:?} backtrace {bt:?}")]
    Corruption {
        /// The file location that corrupted data was found at.
        at: Option<DiskPtr>,
        /// A backtrace for where the corruption was encountered (empty: sled keeps one
        /// only with its `testing` feature).
        bt: (),
    },

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
}

impl Error {
    pub(crate) fn config(what: impl Into<String>) -> Self {
        Error::InvalidConfig { what: what.into() }
    }
}

/// Equality in the manner of `sled::Error`'s, so that sled-style assertions such as
/// `assert_eq!(tree.get(k), Ok(None))` keep compiling after switching to bloomsled: sled's
/// variants compare by sled's rule (by name, message, or corrupt location), I/O errors by
/// kind, the others by variant and message.
impl PartialEq for Error {
    fn eq(&self, other: &Self) -> bool {
        match (self, other) {
            (Error::CollectionNotFound(a), Error::CollectionNotFound(b)) => a == b,
            (Error::Unsupported(a), Error::Unsupported(b)) => a == b,
            (Error::ReportableBug(a), Error::ReportableBug(b)) => a == b,
            (Error::Corruption { at: a, .. }, Error::Corruption { at: b, .. }) => a == b,
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

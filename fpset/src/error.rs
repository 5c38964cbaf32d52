//! The fingerprint set's error type: its own faults (a damaged file, a folder in use, a
//! fingerprint of the wrong width), I/O, and the core crate's [`bloomsled::Error`] wrapped
//! for what the filter in front of the set reported.

use std::path::PathBuf;

use bloomsled::DecodeError;

/// Everything that can go wrong with a [`FingerprintSet`](crate::FingerprintSet).
///
/// ```
/// let dir = tempfile::tempdir()?;
/// let set = bloomsled_fpset::FingerprintSet::open(dir.path(), 4, 1_000, 0.01)?;
/// assert!(matches!(
///     set.insert(b"abc"),
///     Err(bloomsled_fpset::Error::KeyWidth { expected: 4, got: 3 })
/// ));
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// An error of the core crate (the filter in front of the set).
    #[error(transparent)]
    Core(bloomsled::Error),

    /// A read or write error with the file system.
    #[error("I/O: {0}")]
    Io(#[source] std::io::Error),

    /// A configuration value is out of its valid range; `what` names the setting and why.
    #[error("invalid configuration: {what}")]
    InvalidConfig {
        /// The setting and the constraint it broke.
        what: String,
    },

    /// An unexpected bug: please report it.
    #[error("Unexpected bug has happened: {0}. PLEASE REPORT THIS BUG!")]
    ReportableBug(String),

    /// The set was closed while the operation ran.
    #[error("closed during the operation: {0}")]
    Closed(String),

    /// A file of the set is damaged, truncated, foreign or belongs to another set: the set
    /// was not opened (or the lookup not answered) and nothing was changed or deleted.
    #[error("fingerprint set file {} is damaged: {fault}", file.display())]
    FileDamaged {
        /// The file.
        file: PathBuf,
        /// What is wrong with it.
        fault: DecodeError,
    },

    /// The folder is held by another open `FingerprintSet`, in this process or another;
    /// nothing was changed.
    #[error(
        "fingerprint set {} is in use by another open handle (its LOCK file is locked): \
         close that one first",
        path.display()
    )]
    InUse {
        /// The set's folder.
        path: PathBuf,
    },

    /// A fingerprint of another width than the set's: nothing was stored.
    #[error("fingerprint of {got} bytes: this set holds fingerprints of exactly {expected} bytes")]
    KeyWidth {
        /// The set's fingerprint width.
        expected: usize,
        /// The width given.
        got: usize,
    },
}

/// The core's errors as this crate's: its I/O errors and invalid configurations read as
/// this crate's own variants of the same name, everything else wrapped in [`Error::Core`].
impl From<bloomsled::Error> for Error {
    fn from(e: bloomsled::Error) -> Self {
        match e {
            bloomsled::Error::Io(e) => Error::Io(e),
            bloomsled::Error::InvalidConfig { what } => Error::InvalidConfig { what },
            e => Error::Core(e),
        }
    }
}

impl From<std::io::Error> for Error {
    fn from(e: std::io::Error) -> Self {
        Error::Io(e)
    }
}

/// Result alias used throughout bloomsled-fpset.
pub type Result<T, E = Error> = std::result::Result<T, E>;

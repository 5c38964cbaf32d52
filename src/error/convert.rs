//! Conversions between [`Error`] and the error types a sled user converts to and from: every
//! `From` that `sled::Error` has, so `?` works where it worked with sled.
//!
//! sled's transaction errors can only carry a `sled::Error`. sled's own variants map to
//! themselves; bloomsled's own errors travel inside `sled::Error::Io` as the boxed source
//! of an `std::io::Error`, and come back out unchanged: `Error::from` on such an I/O error
//! (directly or through `sled::Error`) returns the bloomsled error that went in.

use std::io;

use sled::transaction::{
    ConflictableTransactionError, TransactionError, UnabortableTransactionError,
};

use super::Error;

impl Error {
    /// The `std::io::ErrorKind` this error reads as (sled's choice for its own variants).
    fn io_kind(&self) -> io::ErrorKind {
        match self {
            Error::Io(e) => e.kind(),
            Error::CollectionNotFound(_) => io::ErrorKind::NotFound,
            Error::Unsupported(_)
            | Error::InvalidConfig { .. }
            | Error::ShapeMismatch { .. }
            | Error::ReservedName { .. } => io::ErrorKind::InvalidInput,
            Error::Corruption { .. }
            | Error::Decode(_)
            | Error::SnapshotRejected { .. }
            | Error::DatabaseRecordRejected { .. }
            | Error::Corrupt(_) => io::ErrorKind::InvalidData,
            Error::OutOfMemory { .. } => io::ErrorKind::OutOfMemory,
            _ => io::ErrorKind::Other,
        }
    }
}

/// sled's errors arrive as the same-named variant; an I/O error that carries a bloomsled
/// error (see the module docs) arrives as that error.
impl From<sled::Error> for Error {
    fn from(e: sled::Error) -> Self {
        #[allow(unreachable_patterns)] // sled's `failpoints` feature adds a variant
        match e {
            sled::Error::CollectionNotFound(name) => Error::CollectionNotFound(name),
            sled::Error::Unsupported(why) => Error::Unsupported(why),
            sled::Error::ReportableBug(what) => Error::ReportableBug(what),
            sled::Error::Io(io) => Error::from(io),
            sled::Error::Corruption { at, .. } => Error::Corruption { at, bt: () },
            other => Error::ReportableBug(other.to_string()),
        }
    }
}

/// `Error::Io`, or, if the I/O error carries a bloomsled error, that error.
impl From<io::Error> for Error {
    fn from(e: io::Error) -> Self {
        if !e.get_ref().is_some_and(|inner| inner.is::<Error>()) {
            return Error::Io(e);
        }
        let kind = e.kind();
        match e.into_inner().map(|inner| inner.downcast::<Error>()) {
            Some(Ok(ours)) => *ours,
            Some(Err(other)) => Error::Io(io::Error::new(kind, other)),
            None => Error::Io(io::Error::from(kind)),
        }
    }
}

/// sled's variants as themselves; bloomsled's own errors as `sled::Error::Io`, carrying the
/// error (recovered by `Error::from`).
impl From<Error> for sled::Error {
    fn from(e: Error) -> Self {
        match e {
            Error::CollectionNotFound(name) => sled::Error::CollectionNotFound(name),
            Error::Unsupported(why) => sled::Error::Unsupported(why),
            Error::ReportableBug(what) => sled::Error::ReportableBug(what),
            Error::Io(io) => sled::Error::Io(io),
            Error::Corruption { at, bt } => sled::Error::Corruption { at, bt },
            ours => sled::Error::Io(io::Error::new(ours.io_kind(), ours)),
        }
    }
}

/// As sled's `From<sled::Error> for std::io::Error`: the I/O error itself, or an I/O error
/// of the matching kind whose source is this error.
impl From<Error> for io::Error {
    fn from(e: Error) -> Self {
        match e {
            Error::Io(io) => io,
            other => io::Error::new(other.io_kind(), other),
        }
    }
}

/// `?` on a bloomsled result in a function returning `TransactionResult`.
impl<E> From<Error> for TransactionError<E> {
    fn from(e: Error) -> Self {
        TransactionError::Storage(e.into())
    }
}

/// `?` on a bloomsled result inside a transaction closure.
impl<E> From<Error> for ConflictableTransactionError<E> {
    fn from(e: Error) -> Self {
        ConflictableTransactionError::Storage(e.into())
    }
}

/// `?` on a bloomsled result in a function returning `UnabortableTransactionResult`.
impl From<Error> for UnabortableTransactionError {
    fn from(e: Error) -> Self {
        UnabortableTransactionError::Storage(e.into())
    }
}

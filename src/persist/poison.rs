//! A failed sync poisons the database (invariant: a failed fsync is never forgotten).
//!
//! Linux reports a failed writeback once per open file (`errseq_t`) and may mark the pages
//! it could not write clean, so the next `fsync` of the same file returns 0 for data that
//! never reached the disk (PostgreSQL's "fsyncgate", 2018). A database that goes on after
//! a failed sync would then acknowledge a later flush, snapshot or dirty mark whose
//! foundation is gone. So the first failed sync that bloomsled issues or relies on (the
//! fsync of sled's log after sled's flush, sled's flush itself, a snapshot's file and
//! folder, a crash journal's header) sets one [`Poison`] shared by every tree of the
//! database, and from then on every write, flush, snapshot and record write of that
//! database fails with [`Error::Poisoned`], naming the file, the step and the first error.
//! Reads go on: they claim nothing about durability. Reopening the database recovers
//! from what is durable: the trust rule never relies on a record that the failed sync
//! was to make durable (it names the previous snapshot, or is stale and rebuilt).
//!
//! Other failed steps (a create, a write, a rename, a removal) poison nothing: the
//! operation fails with an error naming the file and the step, its temporary file is
//! removed, and nothing names what it left behind.

use std::fmt;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use crate::error::Error;

/// The step of a file operation, as errors name it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Step {
    /// Creating (or opening for writing) a file or a folder.
    Create,
    /// Opening an existing file or folder.
    Open,
    /// Writing bytes.
    Write,
    /// An `fsync` of a file.
    Fsync,
    /// An `fsync` of a folder (makes names durable).
    FsyncDir,
    /// A rename.
    Rename,
    /// Removing a file.
    Remove,
    /// The store's own flush, named by the store (sled's `flush()`: its writes and its
    /// `sync_file_range`, "sled's flush").
    StoreFlush(&'static str),
}

impl Step {
    /// The words errors use for the step.
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Step::Create => "create",
            Step::Open => "open",
            Step::Write => "write",
            Step::Fsync => "fsync",
            Step::FsyncDir => "fsync of the folder",
            Step::Rename => "rename",
            Step::Remove => "remove",
            Step::StoreFlush(name) => name,
        }
    }

    /// True for a step whose failure may have dropped data the kernel reports only once.
    pub(crate) fn syncs(self) -> bool {
        matches!(self, Step::Fsync | Step::FsyncDir | Step::StoreFlush(_))
    }
}

/// An I/O error of one step on one file.
#[derive(Debug)]
pub(crate) struct FileFault {
    pub(crate) path: PathBuf,
    pub(crate) step: Step,
    pub(crate) error: io::Error,
}

impl fmt::Display for FileFault {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} of {}: {}",
            self.step.as_str(),
            self.path.display(),
            self.error
        )
    }
}

impl std::error::Error for FileFault {}

impl FileFault {
    /// The fault carried by `e`, if it was made by [`FileFault::into_io`]; else `e`.
    pub(crate) fn take(e: io::Error) -> Result<FileFault, io::Error> {
        if !e.get_ref().is_some_and(|inner| inner.is::<FileFault>()) {
            return Err(e);
        }
        let kind = e.kind();
        match e.into_inner().map(|inner| inner.downcast::<FileFault>()) {
            Some(Ok(fault)) => Ok(*fault),
            _ => Err(io::Error::from(kind)),
        }
    }

    /// As an `io::Error` of the same kind, for code that returns one (recover the fault
    /// with [`FileFault::take`]). Only Linux's journal mapping returns one.
    #[cfg_attr(not(target_os = "linux"), allow(dead_code))]
    pub(crate) fn into_io(self) -> io::Error {
        io::Error::new(self.error.kind(), self)
    }
}

/// Names the file and the step of an I/O result.
pub(crate) trait At<T> {
    /// The result, its error naming `path` and `step`.
    fn at(self, path: &Path, step: Step) -> Result<T, FileFault>;
}

impl<T> At<T> for io::Result<T> {
    fn at(self, path: &Path, step: Step) -> Result<T, FileFault> {
        self.map_err(|error| FileFault {
            path: path.to_path_buf(),
            step,
            error,
        })
    }
}

/// What poisoned a database: the first failed sync.
#[derive(Debug, Clone)]
struct Cause {
    path: PathBuf,
    step: Step,
    error: String,
}

impl Cause {
    fn error(&self) -> Error {
        Error::Poisoned {
            file: self.path.clone(),
            step: self.step.as_str(),
            error: self.error.clone(),
        }
    }
}

/// The poison of one open database (see the module docs): set once, by the first failed
/// sync, never cleared. It also marks the database's folder, so that the next open of it
/// in this process rewrites its files first ([`super::taint`]).
#[derive(Debug, Default)]
pub(crate) struct Poison {
    cause: OnceLock<Cause>,
    /// The database's folder (empty: none to mark).
    folder: PathBuf,
}

impl Poison {
    /// The poison of the database at `folder`.
    pub(crate) fn for_folder(folder: &Path) -> Poison {
        Poison {
            cause: OnceLock::new(),
            folder: folder.to_path_buf(),
        }
    }

    /// `Err(Error::Poisoned)` once a sync failed.
    #[inline]
    pub(crate) fn check(&self) -> Result<(), Error> {
        match self.cause.get() {
            None => Ok(()),
            Some(cause) => Err(cause.error()),
        }
    }

    /// The error for `fault`: a failed sync poisons the database and is
    /// [`Error::Poisoned`] (naming the first failure, if another came first); any other
    /// step is [`Error::Io`] of the same kind, naming the file and the step.
    pub(crate) fn absorb(&self, fault: FileFault) -> Error {
        if !fault.step.syncs() {
            return Error::Io(io::Error::new(fault.error.kind(), fault.to_string()));
        }
        self.set(fault.path, fault.step, fault.error.to_string())
    }

    /// Poisons the database with this failure (unless it already is) and returns the
    /// error that names the first one.
    pub(crate) fn set(&self, path: PathBuf, step: Step, error: String) -> Error {
        let cause = self.cause.get_or_init(|| {
            if !self.folder.as_os_str().is_empty() {
                super::taint::mark(&self.folder);
            }
            log::error!(
                "bloomsled: {} of {} failed ({error}): the database acknowledges nothing as \
                 durable any more; reopen it to recover",
                step.as_str(),
                path.display()
            );
            Cause { path, step, error }
        });
        cause.error()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_first_failed_sync_poisons_and_is_named_by_every_later_error() {
        let p = Poison::default();
        assert!(p.check().is_ok());
        let write = p.absorb(FileFault {
            path: "/x/a.snap.tmp".into(),
            step: Step::Write,
            error: io::Error::from_raw_os_error(28),
        });
        assert!(matches!(&write, Error::Io(e) if e.kind() == io::ErrorKind::StorageFull));
        assert!(
            write.to_string().contains("write of /x/a.snap.tmp"),
            "{write}"
        );
        assert!(p.check().is_ok(), "a failed write poisons nothing");
        let first = Err::<(), _>(io::Error::from_raw_os_error(5))
            .at(Path::new("/x/db"), Step::Fsync)
            .map_err(|f| p.absorb(f));
        let later = p.absorb(FileFault {
            path: "/x/bloomsled".into(),
            step: Step::FsyncDir,
            error: io::Error::from_raw_os_error(5),
        });
        for e in [first.unwrap_err(), later, p.check().unwrap_err()] {
            let msg = e.to_string();
            assert!(matches!(e, Error::Poisoned { .. }), "{msg}");
            assert!(
                msg.contains("fsync of /x/db") && msg.contains("reopen"),
                "{msg}"
            );
        }
    }

    #[test]
    fn a_carried_fault_comes_back_out() {
        let e = FileFault {
            path: "/x/1.jnl".into(),
            step: Step::Fsync,
            error: io::Error::from_raw_os_error(5),
        }
        .into_io();
        let f = FileFault::take(e).unwrap();
        assert_eq!(f.step, Step::Fsync);
        assert!(FileFault::take(io::Error::other("plain")).is_err());
    }
}

//! The CLI's one error type: each variant says what failed, on which path, and (where there
//! is one) what to do instead. `main` prints it on one line and exits 1.

use std::io;
use std::path::PathBuf;

/// Everything a command can fail with.
#[derive(Debug, thiserror::Error)]
pub enum CliError {
    /// The path holds no sled database (commands other than `load` never create one).
    #[error("{}: not a database directory", .0.display())]
    NotADatabase(PathBuf),

    /// Another process holds sled's lock on the database.
    #[error("{}: the database is in use by another process", .0.display())]
    InUse(PathBuf),

    /// Opening the database failed for another reason.
    #[error("{}: {source}", path.display())]
    Open {
        /// The database directory.
        path: PathBuf,
        /// What bloomsled or sled reported.
        source: bloomsled::Error,
    },

    /// A tree could not be opened.
    #[error("tree {name:?}: {source}")]
    Tree {
        /// Tree name (lossy UTF-8).
        name: String,
        /// What bloomsled reported.
        source: bloomsled::Error,
    },

    /// A command that reads a tree was given a name that is no tree of the database.
    #[error("tree {0:?}: no such tree in the database (`load --tree` creates one)")]
    NoSuchTree(String),

    /// A database operation failed.
    #[error(transparent)]
    Db(#[from] bloomsled::Error),

    /// The demo's plain sled database failed.
    #[error("plain sled: {0}")]
    Sled(#[from] sled::Error),

    /// Reading or writing a file or directory failed.
    #[error("{}: {source}", path.display())]
    Io {
        /// The file or directory.
        path: PathBuf,
        /// The I/O error.
        source: io::Error,
    },

    /// Reading standard input or writing standard output failed.
    #[error("{0}")]
    Stdio(io::Error),

    /// A `redis` command failed (the message names the server, filter and cause).
    #[cfg(feature = "redis")]
    #[error("{0}")]
    Redis(String),

    /// `demo --items 0`.
    #[error("--items must be at least 1")]
    NoItems,

    /// The demo refused its directory (see [`DemoRefusal`]).
    #[error("{}: {reason}", path.display())]
    DemoDir {
        /// The `--dir` given.
        path: PathBuf,
        /// Why it is refused and what to do.
        reason: DemoRefusal,
    },

    /// The demo's own check found stored keys the database did not return.
    #[error("{0} present keys were not found")]
    DemoLostKeys(usize),
}

/// Why `demo` will not use a directory: it only ever writes into, and deletes from, a folder
/// it can prove it made.
#[derive(Debug, thiserror::Error)]
pub enum DemoRefusal {
    /// `.`, `..`, the current directory or one of its parents, `/`, or the home directory.
    #[error(
        "refusing to use {0} for the demo, which replaces its folder on every run; \
         pass a new folder, e.g. --dir ./bloomsled-demo"
    )]
    Protected(&'static str),

    /// A symbolic link: what it points to is not the demo's to replace.
    #[error("is a symbolic link; pass the folder itself or a new folder")]
    Symlink,

    /// Something other than a directory.
    #[error("exists and is not a directory; pass a new folder")]
    NotADirectory,

    /// A non-empty folder without the demo's marker file.
    #[error(
        "is not empty and was not made by `bloomsled demo` (no {marker} inside); \
         nothing was changed: pass a new or empty folder"
    )]
    NotADemo {
        /// The marker file's name.
        marker: &'static str,
    },

    /// The folder could not be read or emptied.
    #[error("cannot be read or emptied: {0}")]
    Unreadable(String),

    /// A demo folder that also holds files the demo did not create.
    #[error(
        "holds {entry:?}, which `bloomsled demo` did not create; nothing was changed: \
         move it out or pass another folder"
    )]
    Foreign {
        /// The first unexpected entry.
        entry: String,
    },
}

impl CliError {
    /// An I/O error on `path`.
    pub fn io(path: impl Into<PathBuf>) -> impl FnOnce(io::Error) -> CliError {
        let path = path.into();
        move |source| CliError::Io { path, source }
    }
}

/// Result alias of the CLI.
pub type CliResult<T> = Result<T, CliError>;

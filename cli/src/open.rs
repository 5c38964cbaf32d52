//! Opening databases: which directory (a demo folder stands for the database inside it),
//! and a clear error when another process holds it. Modes and sizes are the library's
//! business: each tree's trust record keeps them.

use std::fs::File;
use std::io;
use std::path::{Path, PathBuf};

use bloomsled::window::Window;
use bloomsled::{Config, Db, Distrust, RecoveryOutcome, RecoveryPolicy, Tree};

use crate::demo::folder;
use crate::error::{CliError, CliResult};

/// Name sled gives the default tree.
pub const DEFAULT_TREE: &[u8] = b"__sled__default";

/// True if `path` holds a sled database.
pub fn is_database(path: &Path) -> bool {
    path.join("conf").exists() || path.join("db").exists()
}

/// The database a command given `path` works on: `path` itself, or, when `path` is a
/// folder made by `bloomsled demo`, the database inside it (said on standard error, so
/// that JSON on standard output stays clean). Nothing is ever created beside the demo's
/// own entries: `load` into a demo folder whose database is gone recreates it in place.
pub fn resolve(path: &Path) -> PathBuf {
    if is_database(path) || !folder::is_demo_folder(path) {
        return path.to_path_buf();
    }
    let inner = folder::database_of(path);
    eprintln!(
        "bloomsled: {} is a demo folder; using its database {}",
        path.display(),
        inner.display()
    );
    inner
}

/// Opens an existing database (never creates one). The mode is left unset, so every tree
/// keeps the mode and sizing its trust record stores, also when its filter is rebuilt at
/// open. A filter that must be rebuilt is rebuilt before this returns: a command is
/// short-lived, and a rebuild left in the background would be cut off at its exit.
pub fn open_existing(path: &Path, recovery: RecoveryPolicy) -> CliResult<Db> {
    open_existing_with(
        path,
        Config::new().recovery(recovery).background_recovery(false),
    )
}

/// [`open_existing`] with `config` (its path is set here).
pub fn open_existing_with(path: &Path, config: Config) -> CliResult<Db> {
    if !is_database(path) {
        return Err(CliError::NotADatabase(path.to_path_buf()));
    }
    open_with(path, config)
}

/// Opens the database at `path` with `config` (its path is set here).
pub fn open_with(path: &Path, config: Config) -> CliResult<Db> {
    let db = config.path(path).open().map_err(|source| {
        if is_lock_error(path, &source) {
            CliError::InUse(path.to_path_buf())
        } else {
            CliError::Open {
                path: path.to_path_buf(),
                source,
            }
        }
    })?;
    // This open replaced the database record (sled lost it, or it was damaged): every
    // answer is now what the store holds, which may be less than it held. Said here, by
    // the open that repairs it, since later opens no longer see it.
    if let RecoveryOutcome::Rebuilt {
        reason: reason @ Distrust::DatabaseRecord(_),
    } = &db.recovery_report().outcome
    {
        eprintln!("bloomsled: warning: {}: {reason}", path.display());
    }
    Ok(db)
}

/// True if `err`, returned by opening the database at `path`, means that another process
/// holds the database's lock. The one place that knows how bloomsled and sled report it.
pub fn is_lock_error(path: &Path, err: &bloomsled::Error) -> bool {
    match err {
        bloomsled::Error::Io(io) => io_is_lock_error(path, io),
        _ => false,
    }
}

/// sled 0.34 reports a held lock as `ErrorKind::Other` and keeps the lock's own error only
/// in its message, so an `Other` is confirmed by trying the very lock sled takes (an
/// exclusive `flock` of `<db>/db`, through fs2 as sled does) and checking the kind of that
/// error.
pub fn io_is_lock_error(path: &Path, err: &io::Error) -> bool {
    err.kind() == io::ErrorKind::WouldBlock
        || (err.kind() == io::ErrorKind::Other && lock_is_held(path))
}

fn lock_is_held(path: &Path) -> bool {
    use fs2::FileExt;
    let Ok(file) = File::open(path.join("db")) else {
        return false;
    };
    // Closing the file releases the lock if the probe took it.
    match FileExt::try_lock_exclusive(&file) {
        Ok(()) => false,
        Err(e) => e.kind() == fs2::lock_contended_error().kind(),
    }
}

/// The tree `name`, or the default tree.
pub fn open_tree(db: &Db, name: Option<&str>) -> CliResult<Tree> {
    match name {
        None => Ok((**db).clone()),
        Some(n) => tree_by_name(db, n.as_bytes()),
    }
}

/// The existing tree `name`, or the default tree: for commands that only read, which must
/// not create a tree (sled's `open_tree` does) and answer for it.
pub fn existing_tree(db: &Db, name: Option<&str>) -> CliResult<Tree> {
    if let Some(n) = name {
        let known =
            n.as_bytes() == DEFAULT_TREE || db.tree_names().iter().any(|t| &t[..] == n.as_bytes());
        if !known {
            return Err(CliError::NoSuchTree(n.to_owned()));
        }
    }
    open_tree(db, name)
}

/// The tree named by the bytes `name` (the default tree's name included).
pub fn tree_by_name(db: &Db, name: &[u8]) -> CliResult<Tree> {
    if name == DEFAULT_TREE {
        return Ok((**db).clone());
    }
    db.open_tree(name).map_err(|source| CliError::Tree {
        name: String::from_utf8_lossy(name).into_owned(),
        source,
    })
}

/// Every tree of the database, the default one first, then the live generations of each
/// window (newest first).
pub fn all_trees(db: &Db) -> CliResult<Vec<Tree>> {
    let mut trees = vec![(**db).clone()];
    for name in db.tree_names() {
        if &*name != DEFAULT_TREE {
            trees.push(tree_by_name(db, &name)?);
        }
    }
    for w in all_windows(db)? {
        let gens = w
            .generation_trees()
            .map_err(|source| window_error(&w.name(), source))?;
        trees.extend(gens.into_iter().map(|(_, t)| t));
    }
    Ok(trees)
}

/// Every window of the database, opened as recorded on the wall clock (so a window whose
/// generations aged out since it was last used drops them now, as its next use would).
pub fn all_windows(db: &Db) -> CliResult<Vec<Window>> {
    let names = db
        .window_names()
        .map_err(|source| window_error(b"", source))?;
    names
        .iter()
        .map(|n| {
            db.open_existing_window(n)
                .map_err(|source| window_error(n, source))
        })
        .collect()
}

fn window_error(name: &[u8], source: bloomsled::Error) -> CliError {
    CliError::Tree {
        name: format!("window {}", String::from_utf8_lossy(name)),
        source,
    }
}

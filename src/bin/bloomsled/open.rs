//! Opening databases: which directory (a demo folder stands for the database inside it),
//! which filter mode (the one its snapshots record), and a clear error when another
//! process holds it.

use std::fs::File;
use std::io;
use std::path::{Path, PathBuf};

use bloomsled::{Config, Db, FilterMode, Recovery, Tree};

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

/// Opens an existing database (never creates one) in the mode and size its snapshots
/// record, so that a filter rebuilt at open (a snapshot it cannot trust) keeps them.
pub fn open_existing(path: &Path, recovery: Recovery) -> CliResult<Db> {
    if !is_database(path) {
        return Err(CliError::NotADatabase(path.to_path_buf()));
    }
    open_with(path, stored_config(path)?.recovery(recovery))
}

/// The settings of the database's default tree as its snapshot header records them, else
/// the defaults in the mode the other trees' headers record.
pub fn stored_config(path: &Path) -> CliResult<Config> {
    match bloomsled::stored_filter(path, DEFAULT_TREE) {
        Some(stored) => Ok(stored.config()),
        None => Ok(base_config(db_mode(path)?.unwrap_or_default())),
    }
}

/// Default settings in `mode`.
pub fn base_config(mode: FilterMode) -> Config {
    Config::new().counting(mode == FilterMode::Counting)
}

/// Opens the database at `path` with `config` (its path is set here).
pub fn open_with(path: &Path, config: Config) -> CliResult<Db> {
    config.path(path).open().map_err(|source| {
        if is_lock_error(path, &source) {
            CliError::InUse(path.to_path_buf())
        } else {
            CliError::Open {
                path: path.to_path_buf(),
                source,
            }
        }
    })
}

/// The filter mode the database's snapshots record: the default tree's, else the first
/// other tree's that has a readable header; `None` if no header says. Opening a counting
/// database in plain mode would rebuild its filters as plain ones, and the reverse.
pub fn db_mode(path: &Path) -> CliResult<Option<FilterMode>> {
    if let Some(mode) = bloomsled::persist::stored_mode(path, DEFAULT_TREE) {
        return Ok(Some(mode));
    }
    if !path.join(bloomsled::persist::DIR_NAME).is_dir() {
        return Ok(None);
    }
    Ok(sled_tree_names(path)?
        .iter()
        .find_map(|name| bloomsled::persist::stored_mode(path, name)))
}

/// The names of every tree, read with sled alone (bloomsled loads no filter), the default
/// tree first; bloomsled's reserved internal trees are left out.
pub fn sled_tree_names(path: &Path) -> CliResult<Vec<Vec<u8>>> {
    let db = sled::Config::new()
        .path(path)
        .open()
        .map_err(|e| match &e {
            sled::Error::Io(io) if io_is_lock_error(path, io) => {
                CliError::InUse(path.to_path_buf())
            }
            _ => CliError::Open {
                path: path.to_path_buf(),
                source: e.into(),
            },
        })?;
    let mut names = vec![DEFAULT_TREE.to_vec()];
    for name in db.tree_names() {
        if &*name != DEFAULT_TREE && !name.starts_with(bloomsled::RESERVED_PREFIX) {
            names.push(name.to_vec());
        }
    }
    Ok(names)
}

/// True if `err`, returned by opening the database at `path`, means that another process
/// holds the database's lock. The one place that knows how bloomsled and sled report it.
pub fn is_lock_error(path: &Path, err: &bloomsled::Error) -> bool {
    match err {
        bloomsled::Error::Sled(sled::Error::Io(io)) | bloomsled::Error::Io(io) => {
            io_is_lock_error(path, io)
        }
        _ => false,
    }
}

/// sled 0.34 reports a held lock as `ErrorKind::Other` and keeps the lock's own error only
/// in its message, so an `Other` is confirmed by trying the very lock sled takes (an
/// exclusive `flock` of `<db>/db`, through fs2 as sled does) and checking the kind of that
/// error.
fn io_is_lock_error(path: &Path, err: &io::Error) -> bool {
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

/// Every tree of the database, the default one first.
pub fn all_trees(db: &Db) -> CliResult<Vec<Tree>> {
    let mut trees = vec![(**db).clone()];
    for name in db.tree_names() {
        if &*name != DEFAULT_TREE {
            trees.push(tree_by_name(db, &name)?);
        }
    }
    Ok(trees)
}

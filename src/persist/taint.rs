//! Database folders (or files) whose sync failed in this process, and the rewrite that
//! makes them safe to open again.
//!
//! A failed sync poisons the open database ([`super::poison`]), and reopening it is the
//! cure. But in the same boot a reopen reads the page cache, and after a failed `fsync`
//! Linux may have dropped the pages it covered while the cache still shows them: sled takes
//! that state for durable and appends to it, its later fsyncs succeed, and a power cut
//! leaves a log whose later writes follow a hole; sled 0.34 then refuses the whole folder
//! (`Corruption`; `tests/failed_fsync.rs` shows it). So the first failed sync marks the
//! database's folder, and the next open of that folder in this process first rewrites
//! every file under it: each is copied, as this process reads it, into a new file that is
//! fsynced and renamed over it, and each folder is fsynced. The disk then holds what a
//! reader sees, and what the reopen recovers from is durable. The cost is one copy of the
//! database's files, once, after a failure. A failure another process saw before a restart
//! in the same boot is not known here.

use std::collections::HashSet;
use std::fs::{self, File};
use std::io;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use crate::error::{Error, Result};

static TAINTED: Mutex<Option<HashSet<PathBuf>>> = Mutex::new(None);

/// The key of `folder` in the set: its absolute form.
fn key(folder: &Path) -> PathBuf {
    std::path::absolute(folder).unwrap_or_else(|_| folder.to_path_buf())
}

/// Marks `folder` (or a file): a sync of one of its files failed in this process.
pub(crate) fn mark(folder: &Path) {
    TAINTED
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .get_or_insert_with(HashSet::new)
        .insert(key(folder));
}

fn marked(folder: &Path) -> bool {
    TAINTED
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .as_ref()
        .is_some_and(|s| s.contains(&key(folder)))
}

fn unmark(folder: &Path) {
    if let Some(s) = TAINTED.lock().unwrap_or_else(|e| e.into_inner()).as_mut() {
        s.remove(&key(folder));
    }
}

/// Before an open of the database at `path` (a folder, or one file): rewrites its files if
/// a sync of one failed in this process (see the module docs). True if it rewrote. An
/// error names the file and the step; the path stays marked.
pub(crate) fn heal(path: &Path) -> Result<bool> {
    if !marked(path) || !path.exists() {
        return Ok(false);
    }
    log::warn!(
        "bloomsled: a sync of {} failed earlier in this process: rewriting it before it is \
         opened again",
        path.display()
    );
    if path.is_dir() {
        rewrite_folder(path)?;
    } else {
        rewrite_file(path)?;
        let parent = match path.parent() {
            Some(p) if !p.as_os_str().is_empty() => p,
            _ => Path::new("."),
        };
        sync_folder(parent)?;
    }
    unmark(path);
    Ok(true)
}

fn rewrite_folder(folder: &Path) -> Result<()> {
    let entries = fs::read_dir(folder).map_err(|e| failed(folder, "list", e))?;
    for entry in entries {
        let entry = entry.map_err(|e| failed(folder, "list", e))?;
        let path = entry.path();
        let kind = entry.file_type().map_err(|e| failed(&path, "stat", e))?;
        if kind.is_dir() {
            rewrite_folder(&path)?;
        } else if kind.is_file() && !is_copy(&path) {
            rewrite_file(&path)?;
        }
    }
    sync_folder(folder)
}

fn sync_folder(folder: &Path) -> Result<()> {
    #[cfg(unix)]
    File::open(folder)
        .and_then(|d| d.sync_all())
        .map_err(|e| failed(folder, "fsync of the folder", e))?;
    #[cfg(not(unix))]
    let _ = folder;
    Ok(())
}

const COPY_SUFFIX: &str = ".bloomsled-rewrite";

fn is_copy(path: &Path) -> bool {
    path.to_string_lossy().ends_with(COPY_SUFFIX)
}

fn rewrite_file(path: &Path) -> Result<()> {
    let mut name = path.as_os_str().to_os_string();
    name.push(COPY_SUFFIX);
    let tmp = PathBuf::from(name);
    {
        let mut src = File::open(path).map_err(|e| failed(path, "open", e))?;
        let mut dst = File::create(&tmp).map_err(|e| failed(&tmp, "create", e))?;
        io::copy(&mut src, &mut dst).map_err(|e| failed(path, "copy", e))?;
        dst.sync_all().map_err(|e| failed(&tmp, "fsync", e))?;
    }
    fs::rename(&tmp, path).map_err(|e| failed(path, "rename of the copy over", e))
}

fn failed(path: &Path, step: &str, e: io::Error) -> Error {
    Error::Io(io::Error::new(
        e.kind(),
        format!(
            "rewriting {} after a failed sync in this process ({step}): {e}",
            path.display()
        ),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_marked_folder_is_rewritten_once_with_the_same_bytes() {
        let dir = tempfile::tempdir().unwrap();
        let db = dir.path().join("db");
        fs::create_dir_all(db.join("bloomsled")).unwrap();
        fs::write(db.join("log"), b"sled's bytes").unwrap();
        fs::write(db.join("bloomsled/t.snap"), b"a snapshot").unwrap();
        assert!(!heal(&db).unwrap(), "not marked: untouched");
        mark(&db);
        assert!(heal(&db).unwrap());
        assert!(!marked(&db));
        assert_eq!(fs::read(db.join("log")).unwrap(), b"sled's bytes");
        assert_eq!(
            fs::read(db.join("bloomsled/t.snap")).unwrap(),
            b"a snapshot"
        );
        assert_eq!(fs::read_dir(&db).unwrap().count(), 2, "no copy left behind");
    }
}

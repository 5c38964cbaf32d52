//! Files whose write failed in this process, and the rewrite that makes them safe to open.
//!
//! After a failed `fsync`, Linux may have marked the pages it covered clean while the disk
//! never got them ("fsyncgate"): the page cache still shows the new bytes, the disk the
//! old ones. redb refuses every transaction on that handle (`PreviousIo`), but a handle
//! opened again in the same boot reads the page cache, takes the failed commit's state for
//! durable, and builds its next commits on it; its later fsyncs succeed, and a power cut
//! then leaves a file whose newest roots point at pages the disk never got and whose older
//! ones were overwritten: redb cannot open it at all (`tests/fault_matrix.rs` lost whole
//! files this way, the failed fsync being a clean close's, which a drop cannot report).
//!
//! So a write that failed through this crate (a commit, a clean close, redb's own close)
//! marks the file, and the next `Builder::create` or `open` of that path in this process
//! first rewrites it: the bytes as this process reads them are copied into a new file in the
//! same folder, which is fsynced and renamed over the old one, and the folder fsynced. What
//! the disk holds is then what a reader sees, and redb's own recovery at open picks a
//! consistent commit from it. The cost is one copy of the file, once, after a failure. A
//! file opened through a `File` or a backend has no path and cannot be marked; nor can a
//! failure another process saw.

use std::collections::HashSet;
use std::fs::{self, File};
use std::io;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use redb::{DatabaseError, StorageError};

static TAINTED: Mutex<Option<HashSet<PathBuf>>> = Mutex::new(None);

/// The key of `path` in the set: its absolute form (the file may no longer exist).
fn key(path: &Path) -> PathBuf {
    std::path::absolute(path).unwrap_or_else(|_| path.to_path_buf())
}

/// Marks `path`: a write to it failed in this process.
pub(crate) fn mark(path: &Path) {
    TAINTED
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .get_or_insert_with(HashSet::new)
        .insert(key(path));
}

fn marked(path: &Path) -> bool {
    TAINTED
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .as_ref()
        .is_some_and(|s| s.contains(&key(path)))
}

fn unmark(path: &Path) {
    if let Some(s) = TAINTED.lock().unwrap_or_else(|e| e.into_inner()).as_mut() {
        s.remove(&key(path));
    }
}

/// True if `e` says a write of the file may not have reached the disk.
pub(crate) fn is_write_failure(e: &StorageError) -> bool {
    matches!(e, StorageError::Io(_) | StorageError::PreviousIo)
}

/// Before an open of `path`: rewrites it if a write to it failed in this process (see the
/// module docs). An error names the step; the file is left marked and as it was.
pub(crate) fn heal(path: &Path) -> Result<(), DatabaseError> {
    if !marked(path) || !path.exists() {
        return Ok(());
    }
    rewrite(path).map_err(|e| {
        let what = format!(
            "a write to {} failed earlier in this process; rewriting it before it is opened \
             again: {e}",
            path.display()
        );
        DatabaseError::Storage(StorageError::Io(io::Error::new(e.kind(), what)))
    })?;
    unmark(path);
    Ok(())
}

fn rewrite(path: &Path) -> io::Result<()> {
    let name = path
        .file_name()
        .ok_or_else(|| io::Error::other("the path names no file"))?;
    let mut tmp_name = name.to_os_string();
    tmp_name.push(".bloomsled-rewrite");
    let tmp = path.with_file_name(tmp_name);
    let step =
        |what: &'static str| move |e: io::Error| io::Error::new(e.kind(), format!("{what}: {e}"));
    {
        let mut src = File::open(path).map_err(step("open"))?;
        let mut dst = File::create(&tmp).map_err(step("create the copy"))?;
        io::copy(&mut src, &mut dst).map_err(step("copy"))?;
        dst.sync_all().map_err(step("fsync of the copy"))?;
    }
    fs::rename(&tmp, path).map_err(step("rename of the copy over the file"))?;
    let dir = match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    };
    #[cfg(unix)]
    File::open(dir)
        .and_then(|d| d.sync_all())
        .map_err(step("fsync of the folder"))?;
    #[cfg(not(unix))]
    let _ = dir;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_marked_file_is_rewritten_once_with_the_same_bytes() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("a.redb");
        fs::write(&path, b"the bytes a reader sees").unwrap();
        heal(&path).unwrap(); // not marked: untouched
        mark(&path);
        assert!(marked(&path));
        heal(&path).unwrap();
        assert!(!marked(&path));
        assert_eq!(fs::read(&path).unwrap(), b"the bytes a reader sees");
        assert_eq!(
            fs::read_dir(dir.path()).unwrap().count(),
            1,
            "no copy left behind"
        );
    }
}

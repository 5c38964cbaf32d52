//! Database folders (or files) whose sync failed in this boot, and the rewrite that
//! makes them safe to open again.
//!
//! A failed sync poisons the open database ([`super::poison`]), and reopening it is the
//! cure. But in the same boot a reopen reads the page cache, and after a failed `fsync`
//! Linux may have dropped the pages it covered while the cache still shows them: sled takes
//! that state for durable and appends to it, its later fsyncs succeed, and a power cut
//! leaves a log whose later writes follow a hole; sled 0.34 then refuses the whole folder
//! (`Corruption`; `tests/failed_fsync.rs` shows it). So the first failed sync marks the
//! database's folder, and the next open of that folder (in this process or, see below, the next) first rewrites
//! every file under it: each is copied, as this process reads it, into a new file that is
//! fsynced and renamed over it, and each folder is fsynced. The disk then holds what a
//! reader sees, and what the reopen recovers from is durable. The cost is one copy of the
//! database's files, once, after a failure.
//!
//! The mark is also a file, [`marker`] (inside the folder; beside a one-file database),
//! written when the failure is seen and removed when a rewrite completes: a process killed
//! after the failure, or in the middle of the rewrite, leaves it, and the next open in any
//! process rewrites (again). It is not fsynced: what it guards against is the page cache of
//! this boot, which it lives in; one that outlives a reboot costs one needless rewrite. A
//! rewrite that fails (a full disk) removes its partial copy and keeps the mark; one killed
//! leaves a partial copy (`*.bloomsled-rewrite`), which the next rewrite removes. If even the
//! marker cannot be written (the failure is logged), a restart in the same boot does not
//! know: reboot first, or copy the folder the same way.

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

/// Marks `folder` (or a file): a sync of one of its files failed in this process. Also on
/// disk (see the module docs), best effort.
pub(crate) fn mark(folder: &Path) {
    TAINTED
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .get_or_insert_with(HashSet::new)
        .insert(key(folder));
    let m = marker(folder);
    if let Err(e) = File::create(&m) {
        log::error!(
            "bloomsled: could not write {} after a failed sync ({e}): a restart in this boot \
             will not know to rewrite {}",
            m.display(),
            folder.display()
        );
    }
}

/// Suffix of the file that marks a database as needing a rewrite.
const MARKER_SUFFIX: &str = ".bloomsled-rewrite-needed";

/// The on-disk mark of `path`: `<folder>/bloomsled-rewrite-needed` for a folder,
/// `<file>.bloomsled-rewrite-needed` beside a file.
pub(crate) fn marker(path: &Path) -> PathBuf {
    if path.is_dir() {
        path.join(&MARKER_SUFFIX[1..])
    } else {
        let mut name = path.as_os_str().to_os_string();
        name.push(MARKER_SUFFIX);
        PathBuf::from(name)
    }
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
/// a sync of one failed in this boot (see the module docs). True if it rewrote. An
/// error names the file and the step; the path stays marked.
pub(crate) fn heal(path: &Path) -> Result<bool> {
    if !path.exists() || !(marked(path) || marker(path).exists()) {
        return Ok(false);
    }
    log::warn!(
        "bloomsled: a sync of {} failed earlier in this boot: rewriting it before it is \
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
    match fs::remove_file(marker(path)) {
        Err(e) if e.kind() != io::ErrorKind::NotFound => {
            Err(failed(&marker(path), "removal of the mark", e))
        }
        _ => Ok(true),
    }
}

fn rewrite_folder(folder: &Path) -> Result<()> {
    let mut entries = Vec::new();
    for entry in fs::read_dir(folder).map_err(|e| failed(folder, "list", e))? {
        let entry = entry.map_err(|e| failed(folder, "list", e))?;
        let path = entry.path();
        let kind = entry.file_type().map_err(|e| failed(&path, "stat", e))?;
        entries.push((path, kind));
    }
    // The partial copies of a rewrite that was killed go first (their originals are
    // intact), before this rewrite makes copies of the same names.
    for (path, kind) in &entries {
        if kind.is_file() && is_copy(path) {
            fs::remove_file(path).map_err(|e| failed(path, "removal of a partial copy", e))?;
        }
    }
    for (path, kind) in &entries {
        if kind.is_dir() {
            rewrite_folder(path)?;
        } else if kind.is_file()
            && !is_copy(path)
            && !path.to_string_lossy().ends_with(&MARKER_SUFFIX[1..])
        {
            rewrite_file(path)?;
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

/// Copies `path` into `<path>.bloomsled-rewrite`, fsyncs the copy and renames it over
/// `path`. On any failure the copy is removed (a full disk gets its space back) and the
/// original is as it was.
fn rewrite_file(path: &Path) -> Result<()> {
    let mut name = path.as_os_str().to_os_string();
    name.push(COPY_SUFFIX);
    let tmp = PathBuf::from(name);
    let copied = (|| {
        let mut src = File::open(path).map_err(|e| failed(path, "open", e))?;
        let mut dst = File::create(&tmp).map_err(|e| failed(&tmp, "create", e))?;
        copy_through_memory(&mut src, &mut dst).map_err(|e| failed(&tmp, "copy", e))?;
        dst.sync_all().map_err(|e| failed(&tmp, "fsync", e))?;
        fs::rename(&tmp, path).map_err(|e| failed(path, "rename of the copy over", e))
    })();
    if copied.is_err() {
        let _ = fs::remove_file(&tmp);
    }
    copied
}

/// Copies `src` into `dst` through this process's memory: `read` then `write`, never
/// `io::copy`, whose kernel-side copy (`copy_file_range`) may share the source's blocks on
/// the disk (a reflink on btrfs or XFS) instead of writing what the page cache shows, which
/// is the point of the rewrite. A chunk of zeroes is skipped, not written, so a sparse file
/// (a crash journal is one) stays sparse and a rewrite needs room only for its data; the
/// copy reads the same either way.
fn copy_through_memory(src: &mut File, dst: &mut File) -> io::Result<()> {
    use std::io::{Read, Seek, SeekFrom, Write};
    let mut buf = vec![0u8; 64 << 10];
    let mut len = 0u64;
    loop {
        let n = match src.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        };
        if buf[..n].iter().all(|&b| b == 0) {
            dst.seek(SeekFrom::Current(n as i64))?;
        } else {
            dst.write_all(&buf[..n])?;
        }
        len += n as u64;
    }
    dst.set_len(len)
}

fn failed(path: &Path, step: &str, e: io::Error) -> Error {
    Error::Io(io::Error::new(
        e.kind(),
        format!(
            "rewriting {} after a failed sync ({step}): {e}",
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
        assert_eq!(
            fs::read_dir(&db).unwrap().count(),
            2,
            "no copy or mark left behind"
        );
    }

    #[test]
    fn the_mark_on_disk_outlives_the_process_and_a_killed_rewrite_is_redone() {
        let dir = tempfile::tempdir().unwrap();
        let db = dir.path().join("db");
        fs::create_dir_all(&db).unwrap();
        fs::write(db.join("log"), b"sled's bytes").unwrap();
        mark(&db);
        assert!(marker(&db).exists());
        // Another process (no mark in memory), after one killed mid-rewrite: a partial copy.
        unmark(&db);
        fs::write(db.join("log.bloomsled-rewrite"), b"sled's").unwrap();
        assert!(heal(&db).unwrap(), "the mark on disk asks for the rewrite");
        assert_eq!(fs::read(db.join("log")).unwrap(), b"sled's bytes");
        let left: Vec<_> = fs::read_dir(&db)
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(left, vec![std::ffi::OsString::from("log")]);
        assert!(!heal(&db).unwrap(), "done: no mark left");
    }

    #[cfg(unix)]
    #[test]
    fn a_sparse_file_is_copied_sparse_with_the_same_bytes() {
        use std::io::{Seek, SeekFrom, Write};
        use std::os::unix::fs::MetadataExt;
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("j.jnl");
        let mut f = File::create(&file).unwrap();
        f.write_all(b"header").unwrap();
        f.seek(SeekFrom::Start(8 << 20)).unwrap();
        f.write_all(b"a record").unwrap();
        f.set_len(32 << 20).unwrap();
        drop(f);
        let before = fs::read(&file).unwrap();
        mark(&file);
        assert!(heal(&file).unwrap());
        assert_eq!(fs::read(&file).unwrap(), before);
        let blocks = fs::metadata(&file).unwrap().blocks() * 512;
        assert!(
            blocks < 1 << 20,
            "the copy filled its holes: {blocks} bytes"
        );
    }

    #[test]
    fn a_one_file_database_is_marked_beside_it() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("a.redb");
        fs::write(&file, b"bytes").unwrap();
        mark(&file);
        assert!(dir.path().join("a.redb.bloomsled-rewrite-needed").exists());
        unmark(&file);
        assert!(heal(&file).unwrap());
        assert_eq!(fs::read_dir(dir.path()).unwrap().count(), 1);
        assert_eq!(fs::read(&file).unwrap(), b"bytes");
    }
}

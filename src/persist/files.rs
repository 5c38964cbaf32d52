//! Snapshot files: `<db>/bloomsled/<tree id>.snap`, one per tree, named by the tree's random
//! id (so neither a tree name's bytes nor its length nor a hash collision decide the path).
//!
//! A snapshot is replaced atomically: written to `<tree id>.snap.tmp`, fsynced, renamed over
//! the old file, and the directory fsynced, so a reader sees one whole snapshot or the
//! previous one. A failed write (a full disk) removes its temporary file before returning.

use std::fs::{self, File};
use std::io::{self, BufWriter, Read, Seek, Write};
use std::path::{Path, PathBuf};
#[cfg(feature = "failpoints")]
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use super::poison::{At, FileFault, Step};
use crate::error::{Distrust, Error, Result};
use crate::format::{self, SnapshotMeta};

/// Subdirectory of the sled directory holding bloomsled's snapshot files.
pub const DIR_NAME: &str = "bloomsled";

/// Bytes snapshot writes may still write before failing as a full disk would (`u64::MAX`:
/// no limit). A test seam: see [`fail_snapshot_writes_after`].
#[cfg(feature = "failpoints")]
static WRITE_BUDGET: AtomicU64 = AtomicU64::new(u64::MAX);

/// Fault injection for tests: snapshot writes fail with ENOSPC ("no space left on device")
/// once `bytes` more bytes were written, as on a full disk; `None` lifts the limit.
/// Process-wide, so use it only in a test binary of its own. Feature `failpoints` only.
///
/// ```
/// bloomsled::persist::fail_snapshot_writes_after(Some(4096));
/// bloomsled::persist::fail_snapshot_writes_after(None);
/// ```
#[cfg(feature = "failpoints")]
pub fn fail_snapshot_writes_after(bytes: Option<u64>) {
    WRITE_BUDGET.store(bytes.unwrap_or(u64::MAX), Ordering::SeqCst);
}

/// The error a full disk gives: ENOSPC.
#[cfg(feature = "failpoints")]
fn no_space() -> io::Error {
    #[cfg(unix)]
    return io::Error::from_raw_os_error(28);
    #[cfg(not(unix))]
    return io::Error::other("no space left on device");
}

/// A writer that spends `WRITE_BUDGET` (feature `failpoints`; a plain pass-through
/// without it).
struct Budgeted<W>(W);

impl<W: Write> Write for Budgeted<W> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        #[cfg(feature = "failpoints")]
        let budget = WRITE_BUDGET.load(Ordering::Relaxed);
        #[cfg(feature = "failpoints")]
        if budget != u64::MAX {
            if budget < buf.len() as u64 {
                WRITE_BUDGET.store(0, Ordering::Relaxed);
                return Err(no_space());
            }
            WRITE_BUDGET.store(budget - buf.len() as u64, Ordering::Relaxed);
        }
        self.0.write(buf)
    }

    fn flush(&mut self) -> io::Result<()> {
        self.0.flush()
    }
}

impl<W: Seek> Seek for Budgeted<W> {
    fn seek(&mut self, pos: io::SeekFrom) -> io::Result<u64> {
        self.0.seek(pos)
    }
}

/// The snapshot file of one tree.
#[derive(Debug, Clone)]
pub(crate) struct SnapshotFile {
    /// The database's `bloomsled` folder, shared by its trees: the names are built when
    /// used, so an open tree holds none.
    dir: Arc<Path>,
    tree_id: [u8; 16],
    /// The path, built by the first [`SnapshotFile::path_ref`] (the public accessor's).
    path: std::sync::OnceLock<PathBuf>,
}

impl SnapshotFile {
    /// The snapshot of tree `tree_id` in `files_dir` (the database's `bloomsled` folder).
    pub(crate) fn new(files_dir: Arc<Path>, tree_id: &[u8; 16]) -> Self {
        SnapshotFile {
            dir: files_dir,
            tree_id: *tree_id,
            path: std::sync::OnceLock::new(),
        }
    }

    /// The snapshot of tree `tree_id` of the database at `db_dir`.
    pub(crate) fn in_db(db_dir: &Path, tree_id: &[u8; 16]) -> Self {
        SnapshotFile::new(Arc::from(db_dir.join(DIR_NAME)), tree_id)
    }

    /// `<tree id>.snap`.
    pub(crate) fn path(&self) -> PathBuf {
        self.name("snap")
    }

    /// [`SnapshotFile::path`], kept once asked for.
    pub(crate) fn path_ref(&self) -> &Path {
        self.path.get_or_init(|| self.path())
    }

    /// `<tree id>.snap.tmp`, where a snapshot is written before its rename.
    fn tmp(&self) -> PathBuf {
        self.name("snap.tmp")
    }

    fn name(&self, extension: &str) -> PathBuf {
        let stem = super::journal_names::hex(&self.tree_id);
        self.dir.join(format!("{stem}.{extension}"))
    }

    /// The file's bytes: `Ok(Err)` if it is missing or unreadable (a reason to distrust),
    /// `Err` if its size cannot be allocated.
    pub(crate) fn read(&self) -> Result<std::result::Result<Vec<u8>, Distrust>> {
        let mut f = match File::open(self.path()) {
            Ok(f) => f,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(Err(Distrust::Missing)),
            Err(e) => return Ok(Err(Distrust::Io(e.to_string()))),
        };
        let len = match f.metadata() {
            Ok(m) => m.len(),
            Err(e) => return Ok(Err(Distrust::Io(e.to_string()))),
        };
        let mut bytes = Vec::new();
        bytes
            .try_reserve_exact(len as usize)
            .map_err(|_| Error::OutOfMemory {
                what: "reading a snapshot",
                bytes: len,
            })?;
        // Exactly the length asked of the open file (a snapshot is replaced by a rename,
        // never rewritten in place): one read, where `read_to_end` asks the size again and
        // reads once more to meet the end.
        bytes.resize(len as usize, 0);
        match f.read_exact(&mut bytes) {
            Ok(()) => Ok(Ok(bytes)),
            Err(e) => Ok(Err(Distrust::Io(e.to_string()))),
        }
    }

    /// The header alone, if the file exists and its header is intact.
    pub(crate) fn peek_header(&self) -> Option<format::Header> {
        let mut buf = [0u8; format::HEADER_LEN];
        File::open(self.path()).ok()?.read_exact(&mut buf).ok()?;
        format::parse_header(&buf).ok()
    }

    /// Writes a snapshot atomically; returns the bytes written. On failure the temporary
    /// file is gone, the previous snapshot untouched, and the error names the file and
    /// the step (a failed fsync poisons the database: the caller's `Meta::absorb`). Without `sync_dir`, the rename is
    /// made durable later by [`sync_snapshot_dir`] (one directory fsync for many trees),
    /// which must come before anything names the new file durably.
    pub(crate) fn write(
        &self,
        meta: &SnapshotMeta,
        words: &[u64],
        page_size: u32,
        sync_dir_now: bool,
    ) -> std::result::Result<u64, FileFault> {
        fs::create_dir_all(&*self.dir).at(&self.dir, Step::Create)?;
        let (tmp, path) = (&self.tmp(), &self.path());
        let result = (|| {
            let file = File::create(tmp).at(tmp, Step::Create)?;
            let mut out = Budgeted(BufWriter::with_capacity(1 << 16, file));
            let written =
                format::encode_to(meta, words, page_size, &mut out).at(tmp, Step::Write)?;
            let file = out
                .0
                .into_inner()
                .map_err(|e| e.into_error())
                .at(tmp, Step::Write)?;
            file.sync_all().at(tmp, Step::Fsync)?;
            drop(file);
            fs::rename(tmp, path).at(path, Step::Rename)?;
            if sync_dir_now {
                sync_dir(&self.dir)?;
            }
            Ok(written)
        })();
        if result.is_err() {
            match fs::remove_file(tmp) {
                Err(e) if e.kind() != io::ErrorKind::NotFound => {
                    log::warn!("bloomsled: cannot remove {}: {e}", tmp.display());
                }
                _ => {}
            }
        }
        result
    }

    /// Deletes the snapshot and any temporary file (the directory is fsynced if one was
    /// there and `sync_dir_now`).
    pub(crate) fn remove(&self, sync_dir_now: bool) -> std::result::Result<(), FileFault> {
        let mut removed = false;
        for p in [&self.path(), &self.tmp()] {
            match fs::remove_file(p) {
                Ok(()) => removed = true,
                Err(e) if e.kind() != io::ErrorKind::NotFound => return Err(e).at(p, Step::Remove),
                Err(_) => {}
            }
        }
        if removed && sync_dir_now {
            sync_dir(&self.dir)?;
        }
        Ok(())
    }
}

/// Makes every rename and removal in the database's snapshot directory durable (see
/// [`SnapshotFile::write`]).
pub(crate) fn sync_snapshot_dir(db_dir: &Path) -> std::result::Result<(), FileFault> {
    match sync_dir(&db_dir.join(DIR_NAME)) {
        Err(f) if f.error.kind() != io::ErrorKind::NotFound => Err(f),
        _ => Ok(()),
    }
}

fn sync_dir(dir: &Path) -> std::result::Result<(), FileFault> {
    File::open(dir)
        .at(dir, Step::Open)?
        .sync_all()
        .at(dir, Step::FsyncDir)
}

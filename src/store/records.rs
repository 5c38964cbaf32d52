//! sled's side of the persistence layer's store boundary (`persist::RecordStore`,
//! `persist::TreeKeys`): bloomsled's records in the sled tree `META_TREE`, made durable
//! by sled's flush and an fsync of sled's log, with sled's error texts and step names.

use std::fs::File;
use std::path::{Path, PathBuf};

use crate::error::{Error, Result};
use crate::persist::{At, EachRecord, FileFault, RecordStore, Step, TreeKeys, META_TREE};

/// The step name errors give sled's `flush()`.
const SLED_FLUSH: Step = Step::StoreFlush("sled's flush");

/// bloomsled's records in one sled database: its tree [`META_TREE`].
pub(crate) struct SledRecords {
    tree: sled::Tree,
    /// sled's log file, fsynced after each durable write: sled's own `flush()` ends in
    /// `sync_file_range(2)`, which survives a process crash but not a power cut
    /// (spacejam/sled#1452). `None` for a database without one on disk (until
    /// [`RecordStore::open_durably`], always).
    log: Option<File>,
    /// The database's folder (sled's log is `db` in it).
    dir: PathBuf,
    /// sled's settings, whose global error says a write of sled's failed (see
    /// [`sled_flush`]).
    sled: sled::Config,
}

impl SledRecords {
    /// The records of the sled database `db` (opened with `sled` at `dir`): opens its tree
    /// [`META_TREE`].
    pub(crate) fn open(db: &sled::Db, sled: &sled::Config, dir: &Path) -> Result<SledRecords> {
        let tree = db
            .open_tree(META_TREE)
            .map_err(|e| read_failed(dir, e.into()))?;
        Ok(SledRecords {
            tree,
            log: None,
            dir: dir.to_path_buf(),
            sled: sled.clone(),
        })
    }
}

/// An error of reading sled's store at open; an I/O error names the store and the step
/// (its kind kept).
fn read_failed(dir: &Path, e: Error) -> Error {
    match e {
        Error::Io(io) => Error::Io(std::io::Error::new(
            io.kind(),
            format!("read of sled's store {}: {io}", dir.display()),
        )),
        other => other,
    }
}

impl RecordStore for SledRecords {
    fn get(&self, key: &[u8]) -> Result<Option<Vec<u8>>> {
        Ok(self.tree.get(key)?.map(|v| v.to_vec()))
    }

    fn insert(&self, key: &[u8], value: &[u8]) -> Result<()> {
        self.tree.insert(key, value)?;
        Ok(())
    }

    fn remove(&self, key: &[u8]) -> Result<()> {
        self.tree.remove(key)?;
        Ok(())
    }

    fn for_each_with_prefix(&self, prefix: &[u8], each: &mut EachRecord<'_>) -> Result<()> {
        for entry in self.tree.scan_prefix(prefix) {
            let (key, value) = entry?;
            each(&key, &value)?;
        }
        Ok(())
    }

    fn is_empty(&self) -> Result<bool> {
        Ok(self.tree.first()?.is_none())
    }

    fn read_failed(&self, e: Error) -> Error {
        read_failed(&self.dir, e)
    }

    fn open_durably(&mut self) -> std::result::Result<(), FileFault> {
        self.log = open_log(&self.dir)?;
        Ok(())
    }

    fn flush(&self) -> std::result::Result<usize, FileFault> {
        sled_flush(&self.tree, &self.sled).map_err(|e| self.flush_fault(e.to_string()))
    }

    fn sync(&self) -> std::result::Result<(), FileFault> {
        match &self.log {
            Some(log) => log.sync_all().at(&self.dir.join("db"), Step::Fsync),
            None => Ok(()),
        }
    }

    fn flush_fault(&self, error: String) -> FileFault {
        FileFault {
            path: self.dir.join("db"),
            step: SLED_FLUSH,
            error: std::io::Error::other(error),
        }
    }
}

/// A user's tree, as recovery asks of it.
impl TreeKeys for sled::Tree {
    fn is_empty(&self) -> Result<bool> {
        Ok(self.first()?.is_none())
    }
}

/// sled's `flush()`, which must not wait forever for a write that failed.
///
/// sled 0.34 records a failed write of its log (made by its I/O threads) as its global
/// error without waking a flush already waiting for that write to become stable: such a
/// flush would wait forever (found by `tests/fault_matrix.rs`). A flush sled starts once
/// the error is recorded returns it at once and wakes the waiters, so a watchdog beside the
/// flush starts one as soon as the error appears.
fn sled_flush(tree: &sled::Tree, sled: &sled::Config) -> sled::Result<usize> {
    use std::sync::atomic::{AtomicBool, Ordering};
    let done = AtomicBool::new(false);
    std::thread::scope(|s| {
        let watchdog = s.spawn(|| {
            while !done.load(Ordering::Acquire) {
                if sled.global_error().is_err() {
                    let _ = tree.flush();
                    return;
                }
                std::thread::park_timeout(std::time::Duration::from_millis(20));
            }
        });
        let flushed = tree.flush();
        done.store(true, Ordering::Release);
        watchdog.thread().unpark();
        flushed
    })
}

/// sled's log file `<db>/db`, with its name made durable (sled never fsyncs its folder),
/// and the database folder's own name too (sled creates it and never fsyncs its parent: on
/// a file system that commits a name only with its folder, a power cut would otherwise
/// take a new database away whole, every flush it returned included).
///
/// sled's `conf` (its segment size and compression, written once when sled creates the
/// database, never fsynced) is fsynced here too, before anything bloomsled makes durable:
/// otherwise a power cut could keep flushed data and lose `conf`, and the next open would
/// write a new one from its own settings and read the log with them, where sled refuses
/// settings that differ from the creator's (`tests/power_cut.rs`).
fn open_log(db_dir: &Path) -> std::result::Result<Option<File>, FileFault> {
    let Ok(log) = File::open(db_dir.join("db")) else {
        return Ok(None);
    };
    let conf = db_dir.join("conf");
    match File::open(&conf) {
        Ok(f) => f.sync_all().at(&conf, Step::Fsync)?,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => Err::<(), _>(e).at(&conf, Step::Open)?,
    }
    let folder = File::open(db_dir).at(db_dir, Step::Open)?;
    folder.sync_all().at(db_dir, Step::FsyncDir)?;
    let parent = match db_dir.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    };
    // A parent this process may not read cannot be fsynced by it either.
    if let Ok(f) = File::open(parent) {
        f.sync_all().at(parent, Step::FsyncDir)?;
    }
    Ok(Some(log))
}

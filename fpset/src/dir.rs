//! The set's folder: its lock, its manifest (written atomically), its saved filter, and
//! the removal of leftovers (files of the set's own naming that the manifest does not
//! list: an interrupted flush, merge or close). Nothing else in the folder is touched.

use std::fs::{self, File, OpenOptions};
use std::io::{BufWriter, Read, Write};
use std::path::{Path, PathBuf};

use fs2::FileExt;

use super::{run, wal};
use crate::format::Manifest;
use bloomsled::DecodeError;
use bloomsled::Filter;

use crate::error::{Error, Result};

/// The manifest's file name.
pub(crate) const MANIFEST: &str = "MANIFEST";
/// The lock file's name.
pub(crate) const LOCK: &str = "LOCK";
/// The saved filter's file name (trusted only when the manifest is clean).
pub(crate) const FILTER: &str = "filter.bin";
const TMP_SUFFIX: &str = ".tmp";
/// How long an open waits for a held lock before reporting [`Error::InUse`].
const LOCK_PATIENCE: std::time::Duration = std::time::Duration::from_millis(500);

/// The folder of an open set: holds its lock until dropped.
#[derive(Debug)]
pub(crate) struct Folder {
    pub(crate) path: PathBuf,
    _lock: File,
}

/// `fs::create_dir_all`, then an fsync of the folder holding each folder it created: a
/// new folder's name is durable only once its parent is synced, and the set's own folder
/// syncs never cover its name (a power cut could otherwise lose the whole set, every
/// `sync()` notwithstanding; found by `tests/power_cut.rs` under its POSIX model).
fn create_durably(path: &Path) -> std::io::Result<()> {
    let mut missing = Vec::new();
    let mut p = path;
    while !p.exists() {
        missing.push(p.to_path_buf());
        match p.parent() {
            Some(parent) if !parent.as_os_str().is_empty() => p = parent,
            _ => break,
        }
    }
    fs::create_dir_all(path)?;
    for created in missing {
        if let Some(parent) = created.parent().filter(|p| !p.as_os_str().is_empty()) {
            File::open(parent)?.sync_all()?;
        }
    }
    Ok(())
}

impl Folder {
    /// Creates the folder if needed and takes its lock; [`Error::InUse`] if another open
    /// set holds it.
    pub(crate) fn lock(path: &Path) -> Result<Folder> {
        create_durably(path).map_err(Error::Io)?;
        let lock = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(path.join(LOCK))
            .map_err(Error::Io)?;
        // A lock is shared with a child process forked by another thread until the child
        // execs (and closes its copy of the descriptor): a lock just released can look
        // held for that moment, so a contended lock is retried for a short while.
        let deadline = std::time::Instant::now() + LOCK_PATIENCE;
        loop {
            match lock.try_lock_exclusive() {
                Ok(()) => break,
                Err(e) if e.kind() == fs2::lock_contended_error().kind() => {
                    if std::time::Instant::now() >= deadline {
                        return Err(Error::InUse {
                            path: path.to_path_buf(),
                        });
                    }
                    std::thread::sleep(std::time::Duration::from_millis(5));
                }
                Err(e) => return Err(Error::Io(e)),
            }
        }
        Ok(Folder {
            path: path.to_path_buf(),
            _lock: lock,
        })
    }

    fn file(&self, name: &str) -> PathBuf {
        self.path.join(name)
    }

    /// The manifest, `None` if there is none yet.
    pub(crate) fn read_manifest(&self) -> Result<Option<Manifest>> {
        let path = self.file(MANIFEST);
        match fs::read(&path) {
            Ok(bytes) => Manifest::decode(&bytes)
                .map(Some)
                .map_err(|fault| Error::FileDamaged { file: path, fault }),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(Error::Io(e)),
        }
    }

    /// Replaces the manifest atomically and durably: temporary file, fsync, rename, fsync
    /// of the folder (which also makes every file created before durable by name).
    pub(crate) fn write_manifest(&self, m: &Manifest) -> Result<()> {
        self.replace(MANIFEST, &mut |out| out.write_all(&m.encode()))?;
        Ok(())
    }

    /// Writes `name` atomically: temporary file, fsync, rename, folder fsync. Returns the
    /// new file's length and CRC32.
    fn replace(
        &self,
        name: &str,
        write: &mut dyn FnMut(&mut BufWriter<File>) -> std::io::Result<()>,
    ) -> Result<(u64, u32)> {
        let tmp = self.file(&format!("{name}{TMP_SUFFIX}"));
        let result = (|| {
            let mut out = BufWriter::with_capacity(1 << 16, File::create(&tmp)?);
            write(&mut out)?;
            let file = out.into_inner().map_err(|e| e.into_error())?;
            file.sync_all()?;
            drop(file);
            let summary = crc_of(&tmp)?;
            fs::rename(&tmp, self.file(name))?;
            self.sync()?;
            Ok(summary)
        })();
        if result.is_err() {
            let _ = fs::remove_file(&tmp);
        }
        result.map_err(Error::Io)
    }

    /// fsync of the folder: renames, creations and removals in it become durable.
    pub(crate) fn sync(&self) -> std::io::Result<()> {
        File::open(&self.path)?.sync_all()
    }

    /// Saves `filter` as the saved filter; returns its file's length and CRC32 (which the
    /// clean manifest records).
    pub(crate) fn save_filter(&self, filter: &Filter) -> Result<(u64, u32)> {
        // `BufWriter<File>` seeks (after writing its buffer) for the encoder's header.
        self.replace(FILTER, &mut |out| filter.write_bytes_to(out).map(|_| ()))
    }

    /// The saved filter, if its file is there, has the length and CRC32 the clean manifest
    /// recorded, and decodes; `None` (rebuild) otherwise.
    pub(crate) fn load_filter(&self, m: &Manifest) -> Option<Filter> {
        let path = self.file(FILTER);
        let bytes = fs::read(&path).ok()?;
        if bytes.len() as u64 != m.filter_len || crate::format::checksum(&[&bytes]) != m.filter_crc
        {
            log::warn!(
                "bloomsled: {} does not match the manifest; rebuilding the filter",
                path.display()
            );
            return None;
        }
        match Filter::from_bytes(&bytes) {
            Ok(f) => Some(f),
            Err(e) => {
                log::warn!("bloomsled: {}: {e}; rebuilding the filter", path.display());
                None
            }
        }
    }

    /// Removes the files of the set's naming that `m` does not list (runs, logs,
    /// temporary files, and the saved filter when `m` is not clean); returns how many.
    pub(crate) fn remove_leftovers(&self, m: &Manifest) -> Result<usize> {
        let mut removed = 0;
        for entry in fs::read_dir(&self.path).map_err(Error::Io)? {
            let entry = entry.map_err(Error::Io)?;
            let name = entry.file_name();
            let Some(name) = name.to_str() else { continue };
            let leftover = if let Some(seq) = run::seq_of(name) {
                !m.runs.iter().any(|r| r.seq == seq)
            } else if let Some(generation) = wal::generation_of(name) {
                generation != m.wal_gen
            } else {
                name == format!("{MANIFEST}{TMP_SUFFIX}")
                    || name == format!("{FILTER}{TMP_SUFFIX}")
                    || (name == FILTER && !m.clean)
            };
            if leftover {
                fs::remove_file(entry.path()).map_err(Error::Io)?;
                removed += 1;
            }
        }
        if removed > 0 {
            self.sync().map_err(Error::Io)?;
        }
        Ok(removed)
    }

    /// Whether the folder holds members although it has no manifest: a run, or a log with
    /// a record (a set whose manifest was lost; a creation cut short leaves at most a log
    /// with a header and no record, since nothing is added before the manifest exists).
    pub(crate) fn has_orphan_members(&self) -> Result<bool> {
        for entry in fs::read_dir(&self.path).map_err(Error::Io)? {
            let entry = entry.map_err(Error::Io)?;
            let name = entry.file_name();
            let Some(name) = name.to_str() else { continue };
            if run::seq_of(name).is_some() {
                return Ok(true);
            }
            if wal::generation_of(name).is_some()
                && entry.metadata().map_err(Error::Io)?.len() > crate::format::WAL_HEADER_LEN as u64
            {
                return Ok(true);
            }
        }
        Ok(false)
    }

    /// The error for a folder with members and no manifest.
    pub(crate) fn missing_manifest(&self) -> Error {
        Error::FileDamaged {
            file: self.file(MANIFEST),
            fault: DecodeError::Inconsistent(
                "missing, but the folder holds members: restore it from a backup".into(),
            ),
        }
    }
}

/// Length and CRC32 of a file, read in chunks.
fn crc_of(path: &Path) -> std::io::Result<(u64, u32)> {
    let mut file = File::open(path)?;
    let mut h = crc32fast::Hasher::new();
    let mut buf = vec![0u8; 1 << 16];
    let mut len = 0u64;
    loop {
        let n = file.read(&mut buf)?;
        if n == 0 {
            break;
        }
        h.update(&buf[..n]);
        len += n as u64;
    }
    Ok((len, h.finalize()))
}

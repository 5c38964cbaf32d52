//! sled 0.34.7's torn `conf` file: completed when a power cut interrupted sled's write of it.
//!
//! When sled creates a database it writes `<db>/conf` — three text lines (`segment_size`,
//! `use_compression`, `version`) and then their CRC32 — in two `write`s and never fsyncs
//! it. A power cut after the name reached the disk can leave any prefix of those bytes.
//! sled treats a file of at most 8 bytes as absent (and writes a new one), but a longer
//! prefix fails its CRC or its parse, and sled then refuses to open the database, every
//! time, with `Read corrupted data at file offset None` (found by `tests/power_cut.rs`).
//!
//! A `kill -9` tears it too (no power cut needed): sled creates a database by writing
//! `conf` (two writes) and only then creating its log `db`, so a process killed between
//! the two writes leaves a folder with the lines but not their CRC, and no `db` (found by
//! a `kill -9` control of `tests/power_cut.rs`; any database's first open can meet it). No
//! data was ever written there, and no process holds it (sled locks `db`, which does not
//! exist yet); the same completion applies. A second process creating the same database
//! at that instant writes these same bytes at the same offsets, so completing is harmless.
//!
//! sled writes `conf` only when it creates a database, from the configuration it is
//! opened with. So if what is on disk is a *strict prefix* of exactly what this open's
//! configuration would have written, the only thing missing is the rest of that one
//! write: bloomsled completes it (the torn file is first copied to
//! `<db>/bloomsled/sled-torn-conf`, never deleted), fsyncs it and its folder, and sled
//! opens. A file that is not such a prefix (other settings, another version, damage) is
//! left alone, and sled's own error stands.

use std::fs;
use std::io::{self, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};

use crate::persist::DIR_NAME;

/// The bytes sled 0.34.7 writes to `conf` for these settings: its three lines, then the
/// CRC32 of them, little-endian.
fn sled_conf_bytes(segment_size: usize, use_compression: bool) -> Vec<u8> {
    let mut out = format!(
        "segment_size: {segment_size}\nuse_compression: {use_compression}\nversion: 0.34\n"
    )
    .into_bytes();
    let crc = crate::format::checksum(&[&out]);
    out.extend_from_slice(&crc.to_le_bytes());
    out
}

/// Completes a torn `<db>/conf` (see the module docs); returns where the torn copy went.
/// Only while holding sled's lock on `<db>/db`, as `set_aside_torn_snapshot` does, or when
/// there is no `<db>/db` at all (sled stopped before creating it).
pub(crate) fn complete_torn_conf(
    db_dir: &Path,
    segment_size: usize,
    use_compression: bool,
) -> io::Result<Option<PathBuf>> {
    use fs2::FileExt;
    // Held until return (closing it releases the lock, before sled takes it).
    let _lock = match fs::File::open(db_dir.join("db")) {
        Ok(lock) => {
            if lock.try_lock_exclusive().is_err() {
                return Ok(None);
            }
            Some(lock)
        }
        // No log: sled was stopped while creating the database, after `conf` and before
        // `db` (see the module docs); there is nothing to lock, and no data.
        Err(e) if e.kind() == io::ErrorKind::NotFound => None,
        Err(_) => return Ok(None),
    };
    let path = db_dir.join("conf");
    let Ok(on_disk) = fs::read(&path) else {
        return Ok(None);
    };
    let whole = sled_conf_bytes(segment_size, use_compression);
    // At most 8 bytes: sled itself treats the file as absent and rewrites it.
    if on_disk.len() <= 8 || on_disk.len() >= whole.len() || !whole.starts_with(&on_disk) {
        return Ok(None);
    }
    let aside = db_dir.join(DIR_NAME).join("sled-torn-conf");
    fs::create_dir_all(&aside)?;
    let copy = aside.join(format!("conf.{}-bytes", on_disk.len()));
    fs::write(&copy, &on_disk)?;
    // The torn file is a prefix of `whole`: write the rest after it (a positioned write
    // by seeking, which every platform has).
    let mut f = fs::OpenOptions::new().write(true).open(&path)?;
    f.seek(SeekFrom::Start(on_disk.len() as u64))?;
    f.write_all(&whole[on_disk.len()..])?;
    f.sync_all().map_err(|e| failed("fsync", &path, e))?;
    // A folder is fsynced through a handle to it on Unix; Windows has no such handle.
    #[cfg(unix)]
    fs::File::open(db_dir)
        .and_then(|d| d.sync_all())
        .map_err(|e| failed("fsync of the folder", db_dir, e))?;
    log::warn!(
        "bloomsled: sled's {} was torn by a power cut ({} of {} bytes; sled 0.34.7 would \
         refuse to open); completed, the torn copy kept at {}",
        path.display(),
        on_disk.len(),
        whole.len(),
        copy.display()
    );
    Ok(Some(copy))
}

/// `e`, its text naming the step and the file (its kind kept): the open that repairs
/// fails with it.
fn failed(step: &str, path: &Path, e: std::io::Error) -> std::io::Error {
    std::io::Error::new(e.kind(), format!("{step} of {}: {e}", path.display()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_strict_prefix_of_this_configs_conf_is_completed_and_sled_opens() {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path().join("db");
        let db = sled::Config::new().path(&d).open().unwrap();
        db.insert("k", "v").unwrap();
        db.flush().unwrap();
        drop(db);
        let whole = fs::read(d.join("conf")).unwrap();
        assert_eq!(
            whole,
            sled_conf_bytes(512 * 1024, false),
            "sled's own bytes"
        );
        for cut in [9, 30, whole.len() - 4, whole.len() - 1] {
            fs::write(d.join("conf"), &whole[..cut]).unwrap();
            if cut == whole.len() - 4 {
                // The lines without their CRC: what the power-cut test found.
                assert!(sled::Config::new().path(&d).open().is_err(), "sled refuses");
            }
            let copy = complete_torn_conf(&d, 512 * 1024, false).unwrap().unwrap();
            assert_eq!(fs::read(copy).unwrap(), &whole[..cut]);
            assert_eq!(fs::read(d.join("conf")).unwrap(), whole);
            let db = sled::Config::new().path(&d).open().unwrap();
            assert_eq!(db.get("k").unwrap().unwrap(), b"v");
        }
        // Not a prefix of this config's bytes (another segment size): left alone.
        fs::write(d.join("conf"), &whole[..30]).unwrap();
        assert_eq!(complete_torn_conf(&d, 1 << 20, false).unwrap(), None);
        assert_eq!(fs::read(d.join("conf")).unwrap(), &whole[..30]);
    }

    /// What a `kill -9` found (`tests/power_cut.rs`, a control): sled killed while creating
    /// a database, between its two writes of `conf` and before it created its log `db`.
    /// No data was ever written; sled refused the folder forever.
    #[test]
    fn a_conf_torn_before_sled_made_its_log_is_completed() {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path().join("db");
        fs::create_dir_all(d.join("blobs")).unwrap();
        let whole = sled_conf_bytes(512 * 1024, false);
        fs::write(d.join("conf"), &whole[..whole.len() - 4]).unwrap();
        assert!(sled::Config::new().path(&d).open().is_err(), "sled refuses");
        assert!(!d.join("db").exists());
        let copy = complete_torn_conf(&d, 512 * 1024, false).unwrap().unwrap();
        assert_eq!(fs::read(copy).unwrap(), &whole[..whole.len() - 4]);
        assert_eq!(fs::read(d.join("conf")).unwrap(), whole);
        let db = sled::Config::new().path(&d).open().unwrap();
        db.insert("k", "v").unwrap();
        drop(db);
        // With the log there and held by a process, nothing is touched.
        fs::write(d.join("conf"), &whole[..whole.len() - 4]).unwrap();
        let lock = fs::File::open(d.join("db")).unwrap();
        fs2::FileExt::lock_exclusive(&lock).unwrap();
        assert_eq!(complete_torn_conf(&d, 512 * 1024, false).unwrap(), None);
    }
}

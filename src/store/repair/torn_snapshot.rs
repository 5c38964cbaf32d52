//! sled 0.34.7's torn snapshot: a workaround that moves sled's crash debris aside.
//!
//! sled writes its own page-cache snapshot to `snap.<lsn>.generating`, fsyncs it and renames
//! it to `snap.<lsn>`. Its reader lists every file starting with `snap.` (the `.generating`
//! one included), takes the name that sorts last and fails with `Corruption` if that file is
//! short or its CRC does not match. A process killed between creating the temporary file and
//! renaming it therefore leaves a database that sled refuses to open, forever (sled issues
//! #1527, #1533; found here by the crash torture after a few hundred `kill -9`s).
//!
//! The rename never happened, so sled's previous snapshot is the one it had committed to:
//! before opening, a `.generating` file that sled would pick **and** reject is moved (never
//! deleted) to `<db>/bloomsled/sled-torn-snapshots/`, and sled recovers from its previous
//! snapshot and its log, as it would have if the kill had come a moment earlier. Any other
//! file is left alone.

use std::fs;
use std::io;
use std::path::{Path, PathBuf};

use crate::persist::DIR_NAME;

/// Where torn sled snapshots are moved.
const ASIDE: &str = "sled-torn-snapshots";

/// Moves a torn `snap.*.generating` file that sled would fail on out of its way; returns
/// where it went. Only while holding sled's own lock on `<db>/db` (so no process has the
/// database open and no snapshot is being written): a database in use is left alone, and
/// sled's open reports it as in use.
pub(crate) fn set_aside_torn_snapshot(db_dir: &Path) -> io::Result<Option<PathBuf>> {
    use fs2::FileExt;
    let Ok(lock) = fs::File::open(db_dir.join("db")) else {
        return Ok(None); // a new database
    };
    if lock.try_lock_exclusive().is_err() {
        return Ok(None);
    }
    // Closing `lock` at return releases it, before sled takes it.
    let Ok(entries) = fs::read_dir(db_dir) else {
        return Ok(None);
    };
    let mut snaps: Vec<PathBuf> = entries
        .flatten()
        .map(|e| e.path())
        .filter(|p| {
            p.file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| n.starts_with("snap.") && !n.ends_with(".in___motion"))
        })
        .collect();
    snaps.sort();
    let Some(last) = snaps.pop() else {
        return Ok(None);
    };
    let is_generating = last
        .file_name()
        .and_then(|n| n.to_str())
        .is_some_and(|n| n.ends_with(".generating"));
    if !is_generating || sled_would_accept(&fs::read(&last)?) {
        return Ok(None);
    }
    let aside = db_dir.join(DIR_NAME).join(ASIDE);
    fs::create_dir_all(&aside)?;
    let to = aside.join(last.file_name().expect("a file name"));
    fs::rename(&last, &to)?;
    fs::File::open(db_dir)?.sync_all()?;
    log::warn!(
        "bloomsled: sled's snapshot {} was torn by a crash (sled 0.34.7 would refuse to open); \
         moved to {}",
        last.display(),
        to.display()
    );
    Ok(Some(to))
}

/// sled's own check of a snapshot file: more than 12 bytes, and the CRC32 (little-endian,
/// last 4 bytes) of everything before the 8-byte length matches.
fn sled_would_accept(bytes: &[u8]) -> bool {
    let len = bytes.len();
    if len <= 12 {
        return false;
    }
    let stored = u32::from_le_bytes(bytes[len - 4..].try_into().expect("4 bytes"));
    crate::format::checksum(&[&bytes[..len - 12]]) == stored
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_torn_last_generating_file_is_moved() {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path();
        fs::write(d.join("db"), b"").unwrap();
        fs::write(d.join("snap.0000000000000010"), b"older, complete or not").unwrap();
        // A complete .generating file (sled reads it fine) stays.
        let mut good = b"snapshot bytes".to_vec();
        let crc = crate::format::checksum(&[&good]);
        good.extend_from_slice(&14u64.to_le_bytes());
        good.extend_from_slice(&crc.to_le_bytes());
        fs::write(d.join("snap.0000000000000020.generating"), &good).unwrap();
        assert_eq!(set_aside_torn_snapshot(d).unwrap(), None);
        // A torn one that sorts last is moved, not deleted.
        fs::write(d.join("snap.0000000000000030.generating"), b"").unwrap();
        let to = set_aside_torn_snapshot(d).unwrap().unwrap();
        assert!(to.exists() && !d.join("snap.0000000000000030.generating").exists());
        assert!(d.join("snap.0000000000000010").exists());
        // A torn file that does not sort last is not sled's pick: left alone.
        fs::write(d.join("snap.0000000000000005.generating"), b"").unwrap();
        assert_eq!(set_aside_torn_snapshot(d).unwrap(), None);
        assert!(d.join("snap.0000000000000005.generating").exists());
    }
}

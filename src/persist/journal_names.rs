//! The names of a tree's crash-journal files and counter files, and the removal of those
//! outside a range of sequences: `<tree id>.<sequence>.jnl` in `<db>/bloomsled`, and
//! `bloomsled-<database id>-<tree id>-<dev>.<ino>-<sequence>.jctr` in the counter folder.

use std::fs;
use std::path::Path;

/// The database folder's device and inode, `<dev>.<ino>` in hex: what tells a folder from
/// a copy of it within one boot (a move within a file system keeps it; a copy, a restore
/// or a move across file systems changes it, and the journal is then refused as
/// `CountersMissing`, a rebuild).
#[cfg(unix)]
pub(super) fn folder_identity(db_dir: &Path) -> Option<String> {
    use std::os::unix::fs::MetadataExt;
    let m = fs::metadata(db_dir).ok()?;
    Some(format!("{:x}.{:x}", m.dev(), m.ino()))
}

#[cfg(not(unix))]
pub(super) fn folder_identity(_db_dir: &Path) -> Option<String> {
    None
}

/// `id` in lowercase hex, as the file names spell it.
pub(super) fn hex(id: &[u8; 16]) -> String {
    id.iter().map(|b| format!("{b:02x}")).collect()
}

/// Deletes the files `<prefix><sequence><suffix>` in `dir` whose sequence is not in
/// `keep`.
pub(super) fn remove_outside(
    dir: &Path,
    prefix: &str,
    suffix: &str,
    keep: &std::ops::RangeInclusive<u64>,
) {
    let Ok(entries) = fs::read_dir(dir) else {
        return;
    };
    for e in entries.flatten() {
        let name = e.file_name();
        let Some(name) = name.to_str() else { continue };
        let Some(g) = name
            .strip_prefix(prefix)
            .and_then(|r| r.strip_suffix(suffix))
            .and_then(|g| g.parse::<u64>().ok())
        else {
            continue;
        };
        if !keep.contains(&g) {
            let path = e.path();
            if let Err(e) = fs::remove_file(&path) {
                log::warn!("bloomsled: cannot remove {}: {e}", path.display());
            }
        }
    }
}

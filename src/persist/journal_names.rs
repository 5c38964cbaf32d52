//! The names of a tree's crash-journal files and counter files, and the removal of those
//! outside a range of sequences: `<tree id>.<sequence>.jnl` in `<db>/bloomsled`, and
//! `bloomsled-<database id>-<tree id>-<sequence>.jctr` in the counter folder.

use std::fs;
use std::path::Path;

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
    for_each_outside(dir, prefix, suffix, keep, remove);
}

/// [`remove_outside`] for counter files: only those no process holds locked (a mapped
/// counter file is locked by its journal, see `Journal::create`), so a copy of the folder
/// open in the same boot never removes the counters of the original's live journals.
pub(super) fn remove_unlocked_outside(
    dir: &Path,
    prefix: &str,
    suffix: &str,
    keep: &std::ops::RangeInclusive<u64>,
) {
    use fs2::FileExt;
    for_each_outside(dir, prefix, suffix, keep, |path| {
        let Ok(f) = fs::File::open(path) else { return };
        if f.try_lock_exclusive().is_ok() {
            // Unlinked while this lock is held: no process maps it in between.
            remove(path);
        }
    });
}

fn remove(path: &Path) {
    if let Err(e) = fs::remove_file(path) {
        log::warn!("bloomsled: cannot remove {}: {e}", path.display());
    }
}

/// Calls `f` with each file `<prefix><sequence><suffix>` in `dir` whose sequence is not
/// in `keep`.
fn for_each_outside(
    dir: &Path,
    prefix: &str,
    suffix: &str,
    keep: &std::ops::RangeInclusive<u64>,
    f: impl Fn(&Path),
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
            f(&e.path());
        }
    }
}

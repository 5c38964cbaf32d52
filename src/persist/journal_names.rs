//! The names of a tree's crash-journal files and counter files, and the removal of those
//! outside a range of sequences: `<tree id>.<sequence>.jnl` in `<db>/bloomsled`, and
//! `bloomsled-<database id>-<tree id>-<sequence>.jctr` in the counter folder.

use std::collections::{BTreeSet, HashMap};
use std::fs;
use std::path::Path;

/// The journal and counter files of one database found on disk, listed once per open of
/// the database (at its first tree's open), so that opening a tree never lists a folder:
/// with thousands of trees, a listing per tree would make opening them all quadratic.
/// Files made later are tracked by the journals that make them.
#[derive(Default)]
pub(crate) struct FoundFiles {
    /// The counter folder when the listing was made (see `journal_map::counter_dir`).
    pub(crate) counter_dir: Option<std::sync::Arc<Path>>,
    /// Sequences by the name before them: `<tree id>` for journals, `bloomsled-<database
    /// id>-<tree id>` for counter files.
    by_stem: HashMap<String, BTreeSet<u64>>,
}

impl FoundFiles {
    /// Lists the journals in `journal_dir` and the counter files in `counter_dir` whose
    /// names start with `counter_prefix` (this database's).
    pub(crate) fn list(
        journal_dir: &Path,
        counter_dir: Option<std::path::PathBuf>,
        counter_prefix: &str,
    ) -> Self {
        let mut found = FoundFiles::default();
        found.add(journal_dir, "", ".jnl", '.');
        if let Some(dir) = &counter_dir {
            found.add(dir, counter_prefix, ".jctr", '-');
        }
        found.counter_dir = counter_dir.map(std::sync::Arc::from);
        found
    }

    fn add(&mut self, dir: &Path, prefix: &str, suffix: &str, separator: char) {
        let Ok(entries) = fs::read_dir(dir) else {
            return;
        };
        for e in entries.flatten() {
            let name = e.file_name();
            let Some(name) = name.to_str() else { continue };
            let Some((stem, g)) = name
                .strip_suffix(suffix)
                .filter(|n| n.starts_with(prefix))
                .and_then(|n| n.rsplit_once(separator))
            else {
                continue;
            };
            if let Ok(g) = g.parse::<u64>() {
                self.by_stem.entry(stem.to_owned()).or_default().insert(g);
            }
        }
    }

    /// The sequences of the files named `<stem>.<sequence>.jnl` or `<counter
    /// stem><sequence>.jctr` (`counter_stem` ends in its `-`).
    pub(crate) fn sequences(&self, stem: &str, counter_stem: &str) -> BTreeSet<u64> {
        let counters = counter_stem.strip_suffix('-').unwrap_or(counter_stem);
        [stem, counters]
            .iter()
            .filter_map(|s| self.by_stem.get(*s))
            .flatten()
            .copied()
            .collect()
    }
}

/// `id` in lowercase hex, as the file names spell it.
pub(super) fn hex(id: &[u8; 16]) -> String {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    let mut s = String::with_capacity(32);
    for b in id {
        s.push(char::from(DIGITS[usize::from(b >> 4)]));
        s.push(char::from(DIGITS[usize::from(b & 15)]));
    }
    s
}

/// Deletes the counter files `<prefix><sequence><suffix>` in `dir` whose sequence is not
/// in `keep`: only those no process holds locked (a mapped
/// counter file is locked by its journal, see `Journal::create`), so a copy of the folder
/// open in the same boot never removes the counters of the original's live journals.
#[cfg(test)]
pub(super) fn remove_unlocked_outside(
    dir: &Path,
    prefix: &str,
    suffix: &str,
    keep: &std::ops::RangeInclusive<u64>,
) {
    for_each_outside(dir, prefix, suffix, keep, remove_if_unlocked);
}

/// Deletes the counter file at `path` if no process holds it locked (see
/// [`remove_unlocked_outside`]).
pub(super) fn remove_if_unlocked(path: &Path) {
    use fs2::FileExt;
    let Ok(f) = fs::File::open(path) else { return };
    // Unlinked while this lock is held and only if the path still names the locked
    // file: another process may have retired it and made a new one there since the
    // open, which it holds locked (or is about to lock: `open_locked` sees the unlink).
    if f.try_lock_exclusive().is_ok() && still_named(&f, path).unwrap_or(false) {
        remove(path);
    }
}

/// Opens (creating it if missing) the counter file at `path` with its exclusive lock
/// (`flock`) held, or `None` if another process holds that lock. The lock is kept only on
/// the file the path still names once it is held: one unlinked between this open and the
/// lock (retired by another process, which locks before it unlinks) is let go and the path
/// opened again, so a journal never maps counters that a later open cannot find.
#[cfg(target_os = "linux")]
pub(super) fn open_locked(path: &Path) -> std::io::Result<Option<fs::File>> {
    use fs2::FileExt;
    // Each retry follows a retirement that happened within one open-and-lock: more than a
    // few in a row means something is deleting the folder's files as fast as they appear.
    for _ in 0..16 {
        let f = fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(path)?;
        if f.try_lock_exclusive().is_err() {
            return Ok(None);
        }
        if still_named(&f, path)? {
            return Ok(Some(f));
        }
    }
    Err(std::io::Error::other(format!(
        "counter file {} was removed each time it was opened",
        path.display()
    )))
}

/// Whether `path` still names the open file `f` (same device and inode): false once it
/// was unlinked, or unlinked and made again.
#[cfg(unix)]
fn still_named(f: &fs::File, path: &Path) -> std::io::Result<bool> {
    use std::os::unix::fs::MetadataExt;
    let held = f.metadata()?;
    match fs::metadata(path) {
        Ok(named) => Ok(named.dev() == held.dev() && named.ino() == held.ino()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(false),
        Err(e) => Err(e),
    }
}

/// Elsewhere a file is not removed while open, so the path names the file opened.
#[cfg(not(unix))]
fn still_named(_: &fs::File, _: &Path) -> std::io::Result<bool> {
    Ok(true)
}

/// Deletes the file at `path`; one already gone is no error.
pub(super) fn remove(path: &Path) {
    match fs::remove_file(path) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
            log::warn!("bloomsled: cannot remove {}: {e}", path.display());
        }
        _ => {}
    }
}

/// Calls `f` with each file `<prefix><sequence><suffix>` in `dir` whose sequence is not
/// in `keep`.
#[cfg(test)]
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

#[cfg(all(test, target_os = "linux"))]
mod tests {
    use super::*;

    #[test]
    fn a_counter_file_unlinked_or_replaced_after_its_open_is_not_named() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("c.jctr");
        let f = open_locked(&path).unwrap().expect("nobody holds it");
        assert!(still_named(&f, &path).unwrap());
        // Another process retires it (unlinks) and a third makes a new one there.
        fs::remove_file(&path).unwrap();
        assert!(!still_named(&f, &path).unwrap());
        fs::write(&path, b"new").unwrap();
        assert!(!still_named(&f, &path).unwrap());
        // Locking again finds the new file, not the orphan this handle holds.
        let again = open_locked(&path)
            .unwrap()
            .expect("the new file is unlocked");
        assert!(still_named(&again, &path).unwrap());
    }

    #[test]
    fn retiring_never_removes_a_file_another_handle_holds_locked() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("bloomsled-x-7.jctr");
        let held = open_locked(&path).unwrap().expect("nobody holds it");
        remove_unlocked_outside(dir.path(), "bloomsled-x-", ".jctr", &(8..=9));
        assert!(path.exists(), "a locked counter file was removed");
        assert!(
            open_locked(&path).unwrap().is_none(),
            "flock is per open file"
        );
        drop(held);
        remove_unlocked_outside(dir.path(), "bloomsled-x-", ".jctr", &(8..=9));
        assert!(!path.exists(), "an unlocked one outside the range stays");
    }

    /// Two processes retiring the counter file (as copies of a folder do) while a third
    /// keeps making its journal there: whatever the interleaving, the file a journal holds
    /// locked is the one its path names, for as long as it holds it.
    #[test]
    fn a_held_counter_file_stays_named_while_others_retire_it() {
        use std::sync::atomic::{AtomicBool, Ordering};
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("bloomsled-x-1.jctr");
        /// Stops the retirers when dropped, also by a failed assertion (the scope waits for
        /// them before it passes the panic on).
        struct Stop<'a>(&'a AtomicBool);
        impl Drop for Stop<'_> {
            fn drop(&mut self) {
                self.0.store(true, Ordering::Relaxed);
            }
        }
        let stop = AtomicBool::new(false);
        std::thread::scope(|s| {
            for _ in 0..2 {
                s.spawn(|| {
                    while !stop.load(Ordering::Relaxed) {
                        remove_unlocked_outside(dir.path(), "bloomsled-x-", ".jctr", &(2..=2));
                    }
                });
            }
            let _stop = Stop(&stop);
            let (mut held, mut busy) = (0, 0);
            while held < 3_000 {
                let Some(f) = open_locked(&path).unwrap() else {
                    busy += 1; // a retirer holds it for its removal
                    continue;
                };
                for _ in 0..3 {
                    assert!(
                        still_named(&f, &path).unwrap(),
                        "a held counter file was unlinked (after {held} holds, {busy} busy)"
                    );
                }
                held += 1;
            }
        });
    }
}

//! A FUSE file system that forgets, on a "power cut", what was not fsynced: the LazyFS idea
//! (and RocksDB's `FaultInjectionTestFS`) for bloomsled's tests.
//!
//! [`PowerCutFs::mount`] passes every request through to a real backing folder, and keeps
//! beside it what it would take to undo each change that no `fsync` has yet made durable:
//! - **File data**: each `write` and each truncation records the bytes and the length it
//!   replaced, per file, until an `fsync` or `fdatasync` of that file clears the list.
//! - **Folder entries**: each create, `mkdir`, unlink, `rmdir` and rename records how to undo
//!   it (an unlinked or replaced file is moved to a stash, not deleted) until an `fsync` of
//!   its folder (both folders, for a rename across two) makes it durable.
//!
//! [`Mounted::cut`] is the power cut: the file system first refuses every request (`EIO`),
//! as a machine that lost power answers nothing; the caller kills its writer; then the
//! file system is unmounted and, on the backing folder, each file loses its unsynced writes
//! (all of them, or — chosen by the seed — all but a prefix in write order, as a disk that
//! wrote back some pages before the cut), and every folder change not made durable by a
//! folder fsync is undone, newest first. [`Mounted::unmount`] without a cut keeps
//! everything: that is a process crash (`kill -9`), the control.
//!
//! # Faults: a disk that errs while the program goes on
//! [`Mounted::fail`] adds a rule ([`Failure`]): the Nth operation of a kind ([`Op`]:
//! create, open, read, write, fsync, folder fsync, rename, unlink, truncate) on a file whose
//! own name matches a glob fails with the errno chosen (`EIO`, `ENOSPC`, `EROFS`, …), once
//! or from then on (sticky). Rules count from the moment they are set, in the order
//! requests arrive, so a single-threaded writer meets the same fault on every run;
//! [`Mounted::count`] and [`Mounted::ops`] read the log of every operation answered, so a
//! test counts a run first, then faults its first, a middle and its last operation. A
//! failed operation changes nothing, and a failed `fsync` makes nothing durable: the writes
//! it covered are undone at the next cut even if a later `fsync` of the file succeeds, as
//! Linux, which reports a writeback error once and may mark the failed pages clean
//! (PostgreSQL's "fsyncgate"). Requests the kernel answers itself (from its caches) are
//! neither counted nor failed.
//!
//! # The models
//! File data is the same in both: a file's writes survive up to its last `fsync` or
//! `fdatasync` (plus, with a seed, a prefix of the later ones). Names differ:
//! - [`Model::Ext4Ordered`] — ext4's default (`data=ordered`, no `fast_commit`): one
//!   journal for the whole file system, committed by any `fsync`, so an fsync of *any*
//!   file or folder makes every earlier create, rename and unlink durable. Data is kept
//!   no more than the POSIX rule above (ext4 also writes back data on a rename over a
//!   file and at journal commits: it keeps more), so a program that keeps its promises
//!   here keeps them on ext4's default.
//! - [`Model::Posix`] — the letter of POSIX: a name is durable only once its own folder
//!   was fsynced (both folders for a rename). Stricter than any common file system.
//!
//! Not modelled: writes torn inside one request, data lost out of write order, metadata
//! other than names and lengths (modes, times), and `sync_file_range(2)`, which never
//! reaches a FUSE file system (it flushes no disk cache either, so it is no durability
//! promise).
//!
//! Linux only; mounting needs `/dev/fuse` and the `fusermount3` program (Debian: `fuse3`),
//! or root.
//!
//! ```no_run
//! let base = std::path::Path::new("/tmp/pc-example");
//! let fs = bloomsled_powercut::PowerCutFs::mount(base)?;
//! std::fs::write(fs.mountpoint().join("unsynced"), b"lost at the cut")?;
//! fs.freeze();
//! let report = fs.cut(Some(42))?;
//! assert!(!base.join("data/unsynced").exists());
//! assert_eq!(report.names_undone, 1);
//! # Ok::<(), std::io::Error>(())
//! ```

mod faults;
mod fs;
mod harness;
mod session;

use std::collections::HashMap;
use std::fs::{self as stdfs, OpenOptions};
use std::io;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use fuser::MountOption;

pub use faults::{Failure, Op, OpRecord};
use fs::{DataUndo, Fs, NameUndo, State, ROOT};
pub use harness::{run_child, run_child_with, ChildRun, Fault};

/// Which changes to names an `fsync` makes durable (see the crate docs).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Model {
    /// Any fsync commits every earlier change to any folder (ext4's default journal).
    #[default]
    Ext4Ordered,
    /// Only an fsync of a folder commits the changes to that folder.
    Posix,
}

/// True if this machine can mount the file system: Linux, `/dev/fuse`, and either root or
/// the `fusermount3` program on `PATH`.
///
/// ```
/// let _ = bloomsled_powercut::available();
/// ```
pub fn available() -> Result<(), String> {
    if !cfg!(target_os = "linux") {
        return Err("the power-cut file system needs Linux's FUSE".into());
    }
    if !Path::new("/dev/fuse").exists() {
        return Err("/dev/fuse is missing (no FUSE in this kernel or container)".into());
    }
    let on_path = std::env::var_os("PATH")
        .map(|p| std::env::split_paths(&p).any(|d| d.join("fusermount3").is_file()))
        .unwrap_or(false);
    if !on_path {
        return Err("fusermount3 is not on PATH (Debian: apt-get install fuse3)".into());
    }
    Ok(())
}

fn undo_name(undo: NameUndo) -> io::Result<()> {
    match undo {
        NameUndo::Created(p) => {
            if stdfs::symlink_metadata(&p)
                .map(|m| m.is_dir())
                .unwrap_or(false)
            {
                stdfs::remove_dir_all(&p)?;
            } else if p.exists() {
                stdfs::remove_file(&p)?;
            }
        }
        // A folder whose removal is durable took its entries with it: an unlink inside it
        // (which had to come first) has nothing to be undone into.
        NameUndo::Unlinked { path, stash } if path.parent().is_some_and(|d| !d.exists()) => {
            stdfs::remove_file(stash)?
        }
        NameUndo::Unlinked { path, stash } => stdfs::rename(stash, path)?,
        NameUndo::RemovedDir(p) => stdfs::create_dir(p)?,
        NameUndo::Renamed { from, to, replaced } => {
            stdfs::rename(&to, &from)?;
            if let Some(stash) = replaced {
                stdfs::rename(stash, to)?;
            }
        }
    }
    Ok(())
}

/// Undoes `undos` (newest first) on the file at `path`; returns how many.
fn roll_back(path: &Path, undos: &[&DataUndo]) -> io::Result<usize> {
    let file = OpenOptions::new()
        .write(true)
        .open(path)
        .map_err(|e| io::Error::new(e.kind(), format!("rolling back {}: {e}", path.display())))?;
    for u in undos {
        file.set_len(u.old_len.max(u.offset + u.old.len() as u64))?;
        file.write_all_at(&u.old, u.offset)?;
        file.set_len(u.old_len)?;
    }
    Ok(undos.len())
}

/// What a power cut undid.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CutReport {
    /// Files that lost writes.
    pub files_rolled_back: usize,
    /// Writes (and truncations) undone.
    pub writes_undone: usize,
    /// Unsynced writes kept because the seed let a prefix reach the disk.
    pub writes_kept: usize,
    /// Folder changes (creates, renames, unlinks) undone.
    pub names_undone: usize,
}

/// A mounted power-cut file system: `<base>/mnt` shows `<base>/data`.
pub struct Mounted {
    session: Option<session::Served>,
    state: Arc<Mutex<State>>,
    mountpoint: PathBuf,
    data: PathBuf,
}

/// The power-cut file system (see the crate docs).
pub struct PowerCutFs;

impl PowerCutFs {
    /// Mounts `<base>/mnt` over the backing folder `<base>/data` (both made if missing; what
    /// `data` holds is taken as durable), with ext4's ordering ([`Model::Ext4Ordered`]).
    ///
    /// ```no_run
    /// let fs = bloomsled_powercut::PowerCutFs::mount(std::path::Path::new("/tmp/pc"))?;
    /// fs.unmount()?;
    /// # Ok::<(), std::io::Error>(())
    /// ```
    pub fn mount(base: &Path) -> io::Result<Mounted> {
        Self::mount_with(base, Model::Ext4Ordered)
    }

    /// [`PowerCutFs::mount`] with the given model of which names an fsync makes durable.
    ///
    /// ```no_run
    /// use bloomsled_powercut::{Model, PowerCutFs};
    /// let fs = PowerCutFs::mount_with(std::path::Path::new("/tmp/pc"), Model::Posix)?;
    /// fs.unmount()?;
    /// # Ok::<(), std::io::Error>(())
    /// ```
    pub fn mount_with(base: &Path, model: Model) -> io::Result<Mounted> {
        let data = base.join("data");
        let stash = base.join("stash");
        let mountpoint = base.join("mnt");
        for d in [&data, &stash, &mountpoint] {
            stdfs::create_dir_all(d)?;
        }
        let data = data.canonicalize()?;
        let mut paths = HashMap::new();
        let mut inodes = HashMap::new();
        paths.insert(ROOT, data.clone());
        inodes.insert(data.clone(), ROOT);
        let state = Arc::new(Mutex::new(State {
            stash,
            stashed: 0,
            paths,
            inodes,
            next_ino: ROOT + 1,
            handles: HashMap::new(),
            next_fh: 1,
            unsynced: HashMap::new(),
            doomed: HashMap::new(),
            faults: faults::Faults::default(),
            names: Vec::new(),
            frozen: false,
            model,
            keep_cache: false,
        }));
        let options = [
            MountOption::FSName("powercut".into()),
            MountOption::RW,
            MountOption::Async,
        ];
        let session = session::Served::start(Fs(state.clone()), &mountpoint, &options)?;
        Ok(Mounted {
            session: Some(session),
            state,
            mountpoint,
            data,
        })
    }
}

impl Mounted {
    /// Where programs under test write.
    pub fn mountpoint(&self) -> &Path {
        &self.mountpoint
    }

    /// The backing folder (what the disk holds once unmounted).
    pub fn backing(&self) -> &Path {
        &self.data
    }

    /// The power goes off: from now on every request fails with `EIO`, and nothing more
    /// reaches the backing folder. Kill the writer after this, then [`Mounted::cut`].
    pub fn freeze(&self) {
        self.state.lock().unwrap_or_else(|p| p.into_inner()).frozen = true;
    }

    /// Unmounts (every writer must be dead and every file on the mount closed, or this
    /// waits for them), then drops from the backing folder what was
    /// not durable: see the crate docs. With a seed, it picks per file how many unsynced
    /// writes reached the disk anyway (none, half the time); without, none did.
    pub fn cut(mut self, seed: Option<u64>) -> io::Result<CutReport> {
        self.freeze();
        if let Some(s) = self.session.take() {
            s.stop()?;
        }
        let mut s = self.state.lock().unwrap_or_else(|p| p.into_inner());
        let mut report = CutReport::default();
        let mut rng = seed.unwrap_or(0) ^ 0x9e37_79b9_7f4a_7c15;
        let mut next = move || {
            // splitmix64
            rng = rng.wrapping_add(0x9e37_79b9_7f4a_7c15);
            let mut z = rng;
            z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
            z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
            z ^ (z >> 31)
        };
        let mut files: Vec<(u64, Vec<DataUndo>)> = s.unsynced.drain().collect();
        for ino in s.doomed.keys() {
            if !files.iter().any(|(i, _)| i == ino) {
                files.push((*ino, Vec::new()));
            }
        }
        files.sort_by_key(|(ino, _)| *ino);
        for (ino, unsynced) in files {
            let keep = if seed.is_none() || next() % 2 == 0 {
                0
            } else {
                (next() % (unsynced.len() as u64 + 1)) as usize
            };
            report.writes_kept += keep;
            // What a failed fsync covered is lost whatever the seed says (older, so first
            // in write order): undone after the unsynced writes above the kept prefix.
            let doomed = s.doomed.remove(&ino).unwrap_or_default();
            let undos: Vec<&DataUndo> = unsynced[keep..]
                .iter()
                .rev()
                .chain(doomed.iter().rev())
                .collect();
            if undos.is_empty() {
                continue;
            }
            let Some(path) = s.paths.get(&ino) else {
                continue;
            };
            report.writes_undone += roll_back(path, &undos)?;
            report.files_rolled_back += 1;
        }
        let names = std::mem::take(&mut s.names);
        for change in names.into_iter().rev() {
            report.names_undone += 1;
            let what = format!("{:?}", change.undo);
            undo_name(change.undo)
                .map_err(|e| io::Error::new(e.kind(), format!("power cut: undoing {what}: {e}")))?;
        }
        let stash = s.stash.clone();
        drop(s);
        stdfs::remove_dir_all(&stash)?;
        Ok(report)
    }

    /// Unmounts keeping every write (a process crash, not a power cut).
    pub fn unmount(mut self) -> io::Result<()> {
        if let Some(s) = self.session.take() {
            s.stop()?;
        }
        let stash = self
            .state
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .stash
            .clone();
        stdfs::remove_dir_all(&stash)
    }

    /// Adds a fault rule (see [`Failure`]); it counts matching operations from now on.
    ///
    /// ```no_run
    /// use bloomsled_powercut::{Failure, Op, PowerCutFs};
    /// let fs = PowerCutFs::mount(std::path::Path::new("/tmp/pc-fail"))?;
    /// let f = std::fs::File::create(fs.mountpoint().join("db"))?;
    /// fs.fail(Failure::new(Op::Fsync, "db").errno(libc::EIO));
    /// assert!(f.sync_all().is_err());
    /// assert!(f.sync_all().is_ok()); // once: Linux reports a writeback error once
    /// # Ok::<(), std::io::Error>(())
    /// ```
    pub fn fail(&self, rule: Failure) {
        self.state
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .faults
            .add(rule);
    }

    /// From now on, each open of a file keeps the kernel's page cache of it, as a local
    /// file system's page cache outlives a file's opens (by default FUSE drops it at each
    /// open, so every read of a newly opened file reaches this file system and its
    /// rules). Only this mount's own writes change its files, so the cache stays true.
    ///
    /// ```no_run
    /// use bloomsled_powercut::PowerCutFs;
    /// let fs = PowerCutFs::mount(std::path::Path::new("/tmp/pc-cache"))?;
    /// fs.keep_page_cache(true);
    /// # Ok::<(), std::io::Error>(())
    /// ```
    pub fn keep_page_cache(&self, keep: bool) {
        self.state
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .keep_cache = keep;
    }

    /// Drops the kernel's page cache of `path` on this mount (a file, or every file under a
    /// folder), as a reboot would: the next reads reach this file system and its rules.
    /// Only clean pages go (close or sync what was written first).
    ///
    /// ```no_run
    /// use bloomsled_powercut::PowerCutFs;
    /// let fs = PowerCutFs::mount(std::path::Path::new("/tmp/pc-drop"))?;
    /// fs.keep_page_cache(true);
    /// std::fs::write(fs.mountpoint().join("a"), b"x")?;
    /// fs.drop_page_cache(fs.mountpoint())?;
    /// # Ok::<(), std::io::Error>(())
    /// ```
    pub fn drop_page_cache(&self, path: &Path) -> io::Result<()> {
        use std::os::fd::AsRawFd;
        if path.is_dir() {
            for e in std::fs::read_dir(path)? {
                self.drop_page_cache(&e?.path())?;
            }
            return Ok(());
        }
        let f = std::fs::File::open(path)?;
        // SAFETY: `f` is an open file for the whole call; `posix_fadvise` only reads its fd
        // and changes nothing but the kernel's cache of that file.
        #[allow(unsafe_code)]
        match unsafe { libc::posix_fadvise(f.as_raw_fd(), 0, 0, libc::POSIX_FADV_DONTNEED) } {
            0 => Ok(()),
            e => Err(io::Error::from_raw_os_error(e)),
        }
    }

    /// Removes every fault rule (the disk is healthy again).
    ///
    /// ```no_run
    /// use bloomsled_powercut::{Failure, Op, PowerCutFs};
    /// let fs = PowerCutFs::mount(std::path::Path::new("/tmp/pc-heal"))?;
    /// fs.fail(Failure::new(Op::Create, "*").sticky());
    /// assert!(std::fs::write(fs.mountpoint().join("a"), b"x").is_err());
    /// fs.heal();
    /// std::fs::write(fs.mountpoint().join("a"), b"x")?;
    /// # Ok::<(), std::io::Error>(())
    /// ```
    pub fn heal(&self) {
        self.state
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .faults
            .clear();
    }

    /// How many operations the rules have failed since the mount.
    ///
    /// ```no_run
    /// let fs = bloomsled_powercut::PowerCutFs::mount(std::path::Path::new("/tmp/pc-fired"))?;
    /// assert_eq!(fs.fired(), 0);
    /// # Ok::<(), std::io::Error>(())
    /// ```
    pub fn fired(&self) -> u64 {
        self.state
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .faults
            .fired()
    }

    /// Every operation answered since the mount, in order (see [`OpRecord`]).
    ///
    /// ```no_run
    /// use bloomsled_powercut::{Op, PowerCutFs};
    /// let fs = PowerCutFs::mount(std::path::Path::new("/tmp/pc-ops"))?;
    /// std::fs::File::create(fs.mountpoint().join("a"))?.sync_all()?;
    /// assert!(fs.ops().iter().any(|r| r.op == Op::Fsync && r.name == "a"));
    /// # Ok::<(), std::io::Error>(())
    /// ```
    pub fn ops(&self) -> Vec<OpRecord> {
        let s = self.state.lock().unwrap_or_else(|p| p.into_inner());
        s.faults.log().to_vec()
    }

    /// How many operations of kind `op` on a name matching `pattern` (a [`Failure`]
    /// glob) were answered since the mount: count a run first, then fail its first, a
    /// middle and its last such operation in the next.
    ///
    /// ```no_run
    /// use bloomsled_powercut::{Op, PowerCutFs};
    /// let fs = PowerCutFs::mount(std::path::Path::new("/tmp/pc-count"))?;
    /// std::fs::write(fs.mountpoint().join("a.log"), b"x")?;
    /// assert_eq!(fs.count(Op::Create, "*.log"), 1);
    /// # Ok::<(), std::io::Error>(())
    /// ```
    pub fn count(&self, op: Op, pattern: &str) -> u64 {
        let probe = Failure::new(op, pattern);
        let s = self.state.lock().unwrap_or_else(|p| p.into_inner());
        s.faults
            .log()
            .iter()
            .filter(|r| r.op == op && probe.matches(&r.name))
            .count() as u64
    }

    /// The number of changes a cut would now undo (file writes, folder changes).
    pub fn pending(&self) -> (usize, usize) {
        let s = self.state.lock().unwrap_or_else(|p| p.into_inner());
        (s.unsynced.values().map(Vec::len).sum(), s.names.len())
    }
}

impl Drop for Mounted {
    fn drop(&mut self) {
        // `Served`'s own drop unmounts and reports (never panics).
        drop(self.session.take());
    }
}

#[cfg(test)]
mod tests;

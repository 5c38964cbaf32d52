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

use std::collections::HashMap;
use std::ffi::OsStr;
use std::fs::{self, File, OpenOptions};
use std::io;
use std::os::unix::fs::{FileExt, MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, UNIX_EPOCH};

use fuser::{
    BackgroundSession, FileAttr, FileType, Filesystem, MountOption, ReplyAttr, ReplyCreate,
    ReplyData, ReplyDirectory, ReplyEmpty, ReplyEntry, ReplyOpen, ReplyWrite, Request, TimeOrNow,
};

/// Which changes to names an `fsync` makes durable (see the crate docs).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Model {
    /// Any fsync commits every earlier change to any folder (ext4's default journal).
    #[default]
    Ext4Ordered,
    /// Only an fsync of a folder commits the changes to that folder.
    Posix,
}

const TTL: Duration = Duration::from_secs(1);
const ROOT: u64 = 1;

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

/// One change to a file's bytes, with what it replaced.
struct DataUndo {
    /// Where the change started.
    offset: u64,
    /// The bytes it overwrote (those below the old length).
    old: Vec<u8>,
    /// The file's length before it.
    old_len: u64,
}

/// How to undo one change to a folder.
#[derive(Debug)]
enum NameUndo {
    /// A file or folder was made at this path: remove it.
    Created(PathBuf),
    /// A file at `path` was unlinked (kept at `stash`): put it back.
    Unlinked { path: PathBuf, stash: PathBuf },
    /// An empty folder was removed: make it again.
    RemovedDir(PathBuf),
    /// `from` was renamed to `to`, which replaced the file now at `stash`.
    Renamed {
        from: PathBuf,
        to: PathBuf,
        replaced: Option<PathBuf>,
    },
}

struct NameChange {
    /// Folders (inodes) whose fsync this change still waits for.
    waiting_for: Vec<u64>,
    undo: NameUndo,
}

struct State {
    stash: PathBuf,
    stashed: u64,
    paths: HashMap<u64, PathBuf>,
    inodes: HashMap<PathBuf, u64>,
    next_ino: u64,
    handles: HashMap<u64, File>,
    next_fh: u64,
    unsynced: HashMap<u64, Vec<DataUndo>>,
    names: Vec<NameChange>,
    frozen: bool,
    model: Model,
}

impl State {
    fn ino_for(&mut self, path: &Path) -> u64 {
        if let Some(&ino) = self.inodes.get(path) {
            return ino;
        }
        let ino = self.next_ino;
        self.next_ino += 1;
        self.inodes.insert(path.to_path_buf(), ino);
        self.paths.insert(ino, path.to_path_buf());
        ino
    }

    fn path(&self, ino: u64) -> Result<PathBuf, i32> {
        self.paths.get(&ino).cloned().ok_or(libc::ENOENT)
    }

    fn child(&self, parent: u64, name: &OsStr) -> Result<PathBuf, i32> {
        Ok(self.path(parent)?.join(name))
    }

    /// Moves the inode at `from` (and, for a folder, everything under it) to `to`.
    fn moved(&mut self, from: &Path, to: &Path) {
        let moved: Vec<(PathBuf, u64)> = self
            .inodes
            .iter()
            .filter(|(p, _)| p.starts_with(from))
            .map(|(p, &i)| (p.clone(), i))
            .collect();
        for (p, ino) in moved {
            self.inodes.remove(&p);
            let rest = p.strip_prefix(from).expect("filtered by prefix");
            // (joining an empty rest would add a trailing slash: "not a directory")
            let new = if rest.as_os_str().is_empty() {
                to.to_path_buf()
            } else {
                to.join(rest)
            };
            self.inodes.insert(new.clone(), ino);
            self.paths.insert(ino, new);
        }
    }

    fn next_stash(&mut self) -> PathBuf {
        self.stashed += 1;
        self.stash.join(self.stashed.to_string())
    }

    fn attr(&mut self, path: &Path) -> Result<FileAttr, i32> {
        let m = fs::symlink_metadata(path).map_err(errno)?;
        let ino = self.ino_for(path);
        let kind = if m.is_dir() {
            FileType::Directory
        } else if m.file_type().is_symlink() {
            FileType::Symlink
        } else {
            FileType::RegularFile
        };
        let time = |s: i64, ns: i64| {
            UNIX_EPOCH + Duration::new(s.max(0) as u64, ns.clamp(0, 999_999_999) as u32)
        };
        Ok(FileAttr {
            ino,
            size: m.size(),
            blocks: m.blocks(),
            atime: time(m.atime(), m.atime_nsec()),
            mtime: time(m.mtime(), m.mtime_nsec()),
            ctime: time(m.ctime(), m.ctime_nsec()),
            crtime: time(m.ctime(), m.ctime_nsec()),
            kind,
            perm: (m.mode() & 0o7777) as u16,
            nlink: m.nlink() as u32,
            uid: m.uid(),
            gid: m.gid(),
            rdev: m.rdev() as u32,
            blksize: 4096,
            flags: 0,
        })
    }

    /// Records what a change of `file`'s bytes from `offset` to `end` (and its length to
    /// `new_len`, if that shrinks it) replaces.
    fn remember(&mut self, ino: u64, file: &File, offset: u64, end: u64) -> io::Result<()> {
        let old_len = file.metadata()?.len();
        let upto = end.min(old_len);
        let mut old = vec![0; upto.saturating_sub(offset) as usize];
        file.read_exact_at(&mut old, offset)?;
        self.unsynced.entry(ino).or_default().push(DataUndo {
            offset,
            old,
            old_len,
        });
        Ok(())
    }

    fn record(&mut self, folders: &[u64], undo: NameUndo) {
        let mut waiting_for = folders.to_vec();
        waiting_for.dedup();
        self.names.push(NameChange { waiting_for, undo });
    }
}

fn errno(e: io::Error) -> i32 {
    e.raw_os_error().unwrap_or(libc::EIO)
}

/// The file system handed to FUSE; its state is shared with the [`Mounted`] handle.
struct Fs(Arc<Mutex<State>>);

impl Fs {
    fn state(&self) -> Result<MutexGuard<'_, State>, i32> {
        let s = self.0.lock().unwrap_or_else(|p| p.into_inner());
        if s.frozen {
            Err(libc::EIO)
        } else {
            Ok(s)
        }
    }
}

macro_rules! tri {
    ($reply:expr, $e:expr) => {
        match $e {
            Ok(v) => v,
            Err(code) => return $reply.error(code),
        }
    };
}

impl Filesystem for Fs {
    fn lookup(&mut self, _req: &Request<'_>, parent: u64, name: &OsStr, reply: ReplyEntry) {
        let mut s = tri!(reply, self.state());
        let path = tri!(reply, s.child(parent, name));
        let attr = tri!(reply, s.attr(&path));
        reply.entry(&TTL, &attr, 0);
    }

    fn getattr(&mut self, _req: &Request<'_>, ino: u64, _fh: Option<u64>, reply: ReplyAttr) {
        let mut s = tri!(reply, self.state());
        let path = tri!(reply, s.path(ino));
        let attr = tri!(reply, s.attr(&path));
        reply.attr(&TTL, &attr);
    }

    fn setattr(
        &mut self,
        _req: &Request<'_>,
        ino: u64,
        mode: Option<u32>,
        _uid: Option<u32>,
        _gid: Option<u32>,
        size: Option<u64>,
        _atime: Option<TimeOrNow>,
        _mtime: Option<TimeOrNow>,
        _ctime: Option<std::time::SystemTime>,
        _fh: Option<u64>,
        _crtime: Option<std::time::SystemTime>,
        _chgtime: Option<std::time::SystemTime>,
        _bkuptime: Option<std::time::SystemTime>,
        _flags: Option<u32>,
        reply: ReplyAttr,
    ) {
        let mut s = tri!(reply, self.state());
        let path = tri!(reply, s.path(ino));
        if let Some(mode) = mode {
            use std::os::unix::fs::PermissionsExt;
            tri!(
                reply,
                fs::set_permissions(&path, fs::Permissions::from_mode(mode)).map_err(errno)
            );
        }
        if let Some(size) = size {
            let file = tri!(
                reply,
                OpenOptions::new()
                    .read(true)
                    .write(true)
                    .open(&path)
                    .map_err(errno)
            );
            let len = tri!(reply, file.metadata().map_err(errno)).len();
            tri!(
                reply,
                s.remember(ino, &file, size.min(len), len).map_err(errno)
            );
            tri!(reply, file.set_len(size).map_err(errno));
        }
        let attr = tri!(reply, s.attr(&path));
        reply.attr(&TTL, &attr);
    }

    fn mkdir(
        &mut self,
        _req: &Request<'_>,
        parent: u64,
        name: &OsStr,
        mode: u32,
        _umask: u32,
        reply: ReplyEntry,
    ) {
        let mut s = tri!(reply, self.state());
        let path = tri!(reply, s.child(parent, name));
        tri!(reply, fs::create_dir(&path).map_err(errno));
        {
            use std::os::unix::fs::PermissionsExt;
            let _ = fs::set_permissions(&path, fs::Permissions::from_mode(mode & 0o7777));
        }
        s.record(&[parent], NameUndo::Created(path.clone()));
        let attr = tri!(reply, s.attr(&path));
        reply.entry(&TTL, &attr, 0);
    }

    fn unlink(&mut self, _req: &Request<'_>, parent: u64, name: &OsStr, reply: ReplyEmpty) {
        let mut s = tri!(reply, self.state());
        let path = tri!(reply, s.child(parent, name));
        tri!(reply, fs::symlink_metadata(&path).map_err(errno));
        let stash = s.next_stash();
        tri!(reply, fs::rename(&path, &stash).map_err(errno));
        s.moved(&path, &stash);
        s.record(
            &[parent],
            NameUndo::Unlinked {
                path,
                stash: stash.clone(),
            },
        );
        reply.ok();
    }

    fn rmdir(&mut self, _req: &Request<'_>, parent: u64, name: &OsStr, reply: ReplyEmpty) {
        let mut s = tri!(reply, self.state());
        let path = tri!(reply, s.child(parent, name));
        tri!(reply, fs::remove_dir(&path).map_err(errno));
        if let Some(ino) = s.inodes.remove(&path) {
            s.paths.remove(&ino);
        }
        s.record(&[parent], NameUndo::RemovedDir(path));
        reply.ok();
    }

    fn rename(
        &mut self,
        _req: &Request<'_>,
        parent: u64,
        name: &OsStr,
        newparent: u64,
        newname: &OsStr,
        flags: u32,
        reply: ReplyEmpty,
    ) {
        if flags != 0 {
            return reply.error(libc::EINVAL);
        }
        let mut s = tri!(reply, self.state());
        let from = tri!(reply, s.child(parent, name));
        let to = tri!(reply, s.child(newparent, newname));
        tri!(reply, fs::symlink_metadata(&from).map_err(errno));
        let replaced = match fs::symlink_metadata(&to) {
            Ok(m) if m.is_dir() => {
                // Renaming over a folder: only an empty one, and it is simply gone.
                tri!(reply, fs::remove_dir(&to).map_err(errno));
                None
            }
            Ok(_) => {
                let stash = s.next_stash();
                tri!(reply, fs::rename(&to, &stash).map_err(errno));
                s.moved(&to, &stash);
                Some(stash)
            }
            Err(_) => None,
        };
        if let Err(e) = fs::rename(&from, &to) {
            if let Some(stash) = &replaced {
                let _ = fs::rename(stash, &to);
                s.moved(stash, &to);
            }
            return reply.error(errno(e));
        }
        s.moved(&from, &to);
        s.record(
            &[parent, newparent],
            NameUndo::Renamed { from, to, replaced },
        );
        reply.ok();
    }

    fn open(&mut self, _req: &Request<'_>, ino: u64, flags: i32, reply: ReplyOpen) {
        let mut s = tri!(reply, self.state());
        let path = tri!(reply, s.path(ino));
        let access = flags & libc::O_ACCMODE;
        let file = tri!(
            reply,
            OpenOptions::new()
                .read(true)
                .write(access != libc::O_RDONLY)
                .open(&path)
                .map_err(errno)
        );
        let fh = s.next_fh;
        s.next_fh += 1;
        s.handles.insert(fh, file);
        reply.opened(fh, 0);
    }

    fn create(
        &mut self,
        _req: &Request<'_>,
        parent: u64,
        name: &OsStr,
        mode: u32,
        _umask: u32,
        flags: i32,
        reply: ReplyCreate,
    ) {
        let mut s = tri!(reply, self.state());
        let path = tri!(reply, s.child(parent, name));
        let existed = path.exists();
        let file = tri!(
            reply,
            OpenOptions::new()
                .read(true)
                .write(true)
                .create(true)
                .create_new(flags & libc::O_EXCL != 0)
                .mode(mode & 0o7777)
                .open(&path)
                .map_err(errno)
        );
        if !existed {
            s.record(&[parent], NameUndo::Created(path.clone()));
        }
        let attr = tri!(reply, s.attr(&path));
        let fh = s.next_fh;
        s.next_fh += 1;
        s.handles.insert(fh, file);
        reply.created(&TTL, &attr, 0, fh, 0);
    }

    fn read(
        &mut self,
        _req: &Request<'_>,
        _ino: u64,
        fh: u64,
        offset: i64,
        size: u32,
        _flags: i32,
        _lock_owner: Option<u64>,
        reply: ReplyData,
    ) {
        let s = tri!(reply, self.state());
        let file = tri!(reply, s.handles.get(&fh).ok_or(libc::EBADF));
        let mut buf = vec![0; size as usize];
        let mut got = 0;
        while got < buf.len() {
            match file.read_at(&mut buf[got..], offset as u64 + got as u64) {
                Ok(0) => break,
                Ok(n) => got += n,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return reply.error(errno(e)),
            }
        }
        reply.data(&buf[..got]);
    }

    fn write(
        &mut self,
        _req: &Request<'_>,
        ino: u64,
        fh: u64,
        offset: i64,
        data: &[u8],
        _write_flags: u32,
        _flags: i32,
        _lock_owner: Option<u64>,
        reply: ReplyWrite,
    ) {
        let mut s = tri!(reply, self.state());
        let file = tri!(
            reply,
            s.handles
                .get(&fh)
                .ok_or(libc::EBADF)
                .and_then(|f| f.try_clone().map_err(errno))
        );
        let offset = offset as u64;
        tri!(
            reply,
            s.remember(ino, &file, offset, offset + data.len() as u64)
                .map_err(errno)
        );
        tri!(reply, file.write_all_at(data, offset).map_err(errno));
        reply.written(data.len() as u32);
    }

    fn flush(&mut self, _req: &Request<'_>, _ino: u64, _fh: u64, _lo: u64, reply: ReplyEmpty) {
        let _s = tri!(reply, self.state());
        reply.ok();
    }

    fn release(
        &mut self,
        _req: &Request<'_>,
        _ino: u64,
        fh: u64,
        _flags: i32,
        _lock_owner: Option<u64>,
        _flush: bool,
        reply: ReplyEmpty,
    ) {
        // A release is not a request of the writer's: it comes after the writer died too.
        let mut s = self.0.lock().unwrap_or_else(|p| p.into_inner());
        s.handles.remove(&fh);
        reply.ok();
    }

    fn fsync(&mut self, _req: &Request<'_>, ino: u64, _fh: u64, _ds: bool, reply: ReplyEmpty) {
        let mut s = tri!(reply, self.state());
        s.unsynced.remove(&ino);
        if s.model == Model::Ext4Ordered {
            s.names.clear();
        }
        reply.ok();
    }

    fn opendir(&mut self, _req: &Request<'_>, ino: u64, _flags: i32, reply: ReplyOpen) {
        let s = tri!(reply, self.state());
        tri!(reply, s.path(ino));
        reply.opened(0, 0);
    }

    fn readdir(
        &mut self,
        _req: &Request<'_>,
        ino: u64,
        _fh: u64,
        offset: i64,
        mut reply: ReplyDirectory,
    ) {
        let mut s = tri!(reply, self.state());
        let path = tri!(reply, s.path(ino));
        let mut entries = vec![
            (ino, FileType::Directory, ".".into()),
            (ino, FileType::Directory, "..".into()),
        ];
        for entry in tri!(reply, fs::read_dir(&path).map_err(errno)) {
            let entry = tri!(reply, entry.map_err(errno));
            let kind = match entry.file_type() {
                Ok(t) if t.is_dir() => FileType::Directory,
                Ok(t) if t.is_symlink() => FileType::Symlink,
                _ => FileType::RegularFile,
            };
            let child = s.ino_for(&entry.path());
            entries.push((child, kind, entry.file_name()));
        }
        for (i, (ino, kind, name)) in entries.into_iter().enumerate().skip(offset as usize) {
            if reply.add(ino, (i + 1) as i64, kind, name) {
                break;
            }
        }
        reply.ok();
    }

    fn fsyncdir(&mut self, _req: &Request<'_>, ino: u64, _fh: u64, _ds: bool, reply: ReplyEmpty) {
        let mut s = tri!(reply, self.state());
        if s.model == Model::Ext4Ordered {
            s.names.clear();
        }
        for change in &mut s.names {
            change.waiting_for.retain(|&d| d != ino);
        }
        s.names.retain(|c| !c.waiting_for.is_empty());
        reply.ok();
    }

    fn access(&mut self, _req: &Request<'_>, _ino: u64, _mask: i32, reply: ReplyEmpty) {
        let _s = tri!(reply, self.state());
        reply.ok();
    }
}

fn undo_name(undo: NameUndo) -> io::Result<()> {
    match undo {
        NameUndo::Created(p) => {
            if fs::symlink_metadata(&p)
                .map(|m| m.is_dir())
                .unwrap_or(false)
            {
                fs::remove_dir_all(&p)?;
            } else if p.exists() {
                fs::remove_file(&p)?;
            }
        }
        NameUndo::Unlinked { path, stash } => fs::rename(stash, path)?,
        NameUndo::RemovedDir(p) => fs::create_dir(p)?,
        NameUndo::Renamed { from, to, replaced } => {
            fs::rename(&to, &from)?;
            if let Some(stash) = replaced {
                fs::rename(stash, to)?;
            }
        }
    }
    Ok(())
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
    session: Option<BackgroundSession>,
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
            fs::create_dir_all(d)?;
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
            names: Vec::new(),
            frozen: false,
            model,
        }));
        let options = [
            MountOption::FSName("powercut".into()),
            MountOption::RW,
            MountOption::Async,
        ];
        let session = fuser::spawn_mount2(Fs(state.clone()), &mountpoint, &options)?;
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
            s.join();
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
        files.sort_by_key(|(ino, _)| *ino);
        for (ino, undos) in files {
            let keep = if seed.is_none() || next() % 2 == 0 {
                0
            } else {
                (next() % (undos.len() as u64 + 1)) as usize
            };
            report.writes_kept += keep;
            if keep == undos.len() {
                continue;
            }
            let Some(path) = s.paths.get(&ino) else {
                continue;
            };
            let file = OpenOptions::new().write(true).open(path).map_err(|e| {
                io::Error::new(e.kind(), format!("rolling back {}: {e}", path.display()))
            })?;
            for u in undos[keep..].iter().rev() {
                file.set_len(u.old_len.max(u.offset + u.old.len() as u64))?;
                file.write_all_at(&u.old, u.offset)?;
                file.set_len(u.old_len)?;
                report.writes_undone += 1;
            }
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
        fs::remove_dir_all(&stash)?;
        Ok(report)
    }

    /// Unmounts keeping every write (a process crash, not a power cut).
    pub fn unmount(mut self) -> io::Result<()> {
        if let Some(s) = self.session.take() {
            s.join();
        }
        let stash = self
            .state
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .stash
            .clone();
        fs::remove_dir_all(&stash)
    }

    /// The number of changes a cut would now undo (file writes, folder changes).
    pub fn pending(&self) -> (usize, usize) {
        let s = self.state.lock().unwrap_or_else(|p| p.into_inner());
        (s.unsynced.values().map(Vec::len).sum(), s.names.len())
    }
}

impl Drop for Mounted {
    fn drop(&mut self) {
        if let Some(s) = self.session.take() {
            s.join();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    fn base(name: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("powercut-{name}-{}", std::process::id()));
        let _ = fs::remove_dir_all(&dir);
        dir
    }

    fn mounted(name: &str) -> Option<(PathBuf, Mounted)> {
        if let Err(why) = available() {
            assert!(std::env::var("CI").as_deref() != Ok("true"), "{why}");
            eprintln!("SKIPPED: {why}");
            return None;
        }
        let b = base(name);
        let m = PowerCutFs::mount_with(&b, Model::Posix).expect("mount");
        Some((b, m))
    }

    fn fsync_dir(p: &Path) {
        File::open(p).unwrap().sync_all().unwrap();
    }

    #[test]
    fn synced_survives_unsynced_does_not() {
        let Some((b, m)) = mounted("basic") else {
            return;
        };
        let mnt = m.mountpoint().to_path_buf();
        let mut f = File::create(mnt.join("a")).unwrap();
        f.write_all(b"durable").unwrap();
        f.sync_all().unwrap();
        fsync_dir(&mnt);
        f.write_all(b" lost").unwrap();
        drop(f);
        fs::write(mnt.join("b"), b"never synced").unwrap();
        let mut c = File::create(mnt.join("c")).unwrap();
        c.write_all(b"synced data, unsynced name").unwrap();
        c.sync_all().unwrap();
        drop(c);
        // Rename over a synced file without a folder fsync: the old file comes back.
        let mut t = File::create(mnt.join("a.tmp")).unwrap();
        t.write_all(b"new").unwrap();
        t.sync_all().unwrap();
        drop(t);
        fs::rename(mnt.join("a.tmp"), mnt.join("a2")).unwrap();
        fs::remove_file(mnt.join("a2")).unwrap();
        assert_eq!(fs::read(mnt.join("a")).unwrap(), b"durable lost");
        assert!(m.pending().1 >= 4);
        let report = m.cut(None).unwrap();
        assert_eq!(fs::read(b.join("data/a")).unwrap(), b"durable");
        assert!(!b.join("data/b").exists());
        assert!(!b.join("data/c").exists());
        assert!(!b.join("data/a.tmp").exists());
        assert!(!b.join("data/a2").exists());
        assert!(report.names_undone >= 4, "{report:?}");
        fs::remove_dir_all(&b).unwrap();
    }

    #[test]
    fn folder_fsync_makes_names_durable_and_unmount_keeps_all() {
        let Some((b, m)) = mounted("names") else {
            return;
        };
        let mnt = m.mountpoint().to_path_buf();
        fs::create_dir(mnt.join("d")).unwrap();
        fsync_dir(&mnt);
        let mut f = File::create(mnt.join("d/x.tmp")).unwrap();
        f.write_all(b"x").unwrap();
        f.sync_all().unwrap();
        drop(f);
        fs::rename(mnt.join("d/x.tmp"), mnt.join("d/x")).unwrap();
        fsync_dir(&mnt.join("d"));
        fs::write(mnt.join("d/y"), b"y").unwrap();
        m.cut(Some(1)).unwrap();
        assert_eq!(fs::read(b.join("data/d/x")).unwrap(), b"x");
        assert!(!b.join("data/d/y").exists());
        // The control: unmount keeps everything.
        let m = PowerCutFs::mount_with(&b, Model::Posix).unwrap();
        fs::write(m.mountpoint().join("d/z"), b"z").unwrap();
        fs::remove_file(m.mountpoint().join("d/x")).unwrap();
        m.unmount().unwrap();
        assert_eq!(fs::read(b.join("data/d/z")).unwrap(), b"z");
        assert!(!b.join("data/d/x").exists());
        fs::remove_dir_all(&b).unwrap();
    }

    #[test]
    fn ext4_any_fsync_commits_every_earlier_name() {
        let Some((b, m)) = mounted("ext4") else {
            return;
        };
        drop(m);
        let m = PowerCutFs::mount_with(&b, Model::Ext4Ordered).unwrap();
        let mnt = m.mountpoint().to_path_buf();
        fs::create_dir(mnt.join("d")).unwrap();
        fs::write(mnt.join("d/named"), b"data never synced").unwrap();
        let f = File::create(mnt.join("other")).unwrap();
        f.sync_all().unwrap();
        drop(f);
        fs::write(mnt.join("d/after"), b"after").unwrap();
        m.cut(None).unwrap();
        assert_eq!(fs::read(b.join("data/d/named")).unwrap(), b"");
        assert!(b.join("data/other").exists());
        assert!(!b.join("data/d/after").exists());
        fs::remove_dir_all(&b).unwrap();
    }

    #[test]
    fn truncation_and_overwrite_roll_back() {
        let Some((b, m)) = mounted("trunc") else {
            return;
        };
        let mnt = m.mountpoint().to_path_buf();
        let mut f = File::create(mnt.join("f")).unwrap();
        f.write_all(&[7; 10_000]).unwrap();
        f.sync_all().unwrap();
        fsync_dir(&mnt);
        f.set_len(100).unwrap();
        f.write_all_at(&[1; 50], 20).unwrap();
        f.write_all_at(&[2; 5000], 9000).unwrap();
        drop(f);
        m.cut(None).unwrap();
        assert_eq!(fs::read(b.join("data/f")).unwrap(), vec![7; 10_000]);
        fs::remove_dir_all(&b).unwrap();
    }
}

/// What ends a run of [`run_child`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fault {
    /// The power is cut (with this seed for the writes that reached the disk anyway, see
    /// [`Mounted::cut`]) and the child dies with it.
    PowerCut(u64),
    /// `kill -9` of the child, the machine stays up: every write stays (the control).
    Kill,
}

/// What a run of [`run_child`] saw.
#[derive(Debug)]
pub struct ChildRun {
    /// Every line the child printed before it died (a line is printed after the act it
    /// reports returned, so a line seen here was true before the fault).
    pub lines: Vec<String>,
    /// What the power cut undid (`None` under [`Fault::Kill`]).
    pub cut: Option<CutReport>,
    /// Whether the child printed the marker before it died or exited.
    pub reached: bool,
}

/// Mounts the power-cut file system at `<base>/mnt` over `<base>/data` (with
/// [`Model::Ext4Ordered`], or [`Model::Posix`] if `BLOOMSLED_POWER_CUT_MODEL=posix`), starts the child
/// that `command` makes for the mount point, waits until it prints a line containing
/// `marker` (at most `limit`), lets it run `then` longer, and ends it with `fault`. The
/// backing folder `<base>/data` then holds what a reboot would find.
///
/// ```no_run
/// use std::process::Command;
/// use std::time::Duration;
/// use bloomsled_powercut::{run_child, Fault};
/// let run = run_child(
///     std::path::Path::new("/tmp/pc-run"),
///     |mnt| { let mut c = Command::new("touch"); c.arg(mnt.join("f")); c },
///     "never printed",
///     Duration::ZERO,
///     Duration::from_secs(5),
///     Fault::PowerCut(7),
/// )?;
/// assert!(!run.reached);
/// # Ok::<(), std::io::Error>(())
/// ```
pub fn run_child(
    base: &Path,
    command: impl FnOnce(&Path) -> std::process::Command,
    marker: &str,
    then: Duration,
    limit: Duration,
    fault: Fault,
) -> io::Result<ChildRun> {
    let model = match std::env::var("BLOOMSLED_POWER_CUT_MODEL").as_deref() {
        Ok("posix") => Model::Posix,
        _ => Model::Ext4Ordered,
    };
    run_child_with(model, base, command, marker, then, limit, fault)
}

/// [`run_child`] on a file system of the given [`Model`].
///
/// ```no_run
/// use std::process::Command;
/// use std::time::Duration;
/// use bloomsled_powercut::{run_child_with, Fault, Model};
/// let run = run_child_with(
///     Model::Posix,
///     std::path::Path::new("/tmp/pc-posix"),
///     |mnt| { let mut c = Command::new("touch"); c.arg(mnt.join("f")); c },
///     "never printed",
///     Duration::ZERO,
///     Duration::from_secs(5),
///     Fault::PowerCut(7),
/// )?;
/// assert!(!run.reached);
/// # Ok::<(), std::io::Error>(())
/// ```
pub fn run_child_with(
    model: Model,
    base: &Path,
    command: impl FnOnce(&Path) -> std::process::Command,
    marker: &str,
    then: Duration,
    limit: Duration,
    fault: Fault,
) -> io::Result<ChildRun> {
    use std::io::{BufRead, BufReader};
    use std::process::Stdio;
    use std::sync::mpsc;
    use std::time::Instant;

    let ctx =
        |what: &'static str| move |e: io::Error| io::Error::new(e.kind(), format!("{what}: {e}"));
    let mounted = PowerCutFs::mount_with(base, model).map_err(ctx("mount"))?;
    let mut cmd = command(mounted.mountpoint());
    let mut child = cmd
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .map_err(ctx("spawn the child"))?;
    let out = child.stdout.take().expect("piped stdout");
    let (tx, rx) = mpsc::channel();
    let reader = std::thread::spawn(move || {
        for line in BufReader::new(out).lines() {
            let Ok(line) = line else { break };
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    let deadline = Instant::now() + limit;
    let mut lines = Vec::new();
    let reached = loop {
        let Ok(line) = rx.recv_timeout(deadline.saturating_duration_since(Instant::now())) else {
            break false;
        };
        let hit = line.contains(marker);
        lines.push(line);
        if hit {
            break true;
        }
    };
    if reached {
        std::thread::sleep(then);
    }
    if matches!(fault, Fault::PowerCut(_)) {
        // The power goes first: nothing the child does after this instant reaches a disk.
        mounted.freeze();
    }
    let _ = child.kill();
    child.wait()?;
    reader.join().expect("the reader thread");
    lines.extend(rx.try_iter());
    let cut = match fault {
        Fault::PowerCut(seed) => Some(mounted.cut(Some(seed)).map_err(ctx("cut"))?),
        Fault::Kill => {
            mounted.unmount().map_err(ctx("unmount"))?;
            None
        }
    };
    Ok(ChildRun {
        lines,
        cut,
        reached,
    })
}

//! The FUSE side: a pass-through to the backing folder that records, per change, how to
//! undo it until an fsync makes it durable.

use std::collections::HashMap;
use std::ffi::OsStr;
use std::fs::{self, File, OpenOptions};
use std::io;
use std::os::unix::fs::{FileExt, MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, UNIX_EPOCH};

use fuser::{
    FileAttr, FileType, Filesystem, ReplyAttr, ReplyCreate, ReplyData, ReplyDirectory, ReplyEmpty,
    ReplyEntry, ReplyOpen, ReplyWrite, Request, TimeOrNow,
};

use crate::faults::{Faults, Op};
use crate::Model;

const TTL: Duration = Duration::from_secs(1);
pub(crate) const ROOT: u64 = 1;

/// One change to a file's bytes, with what it replaced.
pub(crate) struct DataUndo {
    /// Where the change started.
    pub(crate) offset: u64,
    /// The bytes it overwrote (those below the old length).
    pub(crate) old: Vec<u8>,
    /// The file's length before it.
    pub(crate) old_len: u64,
}

/// How to undo one change to a folder.
#[derive(Debug)]
pub(crate) enum NameUndo {
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

pub(crate) struct NameChange {
    /// Folders (inodes) whose fsync this change still waits for.
    pub(crate) waiting_for: Vec<u64>,
    pub(crate) undo: NameUndo,
}

pub(crate) struct State {
    pub(crate) stash: PathBuf,
    pub(crate) stashed: u64,
    pub(crate) paths: HashMap<u64, PathBuf>,
    pub(crate) inodes: HashMap<PathBuf, u64>,
    pub(crate) next_ino: u64,
    pub(crate) handles: HashMap<u64, File>,
    pub(crate) next_fh: u64,
    pub(crate) unsynced: HashMap<u64, Vec<DataUndo>>,
    /// Writes a failed `fsync` covered: lost at the next cut whatever later fsyncs say
    /// (Linux marks the pages clean after a failed writeback).
    pub(crate) doomed: HashMap<u64, Vec<DataUndo>>,
    pub(crate) faults: Faults,
    pub(crate) names: Vec<NameChange>,
    pub(crate) frozen: bool,
    pub(crate) model: Model,
    /// Opens keep the kernel's page cache of the file (as a local file system's does).
    pub(crate) keep_cache: bool,
}

impl State {
    pub(crate) fn ino_for(&mut self, path: &Path) -> u64 {
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

    /// Logs an operation of kind `op` on inode `ino` and fails it if a rule says so.
    fn gate(&mut self, op: Op, ino: u64) -> Result<(), i32> {
        self.gate_span(op, ino, None)
    }

    /// As [`State::gate`], for a read or write of `span` (offset, length) of the file.
    fn gate_span(&mut self, op: Op, ino: u64, span: Option<(u64, u64)>) -> Result<(), i32> {
        let name = self.path(ino)?;
        let name = name.file_name().unwrap_or_default().to_string_lossy();
        self.faults.check_span(op, &[&name], span)
    }

    /// As [`State::gate`], for the entry `name` of a folder (or two, for a rename).
    fn gate_names(&mut self, op: Op, names: &[&OsStr]) -> Result<(), i32> {
        let names: Vec<String> = names
            .iter()
            .map(|n| n.to_string_lossy().into_owned())
            .collect();
        let names: Vec<&str> = names.iter().map(String::as_str).collect();
        self.faults.check(op, &names)
    }

    fn record(&mut self, folders: &[u64], undo: NameUndo) {
        let mut waiting_for = folders.to_vec();
        waiting_for.dedup();
        self.names.push(NameChange { waiting_for, undo });
    }
}

pub(crate) fn errno(e: io::Error) -> i32 {
    e.raw_os_error().unwrap_or(libc::EIO)
}

/// The file system handed to FUSE; its state is shared with the [`Mounted`] handle.
pub(crate) struct Fs(pub(crate) Arc<Mutex<State>>);

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
            tri!(reply, s.gate(Op::Truncate, ino));
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
        tri!(reply, s.gate_names(Op::Create, &[name]));
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
        tri!(reply, s.gate_names(Op::Unlink, &[name]));
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
        tri!(reply, s.gate_names(Op::Unlink, &[name]));
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
        tri!(reply, s.gate_names(Op::Rename, &[name, newname]));
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
        tri!(reply, s.gate(Op::Open, ino));
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
        reply.opened(
            fh,
            u32::from(s.keep_cache) * fuser::consts::FOPEN_KEEP_CACHE,
        );
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
        tri!(reply, s.gate_names(Op::Create, &[name]));
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
        ino: u64,
        fh: u64,
        offset: i64,
        size: u32,
        _flags: i32,
        _lock_owner: Option<u64>,
        reply: ReplyData,
    ) {
        let mut s = tri!(reply, self.state());
        tri!(
            reply,
            s.gate_span(Op::Read, ino, Some((offset.max(0) as u64, u64::from(size))))
        );
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
        let span = Some((offset.max(0) as u64, data.len() as u64));
        tri!(reply, s.gate_span(Op::Write, ino, span));
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
        if let Err(code) = s.gate(Op::Fsync, ino) {
            // Nothing became durable, and what the fsync covered never will (fsyncgate).
            if let Some(undos) = s.unsynced.remove(&ino) {
                s.doomed.entry(ino).or_default().extend(undos);
            }
            return reply.error(code);
        }
        s.unsynced.remove(&ino);
        if s.model == Model::Ext4Ordered {
            s.names.clear();
        }
        reply.ok();
    }

    fn opendir(&mut self, _req: &Request<'_>, ino: u64, _flags: i32, reply: ReplyOpen) {
        let mut s = tri!(reply, self.state());
        tri!(reply, s.gate(Op::Open, ino));
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
        tri!(reply, s.gate(Op::FsyncDir, ino));
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

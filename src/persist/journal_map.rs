//! A tree's live crash journals: each a file of [`super::journal`]'s format mapped shared,
//! with its counter file (outside the database folder, see [`counter_dir`]) mapped shared
//! too, so an append is two stores into the page cache and two atomic adds, with no
//! syscall and no fsync (a journal is trusted only on the boot that wrote it, where
//! everything handed to the page cache survives a process crash). Linux only: elsewhere
//! there is no boot id and no journal is kept.

use std::collections::BTreeSet;
use std::fs;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock};

#[cfg(target_os = "linux")]
use zerocopy::IntoBytes;

#[cfg(target_os = "linux")]
use super::journal::COUNTERS_LEN;
use super::journal::{
    check_word, decode, file_len, Decoded, JournalHeader, FINISHED_OFFSET, NO_SPACE,
    NO_SPACE_OFFSET, RECORDS_OFFSET, RECORD_LEN, RESERVED_OFFSET,
};
#[cfg(target_os = "linux")]
use super::journal_names::open_locked;
use super::journal_names::{hex, remove, remove_if_unlocked, FoundFiles};
use crate::error::JournalFault;

/// Records per journal: 16 MiB of file, sparse until written. A sequence that writes
/// more keys overflows its journal; the tree then takes a snapshot (see
/// `Persistence::journal_filling`), and a crash before that snapshot rebuilds from a scan.
pub(crate) const CAPACITY: u64 = 1 << 20;

/// The most sequences since the trusted snapshot that replay reads journals for.
pub(crate) const MAX_JOURNALS: u64 = 64;

/// The first bytes of the names of database `db_id`'s counter files.
pub(crate) fn counter_prefix(db_id: &[u8; 16]) -> String {
    format!("bloomsled-{}-", hex(db_id))
}

/// The environment variable naming the folder for journals' counter files (empty: keep no
/// crash journal).
pub(crate) const COUNTER_DIR_ENV: &str = "BLOOMSLED_JOURNAL_COUNTER_DIR";

/// The folder for the journals' counter files: `$BLOOMSLED_JOURNAL_COUNTER_DIR` if set
/// (empty: none), else `/dev/shm`, else `$XDG_RUNTIME_DIR`: a folder a restore of the
/// database folder does not reach and a reboot clears (both are memory file systems).
/// `None` (no such folder): no crash journal is kept, and a crash means a rebuild.
pub(crate) fn counter_dir() -> Option<PathBuf> {
    if let Some(dir) = std::env::var_os(COUNTER_DIR_ENV) {
        return (!dir.is_empty()).then(|| PathBuf::from(dir));
    }
    let shm = Path::new("/dev/shm");
    if shm.is_dir() {
        return Some(shm.to_path_buf());
    }
    std::env::var_os("XDG_RUNTIME_DIR")
        .map(PathBuf::from)
        .filter(|d| d.is_dir())
}

/// The bytes of the file at `path` up to the end of its data, and its length: past the
/// first hole, if the file holds no data after it, every byte reads as zero (a journal is
/// 16 MiB of sparse file whatever its tree wrote; reading only what was backed keeps a
/// replay's reads to what the tree wrote). A file system that cannot say where its holes
/// are gives the whole file.
fn read_data(path: &Path) -> io::Result<(Vec<u8>, u64)> {
    use std::io::Read;
    let f = fs::File::open(path)?;
    let len = f.metadata()?.len();
    let end = data_end(&f, len);
    let mut bytes = Vec::new();
    bytes
        .try_reserve_exact(end as usize)
        .map_err(|_| io::Error::other("no memory to read a journal"))?;
    f.take(end).read_to_end(&mut bytes)?;
    Ok((bytes, len))
}

/// Where the data of `f` (`len` bytes) ends: its first hole, if no data follows it; else
/// `len`.
#[cfg(target_os = "linux")]
fn data_end(f: &fs::File, len: u64) -> u64 {
    use std::os::fd::AsRawFd;
    let fd = f.as_raw_fd();
    // SAFETY: `lseek` on a file descriptor `f` owns and keeps open for this call; it only
    // moves the descriptor's offset (not used by `read_data`'s reads through `f`, which
    // start from the offset `lseek(.., 0, SEEK_SET)` below puts back) and reads no memory.
    #[allow(unsafe_code)]
    let (hole, data, rewound) = unsafe {
        let hole = libc::lseek(fd, 0, libc::SEEK_HOLE);
        let data = if hole >= 0 {
            libc::lseek(fd, hole, libc::SEEK_DATA)
        } else {
            -1
        };
        let rewound = libc::lseek(fd, 0, libc::SEEK_SET);
        (hole, data, rewound)
    };
    let no_data_after = data < 0 && io::Error::last_os_error().raw_os_error() == Some(libc::ENXIO);
    if rewound != 0 || hole < 0 || !no_data_after {
        return len;
    }
    (hole as u64).min(len)
}

/// Elsewhere every byte is read.
#[cfg(not(target_os = "linux"))]
fn data_end(_: &fs::File, len: u64) -> u64 {
    len
}

/// One sequence's journal, mapped.
///
/// A store into a page of a shared mapping that the file system cannot back (a hole of the
/// sparse file on a full disk) is answered by `SIGBUS`, which would kill the process. So
/// writers store only into slots whose pages were backed beforehand, by writing zeros
/// there with `pwrite(2)` (which fails with `ENOSPC` instead): the header's page at
/// creation, then ahead of the writers in chunks that double up to [`BACK_MAX`] (about 20
/// calls for a full journal, one per 1 MiB at most). A writer whose slot finds no room
/// marks the journal [`JournalFault::NoSpace`] (its reserved count past the capacity, read
/// as overflowed by older builds) before its sled write, which goes on unjournaled: a
/// crash before the next snapshot rebuilds from a scan.
pub(crate) struct Journal {
    pub(crate) sequence: u64,
    pub(crate) seed: u64,
    capacity: u64,
    /// Slots whose pages the file system has backed.
    backed: AtomicU64,
    /// Held while backing more pages.
    backing: Mutex<()>,
    #[cfg(target_os = "linux")]
    file: fs::File,
    #[cfg(target_os = "linux")]
    map: memmap2::MmapMut,
    /// The counter file's mapping: reserved, finished, no-space word.
    #[cfg(target_os = "linux")]
    counters: memmap2::MmapMut,
    /// The counter file, open and locked (`flock`) for as long as it is mapped; dropped
    /// (unlocked) with the journal.
    #[cfg(target_os = "linux")]
    _counters_lock: fs::File,
}

/// The most bytes backed at once.
const BACK_MAX: u64 = 1 << 20;

/// The size of a memory page: the unit in which a store into the mapping needs the file
/// system to have room (so every chunk backed starts and ends on one). Read from the
/// kernel's auxiliary vector (`AT_PAGESZ`); 64 KiB, the largest in common use, if that
/// cannot be read (more bytes backed at a time, never fewer).
fn page() -> u64 {
    static PAGE: std::sync::OnceLock<u64> = std::sync::OnceLock::new();
    *PAGE.get_or_init(|| {
        const AT_PAGESZ: u64 = 6;
        let auxv = fs::read("/proc/self/auxv").unwrap_or_default();
        auxv.chunks_exact(16)
            .map(|e| {
                let word = |b: &[u8]| u64::from_ne_bytes(b.try_into().expect("8 bytes"));
                (word(&e[..8]), word(&e[8..]))
            })
            .find(|&(key, _)| key == AT_PAGESZ)
            .map(|(_, size)| size)
            .filter(|s| s.is_power_of_two() && (4096..=1 << 20).contains(s))
            .unwrap_or(1 << 16)
    })
}

/// The slots in the first `bytes` bytes of a journal of `capacity` records.
fn slots_in(bytes: u64, capacity: u64) -> u64 {
    (bytes.saturating_sub(RECORDS_OFFSET as u64) / RECORD_LEN as u64).min(capacity)
}

impl Journal {
    /// Creates (or empties) the journal file at `path` with `header` and its counter file
    /// at `counters`, and maps both. Files that cannot be made whole (a full disk) are
    /// removed. The counter file is locked (`flock`) first and for as long as it is
    /// mapped: if another process holds it (a copy of this folder, same ids, open in the
    /// same boot), this fails with [`io::ErrorKind::ResourceBusy`] and touches nothing, so
    /// that process's mapping never meets a truncation (a `SIGBUS`) or foreign counts.
    #[cfg(target_os = "linux")]
    fn create(path: &Path, counters: &Path, header: JournalHeader) -> io::Result<Journal> {
        Self::try_create(path, counters, header).inspect_err(|e| {
            if e.kind() != io::ErrorKind::ResourceBusy {
                let _ = fs::remove_file(path);
                let _ = fs::remove_file(counters);
            }
        })
    }

    /// Long because it makes two files whole and maps them, each step commented.
    #[cfg(target_os = "linux")]
    fn try_create(path: &Path, counters: &Path, header: JournalHeader) -> io::Result<Journal> {
        use std::io::Write;
        // The counter file first, locked before anything is written: another process's
        // lock (a copy of this folder) means its counters, left alone.
        let Some(mut c) = open_locked(counters)? else {
            return Err(io::Error::new(
                io::ErrorKind::ResourceBusy,
                format!(
                    "counter file {} is locked by another process (a copy of this database \
                     folder open in this boot?): no journal for this sequence",
                    counters.display()
                ),
            ));
        };
        let capacity = header.capacity.get();
        let mut file = fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(true)
            .open(path)?;
        file.set_len(file_len(capacity))?;
        // The header's page, whole: written, so backed.
        let mut first = vec![0u8; page().min(file_len(capacity)) as usize];
        first[..header.as_bytes().len()].copy_from_slice(header.as_bytes());
        file.write_all(&first)?;
        // The header and length (a snapshot's cost, not a write's): a file whose records a
        // power cut dropped then still reads as this journal, and only its boot id refuses
        // it (the case `tests/power_cut.rs` reproduces), never its absence by luck.
        file.sync_all().map_err(|error| {
            // Named, so that the tree poisons the database (`Persistence::start_journal`).
            let step = super::poison::Step::Fsync;
            super::poison::FileFault {
                path: path.to_path_buf(),
                step,
                error,
            }
            .into_io()
        })?;
        // SAFETY: the file was just created by this process in the database's own folder,
        // which sled holds locked against a second process; nothing truncates it while it
        // is mapped (only this tree's `Journals` removes it, which unlinks without
        // truncating). Every access goes through the atomics below, and only to pages
        // backed beforehand (`backed`), so no access faults on a full disk.
        #[allow(unsafe_code)]
        let map = unsafe { memmap2::MmapOptions::new().map_mut(&file)? };
        // The counter file, written whole (so every page of it is backed: no store into
        // it can fault), replacing any earlier incarnation's (whose process is gone: it
        // held the lock while it lived).
        c.set_len(0)?;
        c.write_all(&header.counters())?;
        // SAFETY: as for the journal: made by this process just now, named by this
        // database's and tree's random ids, and locked by this process for as long as it
        // is mapped (`_counters_lock`): no other process truncates it (`try_create` takes
        // the lock first), and it is removed only by unlinking, never truncated; every
        // access is atomic (`counter`).
        #[allow(unsafe_code)]
        let counters = unsafe { memmap2::MmapOptions::new().map_mut(&c)? };
        if counters.len() != COUNTERS_LEN {
            return Err(io::Error::other("counter file of the wrong length"));
        }
        Ok(Journal {
            sequence: header.sequence.get(),
            seed: header.seed.get(),
            capacity,
            backed: AtomicU64::new(slots_in(first.len() as u64, capacity)),
            backing: Mutex::new(()),
            file,
            map,
            counters,
            _counters_lock: c,
        })
    }

    #[cfg(not(target_os = "linux"))]
    fn create(_path: &Path, _counters: &Path, _header: JournalHeader) -> io::Result<Journal> {
        Err(io::Error::other("crash journals are kept on Linux only"))
    }

    /// The word at byte offset `at` of the mapping.
    #[cfg(target_os = "linux")]
    #[inline]
    fn word(&self, at: usize) -> &AtomicU64 {
        assert!(at.is_multiple_of(8) && at + 8 <= self.map.len());
        // SAFETY: the mapping is page aligned and `at` a multiple of 8 inside it (checked
        // above), so the pointer is aligned and valid for 8 bytes for as long as `self`
        // (which owns the mapping) lives; `AtomicU64` has `u64`'s layout, and every access
        // to the mapping after `create` is atomic, so no access is a data race.
        #[allow(unsafe_code)]
        unsafe {
            &*(self.map.as_ptr().add(at) as *const AtomicU64)
        }
    }

    #[cfg(not(target_os = "linux"))]
    fn word(&self, _at: usize) -> &AtomicU64 {
        unreachable!("no journal is created off Linux")
    }

    /// The counter at byte offset `at` of the counter file's mapping.
    #[cfg(target_os = "linux")]
    #[inline]
    fn counter(&self, at: usize) -> &AtomicU64 {
        assert!(at.is_multiple_of(8) && at + 8 <= self.counters.len());
        // SAFETY: as in `word`: a page-aligned mapping owned by `self`, `at` a multiple of 8
        // inside it (checked above), every access to it atomic.
        #[allow(unsafe_code)]
        unsafe {
            &*(self.counters.as_ptr().add(at) as *const AtomicU64)
        }
    }

    #[cfg(not(target_os = "linux"))]
    fn counter(&self, _at: usize) -> &AtomicU64 {
        unreachable!("no journal is created off Linux")
    }

    /// Appends a record of `op` for a key whose hash under `seed` is `hash`. Past the
    /// capacity (or with another seed than the journal's, or with no room on the disk for
    /// its slot) nothing is written but the slot is still counted reserved, which marks the
    /// journal overflowed (or out of space) before the caller's write reaches sled.
    #[inline]
    pub(crate) fn append(&self, op: u8, seed: u64, hash: u64) {
        let slot = if seed == self.seed {
            self.counter(RESERVED_OFFSET)
                .fetch_add(1, Ordering::Relaxed)
        } else {
            self.counter(RESERVED_OFFSET)
                .fetch_add(self.capacity + 1, Ordering::Relaxed)
        };
        if slot >= self.capacity {
            return;
        }
        if slot >= self.backed.load(Ordering::Acquire) && !self.back(slot) {
            return;
        }
        let at = RECORDS_OFFSET + slot as usize * RECORD_LEN;
        self.word(at).store(hash, Ordering::Relaxed);
        let check = check_word(slot, self.sequence, hash, op);
        self.word(at + 8).store(check, Ordering::Release);
        self.counter(FINISHED_OFFSET)
            .fetch_add(1, Ordering::Release);
    }

    /// Appends a record of `op` for each of `hashes` (under `seed`), as [`Journal::append`]
    /// would one by one, with one reservation of as many slots and one count of the records
    /// finished (a batch's keys). Slots past the capacity are reserved but not written,
    /// which marks the journal overflowed; with another seed than the journal's, or no room
    /// on the disk, nothing is written (the journal is marked overflowed, or out of space).
    #[inline]
    pub(crate) fn append_all(&self, op: u8, seed: u64, hashes: &[u64]) {
        if hashes.is_empty() {
            return;
        }
        let reserved = self.counter(RESERVED_OFFSET);
        if seed != self.seed {
            reserved.fetch_add(self.capacity + 1, Ordering::Relaxed);
            return;
        }
        let first = reserved.fetch_add(hashes.len() as u64, Ordering::Relaxed);
        let end = (first + hashes.len() as u64).min(self.capacity);
        if first >= end {
            return;
        }
        // Backing the last slot's page backs every page before it.
        if end > self.backed.load(Ordering::Acquire) && !self.back(end - 1) {
            return;
        }
        for (slot, &hash) in (first..end).zip(hashes) {
            let at = RECORDS_OFFSET + slot as usize * RECORD_LEN;
            self.word(at).store(hash, Ordering::Relaxed);
            let check = check_word(slot, self.sequence, hash, op);
            self.word(at + 8).store(check, Ordering::Release);
        }
        self.counter(FINISHED_OFFSET)
            .fetch_add(end - first, Ordering::Release);
    }

    /// Backs the pages up to `slot`'s and beyond (see the type's docs); false if the file
    /// system had no room, and then the journal is marked [`JournalFault::NoSpace`].
    #[cold]
    fn back(&self, slot: u64) -> bool {
        let _held = self.backing.lock().unwrap_or_else(|p| p.into_inner());
        let backed = self.backed.load(Ordering::Relaxed);
        if slot < backed {
            return true; // another writer backed it meanwhile
        }
        if self.counter(NO_SPACE_OFFSET).load(Ordering::Relaxed) == NO_SPACE {
            return false;
        }
        // Every chunk starts and ends on a page boundary (the first one after the header's
        // page does), so each slot's page is backed by the chunk holding it.
        let from = RECORDS_OFFSET as u64 + backed * RECORD_LEN as u64;
        let need =
            (RECORDS_OFFSET as u64 + (slot + 1) * RECORD_LEN as u64).next_multiple_of(page());
        let end = need
            .max(from + from.clamp(page(), BACK_MAX))
            .min(file_len(self.capacity));
        match self.write_zeros(from, end) {
            Ok(()) => {
                self.backed
                    .store(slots_in(end, self.capacity), Ordering::Release);
                true
            }
            Err(e) => {
                self.counter(NO_SPACE_OFFSET)
                    .store(NO_SPACE, Ordering::Relaxed);
                self.counter(RESERVED_OFFSET)
                    .fetch_add(self.capacity + 1, Ordering::Release);
                log::warn!(
                    "bloomsled: crash journal of sequence {}: cannot grow it ({e}); \
                     the writes from now until the next snapshot are not journaled (a \
                     crash before it rebuilds the filter from a scan)",
                    self.sequence
                );
                false
            }
        }
    }

    /// Writes zeros to bytes `from..end` of the file (no writer touches them before
    /// `backed` covers them).
    #[cfg(target_os = "linux")]
    fn write_zeros(&self, from: u64, end: u64) -> io::Result<()> {
        use std::os::unix::fs::FileExt;
        let zeros = vec![0u8; (end - from) as usize];
        self.file.write_all_at(&zeros, from)
    }

    #[cfg(not(target_os = "linux"))]
    fn write_zeros(&self, _from: u64, _end: u64) -> io::Result<()> {
        unreachable!("no journal is created off Linux")
    }

    /// True once half the journal's slots are handed out.
    pub(crate) fn half_full(&self) -> bool {
        self.counter(RESERVED_OFFSET).load(Ordering::Relaxed) >= self.capacity / 2
    }
}

/// The journals of one tree: the mapped ones writers append to (the current sequence's
/// and, while a snapshot moves on, the previous one's), and the files on disk.
pub(crate) struct Journals {
    /// The database's `bloomsled` folder, shared by its trees (names are built when a file
    /// is made, so a tree that writes none holds no name).
    dir: Arc<Path>,
    tree_id: [u8; 16],
    /// The folder of the counter files (see [`counter_dir`]; `None`: no journal is made).
    counter_dir: Option<Arc<Path>>,
    /// With the tree id, names the counter files: `bloomsled-<database id>-<tree id>-`
    /// before the sequence, so no two databases' or trees' counters collide (a copy of the
    /// folder shares them: see the counter file's lock in [`Journal::create`]).
    db_id: [u8; 16],
    live: RwLock<Vec<Arc<Journal>>>,
    /// The sequences whose journal or counter file may be on disk: those found when the
    /// database was opened, and those made since. Retiring removes only these, with no
    /// listing of a folder.
    files: Mutex<BTreeSet<u64>>,
}

impl Journals {
    /// The journals of tree `tree_id` of database `db_id` in `db_dir`, their counter files
    /// in `counter_dir`; `found`: the files on disk when the database was opened.
    pub(crate) fn new(
        files_dir: Arc<Path>,
        db_id: &[u8; 16],
        tree_id: &[u8; 16],
        counter_dir: Option<Arc<Path>>,
        found: &FoundFiles,
    ) -> Journals {
        let journals = Journals {
            dir: files_dir,
            tree_id: *tree_id,
            counter_dir,
            db_id: *db_id,
            live: RwLock::new(Vec::new()),
            files: Mutex::new(BTreeSet::new()),
        };
        let files = found.sequences(&hex(tree_id), &journals.counter_stem());
        *journals.files.lock().unwrap_or_else(|p| p.into_inner()) = files;
        journals
    }

    fn path(&self, sequence: u64) -> PathBuf {
        self.dir
            .join(format!("{}.{sequence}.jnl", hex(&self.tree_id)))
    }

    /// `bloomsled-<database id>-<tree id>-`: the counter files' names before the sequence.
    fn counter_stem(&self) -> String {
        counter_prefix(&self.db_id) + &hex(&self.tree_id) + "-"
    }

    /// The counter file of `sequence`'s journal (`None`: no counter folder).
    fn counter_path(&self, sequence: u64) -> Option<PathBuf> {
        let name = format!("{}{sequence}.jctr", self.counter_stem());
        self.counter_dir.as_ref().map(|d| d.join(name))
    }

    /// Creates the journal of `header`'s sequence and makes it the one writers of that
    /// sequence append to. Older live journals stay live (a writer may still be about to
    /// append to one) until [`Journals::retire`].
    pub(crate) fn start(&self, header: JournalHeader) -> io::Result<()> {
        fs::create_dir_all(&*self.dir)?;
        let g = header.sequence.get();
        let counters = self
            .counter_path(g)
            .ok_or_else(|| io::Error::other("no folder for the journal's counter file"))?;
        self.files
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(g);
        let j = Arc::new(Journal::create(&self.path(g), &counters, header)?);
        let mut live = self.live.write().unwrap_or_else(|p| p.into_inner());
        live.retain(|l| l.sequence != j.sequence);
        live.push(j);
        Ok(())
    }

    /// The live journal of `sequence`, if there is one.
    #[inline]
    pub(crate) fn with(&self, sequence: u64, f: impl FnOnce(&Journal)) {
        let live = self.live.read().unwrap_or_else(|p| p.into_inner());
        if let Some(j) = live.iter().rev().find(|j| j.sequence == sequence) {
            f(j);
        }
    }

    /// True if the newest live journal is half full (time for a snapshot).
    pub(crate) fn filling(&self) -> bool {
        let live = self.live.read().unwrap_or_else(|p| p.into_inner());
        live.last().is_some_and(|j| j.half_full())
    }

    /// Reads and decodes the journal file of `sequence` with its counter file.
    pub(crate) fn read(&self, sequence: u64) -> Result<Decoded, JournalFault> {
        let counters = match self.counter_path(sequence).map(fs::read) {
            Some(Ok(bytes)) => Ok(bytes),
            Some(Err(e)) if e.kind() != io::ErrorKind::NotFound => Err(JournalFault::Damaged {
                sequence,
                what: format!("counter file: {e}"),
            }),
            _ => Err(JournalFault::CountersMissing { sequence }),
        };
        match read_data(&self.path(sequence)) {
            Ok((bytes, len)) => decode(
                &bytes,
                len,
                counters.as_deref().map_err(Clone::clone),
                sequence,
            ),
            Err(e) if e.kind() == io::ErrorKind::NotFound => {
                Err(JournalFault::Missing { sequence })
            }
            Err(e) => Err(JournalFault::Damaged {
                sequence,
                what: e.to_string(),
            }),
        }
    }

    /// Deletes this tree's journal files and counter files whose sequence is not in
    /// `keep`, and forgets the live ones outside it.
    pub(crate) fn retire(&self, keep: std::ops::RangeInclusive<u64>) {
        self.live
            .write()
            .unwrap_or_else(|p| p.into_inner())
            .retain(|j| keep.contains(&j.sequence));
        let mut files = self.files.lock().unwrap_or_else(|p| p.into_inner());
        files.retain(|&g| {
            if keep.contains(&g) {
                return true;
            }
            remove(&self.path(g));
            if let Some(counters) = self.counter_path(g) {
                remove_if_unlocked(&counters);
            }
            false
        });
    }
}

#[cfg(all(test, target_os = "linux"))]
mod tests;

//! The live persistence state of one open tree: the dirty mark before writes, the crash
//! journal's appends, snapshots. Recovery at open (`recovery.rs`) decides from the tree's
//! record and files before this state exists, then hands them to [`Persistence::new`].

use std::path::Path;
use std::sync::atomic::{fence, AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock, RwLockReadGuard};
use std::time::Instant;

use super::files::SnapshotFile;
use super::journal::{JournalHeader, OP_INSERT, OP_REMOVE};
use super::journal_map::CAPACITY;
use super::meta::{random_id, Meta};
use super::poison::FileFault;
use super::settings::set_settings;
use super::tree_files::{TreeFiles, TreeJournals};
use super::trust::{judge, Identity};
use super::SnapshotInfo;
use crate::error::{Distrust, Error, Result};
use crate::filter::any::AnyFilter;
use crate::filter::{FilterConfig, FilterMode};
use crate::format::{self, SnapshotMeta, TreeRecord, FLAG_EMPTY};

use zerocopy::little_endian::{U32, U64};

/// What a snapshot copies from the filter: its parameters (ids and sequence are filled
/// in here) and its words.
pub(crate) type FilterImage = (SnapshotMeta, Vec<u64>);

/// What a snapshot of `f` stores: its parameters and a copy of its words.
pub(crate) fn filter_image(f: &AnyFilter) -> Result<FilterImage> {
    let meta = format::SnapshotMeta::of(f.bits(), format::filter_kind(f.mode()), f.items());
    Ok((meta, f.image_words()?))
}

/// The persistence state of one tree (see the protocol in [`crate::persist`]).
/// A journal started and not made yet: what its header takes from the moment it started.
#[derive(Clone, Copy)]
struct PendingJournal {
    sequence: u64,
    tree_id: [u8; 16],
    /// The snapshot of its sequence.
    snapshot_id: [u8; 16],
    /// The snapshot the record named when it started.
    base_id: [u8; 16],
    seed: u64,
}

pub(crate) struct Persistence {
    meta: Arc<Meta>,
    name: Vec<u8>,
    file: SnapshotFile,
    page_size: u32,
    /// Sequence of the latest snapshot copy (or of the loaded snapshot).
    sequence: AtomicU64,
    /// Highest sequence whose dirty mark is durable.
    marked: AtomicU64,
    /// The tree's record as last written; every change writes it whole.
    record: Mutex<TreeRecord>,
    /// One snapshot at a time.
    snapshotting: Mutex<()>,
    /// Held (shared) by a transaction from its dirty mark to its end, taken (exclusive) by a
    /// snapshot to move the sequence on: a transaction's writes then never need a mark
    /// inside sled's transaction, where writing the record would deadlock on sled's own
    /// transaction lock (see [`Persistence::hold_sequence`]).
    sequence_hold: RwLock<()>,
    /// The tree was dropped: its record and file are gone and never written again.
    dropped: AtomicBool,
    /// The crash journals (`None`: switched off, or no boot id on this platform).
    journal: Option<TreeJournals>,
    /// The journal of the latest sequence started, until its first write makes it (in [`Persistence::mark`], before the dirty mark): a tree that is opened or
    /// snapshotted and then not written makes no journal file.
    pending_journal: Mutex<Option<PendingJournal>>,
    /// Held (shared) by a counting-mode correction from its counter decrement to its
    /// journal record, taken (exclusive) by a snapshot from the sequence's move to the
    /// end of its copy: a decrement is in the copy iff its record is in an older journal.
    corrections: RwLock<()>,
    /// The filter was replayed from journals at open: it differs from the snapshot, so the
    /// tree counts as dirty until its next snapshot.
    replayed: AtomicBool,
}

impl Persistence {
    /// The state of a tree whose `record` is stored (durably or not) in `meta`, and whose
    /// `files` (named by the record's tree id) recovery has read.
    pub(crate) fn new(
        meta: Arc<Meta>,
        name: &[u8],
        page_size: u32,
        record: TreeRecord,
        files: TreeFiles,
    ) -> Self {
        Persistence {
            file: files.snapshot,
            meta,
            name: name.to_vec(),
            page_size,
            sequence: AtomicU64::new(record.snapshot_sequence.get()),
            marked: AtomicU64::new(record.dirty_sequence.get()),
            record: Mutex::new(record),
            snapshotting: Mutex::new(()),
            sequence_hold: RwLock::new(()),
            dropped: AtomicBool::new(false),
            journal: files.journals,
            pending_journal: Mutex::new(None),
            corrections: RwLock::new(()),
            replayed: AtomicBool::new(false),
        }
    }

    /// The store's durable flush (see `Meta::flush_user`).
    pub(crate) fn flush_user(&self) -> Result<usize> {
        self.meta.flush_user()
    }

    /// The store's sync after a flush the store ran itself.
    pub(crate) fn sync_log(&self) -> Result<()> {
        self.meta.sync_log()
    }

    /// `Err(Error::Poisoned)` once a sync of the database failed.
    pub(crate) fn check_poison(&self) -> Result<()> {
        self.meta.check_poison()
    }

    /// The error for a failed flush of the store the caller ran itself: it poisons the
    /// database.
    pub(crate) fn flush_failed(&self, e: impl std::fmt::Display) -> Error {
        self.meta.flush_failed(e)
    }

    fn tree_id(&self) -> [u8; 16] {
        self.record
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .tree_id
    }

    /// Starts the journal of `sequence`, for the snapshot `snapshot_id` of that
    /// sequence, whose hashes use `seed`; its base is the snapshot the record names now.
    /// The file is made by the sequence's first write (see `pending_journal`). A journal
    /// that cannot be made is logged: that sequence's writes are then not journaled, and a
    /// crash before the next durable snapshot rebuilds from a scan
    /// (`JournalFault::Missing`).
    pub(crate) fn start_journal(&self, sequence: u64, snapshot_id: [u8; 16], seed: u64) {
        let Some(j) = &self.journal else { return };
        let (tree_id, base_id) = {
            let r = self.record.lock().unwrap_or_else(|p| p.into_inner());
            (r.tree_id, r.snapshot_id)
        };
        let started = PendingJournal {
            sequence,
            tree_id,
            snapshot_id,
            base_id,
            seed,
        };
        let mut pending = self
            .pending_journal
            .lock()
            .unwrap_or_else(|p| p.into_inner());
        // The sequence before this one was never written (its journal was never made), but
        // a later dirty mark makes recovery ask for every journal since the snapshot: it
        // is made now, empty.
        if let Some(earlier) = pending.replace(started) {
            self.make_file(j, earlier);
        }
    }

    /// Makes the journal file of `started` (its failure logged: that sequence is then not
    /// journaled). A failed fsync of the journal's header poisons the database, as any
    /// other. Its header, with a fresh random nonce, is built here: a tree that opens and
    /// never writes draws no nonce and holds no header.
    fn make_file(&self, j: &TreeJournals, started: PendingJournal) {
        let sequence = started.sequence;
        let mut h = JournalHeader::blank();
        h.tree_id = started.tree_id;
        h.base_id = started.base_id;
        h.db_id = self.meta.db_id();
        h.snapshot_id = started.snapshot_id;
        h.boot_id = j.boot_id;
        h.nonce = match random_id() {
            Ok(nonce) => nonce,
            Err(e) => {
                log::warn!("bloomsled: crash journal of sequence {sequence}: {e}");
                return;
            }
        };
        h.sequence = U64::new(sequence);
        h.seed = U64::new(started.seed);
        h.capacity = U64::new(CAPACITY);
        let header = h.sealed();
        if let Err(e) = j.journals.start(header) {
            let e = match FileFault::take(e) {
                Ok(fault) => self.meta.absorb(fault),
                Err(e) => Error::Io(e),
            };
            let g = header.sequence.get();
            log::warn!("bloomsled: crash journal of sequence {g}: {e}");
        }
    }

    /// Makes the journal of `sequence` if it was started and not made yet: called by the
    /// sequence's first write, before its dirty mark and its store write.
    fn make_journal(&self, sequence: u64) {
        let Some(j) = &self.journal else { return };
        let mut pending = self
            .pending_journal
            .lock()
            .unwrap_or_else(|p| p.into_inner());
        if pending.is_some_and(|h| h.sequence == sequence) {
            let h = pending.take().expect("checked");
            self.make_file(j, h);
        }
    }

    /// After replaying journals at open: writes go on in `sequence` (past every
    /// sequence replayed, whose journals stay until the next durable snapshot), in a
    /// fresh journal, and the tree counts as dirty.
    pub(crate) fn resume_after_replay(&self, sequence: u64, seed: u64) -> Result<()> {
        self.sequence.store(sequence, Ordering::SeqCst);
        self.replayed.store(true, Ordering::SeqCst);
        self.start_journal(sequence, random_id()?, seed);
        Ok(())
    }

    /// Deletes the journals no longer needed: those older than the snapshot the record
    /// names, which the caller made durable (handed to the OS) before calling this.
    pub(crate) fn retire_journals(&self) {
        if let Some(j) = &self.journal {
            let from = self
                .record
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .snapshot_sequence
                .get();
            j.journals.retire(from..=u64::MAX);
        }
    }

    /// At a clean close (the last handle gone, after the closing snapshot): if the record
    /// names a snapshot no write came after, deletes every journal and its counter file
    /// (the next open starts a fresh journal; none is needed to trust the snapshot), so a
    /// closed database leaves nothing in the counter folder.
    pub(crate) fn retire_journals_if_clean(&self) {
        let r = self.record.lock().unwrap_or_else(|p| p.into_inner());
        let clean = r.dirty_sequence.get() < r.snapshot_sequence.get();
        if let (true, false, Some(j)) = (clean, self.is_dirty(), &self.journal) {
            #[allow(clippy::reversed_empty_ranges)]
            j.journals.retire(1..=0);
        }
    }

    /// Deletes the journals outside `keep` (at open: those no trusted state needs).
    pub(crate) fn retire_journals_outside(&self, keep: std::ops::RangeInclusive<u64>) {
        if let Some(j) = &self.journal {
            j.journals.retire(keep);
        }
    }

    /// Appends `hashes` (under `seed`) to the journal of `sequence`, as keys counted in
    /// before their sled write. Call after [`Persistence::before_write`] returned it.
    #[inline]
    pub(crate) fn journal_inserts(&self, sequence: u64, seed: u64, hashes: &[u64]) {
        if let Some(j) = &self.journal {
            j.journals
                .with(sequence, |jr| jr.append_all(OP_INSERT, seed, hashes));
        }
    }

    /// Runs a counting-mode correction (`release` counts a key out, after its sled write,
    /// and returns `(seed, hash)`) and journals it as a remove in the sequence current
    /// at that moment, with no snapshot copy in between (see `corrections`).
    #[inline]
    pub(crate) fn journal_release(&self, release: impl FnOnce() -> (u64, u64)) {
        let Some(j) = &self.journal else {
            release();
            return;
        };
        let _held = self.corrections.read().unwrap_or_else(|p| p.into_inner());
        let (seed, h) = release();
        fence(Ordering::SeqCst);
        let g = self.sequence.load(Ordering::SeqCst);
        j.journals.with(g, |jr| jr.append(OP_REMOVE, seed, h));
    }

    /// True if the newest journal is half full: time for a snapshot (a fresh journal).
    pub(crate) fn journal_filling(&self) -> bool {
        self.journal.as_ref().is_some_and(|j| j.journals.filling())
    }

    /// The sequence writers are in now (held still inside a transaction).
    pub(crate) fn current_sequence(&self) -> u64 {
        self.sequence.load(Ordering::SeqCst)
    }

    pub(crate) fn snapshot_path(&self) -> &Path {
        self.file.path_ref()
    }

    /// Replaces the sizing and mode new and rebuilt filters get (durable on return).
    pub(crate) fn set_settings(&self, mode: FilterMode, cfg: &FilterConfig) -> Result<()> {
        let mut r = self.record.lock().unwrap_or_else(|p| p.into_inner());
        set_settings(&mut r, mode, cfg);
        self.meta.write(&self.name, &mut r, true)
    }

    /// Fully verifies the snapshot on disk against the tree's record: `Ok(sequence)` if
    /// it is the one open would load.
    /// Writes since the snapshot do not count against it here: it is checked as the
    /// snapshot of the data at its sequence. A tree never snapshotted yet has sequence 0
    /// and nothing to check.
    pub(crate) fn verify(&self, mode: FilterMode) -> std::result::Result<u64, Distrust> {
        let mut record = *self.record.lock().unwrap_or_else(|p| p.into_inner());
        if record.snapshot_sequence.get() == 0 {
            return Ok(0); // never snapshotted yet: nothing on disk to check
        }
        record.dirty_sequence = U64::new(0);
        let identity = Identity {
            db_id: self.meta.db_id(),
            mode,
        };
        let read = || -> std::result::Result<format::Header, Distrust> {
            let bytes = self
                .file
                .read()
                .map_err(|e| Distrust::Io(e.to_string()))??;
            Ok(format::decode(&bytes)?.0)
        };
        judge(&record, &identity, read, |h| h).map(|_| record.snapshot_sequence.get())
    }

    /// The tree was dropped: delete its record and file, and never write them again
    /// (handles to the dropped tree may still be alive).
    pub(crate) fn forget(&self) -> Result<()> {
        let _one = self.snapshotting.lock().unwrap_or_else(|p| p.into_inner());
        let _r = self.record.lock().unwrap_or_else(|p| p.into_inner());
        self.dropped.store(true, Ordering::SeqCst);
        self.meta.remove(&self.name)?;
        self.file.remove(true).map_err(|f| self.meta.absorb(f))?;
        if let Some(j) = &self.journal {
            #[allow(clippy::reversed_empty_ranges)]
            j.journals.retire(1..=0);
        }
        Ok(())
    }

    /// True if the tree was written since its last snapshot copy (and not dropped).
    pub(crate) fn is_dirty(&self) -> bool {
        !self.dropped.load(Ordering::Relaxed)
            && (self.replayed.load(Ordering::Relaxed)
                || self.marked.load(Ordering::Acquire) >= self.sequence.load(Ordering::SeqCst))
    }

    /// Must be called after a key's bits are set and before its sled write: makes sure the
    /// tree's record durably says the current sequence is dirty, and returns that
    /// sequence (whose journal the write's keys go to).
    ///
    /// Refused with [`Error::Poisoned`] once a sync of the database failed.
    #[inline]
    pub(crate) fn before_write(&self) -> Result<u64> {
        self.meta.check_poison()?;
        fence(Ordering::SeqCst);
        let g = self.sequence.load(Ordering::SeqCst);
        if self.marked.load(Ordering::Acquire) >= g {
            return Ok(g);
        }
        self.mark(g)?;
        Ok(g)
    }

    /// For a transaction: makes the dirty mark cover the current sequence and keeps the
    /// sequence from moving on until the returned guard is dropped. sled runs a
    /// transaction's closure under its global transaction lock, which every other sled write
    /// waits for, so the record cannot be written from inside it; with this guard held,
    /// [`Persistence::is_marked`] stays true for the whole transaction. Drop the guard before
    /// anything that may take a snapshot.
    pub(crate) fn hold_sequence(&self) -> Result<RwLockReadGuard<'_, ()>> {
        let guard = self.sequence_hold.read().unwrap_or_else(|p| p.into_inner());
        self.before_write()?;
        Ok(guard)
    }

    /// True if the dirty mark covers the current sequence (no write needed before a
    /// write to sled).
    pub(crate) fn is_marked(&self) -> bool {
        fence(Ordering::SeqCst);
        self.dropped.load(Ordering::SeqCst)
            || self.marked.load(Ordering::Acquire) >= self.sequence.load(Ordering::SeqCst)
    }

    #[cold]
    fn mark(&self, g: u64) -> Result<()> {
        let mut r = self.record.lock().unwrap_or_else(|p| p.into_inner());
        if self.marked.load(Ordering::Acquire) >= g || self.dropped.load(Ordering::SeqCst) {
            return Ok(());
        }
        self.make_journal(g);
        r.dirty_sequence = U64::new(r.dirty_sequence.get().max(g));
        self.meta.write(&self.name, &mut r, true)?;
        self.marked.store(g, Ordering::Release);
        Ok(())
    }

    /// Writes a snapshot as the next sequence. Its journal (hashes under `seed`) is
    /// started first; then, holding the gate from `enter`, no transaction and no
    /// counting-mode correction in flight, the sequence moves on and `copy` takes the
    /// filter's parameters and words. With `durable`, the record naming the snapshot is
    /// flushed before this returns and older journals are deleted; without, the caller
    /// flushes sled later (one flush for many trees), then calls
    /// [`Persistence::retire_journals`], and until then the previous snapshot stays the
    /// trusted one.
    pub(crate) fn snapshot<G>(
        &self,
        seed: u64,
        enter: impl FnOnce() -> G,
        copy: impl FnOnce(&G) -> Result<FilterImage>,
        durable: bool,
    ) -> Result<SnapshotInfo> {
        let _one = self.snapshotting.lock().unwrap_or_else(|p| p.into_inner());
        if self.dropped.load(Ordering::SeqCst) {
            return Err(Error::Closed("the tree was dropped".into()));
        }
        // A poisoned database writes no snapshot: its record could not be made durable.
        self.meta.check_poison()?;
        let snapshot_id = random_id()?;
        // Only snapshots (one at a time) move the sequence: this is the next one.
        self.start_journal(self.sequence.load(Ordering::SeqCst) + 1, snapshot_id, seed);
        let start = Instant::now();
        let (sequence, image) = {
            let gate = enter();
            let _corrections = self.corrections.write().unwrap_or_else(|p| p.into_inner());
            let sequence = {
                // No transaction is between its dirty mark and its end (see
                // `hold_sequence`).
                let _held = self
                    .sequence_hold
                    .write()
                    .unwrap_or_else(|p| p.into_inner());
                self.sequence.fetch_add(1, Ordering::SeqCst) + 1
            };
            fence(Ordering::SeqCst);
            (sequence, copy(&gate))
        };
        let result =
            image.and_then(|image| self.write_snapshot(sequence, snapshot_id, image, durable));
        match &result {
            Ok(_) => {
                self.replayed.store(false, Ordering::SeqCst);
                if durable {
                    self.retire_journals();
                }
            }
            Err(_) => {
                // The sequence moved on without a snapshot: mark it dirty, so that the
                // tree still counts as written since its last snapshot and close retries.
                if let Err(e) = self.mark(sequence) {
                    log::warn!("bloomsled: dirty mark after a failed snapshot: {e}");
                }
            }
        }
        result.map(|mut info| {
            info.duration = start.elapsed();
            info
        })
    }

    fn write_snapshot(
        &self,
        sequence: u64,
        snapshot_id: [u8; 16],
        (mut meta, words): FilterImage,
        durable: bool,
    ) -> Result<SnapshotInfo> {
        meta.db_id = self.meta.db_id();
        meta.tree_id = self.tree_id();
        meta.snapshot_id = snapshot_id;
        meta.sequence = sequence;
        // An empty filter (a tree never written) needs no file: its record says so.
        let empty = words.iter().all(|&w| w == 0);
        let absorb = |f| self.meta.absorb(f);
        let (bytes, pages) = if empty {
            self.file.remove(durable).map_err(absorb)?;
            (0, 0)
        } else {
            let bytes = self
                .file
                .write(&meta, &words, self.page_size, durable)
                .map_err(absorb)?;
            let pages = (words.len() as u64 * 8).div_ceil(u64::from(self.page_size)) as u32;
            (bytes, pages)
        };
        drop(words);
        // The file is durable; now the record names it. Its flush also makes every sled
        // write before the copy durable (counting mode relies on that for removes).
        {
            let mut r = self.record.lock().unwrap_or_else(|p| p.into_inner());
            if self.dropped.load(Ordering::SeqCst) {
                return Err(Error::Closed("the tree was dropped".into()));
            }
            r.snapshot_sequence = U64::new(sequence);
            r.snapshot_id = snapshot_id;
            let kept = r.flags.get() & !FLAG_EMPTY;
            r.flags = U32::new(kept | if empty { FLAG_EMPTY } else { 0 });
            self.meta.write(&self.name, &mut r, durable)?;
        }
        Ok(SnapshotInfo {
            sequence,
            bytes,
            pages,
            items: meta.items,
            duration: std::time::Duration::ZERO,
        })
    }
}

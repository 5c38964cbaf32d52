//! Persistence: what makes a snapshot trustworthy, and recovery when it is not.
//!
//! # What is stored where
//! - **In sled**, in bloomsled's own tree [`META_TREE`] (the only tree bloomsled hides):
//!   the database id (random, made once) and, per filtered tree, a trust record keyed by the
//!   tree's *full* name: the tree's random id, the id and sequence of its current
//!   snapshot, the highest sequence it was written after (`dirty`), and its sizing and
//!   mode.
//! - **In files**, `<db>/bloomsled/<tree id>.snap`: each tree's snapshot
//!   (`src/format`), whose header repeats the database id, the tree id, the snapshot id
//!   and the sequence, all under CRC32.
//!
//! # When a snapshot is trusted (`trust::judge`, the one place that decides)
//! At open, a tree's snapshot is used only if (1) the tree is opened in the mode its
//! record stores, (2) the record says the tree was not written after the snapshot
//! (`dirty < sequence`), (3) every CRC of the file passes, (4) the file's database id is
//! this database's, (5) its tree id is the record's, and (6) its snapshot id and sequence
//! are the ones the record names. Otherwise the filter is rebuilt from a scan of the keys
//! (or, under [`RecoveryPolicy::Strict`], open fails with the reason), and the
//! [`RecoveryReport`] says why.
//!
//! # Why a trusted snapshot holds every stored key
//! - *Writes.* A writer sets its key's bits, then (SeqCst fence) reads the sequence *g*;
//!   if the record does not yet say `dirty ≥ g`, it writes that and flushes sled **before**
//!   its own sled write. A snapshot first moves the sequence to *g* (fence), then copies
//!   the bits. The fences make the two orders exclusive: either the writer reads *g* (and
//!   the record durably says *g* is dirty before its key can be durable, so snapshot *g* is
//!   never trusted), or it read an older sequence, and then its bits were set before the
//!   copy, which holds them.
//! - *The record names exactly one file.* A snapshot writes its file (temp, fsync, rename,
//!   fsync dir) and only then points the record at it (new random snapshot id + sequence)
//!   and flushes sled. A crash in between leaves the record naming the previous snapshot,
//!   which the new file does not match: rebuild.
//! - *Files cannot vouch for themselves.* The record lives in sled with the data, so
//!   restoring old snapshot files (a backup, a rollback), copying another database's or
//!   another tree's files, swapping two trees' files, or editing one (CRCs recomputed)
//!   leaves a file whose database id, tree id or snapshot id differs from what the record
//!   names: rebuild. Restoring the data *and* its record together restores a consistent
//!   state. Tree names are compared in full (they are sled keys), never by a hash, and
//!   files are named by the tree's random id, so no two trees share a file.
//! - *A new tree* gets a record that says "the current snapshot is the empty filter" and
//!   needs no file; its first write marks it dirty like any other.
//! - *Outside the contract:* writing the database with plain sled, which bypasses the dirty
//!   mark. Open such a database once with a rebuild ([`crate::Tree::rebuild`] or the CLI's
//!   `rebuild`), or delete the meta tree's record, after such writes.
//!
//! Writers are never held off by a snapshot; the first write after each snapshot pays one
//! sled flush.
//!
//! # Power loss
//! A power cut keeps only what was fsynced (names: once a later fsync committed them, on
//! ext4's default journal). sled 0.34.7's `flush()` ends in `sync_file_range(2)`, not an
//! fsync (spacejam/sled#1452): it survives a process crash, not a power cut. So every
//! durable write of the meta tree (the dirty mark, a snapshot's record, the database
//! record, a window's ring record) is sled's flush *and then an fsync of sled's log file*
//! (whose name is made durable by an fsync of its folder at open): the mark is on the
//! platter before the key's write starts, with no reliance on how sled recovers its log.
//! The cost is one fsync per sequence, paid by the first write after a snapshot. The
//! snapshot file is fsynced with its folder before the record names it, so a recovered
//! record never names a missing file. `tests/power_cut.rs` holds this to a file system
//! that drops every unsynced write (`powercut/`), across every kind of writer.
//!
//! # Crash journal (`journal.rs`, `journal_map.rs`; the rule is `trust::judge_journals`)
//! A stale record (`dirty ≥ sequence`) used to mean a scan. Each tree also keeps, per
//! sequence *g*, a journal `<tree id>.<g>.jnl`: a shared file mapping to which every
//! write appends its keys' hashes, with no syscall and no fsync. At open, a stale record
//! whose snapshot passes `judge` (dirty mark aside) is replayed from the journals of
//! sequences `snapshot..=dirty` if `judge_journals` accepts all of them; else it is
//! rebuilt as before, with [`Distrust::Journal`] saying why.
//! - *Which writes each journal holds.* A writer sets its key's bits, reads *g* (the fence
//!   above), makes the mark `dirty ≥ g` durable, appends the hash to journal *g*, and only
//!   then writes to sled. A snapshot starts journal *g+1* **before** it moves the
//!   sequence to *g+1*; the file is made by the first write that reads *g+1*, in its
//!   dirty mark, before the mark is stored (a writer that finds the mark made, by the
//!   mark's release, finds the journal made). A sequence no write read has no file until
//!   the next one starts, which makes it, empty: a later dirty mark makes replay ask for
//!   every journal since the snapshot. A write that read *g < G* set its bits before the move to *G*,
//!   so snapshot *G*'s copy holds them; one that read *g ≥ G* is in journal *g*, and its
//!   durable mark makes `dirty ≥ g`, so replay reads that journal. Hence snapshot ∪
//!   journals `G..=dirty` ⊇ every stored key. Journal *G* names snapshot *G*'s id; a later
//!   one names, as its base, the snapshot the record named when it was created; replay
//!   needs each link to be the recorded snapshot's id, so no journal of another history,
//!   database or tree is replayed. A write that finds no live journal for its *g* (none
//!   could be made) leaves it missing: rebuild. Transactions journal each key as it is
//!   counted in (the sequence is held still), so a re-run adds only duplicates.
//! - *Concurrent and killed writers.* Each append takes a fresh slot (an atomic add on the
//!   journal's counter file, see "An earlier copy of a journal" below), stores
//!   the hash, then a check word (a CRC of slot, sequence, hash and op, under a marker
//!   with three non-zero bytes), then counts itself finished. A slot whose check word is
//!   zero was never completed; its writer died before its sled write (journal before
//!   sled), so skipping it loses nothing. Any other record that fails its check, a record
//!   past the reserved count, or fewer intact records than finished ones, means damage:
//!   rebuild. Extra or duplicate records only add false positives. (A completed record
//!   erased together with another writer killed between its check word and its count, two
//!   adjacent instructions, would go unseen: damage at rest is caught, not adversaries.)
//! - *Full journal.* A writer past the capacity still takes a slot, so the reserved count
//!   passing the capacity marks the journal overflowed before its sled write: rebuild.
//!   A tree whose newest journal is half full snapshots (a fresh journal) after its write.
//! - *Full disk.* A store into a page of the mapping the file system cannot back kills the
//!   process (`SIGBUS`), so writers store only into pages backed beforehand by `pwrite(2)`
//!   of zeros (which fails with `ENOSPC` instead). A writer whose slot finds no room marks
//!   the journal out of space the same way (reserved count past the capacity, plus a
//!   no-space word), before its sled write: [`crate::JournalFault::NoSpace`], rebuild. A
//!   journal that cannot be created is removed: missing, rebuild (`tests/enospc.rs`).
//! - *Retiring.* Journals older than the recorded snapshot are deleted only after the record
//!   naming it was flushed; at open, the replayed ones stay (the tree goes on in journal
//!   `dirty + 1`, based on the same snapshot) until the next snapshot.
//! - *Counting mode.* Count-ins are journaled before their sled write, and a take-back of a
//!   count-in (the key was there, or the write lost or aborted) after it: the key's sled
//!   state does not depend on that write, so replaying the pair is right either way. A
//!   take-back's decrement and its journal record happen under a lock a snapshot holds
//!   exclusively from its move to the end of its copy, so a decrement is in the copy
//!   exactly when its record is not replayed (a count-in may be both: an extra count). A
//!   remove is **not** journaled: a sled remove that returned may still be lost by a kill
//!   (sled buffers writes in the process), and replaying its decrement would then deny a
//!   stored key. After a replay, keys removed since the snapshot keep their counts (false
//!   positives) until the next rebuild. A snapshot whose copy holds a decrement flushed
//!   sled first (below), so a copied remove is never lost.
//! - *Power loss.* The journal is never fsynced, and sled's flusher (or any later flush)
//!   can make a key durable while the journal page naming it never reached the disk. So
//!   each journal carries the boot id (`/proc/sys/kernel/random/boot_id`), and replay
//!   requires this boot's: in one boot every page handed to the OS survives a process
//!   crash, while after a reboot (the only way to lose the page cache) the journal is
//!   refused ([`crate::JournalFault::OtherBoot`]). Without a boot id (not Linux) no journal is
//!   kept. `tests/power_cut.rs` reopens after each cut under another boot id, and shows,
//!   forcing the same one, that trusting the journal then can deny a key.
//!
//! - *Other stores.* The journal files, their counter files, the boot id and this rule
//!   (`trust::judge_chain`, which `judge_journals` applies to a tree's record) are also a
//!   store-independent API ([`JournalWriter`], [`replay_journals`], [`remove_journals`]):
//!   a store binds a journal to a filter it stored itself ([`JournalBinding`]: database,
//!   tree and base ids, seed) and makes the sequences to replay durable with its data, as
//!   sled's dirty mark does here (`bloomsled-redb` does, per table and session).
//!
//! # An earlier copy of a journal (rollback; `tests/rollback.rs`)
//! A journal is in the database folder, and everything there can be put back from an
//! earlier copy (a backup restore, a careless admin): a journal copied after a clean close
//! (no records) and put back after a crash is whole, of this boot, database, tree and
//! snapshot, and would be replayed without the writes made since: false negatives. No
//! check on the file alone can tell it from the journal itself, so what it is checked
//! against lives where a restore of the folder does not reach:
//! - *Counters outside the folder.* A journal's `reserved` and `finished` counts live in a
//!   counter file `bloomsled-<database id>-<tree id>-<sequence>.jctr` in a memory file
//!   system (`/dev/shm`, else `$XDG_RUNTIME_DIR`, or `$BLOOMSLED_JOURNAL_COUNTER_DIR`),
//!   mapped shared like the journal: the slot reservation's atomic add just moves there
//!   (same cost). It survives a process crash, is cleared by a reboot (when the journal
//!   is refused anyway) and is removed when its journal is retired. While mapped it is
//!   locked (`flock`): a process that cannot take the lock (a copy of the folder, same
//!   ids, opened in the same boot) neither rewrites nor removes it, and keeps no journal of
//!   that sequence (`tests/folder_copy.rs`). Each journal file gets
//!   a random 128-bit nonce at creation, repeated in its counter file.
//! - *The check.* Replay needs the counter file (missing: `CountersMissing`, refused), of
//!   the same nonce (another incarnation of the same sequence's journal, from a copy:
//!   `OtherIncarnation`), and at least as many intact records as it says finished. A
//!   copy of the same incarnation taken earlier (after a clean close, mid-run, even while
//!   the process still runs) holds a prefix of its records: `RecordsLost`, refused.
//!   Refused means rebuilt from a scan, never a false negative.
//! - *Collisions.* Counter files are named by the random database and tree ids and the
//!   sequence: no two databases share one. A copy of the whole database folder opened
//!   in the same boot shares its original's counters: it can only make either side's
//!   journals fail the checks (rebuild), never pass one they would not.
//! - *Left over.* Someone who rolls back the counter file **and** the journal to the same
//!   moment (or edits both) is not caught; nor is a journal kept on a machine with no
//!   memory file system for the counters (then no journal is kept: a crash rebuilds).
//! - *Windows and the fingerprint set.* A window's generations are trees: each has its own
//!   journals and counter files, removed with the generation. The fingerprint set keeps no
//!   crash journal (its log is its data).
//! - *Cost.* One tmpfs page (4 KiB) per live journal (one or two per open tree, plus the
//!   replayed ones until the next snapshot): 16,000 journals fill Docker's default 64 MiB
//!   `/dev/shm`; a counter file that cannot be made means no journal for that sequence
//!   (a crash rebuilds). A clean close removes a tree's counter files; a database killed
//!   and then deleted without being opened again leaves its own until the next reboot.
//!
//! # Why serving before the filter is rebuilt never gives a false negative
//! A tree whose snapshot is not trusted opens with a *stand-in* filter whose every bit is
//! set (every counter stuck at its maximum, in counting mode, so no remove clears one), and
//! its record is first made durable as stale (`dirty = sequence`, past every sequence
//! seen). Then:
//! - *While the stand-in is current* every lookup answers "maybe" and goes to sled: no
//!   false negative, whatever sled holds.
//! - *The new filter holds every key when it is swapped in.* The rebuild scans the key
//!   ranges in rounds, each under the gate's write side (no write in flight), and keeps a
//!   per-range cursor. A key written while the gate is open is applied to the new filter by
//!   its writer iff it is at or before its range's cursor; the scan reads every key beyond
//!   the cursors later, from a quiet tree. So each stored key reaches the new filter exactly
//!   once (by the scan or by its last writer), which also keeps counting mode exact: a
//!   remove of a key the scan has not reached is not applied, and the scan does not see the
//!   key. The swap happens in the last round, still under the gate. Nothing relies on sled's
//!   iterators under concurrent writes.
//! - *The stand-in is never written.* Snapshots wait for (or skip, at close) a tree whose
//!   filter is not in use, so its record stays stale: a close, drop or crash during the
//!   rebuild leaves nothing trusted, and the next open rebuilds again. After the swap the
//!   snapshot protocol above applies unchanged.
//!
//! # The database record
//! A missing or undecodable database record means no file can be tied to this database:
//! every readable tree record is durably marked stale first, then a new random id is
//! written, so no snapshot is trusted even if the process dies before reopening each tree.
//! A record that decodes but was copied from another database can only make snapshots
//! *less* trusted: every snapshot must also carry the tree id and the snapshot id its
//! record names (random, 128 bits), which a database record does not change; with a
//! foreign id the database ids differ and each tree is rebuilt (`ForeignDatabase`).

mod boot;
mod files;
mod journal;
mod journal_map;
mod journal_names;
mod live;
mod meta;
mod poison;
mod records;
mod recovery;
mod scan_pause;
mod settings;
mod store_journal;
mod stored;
pub(crate) mod taint;
mod tree_files;
mod trust;

use std::time::Duration;

use crate::error::Distrust;
#[cfg(feature = "failpoints")]
#[cfg_attr(docsrs, doc(cfg(feature = "failpoints")))]
pub use boot::set_boot_id;

/// Marks `path` (a database's folder, or a one-file database): a write or sync of it failed
/// in this process, so the page cache may show pages the disk never got. The next
/// [`rewrite_after_failed_sync`] of it, in this process or another one in the same boot,
/// rewrites it: the mark is also a file (`<folder>/bloomsled-rewrite-needed`, or
/// `<file>.bloomsled-rewrite-needed` beside a file), written here best effort and removed
/// by the rewrite. bloomsled's own databases mark and rewrite theirs; this is for the store
/// crates built on the core (`bloomsled-redb`).
///
/// ```
/// # let dir = tempfile::tempdir()?;
/// let file = dir.path().join("a.redb");
/// std::fs::write(&file, b"bytes")?;
/// bloomsled::persist::mark_failed_sync(&file);
/// assert!(bloomsled::persist::rewrite_after_failed_sync(&file)?);
/// assert!(!bloomsled::persist::rewrite_after_failed_sync(&file)?);
/// assert_eq!(std::fs::read(&file)?, b"bytes");
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub fn mark_failed_sync(path: &std::path::Path) {
    taint::mark(path);
}

/// If [`mark_failed_sync`] marked `path` (in this process, or on disk): copies the file (or
/// every file under the folder), as this process reads it, into a new file that is fsynced
/// and renamed over it, and fsyncs the folders, so that the disk holds what a reader sees;
/// then unmarks it. A copy left by a rewrite that was killed is removed first; one that
/// fails removes its copy and keeps the mark. True if it rewrote. Call it before the files
/// are opened again (see `docs/persistence.md`, "A reopen in the same boot rewrites the
/// folder first").
///
/// ```
/// # let dir = tempfile::tempdir()?;
/// assert!(!bloomsled::persist::rewrite_after_failed_sync(dir.path())?);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub fn rewrite_after_failed_sync(path: &std::path::Path) -> crate::error::Result<bool> {
    taint::heal(path)
}
#[cfg(feature = "failpoints")]
#[cfg_attr(docsrs, doc(cfg(feature = "failpoints")))]
pub use files::fail_snapshot_writes_after;
pub use files::DIR_NAME;
pub use meta::META_TREE;
pub(crate) use scan_pause::{pause_limit, wait_at_pause};
#[cfg(feature = "failpoints")]
#[cfg_attr(docsrs, doc(cfg(feature = "failpoints")))]
pub use scan_pause::{pause_rebuild_scans_after, rebuild_scans_paused};
pub use store_journal::{
    remove_journals, replay_journals, JournalBinding, JournalChain, JournalWriter,
};
pub use stored::{
    decode_database, decode_record, encode_counting_record, encode_counting_snapshot,
    encode_database, encode_record, encode_snapshot, judge_named, judge_stored,
    judge_stored_counting, StoredIds,
};

pub(crate) use live::{filter_image, Persistence};
pub(crate) use meta::Meta;
pub(crate) use poison::{At, FileFault, Step};
pub(crate) use records::{EachRecord, RecordStore, TreeKeys};
pub(crate) use recovery::{recover, Opening, Start};

/// What `open` does with a snapshot it cannot trust.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum RecoveryPolicy {
    /// Rebuild the filter from a scan of the tree's keys (default), and report why. By
    /// default the tree serves at once (every lookup goes to sled until the filter is
    /// back) and the scan runs in the background; see `Config::background_recovery`.
    #[default]
    Repair,
    /// Fail with [`crate::Error::SnapshotRejected`] naming what failed.
    Strict,
}

/// How a tree's filter came to be at open.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum RecoveryOutcome {
    /// Loaded from a verified, current snapshot; no key was scanned.
    Loaded,
    /// Rebuilt from a scan of the keys because the snapshot could not be trusted (while
    /// [`RecoveryReport::rebuilding`] is set, the scan is still running in the background).
    Rebuilt {
        /// Why the snapshot was not used.
        reason: Distrust,
    },
    /// Loaded from a verified snapshot, then the crash journals of the writes made since
    /// (by a process that crashed in this boot of the machine) replayed over it: no key was
    /// scanned, and the filter served from the start.
    Replayed {
        /// Journals read (one per sequence written since the snapshot).
        journals: u64,
        /// Records replayed (a key written twice, or by a transaction that retried, may
        /// count more than once).
        records: u64,
    },
    /// A new tree: empty filter.
    Created,
    /// A temporary database: built from a scan, never persisted.
    InMemory,
}

/// What happened to one tree's filter at open (also logged at `info` level).
#[derive(Debug, Clone, PartialEq)]
pub struct RecoveryReport {
    /// Tree name (lossy UTF-8).
    pub tree: String,
    /// Loaded, rebuilt (and why), created or in-memory.
    pub outcome: RecoveryOutcome,
    /// Keys read from sled to build the filter (0 when loaded).
    pub keys_scanned: u64,
    /// Snapshot bytes read and CRC-verified.
    pub bytes_verified: u64,
    /// Sequence of the filter after open.
    pub sequence: u64,
    /// Time the load or rebuild took (while rebuilding: the time the open took).
    pub duration: Duration,
    /// Set while the filter is being rebuilt in the background after open: until then the
    /// tree answers every lookup from sled (correct, without the filter's speed-up). `None`
    /// once the filter is in use, or if it never needed a rebuild.
    pub rebuilding: Option<RebuildProgress>,
}

/// How far a rebuild scan has come.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct RebuildProgress {
    /// Keys read into the new filter so far.
    pub keys_scanned: u64,
    /// Time since the scan started.
    pub elapsed: Duration,
    /// Keys read per second so far.
    pub keys_per_second: f64,
    /// Keys the scan expects to read: the item count of the tree's last snapshot (an
    /// estimate; `None` if there is none to go by).
    pub expected_keys: Option<u64>,
    /// Time left at the rate so far, if the keys to read are known and not yet passed.
    pub estimated_time_left: Option<Duration>,
}

impl RebuildProgress {
    /// The progress of a scan that read `keys_scanned` of about `expected_keys` keys in
    /// `elapsed`.
    pub(crate) fn new(keys_scanned: u64, elapsed: Duration, expected_keys: Option<u64>) -> Self {
        let secs = elapsed.as_secs_f64();
        let keys_per_second = if secs > 0.0 {
            keys_scanned as f64 / secs
        } else {
            0.0
        };
        let estimated_time_left = match expected_keys {
            Some(total) if total >= keys_scanned && keys_per_second > 0.0 => Some(
                Duration::from_secs_f64((total - keys_scanned) as f64 / keys_per_second),
            ),
            _ => None,
        };
        RebuildProgress {
            keys_scanned,
            elapsed,
            keys_per_second,
            expected_keys,
            estimated_time_left,
        }
    }
}

impl RecoveryReport {
    /// True if the filter came from its snapshot without a scan.
    ///
    /// ```
    /// let db = bloomsled::Config::new().temporary(true).open()?;
    /// assert!(!db.recovery_report().loaded());
    /// # Ok::<(), bloomsled::Error>(())
    /// ```
    pub fn loaded(&self) -> bool {
        self.outcome == RecoveryOutcome::Loaded
    }

    /// True if the filter came from its snapshot and the crash journals of the writes
    /// made since, without a scan (see [`RecoveryOutcome::Replayed`]).
    ///
    /// ```
    /// let db = bloomsled::Config::new().temporary(true).open()?;
    /// assert!(!db.recovery_report().replayed());
    /// # Ok::<(), bloomsled::Error>(())
    /// ```
    pub fn replayed(&self) -> bool {
        matches!(self.outcome, RecoveryOutcome::Replayed { .. })
    }
}

/// What a snapshot wrote.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SnapshotInfo {
    /// Sequence of the snapshot.
    pub sequence: u64,
    /// Bytes written.
    pub bytes: u64,
    /// Pages of the bitset.
    pub pages: u32,
    /// Items in the filter.
    pub items: u64,
    /// Time from the copy of the bits to the durable rename.
    pub duration: Duration,
}

/// What [`crate::Tree::verify`] found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VerifyReport {
    /// Keys read from the store and checked against the filter.
    pub keys_checked: u64,
    /// Stored keys the filter denied (always 0 unless an invariant broke).
    pub false_negatives: u64,
    /// The snapshot file on disk: `Ok(sequence)` if every CRC passed, the fault otherwise;
    /// `None` for a temporary database.
    pub snapshot: Option<Result<u64, Distrust>>,
}

impl VerifyReport {
    /// True if no key was denied and the snapshot (if any) verified.
    pub fn is_ok(&self) -> bool {
        self.false_negatives == 0 && !matches!(self.snapshot, Some(Err(_)))
    }
}

/// Deletes the record, snapshot file and crash journals of tree `name`, which is not open
/// (it was dropped).
pub(crate) fn forget_closed(
    meta: &meta::Meta,
    db_dir: &std::path::Path,
    name: &[u8],
) -> crate::error::Result<()> {
    if let Some(Ok(record)) = meta.read(name)? {
        files::SnapshotFile::in_db(db_dir, &record.tree_id)
            .remove(true)
            .map_err(|f| meta.absorb(f))?;
        let files = tree_files::TreeFiles::new(db_dir, meta, &record.tree_id, true);
        if let Some(j) = files.journals {
            #[allow(clippy::reversed_empty_ranges)]
            j.journals.retire(1..=0);
        }
    }
    meta.remove(name)
}

//! What a table's lookups did (counts), and its memory of false positives: the core's
//! striped counters and `FpMemory` (`bloomsled::reuse`), under an MVCC rule of this crate.
//!
//! ## The counts
//! Every `get` of a table through this crate counts one lookup, before the filter answers
//! (so the counter it bumps does not wait for the probe); the lookups that read redb count
//! one store lookup, and those of them that found nothing with a trusted filter in front
//! (the filter said "maybe") one false positive. A lookup the memory answered counts as
//! remembered. Ruled out = lookups − store lookups − remembered. Counters are the core's:
//! a plain load and store on this thread's stripe, no locked instruction.
//!
//! ## The false-positive memory (read tables)
//! The core's protocol (`FpMemory`: a writer forgets a key before the store write and ends
//! after it; a reader takes a ticket before its store read and records only if no writer
//! began or was in flight since) assumes the reader reads the latest store. A redb reader
//! reads its snapshot, perhaps older than a commit that already ended. So a read table
//! also asks, after its ticket and again after a recall, that its snapshot be the latest
//! committed state of its table: no commit that may change the table is in flight or
//! ended after its transaction read `finished` (its `seq`), by the table's commit word and
//! the database's wide word (`commits.rs`; commits to other tables do not count). A write
//! transaction forgets each key it may create as it sets its bits (before redb stores it)
//! and ends its forgets only when it ends (after its commit returned and ended its tables'
//! words, or its abort): a reader never records while a commit of the key can still
//! become visible. A restore forgets every key of every table (`forget_all`), a rename
//! every key of the table it renames to (`forget_table`), before redb's call, ended with
//! the transaction. Multimap tables are read the same way
//! (a key with no value is a miss).
//!
//! ## Write transactions
//! A write transaction's table recalls (its base is the latest committed state, and a key
//! it wrote keeps a writer in its set) and keeps its own misses per handle; it records
//! them only after its commit returned, if it did not write them since and no commit began
//! after its own ([`Forgets::end_and_record`]). The argument is in `docs/redb.md`, "The
//! false-positive memory" (rule 6).
//!
//! ## Counting mode
//! A read table's filter may have keys of its snapshot counted out by commits since: its
//! "absent" holds only if no such commit is in flight or finished after its `seq`
//! (`TableFilter::absent_holds_for`, `commits.rs`, "Count-outs"); otherwise redb answers.

use std::cell::RefCell;
use std::sync::Arc;
use std::sync::atomic::AtomicU32;
use std::sync::atomic::Ordering::{Relaxed, SeqCst};

use bloomsled::reuse::{Counters, FpMemory, Hashed, Pending, Recall};

use super::{Built, Kind, Shared, TableFilter};

const LOOKUPS: usize = 0;
const STORE: usize = 1;
const FALSE_POSITIVES: usize = 2;
const REMEMBERED: usize = 3;
const BYPASSED: usize = 4;

/// False positives one table remembers (about 21 bytes each, 21 KiB a table).
#[cfg(not(bloomsled_loom))]
pub(crate) const MEMORY_ENTRIES: usize = 1024;
/// Under loom, one set: the rule does not depend on the memory's size.
#[cfg(bloomsled_loom)]
pub(crate) const MEMORY_ENTRIES: usize = 1;

/// A table's lookup counters (see the module docs).
#[derive(Default)]
pub(crate) struct Lookups(Counters<5>);

impl Lookups {
    /// One lookup, before the filter answers.
    #[inline]
    pub(crate) fn lookup(&self) {
        self.0.add(LOOKUPS, 1);
    }

    /// One lookup that read redb, and whether it was a false positive.
    #[inline]
    pub(crate) fn stored(&self, false_positive: bool) {
        self.0.add(STORE, 1);
        if false_positive {
            self.0.add(FALSE_POSITIVES, 1);
        }
    }

    /// One lookup that read redb without asking the filter (a handle's bypass).
    #[inline]
    pub(crate) fn bypassed(&self) {
        self.0.add(STORE, 1);
        self.0.add(BYPASSED, 1);
    }

    /// Lookups that skipped the filter (counted in the store lookups too).
    pub(crate) fn bypassed_total(&self) -> u64 {
        self.0.sum(BYPASSED)
    }

    /// One lookup the memory answered.
    pub(crate) fn remembered(&self) {
        self.0.add(REMEMBERED, 1);
    }

    /// Lookups, ruled out by the filter, read from redb, false positives, remembered.
    pub(crate) fn totals(&self) -> (u64, u64, u64, u64, u64) {
        // Store lookups and remembered read before the lookups: a lookup landing between the
        // reads only makes "ruled out" larger by one in flight, never negative.
        let store = self.0.sum(STORE);
        let remembered = self.0.sum(REMEMBERED);
        let fps = self.0.sum(FALSE_POSITIVES);
        let lookups = self.0.sum(LOOKUPS);
        let ruled_out = lookups.saturating_sub(store + remembered);
        (lookups, ruled_out, store, fps, remembered)
    }
}

/// A table's memory of false positives, seeded with the table's seed (its hashes are the
/// filter's).
pub(crate) fn memory(seed: u64) -> FpMemory {
    FpMemory::new(MEMORY_ENTRIES, seed)
}

impl TableFilter {
    /// True if the memory holds `key` (which the trusted filter passed) as absent from the
    /// latest committed state, for a write transaction, whose state is that one plus its own
    /// writes (rule 6 of `docs/redb.md`, "The false-positive memory": a key it wrote is in
    /// a set it keeps a writer in, which answers nothing).
    pub(crate) fn remembered_absent(&self, key: &[u8], hashed: Hashed) -> bool {
        matches!(self.memory.recall_hashed(key, hashed), Recall::Absent)
    }

    /// Forgets the key of hash `h` (a write that may create it, before redb stores it),
    /// keeping its set from recording until `pending` ends with the transaction. `pending`
    /// is the table handle's own (`&mut`: a `RefCell` in the handle would make redb's
    /// `Sync` tables not `Sync`), lent to the core's `forget` for the call.
    #[inline]
    pub(crate) fn forget(&self, h: u64, pending: &mut Pending) {
        let cell = RefCell::new(std::mem::take(pending));
        self.memory.forget(h, &cell);
        *pending = cell.into_inner();
    }
}

/// The forgets of one write transaction, ended when it ends (after its commit returned,
/// or its abort): declared after redb's transaction, so dropped after it. And the false
/// positives its tables' handles found (`.1`, [`Forgets::keep_misses`]), recorded after its
/// commit by [`Forgets::end_and_record`].
#[derive(Default)]
pub(crate) struct Forgets(
    std::sync::Mutex<Vec<(Arc<TableFilter>, Pending)>>,
    std::sync::Mutex<Misses>,
);

/// Keys a write transaction's handles found absent, with their tables.
type Misses = Vec<(Arc<TableFilter>, Box<[u8]>)>;

impl Forgets {
    /// Keeps `pending` (forgets made in `tf`'s memory) until the transaction ends.
    pub(crate) fn keep(&self, tf: Arc<TableFilter>, pending: Pending) {
        self.0
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push((tf, pending));
    }

    /// Keeps the keys a handle of `tf` found absent after its filter passed them
    /// (`Writing::get`), to record after the commit.
    pub(crate) fn keep_misses(&self, tf: &Arc<TableFilter>, misses: Vec<Box<[u8]>>) {
        let mut kept = self.1.lock().unwrap_or_else(|e| e.into_inner());
        kept.extend(misses.into_iter().map(|k| (tf.clone(), k)));
    }

    /// After the transaction's commit returned `Ok` (`seq`: its `seq`; `settled`: it
    /// restored and renamed nothing): ends its forgets, then records each kept miss that
    /// it did not write since (`written(tf, hash)`: in its log) in its table's memory, if
    /// no commit began since this one (`started` is `seq + 1`, read after the ticket). The
    /// argument is in `docs/redb.md`, "The false-positive memory" (rule 6).
    pub(crate) fn end_and_record(
        self,
        shared: &Shared,
        seq: u64,
        settled: bool,
        written: impl Fn(&TableFilter, u64) -> bool,
    ) {
        let misses = std::mem::take(&mut *self.1.lock().unwrap_or_else(|e| e.into_inner()));
        drop(self); // the forgets end: this transaction's own writers leave the sets
        for (tf, key) in misses.into_iter().filter(|_| settled) {
            if written(&tf, bloomsled::hash::hash_key(&key, tf.seed)) {
                continue;
            }
            if let Recall::Unknown(ticket) = tf.memory.recall(&key)
                && shared.started.load(SeqCst) == seq + 1
            {
                tf.memory.record(ticket, &key);
            }
        }
    }

    /// Forgets every key of every table this handle knows (a restore or rename, before
    /// redb's call).
    pub(crate) fn forget_all(&self, shared: &Shared) {
        for tf in shared.every_table() {
            self.forget_table(&tf);
        }
    }

    /// Forgets every key of `tf`'s table (a rename to its name, before redb's call).
    pub(crate) fn forget_table(&self, tf: &Arc<TableFilter>) {
        let pending = RefCell::new(Pending::default());
        tf.memory.forget_all(&pending);
        self.keep(tf.clone(), pending.into_inner());
    }
}

impl Shared {
    /// Every table's filter this handle made.
    pub(crate) fn every_table(&self) -> Vec<Arc<TableFilter>> {
        let mut out = Vec::new();
        for kind in [Kind::Table, Kind::Multimap] {
            let map = self.map(kind).read().unwrap_or_else(|e| e.into_inner());
            out.extend(map.values().cloned());
        }
        out
    }
}

impl Drop for Forgets {
    fn drop(&mut self) {
        let list = std::mem::take(self.0.get_mut().unwrap_or_else(|e| e.into_inner()));
        for (tf, mut pending) in list {
            tf.memory.end(&mut pending);
        }
    }
}

/// What a read table asks before redb: its table's counters and memory, the filter it may
/// trust (if any), and its snapshot's place (`seq`: `finished` before its `begin_read`).
pub(crate) struct ReadSide {
    pub(crate) tf: Arc<TableFilter>,
    pub(crate) built: Option<Arc<Built>>,
    pub(crate) shared: Arc<Shared>,
    pub(crate) seq: u64,
    /// The table's filter counts (counting mode): its "absent" is checked against the
    /// count-outs (`commits.rs`). Kept here, beside `built`, for the lookup path.
    counting: bool,
    /// This handle's hits in a row (`Builder::set_bypass_after_hits`).
    streak: Streak,
}

/// A table handle's lookups in a row that the filter passed and redb found, up to
/// `after` (`Builder::set_bypass_after_hits`); from `after` on, the handle skips the filter
/// until a lookup finds nothing. A heuristic only: every answer is redb's, or the filter's
/// "absent" under the rules above, whatever this holds; so plain loads and stores serve (a
/// handle shared by threads may lose a count), and a stream of misses writes nothing.
pub(crate) struct Streak {
    hits: AtomicU32,
    /// `u32::MAX` for a setting of 0 (off: `hits` is never raised).
    after: u32,
}

impl Streak {
    /// The streak of a handle of a database whose setting is `after_hits` (0: off).
    pub(crate) fn new(after_hits: u32) -> Streak {
        Streak {
            hits: AtomicU32::new(0),
            after: match after_hits {
                0 => u32::MAX,
                n => n,
            },
        }
    }

    /// The hits so far, read once per lookup and handed back to [`Streak::found`] or
    /// [`Streak::missed`].
    #[inline]
    pub(crate) fn hits(&self) -> u32 {
        self.hits.load(Relaxed)
    }

    /// True if a lookup with `hits` so far skips the filter.
    #[inline]
    pub(crate) fn bypasses(&self, hits: u32) -> bool {
        hits >= self.after
    }

    /// The lookup found its key (asked of the filter: `hits` is below `after`).
    #[inline]
    pub(crate) fn found(&self, hits: u32) {
        if self.after != u32::MAX {
            self.hits.store(hits + 1, Relaxed);
        }
    }

    /// The lookup found nothing: the streak starts over (and a bypass ends).
    #[inline]
    pub(crate) fn missed(&self, hits: u32) {
        if hits != 0 {
            self.hits.store(0, Relaxed);
        }
    }

    /// A lookup during a bypass, counted in `lookups`: redb's answer.
    #[inline]
    pub(crate) fn bypassed<G, E>(
        &self,
        hits: u32,
        lookups: &Lookups,
        get: impl FnOnce() -> Result<Option<G>, E>,
    ) -> Result<Option<G>, E> {
        let v = get()?;
        lookups.bypassed();
        if v.is_none() {
            self.missed(hits);
        }
        Ok(v)
    }
}

impl ReadSide {
    /// True if this snapshot is the latest committed state of this table: no commit that
    /// may change it (one that wrote it, or a restore, a rename or any commit whose
    /// tables are not known) is in flight or ended after the transaction counted
    /// `finished` before its `begin_read` (`commits.rs`). Two loads, only on the lookups
    /// the filter passed and redb did not find (or the memory answered).
    fn latest(&self) -> bool {
        self.tf.commits.settled_for(self.seq) && self.shared.wide.settled_for(self.seq)
    }

    /// A lookup of `key` through the filter, the memory, then `get` (redb), counted; after a
    /// streak of hits, redb's alone until a lookup finds nothing ([`Streak`]).
    #[inline]
    pub(crate) fn get<G, E>(
        &self,
        key: &[u8],
        get: impl FnOnce() -> Result<Option<G>, E>,
    ) -> Result<Option<G>, E> {
        self.tf.lookups.lookup();
        let hits = self.streak.hits();
        if self.streak.bypasses(hits) {
            return self.streak.bypassed(hits, &self.tf.lookups, get);
        }
        match &self.built {
            Some(b) => match b.probe(key) {
                // Counting mode: unless a count-out the snapshot may not hold cleared it.
                None if !self.counting || self.tf.absent_holds_for(self.seq) => {
                    self.streak.missed(hits);
                    Ok(None)
                }
                Some(hashed) => {
                    let v = self.passed(key, hashed, get)?;
                    match v {
                        Some(_) => self.streak.found(hits),
                        None => self.streak.missed(hits),
                    }
                    Ok(v)
                }
                None => self.unfiltered(get),
            },
            None => self.unfiltered(get),
        }
    }

    /// A lookup the filter does not answer: redb's.
    fn unfiltered<G, E>(&self, get: impl FnOnce() -> Result<Option<G>, E>) -> Result<Option<G>, E> {
        let v = get()?;
        self.tf.lookups.stored(false);
        Ok(v)
    }

    /// The filter said "maybe" (`hashed`: the key's hash from its probe): the memory, else
    /// redb (and a miss remembered). A snapshot that is not the latest neither recalls nor
    /// records (see the module docs).
    fn passed<G, E>(
        &self,
        key: &[u8],
        hashed: Hashed,
        get: impl FnOnce() -> Result<Option<G>, E>,
    ) -> Result<Option<G>, E> {
        let ticket = match self.tf.memory.recall_hashed(key, hashed) {
            // After the recall: the entry was recorded before, by a snapshot no newer.
            Recall::Absent if self.latest() => {
                self.tf.lookups.remembered();
                return Ok(None);
            }
            Recall::Absent => None,
            Recall::Unknown(t) => t,
        };
        let v = get()?;
        self.tf.lookups.stored(v.is_none());
        // After the ticket (here, after the read too, so a found key does not pay it: a
        // commit that ended before the ticket is seen by any later load): every commit of
        // this table that ended before the ticket is in this snapshot.
        if v.is_none() && self.latest() {
            self.tf.memory.record(ticket, key);
        }
        Ok(v)
    }
}

impl ReadSide {
    /// The read side of `tf` for a read transaction whose state is `seq` (rule 3 decides
    /// whether it may trust the filter, once, at the table's open).
    pub(crate) fn new(shared: &Arc<Shared>, tf: Arc<TableFilter>, seq: u64) -> ReadSide {
        ReadSide {
            built: shared.trusted_current(&tf, seq),
            counting: tf.counting,
            streak: Streak::new(shared.bypass_after_hits),
            tf,
            shared: shared.clone(),
            seq,
        }
    }
}

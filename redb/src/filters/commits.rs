//! Commits counted per table, for the false-positive memory (`lookups.rs`): a read table
//! asks whether any commit that may have changed *its* table ended after its snapshot or
//! is in flight, not whether any commit of the database did. So a stream of commits to
//! one table does not stop another table's memory.
//!
//! Each table has a [`Commits`] word, and the database one more, `Shared::wide`, for the
//! commits whose set of changed tables is not known (a savepoint restore, a table whose
//! filter could not be made): a read table asks both. A commit, around redb's:
//! 1. *begins* the word of each table it may have changed (every table opened for
//!    writing, deleted or renamed: [`Touched`]), or the wide word, before redb's commit;
//! 2. counts itself `finished` (the database's count, which a read transaction reads
//!    before its `begin_read` as its `seq`): it is the `n`-th commit to finish;
//! 3. *ends* those words with `n`, before its write transaction's forgets end.
//!
//! A word packs the commits in flight (high 16 bits) and the largest `n` of the commits
//! that ended (low 48 bits). [`Commits::settled_for`]`(seq)` is one load and one
//! comparison, `word <= seq`: no commit of the word in flight, and every one that ended
//! counted `finished` no later than `seq`, so redb had returned from it before the read
//! transaction's `begin_read`, and its state is in the snapshot. That is what rules 3 and
//! 4 of `lookups.rs` ask of a table, and the proof is in `docs/redb.md`, "The
//! false-positive memory".
//!
//! ## Count-outs (counting mode)
//! A commit that removed keys (or overwrote them: each write counted its key in once
//! more) counts them out of its table's filters after redb's commit returned, under the
//! read guard it took before redb's commit (rule 2 of `filters.rs`: no build installs
//! another `current` meanwhile, so the filter it counts out of is one that counted the
//! keys in). A removal is counted out of `current` only, an extra count of `pending` too
//! ([`Out`]); a count left high is a false positive only. A reader whose snapshot is
//! older than the commit may still hold the removed keys, and reads the same filter. So
//! each table has a second word, `outs`, of the commits that counted out of it: such a
//! commit *begins* it before redb's commit, counts out after a release fence (the word
//! in flight), and *ends* it with its `n` as it ends the others. A read table whose
//! filter rules a key out trusts that only if, after an acquire fence,
//! `outs.settled_for(seq)`: every count-out it could have seen was of a commit in its
//! snapshot. Otherwise it asks redb. A commit that restored a savepoint (`wide`) counts
//! nothing out: every filter is distrusted and rebuilt from a scan. A rename marks its two
//! tables only, a delete its one; their filters are distrusted and rebuilt from a scan too,
//! so a count-out of theirs is harmless, and the other tables' count-outs are those of any
//! commit.

use std::sync::Arc;
use std::sync::atomic::Ordering::{Acquire, Release, SeqCst};

use crate::sync::fence;

use super::{Shared, Slots, TableFilter};
use crate::sync::{AtomicU64, Mutex};

/// The largest `n` a word can hold. After this many commits (2^48) every word compares
/// greater than every `seq` the check accepts: the memory stops answering, never wrongly.
const STAMP: u64 = (1 << 48) - 1;
/// One commit in flight. redb runs one write transaction at a time, so at most one commit
/// is in flight per word; 16 bits leave room for many more.
const IN_FLIGHT: u64 = 1 << 48;

/// One table's (or the database's wide) count of commits (see the module docs).
#[derive(Default)]
pub(crate) struct Commits(AtomicU64);

impl Commits {
    /// A commit that may change this word's tables begins (before redb's commit).
    fn begin(&self) {
        self.0.fetch_add(IN_FLIGHT, SeqCst);
    }

    /// That commit ended, the `n`-th to count `finished`, in one step: a reader never sees
    /// it neither in flight nor stamped.
    fn end(&self, n: u64) {
        let n = n.min(STAMP);
        let _ = self.0.fetch_update(SeqCst, SeqCst, |w| {
            Some((w - IN_FLIGHT) & !STAMP | (w & STAMP).max(n))
        });
    }

    /// True if no commit of this word is in flight and every one that ended was counted
    /// `finished` when `seq` was read (see the module docs). One load.
    #[inline]
    pub(crate) fn settled_for(&self, seq: u64) -> bool {
        seq < STAMP && self.0.load(SeqCst) <= seq
    }
}

/// The tables a write transaction may change, and whether the set is unknown (`wide`).
#[derive(Default)]
pub(crate) struct Touched(Mutex<(Vec<Arc<TableFilter>>, bool)>);

impl Touched {
    /// The transaction may change `tf`'s table (`None`: a table whose filter could not be
    /// made, so the set is unknown).
    pub(crate) fn add(&self, tf: Option<&Arc<TableFilter>>) {
        let mut t = self.0.lock().unwrap_or_else(|e| e.into_inner());
        match tf {
            Some(tf) if !t.0.iter().any(|x| Arc::ptr_eq(x, tf)) => t.0.push(tf.clone()),
            Some(_) => {}
            None => t.1 = true,
        }
    }

    /// The transaction may change any table (a restore).
    pub(crate) fn all(&self) {
        self.0.lock().unwrap_or_else(|e| e.into_inner()).1 = true;
    }
}

/// A key to count out of a table's filter at the commit (counting mode): its hash, and
/// whether it is the `extra` count of a write of this transaction that found its key there
/// (else a removal). A removal is counted out of `current` only: `pending`'s scan may not
/// have counted the key. An extra count is counted out of `pending` too: the write's admit
/// raised every filter of its build generation, so if the generation is still the
/// commit's, the commit's `pending` is the admit's (and its `current` the admit's, or the
/// `pending` a build installed since); if a build began since, the commit re-inserted the
/// transaction's hashes into both under its guard (rule 2), that hash among them.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Out {
    pub(crate) h: u64,
    pub(crate) extra: bool,
}

/// What a write transaction wrote in one table, for its commit: the table's filter, the
/// build generation the transaction first saw, the hashes it logged there (rule 2), and
/// the hashes to count out if it commits (counting mode).
pub(crate) struct Written<'a> {
    pub(crate) filter: &'a TableFilter,
    pub(crate) gen_seen: u64,
    pub(crate) hashes: &'a [u64],
    pub(crate) outs: &'a [Out],
}

impl TableFilter {
    /// Counts `outs` out of `slots`' filters, under the guard its commit took before redb's
    /// commit (module docs).
    fn count_out(slots: &Slots, outs: &[Out]) {
        for out in outs {
            slots.current.remove_hash(out.h);
            if let (Some(p), true) = (&slots.pending, out.extra) {
                p.remove_hash(out.h);
            }
        }
    }

    /// True if a read transaction whose state is `seq` may trust this table's filter when
    /// it rules a key out: no commit counted keys out of it that the snapshot may not hold
    /// (see "Count-outs" in the module docs). Called after the probe.
    #[inline]
    pub(crate) fn absent_holds_for(&self, seq: u64) -> bool {
        if !self.counting {
            return true;
        }
        // Pairs with the release fence before a count-out: a cleared bit the probe read
        // makes the stamp of its commit visible here.
        fence(Acquire);
        self.outs.settled_for(seq)
    }
}

impl Shared {
    /// A write transaction's commit around redb's (`commit`): rule 2 of the filters
    /// (counts it started, takes a read guard of each table it wrote, re-inserts its hashes
    /// if a build installed a pending filter since the transaction first opened the table;
    /// runs `commit` under the guards), the count-outs of a commit that returned `Ok`
    /// (counting mode, "Count-outs" in the module docs), then releases the guards, counts
    /// it finished, and ends the per-table counts of the false-positive memory (`touched`).
    pub(crate) fn commit_guarded<'a, T, E>(
        &self,
        written: impl IntoIterator<Item = Written<'a>>,
        touched: &Touched,
        commit: impl FnOnce() -> Result<T, E>,
    ) -> Result<T, E> {
        self.started.fetch_add(1, SeqCst);
        let touched = std::mem::take(&mut *touched.0.lock().unwrap_or_else(|e| e.into_inner()));
        let written: Vec<_> = written.into_iter().collect();
        let words: Vec<&Commits> = match touched.1 {
            true => vec![&self.wide],
            // The tables opened for writing are in `touched` too; counted twice is harmless.
            false => (touched.0.iter().map(|tf| &tf.commits))
                .chain(written.iter().map(|w| &w.filter.commits))
                .collect(),
        };
        // A restore counts nothing out (module docs).
        let outs: Vec<&Written> = written
            .iter()
            .filter(|w| !touched.1 && w.filter.counting && !w.outs.is_empty())
            .collect();
        words.iter().for_each(|w| w.begin());
        outs.iter().for_each(|w| w.filter.outs.begin());
        let guards: Vec<_> = written
            .iter()
            .map(|w| {
                let slots = w.filter.read();
                if slots.build_gen != w.gen_seen {
                    TableFilter::reinsert(&slots, w.hashes);
                }
                slots
            })
            .collect();
        let result = commit();
        if result.is_ok() && !outs.is_empty() {
            // The `outs` words are in flight since before redb's commit: a reader that
            // sees a cleared bit sees them so (module docs).
            fence(Release);
            for (w, slots) in written.iter().zip(&guards) {
                if outs.iter().any(|o| std::ptr::eq(*o, w)) {
                    TableFilter::count_out(slots, w.outs);
                }
            }
        }
        drop(guards);
        let n = self.finished.fetch_add(1, SeqCst) + 1;
        (words.iter().copied())
            .chain(outs.iter().map(|w| &w.filter.outs))
            .for_each(|w| w.end(n));
        result
    }
}

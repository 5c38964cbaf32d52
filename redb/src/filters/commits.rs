//! Commits counted per table, for the false-positive memory (`lookups.rs`): a read table
//! asks whether any commit that may have changed *its* table ended after its snapshot or
//! is in flight, not whether any commit of the database did. So a stream of commits to
//! one table does not stop another table's memory.
//!
//! Each table has a [`Commits`] word, and the database one more, `Shared::wide`, for the
//! commits whose set of changed tables is not known (a savepoint restore, a rename, a
//! table whose filter could not be made): a read table asks both. A commit, around redb's:
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

use std::sync::Arc;
use std::sync::atomic::Ordering::SeqCst;

use super::{Shared, TableFilter};
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

    /// The transaction may change any table (a restore or rename).
    pub(crate) fn all(&self) {
        self.0.lock().unwrap_or_else(|e| e.into_inner()).1 = true;
    }
}

impl Shared {
    /// A write transaction's commit around redb's (`commit`): rule 2 of the filters
    /// (counts it started, takes a read guard of each table it wrote, `written`: the
    /// table's filter, the build generation the transaction first saw, the hashes it
    /// logged there, and re-inserts its hashes if a build installed a pending filter
    /// since; runs `commit` under the guards, then releases them and counts it finished),
    /// and the per-table counts of the false-positive memory (`touched`, the module docs).
    pub(crate) fn commit_guarded<'a, R>(
        &self,
        written: impl IntoIterator<Item = (&'a TableFilter, u64, &'a [u64])>,
        touched: &Touched,
        commit: impl FnOnce() -> R,
    ) -> R {
        self.started.fetch_add(1, SeqCst);
        let touched = std::mem::take(&mut *touched.0.lock().unwrap_or_else(|e| e.into_inner()));
        let written: Vec<_> = written.into_iter().collect();
        let words: Vec<&Commits> = match touched.1 {
            true => vec![&self.wide],
            // The tables opened for writing are in `touched` too; counted twice is harmless.
            false => (touched.0.iter().map(|tf| &tf.commits))
                .chain(written.iter().map(|w| &w.0.commits))
                .collect(),
        };
        words.iter().for_each(|w| w.begin());
        let guards: Vec<_> = written
            .into_iter()
            .map(|(tf, gen_seen, hashes)| {
                let slots = tf.read();
                if slots.build_gen != gen_seen {
                    TableFilter::reinsert(&slots, hashes);
                }
                slots
            })
            .collect();
        let result = commit();
        drop(guards);
        let n = self.finished.fetch_add(1, SeqCst) + 1;
        words.iter().for_each(|w| w.end(n));
        result
    }
}

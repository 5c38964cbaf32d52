//! The write guard: one verb per act of a write — count a key in, mark the tree dirty,
//! count a key out, finish — in the order the no-false-negative protocol needs.

use std::cell::{Cell, RefCell};

use super::filters::Entered;
use super::rebuild::Rebuild;
use super::state::TreeState;
use crate::error::Result;
use crate::filter::any::FilterMode;

/// A write in progress: holds the tree's gate (see [`super::filters`]) from the filter
/// update before the sled write to the corrections after it.
pub(crate) struct Writing<'a> {
    state: &'a TreeState,
    gate: Entered<'a>,
    /// The hash of the first key counted in and not yet journaled.
    first: Cell<Option<u64>>,
    /// The hashes of the further ones (a batch: all of its keys, see
    /// [`Writing::count_in_all`]).
    more: RefCell<Vec<u64>>,
}

impl<'a> Writing<'a> {
    pub(crate) fn new(state: &'a TreeState) -> Self {
        Writing {
            state,
            gate: state.filters.enter(),
            first: Cell::new(None),
            more: RefCell::new(Vec::new()),
        }
    }

    /// [`Writing::count_in`] for many keys (a batch's inserts), their filter inserts
    /// overlapped (see `Entered::admit_all`).
    pub(crate) fn count_in_all(&self, keys: &[&[u8]]) {
        let mut more = self.more.borrow_mut();
        more.reserve(keys.len());
        self.gate.admit_all(keys, &mut more);
        self.state.counters.inserted(keys.len() as u64);
    }

    /// Counts `key` in, **before** its sled write: a reader that can see the key in sled
    /// then also sees its bits (sled's own release/acquire publishes the earlier bit
    /// stores). Then [`Writing::mark_dirty`], once for one key or a batch, which journals
    /// it.
    #[inline]
    pub(crate) fn count_in(&self, key: &[u8]) {
        let h = self.gate.admit(key);
        match self.first.get() {
            None => self.first.set(Some(h)),
            Some(_) => self.more.borrow_mut().push(h),
        }
        self.state.counters.inserted(1);
    }

    /// Makes the tree's dirty mark durable and journals the keys counted in, before the
    /// write reaches sled (see [`crate::persist`]). An error means the write must not be
    /// made.
    #[inline]
    pub(crate) fn mark_dirty(&self) -> Result<()> {
        if let Some(g) = self.state.mark_dirty()? {
            self.journal(g);
        }
        Ok(())
    }

    /// Journals the keys counted in so far in sequence `g`'s journal.
    #[inline]
    fn journal(&self, g: u64) {
        let Some(p) = &self.state.persist else {
            return;
        };
        let seed = self.gate.seed();
        let first = self.first.take();
        let mut more = std::mem::take(&mut *self.more.borrow_mut());
        match first {
            Some(h) if more.is_empty() => p.journal_inserts(g, seed, &[h]),
            None if more.is_empty() => {}
            // One append for the whole batch (the records' order does not matter).
            _ => {
                more.extend(first);
                p.journal_inserts(g, seed, &more);
            }
        }
    }

    /// Inside a transaction, whose trees' marks were made before it started and whose
    /// sequences are held still (see [`super::transaction`]): confirms the mark covers the
    /// current sequence, and journals the keys counted in. Never writes to sled, since
    /// sled's transaction lock is held; an error means the write must not be made.
    pub(crate) fn check_marked(&self) -> Result<()> {
        match &self.state.persist {
            Some(p) if !p.is_marked() => Err(crate::error::Error::ReportableBug(format!(
                "tree {:?}: a transaction's write found the dirty mark behind the sequence",
                self.state.report.tree
            ))),
            Some(p) => {
                self.journal(p.current_sequence());
                Ok(())
            }
            None => Ok(()),
        }
    }

    /// [`Writing::mark_dirty`] before a write that may remove a key: counting mode only
    /// (the filter will change after it); plain-mode removes leave the filter alone, but
    /// are refused as every write is once a sync of the database failed.
    #[inline]
    pub(crate) fn mark_dirty_for_remove(&self) -> Result<()> {
        match &self.state.persist {
            _ if self.state.mode == FilterMode::Counting => drop(self.state.mark_dirty()?),
            Some(p) => p.check_poison()?,
            None => {}
        }
        Ok(())
    }

    /// Takes back a count-in of `key` in a counting filter, after its sled write, journaled
    /// as a remove (see `Persistence::journal_release`): the key's sled state did not change
    /// by this count (it was there before, or the write was not made), so replaying the
    /// pair of records is right whether or not sled kept the write.
    fn release(&self, key: &[u8]) {
        match &self.state.persist {
            Some(p) => p.journal_release(|| (self.gate.seed(), self.gate.release(key))),
            None => {
                self.gate.release(key);
            }
        }
    }

    /// Takes back a [`Writing::count_in`] that did not add a key to the store (it was there
    /// already, or the write lost a race). Counting mode only; plain bits stay.
    #[inline]
    pub(crate) fn undo_count_in(&self, key: &[u8]) {
        if self.state.mode == FilterMode::Counting {
            self.release(key);
        }
    }

    /// `key` left the store (after sled removed it): counted out, or counted stale.
    #[inline]
    pub(crate) fn count_out(&self, key: &[u8]) {
        self.state.counters.removed(1);
        match self.state.mode {
            // Not journaled: sled may still lose this remove in a crash (kill -9 loses its
            // unflushed writes), and replaying the decrement then would deny a stored key.
            // A snapshot holding it flushed sled first (see `crate::persist`).
            FilterMode::Counting => {
                self.gate.release(key);
            }
            FilterMode::Plain => self.state.counters.stale(1),
        }
    }

    /// `n` keys left the store, in plain mode counted stale (counting mode counts each out
    /// with [`Writing::count_out`] instead).
    pub(crate) fn count_out_plain(&self, n: u64) {
        self.state.counters.removed(n);
        if self.state.mode == FilterMode::Plain {
            self.state.counters.stale(n);
        }
    }

    /// The write is done: `keys` keys were written. In counting mode, a snapshot that copied
    /// the filter while this write was between its two halves is marked untrusted, so that
    /// a crash can never reload a count this write was still correcting.
    pub(crate) fn finish(self, keys: u64) {
        let state = self.state;
        if state.mode == FilterMode::Counting {
            if let Err(e) = state.mark_dirty() {
                log::warn!("bloomsled: tree {:?}: dirty marker: {e}", state.report.tree);
            }
        }
        drop(self.gate);
        if state.after_write(keys) {
            Rebuild(state).check();
        }
    }
}

//! The write guard: one verb per act of a write — count a key in, mark the tree dirty,
//! count a key out, finish — in the order the no-false-negative protocol needs.

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
}

impl<'a> Writing<'a> {
    pub(crate) fn new(state: &'a TreeState) -> Self {
        Writing {
            state,
            gate: state.filters.enter(),
        }
    }

    /// Counts `key` in, **before** its sled write: a reader that can see the key in sled
    /// then also sees its bits (sled's own release/acquire publishes the earlier bit
    /// stores). Then [`Writing::mark_dirty`], once for one key or a batch.
    #[inline]
    pub(crate) fn count_in(&self, key: &[u8]) {
        self.gate.admit(key);
        self.state.counters.inserted(1);
    }

    /// Makes the tree's dirty mark durable before the write reaches sled (see
    /// [`crate::persist`]). An error means the write must not be made.
    pub(crate) fn mark_dirty(&self) -> Result<()> {
        self.state.mark_dirty()
    }

    /// Inside a transaction, whose trees' marks were made before it started and whose
    /// generations are held still (see [`super::transaction`]): confirms the mark covers the
    /// current generation. Never writes, since sled's transaction lock is held; an error
    /// means the write must not be made.
    pub(crate) fn check_marked(&self) -> Result<()> {
        match &self.state.persist {
            Some(p) if !p.is_marked() => Err(crate::error::Error::ReportableBug(format!(
                "tree {:?}: a transaction's write found the dirty mark behind the generation",
                self.state.report.tree
            ))),
            _ => Ok(()),
        }
    }

    /// [`Writing::mark_dirty`] before a write that may remove a key: counting mode only
    /// (the filter will change after it); plain-mode removes leave the filter alone.
    #[inline]
    pub(crate) fn mark_dirty_for_remove(&self) -> Result<()> {
        if self.state.mode == FilterMode::Counting {
            self.state.mark_dirty()?;
        }
        Ok(())
    }

    /// Takes back a [`Writing::count_in`] that did not add a key to the store (it was there
    /// already, or the write lost a race). Counting mode only; plain bits stay.
    #[inline]
    pub(crate) fn undo_count_in(&self, key: &[u8]) {
        if self.state.mode == FilterMode::Counting {
            self.gate.release(key);
        }
    }

    /// `key` left the store (after sled removed it): counted out, or counted stale.
    #[inline]
    pub(crate) fn count_out(&self, key: &[u8]) {
        self.state.counters.removed(1);
        match self.state.mode {
            FilterMode::Counting => self.gate.release(key),
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

//! `TreeState`: what every handle of one tree shares: its filters, mode, persistence,
//! counters and rebuild bookkeeping. The sled-shaped methods are on the [`super::Tree`]
//! facade; writes go through the guard in [`super::write`].

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Weak};

use super::filters::Filters;
use super::fp_memory::{FpMemory, Hashed, Recall, Ticket};
use super::holds::Holds;
use super::policy::{RebuildPolicy, RebuildState};
use super::ready::RecoveryState;
use crate::error::{Error, Result};
use crate::filter::any::{AnyFilter, FilterMode};
use crate::persist::{filter_image, Persistence, RecoveryReport, SnapshotInfo};
use crate::stats::LookupCounters;

/// Per-tree state shared by every handle of the tree.
pub(crate) struct TreeState {
    pub(crate) filters: Filters,
    pub(crate) mode: FilterMode,
    /// The sled tree (snapshots flush it in counting mode; rebuilds scan it).
    pub(crate) sled: sled::Tree,
    pub(crate) counters: LookupCounters,
    /// `None` for temporary databases.
    pub(crate) persist: Option<Persistence>,
    /// How the filter came to be at open (see [`super::recovery::report`] for it as of now).
    pub(crate) report: RecoveryReport,
    /// Whether the filter is in use yet (a tree whose snapshot was not trusted serves with
    /// a pass-all filter until its rebuild is done).
    pub(crate) recovery: RecoveryState,
    /// Automatic snapshot every this many writes (0: off).
    every_writes: u64,
    writes: AtomicU64,
    pub(crate) rebuild: RebuildState,
    /// Set when the database or the tree is closed or dropped: background work stops.
    pub(crate) closing: AtomicBool,
    /// Set when the tree is dropped: lookups then go to sled, which answers
    /// `Error::CollectionNotFound` (as sled's handles of a dropped tree do).
    dropped: AtomicBool,
    pub(crate) me: Weak<TreeState>,
    /// Background threads working on this tree (see [`super::holds`]).
    pub(crate) holds: Arc<Holds>,
}

impl TreeState {
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn new(
        filter: AnyFilter,
        sled: sled::Tree,
        persist: Option<Persistence>,
        report: RecoveryReport,
        every_writes: u64,
        policy: RebuildPolicy,
        recovery: RecoveryState,
        fp_memory: Option<usize>,
    ) -> Arc<Self> {
        let mode = filter.mode();
        let limit = policy.items_limit(&filter);
        // Sized for the filter the tree will have: the one it starts with, or (serving with
        // the stand-in while it rebuilds) the keys it had.
        let keys = filter
            .capacity()
            .max(recovery.expected_keys.unwrap_or(0))
            .max(policy.base.get_expected_items());
        let fp_memory = fp_memory.unwrap_or_else(|| {
            FpMemory::entries_for(super::config::DEFAULT_FALSE_POSITIVE_MEMORY, keys)
        });
        let rebuild = RebuildState::new(policy, limit);
        if !recovery.is_ready() {
            // The rebuild after open is pending from the start: no automatic rebuild is
            // started meanwhile, and waiting for rebuilds waits for it.
            rebuild.pending.store(true, Ordering::Release);
            rebuild.start_progress(recovery.expected_keys);
        }
        Arc::new_cyclic(|me| TreeState {
            filters: Filters::with_memory(filter, fp_memory),
            mode,
            sled,
            counters: LookupCounters::default(),
            persist,
            report,
            recovery,
            every_writes,
            writes: AtomicU64::new(0),
            rebuild,
            closing: AtomicBool::new(false),
            dropped: AtomicBool::new(false),
            me: me.clone(),
            holds: Arc::default(),
        })
    }

    /// Makes sure the dirty marker covers the current sequence (see [`crate::persist`]);
    /// returns that sequence (`None` for a temporary database).
    #[inline]
    pub(crate) fn mark_dirty(&self) -> Result<Option<u64>> {
        match &self.persist {
            Some(p) => p.before_write().map(Some),
            None => Ok(None),
        }
    }

    /// Keys written through this handle's tree in this process (the count `after_write`
    /// keeps).
    #[inline]
    pub(crate) fn written(&self) -> u64 {
        self.writes.load(Ordering::Relaxed)
    }

    /// Called after a write reached sled: takes the automatic snapshot when one is due.
    /// Returns true every 256 keys: time to check whether the filter needs a rebuild.
    #[inline]
    pub(crate) fn after_write(&self, keys: u64) -> bool {
        let before = self.writes.fetch_add(keys, Ordering::Relaxed);
        let after = before + keys;
        let crossed = before >> 8 != after >> 8;
        let due = self.every_writes != 0 && before / self.every_writes != after / self.every_writes;
        // A half-full crash journal: a snapshot starts a fresh one before it overflows.
        let journal_full = crossed && self.persist.as_ref().is_some_and(|p| p.journal_filling());
        if (due || journal_full) && self.recovery.is_ready() {
            if let Err(e) = self.snapshot() {
                log::warn!("automatic snapshot of {:?} failed: {e}", self.report.tree);
            }
        }
        crossed
    }

    /// Writes a snapshot of the filter. The copy is taken under the gate (a rebuild cannot
    /// swap filters during it); in counting mode sled is flushed after the copy, so every
    /// remove whose decrement the copy holds is durable before the snapshot is.
    pub(crate) fn snapshot(&self) -> Result<SnapshotInfo> {
        self.snapshot_with(true)
    }

    /// [`TreeState::snapshot`]; without `durable` the caller flushes sled afterwards (one
    /// flush for many trees).
    pub(crate) fn snapshot_with(&self, durable: bool) -> Result<SnapshotInfo> {
        let p = self
            .persist
            .as_ref()
            .ok_or_else(|| Error::Unsupported("a temporary database keeps no snapshots".into()))?;
        if !self.recovery.is_ready() {
            // The pass-all stand-in is never written: it would be trusted as the filter.
            return Err(Error::Unsupported(format!(
                "tree {:?}: its filter is being rebuilt; a snapshot can be taken once it is \
                 in use (`Tree::wait_for_filter`)",
                self.report.tree
            )));
        }
        // In counting mode the flush of the record that completes the snapshot also makes
        // every remove whose decrement the copy holds durable (see `persist`).
        let seed = self.filters.enter().seed();
        let info = p.snapshot(
            seed,
            || self.filters.enter(),
            |gate| filter_image(gate.current()),
            durable,
        )?;
        self.counters.snapshot_written();
        log::debug!(
            "snapshot of {:?}: sequence {}, {} bytes in {:?}",
            self.report.tree,
            info.sequence,
            info.bytes,
            info.duration
        );
        Ok(info)
    }

    /// New sizing (and mode) for the filters this tree builds from now on, stored in its
    /// record. A different mode than the open filter's is refused: it needs a reopen.
    pub(crate) fn set_settings(
        &self,
        mode: Option<FilterMode>,
        cfg: &crate::filter::FilterConfig,
    ) -> Result<()> {
        let mode = mode.unwrap_or(self.mode);
        if mode != self.mode {
            return Err(Error::config(format!(
                "tree {:?} is open in {} mode: close every handle to it before reopening it in \
                 {} mode",
                self.report.tree,
                self.mode.name(),
                mode.name()
            )));
        }
        match &self.persist {
            Some(p) => p.set_settings(mode, cfg),
            None => Ok(()),
        }
    }

    /// Deletes the tree's snapshot files and stops persisting it (the tree was dropped).
    pub(crate) fn forget_snapshot(&self) -> Result<()> {
        self.closing.store(true, Ordering::Relaxed);
        self.dropped.store(true, Ordering::Relaxed);
        if let Some(p) = &self.persist {
            p.forget()?;
        }
        Ok(())
    }

    /// Snapshots if the tree was written since its last snapshot.
    pub(crate) fn snapshot_if_dirty(&self) -> Result<Option<SnapshotInfo>> {
        self.snapshot_if_dirty_with(true)
    }

    /// [`TreeState::snapshot_if_dirty`], durable or not (see [`TreeState::snapshot_with`]).
    pub(crate) fn snapshot_if_dirty_with(&self, durable: bool) -> Result<Option<SnapshotInfo>> {
        // A tree still serving with the pass-all stand-in has nothing to save: its record
        // stays dirty, and the next open rebuilds again.
        match &self.persist {
            Some(p) if p.is_dirty() && self.recovery.is_ready() => {
                self.snapshot_with(durable).map(Some)
            }
            _ => Ok(None),
        }
    }

    /// The filter's verdict for a store lookup, counted: `None` if the key is certainly
    /// absent, else its hash for [`TreeState::recall`].
    #[inline(always)]
    pub(crate) fn probe(&self, key: &[u8]) -> Option<Hashed> {
        self.counters.lookup();
        let (maybe, hashed) = self.filters.contains_for_lookup(key);
        if maybe || self.dropped.load(Ordering::Relaxed) {
            self.counters.passed_on();
            return Some(hashed);
        }
        None
    }

    /// [`TreeState::probe`] for many keys, counted by the caller.
    pub(crate) fn probe_many<K: AsRef<[u8]>>(&self, keys: &[K], maybe: &mut [bool]) {
        self.filters.contains_many_into(keys, maybe);
        if self.dropped.load(Ordering::Relaxed) {
            maybe.fill(true);
        }
    }

    /// For a lookup the filter passed, before its store read: `None` if `key` is a
    /// remembered false positive (absent; counted), else the ticket for
    /// [`TreeState::store_missed`] (see [`super::fp_memory`]).
    ///
    /// `hashed`: the key's hash from [`TreeState::probe`], if the caller has it.
    #[inline]
    pub(crate) fn recall(&self, key: &[u8], hashed: Option<Hashed>) -> Option<Option<Ticket>> {
        if self.dropped.load(Ordering::Relaxed) {
            return Some(None); // sled answers: `CollectionNotFound`
        }
        let memory = self.filters.memory();
        let recalled = match hashed {
            Some(hashed) => memory.recall_hashed(key, hashed),
            None => memory.recall(key),
        };
        match recalled {
            Recall::Absent => {
                self.counters.remembered();
                None
            }
            Recall::Unknown(t) => Some(t),
        }
    }

    /// The store did not hold `key`, read after [`TreeState::recall`] gave `ticket`: a
    /// false positive, counted and remembered.
    #[inline]
    pub(crate) fn store_missed(&self, ticket: Option<Ticket>, key: &[u8]) {
        self.counters.false_positive();
        self.filters.memory().record(ticket, key);
    }

    /// Removes counted stale since the filter was last rebuilt.
    pub(crate) fn stale(&self) -> u64 {
        self.stale_total()
            .saturating_sub(self.rebuild.stale_base.load(Ordering::Relaxed))
    }

    /// The running total of stale removes (the base of [`TreeState::stale`]).
    pub(crate) fn stale_total(&self) -> u64 {
        self.counters.stale_total()
    }
}

impl Drop for TreeState {
    /// The last handle is gone: a clean close, so persist the filter if it changed.
    fn drop(&mut self) {
        match self.snapshot_if_dirty() {
            Ok(_) => {
                if let Some(p) = &self.persist {
                    p.retire_journals_if_clean();
                }
            }
            Err(e) => log::warn!(
                "bloomsled: snapshot of {:?} at close failed: {e}",
                self.report.tree
            ),
        }
    }
}

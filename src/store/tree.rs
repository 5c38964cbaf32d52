//! `Tree`: a sled tree with its filter in front.

use std::cell::Cell;
use std::fmt;
use std::ops::RangeBounds;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Weak};

use sled::{IVec, MergeOperator};

use super::filters::{Entered, Filters};
use super::rebuild::{RebuildPolicy, RebuildReport, RebuildState};
use super::transaction::{self, TransactionalTree};
use super::{Batch, Iter, Subscriber};
use crate::error::{Error, Result};
use crate::filter::any::{AnyFilter, FilterMode};
use crate::filter::Filter;
use crate::persist::{snapshot_copy, Persistence, RecoveryReport, SnapshotInfo, VerifyReport};
use crate::stats::{Counters, Stats};

pub use sled::CompareAndSwapError;

/// The result of [`Tree::compare_and_swap`]: the outer error is a storage failure, the
/// inner one a lost race (the current value is returned).
pub type CompareAndSwapResult = Result<std::result::Result<(), CompareAndSwapError>>;

thread_local! {
    /// Whether the key existed before the last merge this thread made: set by the wrapper
    /// around the user's merge operator, which sled calls in the merging thread, last for
    /// the attempt it commits.
    static MERGED_OVER: Cell<Option<bool>> = const { Cell::new(None) };
}

/// Per-tree state shared by every handle of the tree.
pub(crate) struct TreeShared {
    pub(crate) filters: Filters,
    pub(crate) mode: FilterMode,
    /// The sled tree (snapshots flush it in counting mode; rebuilds scan it).
    pub(crate) sled: sled::Tree,
    counters: Counters<4>,
    /// `None` for temporary databases.
    pub(crate) persist: Option<Persistence>,
    pub(crate) report: RecoveryReport,
    /// Automatic snapshot every this many writes (0: off).
    every_writes: u64,
    writes: AtomicU64,
    pub(crate) rebuild: RebuildState,
    /// Set when the database or the tree is closed or dropped: background work stops.
    pub(crate) closing: AtomicBool,
    /// Set when the tree is dropped: lookups then go to sled, which answers
    /// `Error::CollectionNotFound` (as sled's handles of a dropped tree do).
    dropped: AtomicBool,
    pub(crate) me: Weak<TreeShared>,
}

// Counter slots. A lookup bumps exactly one of SKIPPED / PASSED, so the hot path pays one
// add; `lookups` is their sum.
const SKIPPED: usize = 0;
const PASSED: usize = 1;
const FALSE_POSITIVES: usize = 2;
const STALE: usize = 3;

/// A write in progress: holds the tree's gate (see [`super::filters`]) from the filter
/// update before the sled write to the corrections after it.
pub(crate) struct Writing<'a> {
    shared: &'a TreeShared,
    gate: Entered<'a>,
}

impl Writing<'_> {
    /// Counts `key` in, **before** its sled write: a reader that can see the key in sled
    /// then also sees its bits (sled's own release/acquire publishes the earlier bit
    /// stores), and the dirty marker is durable before sled has the key (see
    /// [`crate::persist`]). An error means the write must not be made.
    #[inline]
    pub(crate) fn admit(&self, key: &[u8]) -> Result<()> {
        self.gate_admit(key);
        self.admit_done()
    }

    /// The filter half of [`Writing::admit`], for a batch of keys; call
    /// [`Writing::admit_done`] once after them.
    #[inline]
    pub(crate) fn gate_admit(&self, key: &[u8]) {
        self.gate.admit(key);
    }

    /// The persistence half of [`Writing::admit`], once for a batch.
    pub(crate) fn admit_done(&self) -> Result<()> {
        self.shared.mark_dirty()
    }

    /// In counting mode, marks the tree dirty before a write that may remove a key (the
    /// filter will change after it). Plain mode removes leave the filter alone.
    #[inline]
    pub(crate) fn before_remove(&self) -> Result<()> {
        if self.shared.mode == FilterMode::Counting {
            self.shared.mark_dirty()?;
        }
        Ok(())
    }

    /// Takes back an [`admit`](Writing::admit) that did not add a key to the store (it was
    /// there already, or the write lost a race). Counting mode only; plain bits stay.
    #[inline]
    pub(crate) fn uncount(&self, key: &[u8]) {
        if self.shared.mode == FilterMode::Counting {
            self.gate.release(key);
        }
    }

    /// `key` left the store (after sled removed it): counted out, or counted stale.
    #[inline]
    pub(crate) fn removed(&self, key: &[u8]) {
        match self.shared.mode {
            FilterMode::Counting => self.gate.release(key),
            FilterMode::Plain => self.shared.counters.add(STALE, 1),
        }
    }

    /// `n` removes counted stale in plain mode (counting mode counts keys out instead).
    pub(crate) fn count_stale(&self, n: u64) {
        if self.shared.mode == FilterMode::Plain {
            self.shared.counters.add(STALE, n);
        }
    }

    /// The write is done: `keys` keys were written. In counting mode, a snapshot that copied
    /// the filter while this write was between its two halves is marked untrusted, so that
    /// a crash can never reload a count this write was still correcting.
    pub(crate) fn finish(self, keys: u64) {
        let shared = self.shared;
        if shared.mode == FilterMode::Counting {
            if let Err(e) = shared.mark_dirty() {
                log::warn!(
                    "bloomsled: tree {:?}: dirty marker: {e}",
                    shared.report.tree
                );
            }
        }
        drop(self.gate);
        shared.after_write(keys);
    }
}

impl TreeShared {
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn new(
        filter: AnyFilter,
        sled: sled::Tree,
        persist: Option<Persistence>,
        report: RecoveryReport,
        every_writes: u64,
        policy: RebuildPolicy,
    ) -> Arc<Self> {
        let mode = filter.mode();
        let limit = policy.items_limit(&filter);
        Arc::new_cyclic(|me| TreeShared {
            filters: Filters::new(filter),
            mode,
            sled,
            counters: Counters::default(),
            persist,
            report,
            every_writes,
            writes: AtomicU64::new(0),
            rebuild: RebuildState::new(policy, limit),
            closing: AtomicBool::new(false),
            dropped: AtomicBool::new(false),
            me: me.clone(),
        })
    }

    /// Starts a write (see [`Writing`]).
    #[inline]
    pub(crate) fn begin_write(&self) -> Writing<'_> {
        Writing {
            shared: self,
            gate: self.filters.enter(),
        }
    }

    /// Makes sure the dirty marker covers the current generation (see [`crate::persist`]).
    #[inline]
    fn mark_dirty(&self) -> Result<()> {
        if let Some(p) = &self.persist {
            p.before_write()?;
        }
        Ok(())
    }

    /// Called after a write reached sled: takes the automatic snapshot when one is due and
    /// checks, every 256 keys, whether the filter needs a rebuild.
    #[inline]
    pub(crate) fn after_write(&self, keys: u64) {
        let before = self.writes.fetch_add(keys, Ordering::Relaxed);
        let after = before + keys;
        if self.every_writes != 0 && before / self.every_writes != after / self.every_writes {
            if let Err(e) = self.snapshot() {
                log::warn!("automatic snapshot of {:?} failed: {e}", self.report.tree);
            }
        }
        if before >> 8 != after >> 8 {
            self.check_rebuild();
        }
    }

    /// Writes a snapshot of the filter. The copy is taken under the gate (a rebuild cannot
    /// swap filters during it); in counting mode sled is flushed after the copy, so every
    /// remove whose decrement the copy holds is durable before the snapshot is.
    pub(crate) fn snapshot(&self) -> Result<SnapshotInfo> {
        self.snapshot_with(true)
    }

    /// [`TreeShared::snapshot`]; without `durable` the caller flushes sled afterwards (one
    /// flush for many trees).
    pub(crate) fn snapshot_with(&self, durable: bool) -> Result<SnapshotInfo> {
        let p = self
            .persist
            .as_ref()
            .ok_or_else(|| Error::Unsupported("a temporary database keeps no snapshots".into()))?;
        // In counting mode the flush of the record that completes the snapshot also makes
        // every remove whose decrement the copy holds durable (see `persist`).
        let info = p.snapshot(
            || {
                let gate = self.filters.enter();
                snapshot_copy(gate.current())
            },
            durable,
        )?;
        log::debug!(
            "snapshot of {:?}: generation {}, {} bytes in {:?}",
            self.report.tree,
            info.generation,
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

    /// [`TreeShared::snapshot_if_dirty`], durable or not (see [`TreeShared::snapshot_with`]).
    pub(crate) fn snapshot_if_dirty_with(&self, durable: bool) -> Result<Option<SnapshotInfo>> {
        match &self.persist {
            Some(p) if p.is_dirty() => self.snapshot_with(durable).map(Some),
            _ => Ok(None),
        }
    }

    /// The filter's verdict for a store lookup, counted.
    #[inline]
    fn probe(&self, key: &[u8]) -> bool {
        let maybe = self.filters.contains(key);
        self.counters.add(if maybe { PASSED } else { SKIPPED }, 1);
        maybe || self.dropped.load(Ordering::Relaxed)
    }

    /// [`TreeShared::probe`] for many keys, counted by the caller.
    fn probe_many<K: AsRef<[u8]>>(&self, keys: &[K]) -> Vec<bool> {
        let mut maybe = self.filters.contains_many(keys);
        if self.dropped.load(Ordering::Relaxed) {
            maybe.fill(true);
        }
        maybe
    }

    #[inline]
    fn note_store_miss(&self) {
        self.counters.add(FALSE_POSITIVES, 1);
    }

    /// Removes counted stale since the filter was last rebuilt.
    pub(crate) fn stale(&self) -> u64 {
        self.stale_total()
            .saturating_sub(self.rebuild.stale_base.load(Ordering::Relaxed))
    }

    /// The running total of stale removes (the base of [`TreeShared::stale`]).
    pub(crate) fn stale_total(&self) -> u64 {
        self.counters.sum(STALE)
    }
}

impl Drop for TreeShared {
    /// The last handle is gone: a clean close, so persist the filter if it changed.
    fn drop(&mut self) {
        if let Err(e) = self.snapshot_if_dirty() {
            log::warn!(
                "bloomsled: snapshot of {:?} at close failed: {e}",
                self.report.tree
            );
        }
    }
}

/// A key-value tree with the API of `sled::Tree`, answering lookups of absent keys from
/// its Bloom filter without touching the store.
///
/// Cheap to clone (two `Arc`s), `Send + Sync`. Every method has sled's signature, except
/// that errors are [`crate::Error`]. Writes go to the filter first, then to sled.
///
/// ```
/// let db = bloomsled::Config::new().temporary(true).open()?;
/// let tree = db.open_tree("users")?;
/// assert_eq!(tree.insert(b"alice", b"1".to_vec())?, None);
/// assert_eq!(tree.get(b"alice")?.as_deref(), Some(&b"1"[..]));
/// assert_eq!(tree.get(b"bob")?, None); // answered by the filter
/// # Ok::<(), bloomsled::Error>(())
/// ```
#[derive(Clone)]
pub struct Tree {
    pub(crate) inner: sled::Tree,
    pub(crate) shared: Arc<TreeShared>,
}

impl fmt::Debug for Tree {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Tree")
            .field("name", &String::from_utf8_lossy(&self.inner.name()))
            .field("mode", &self.shared.mode)
            .finish()
    }
}

impl Tree {
    pub(crate) fn new(inner: sled::Tree, shared: Arc<TreeShared>) -> Self {
        Tree { inner, shared }
    }

    /// Inserts a key to a new value, returning the last value if it was set.
    ///
    /// ```
    /// # let db = bloomsled::Config::new().temporary(true).open()?;
    /// assert_eq!(db.insert(&[1, 2, 3], vec![0]), Ok(None));
    /// assert_eq!(db.insert(&[1, 2, 3], vec![1]), Ok(Some(sled::IVec::from(&[0]))));
    /// # Ok::<(), bloomsled::Error>(())
    /// ```
    pub fn insert<K, V>(&self, key: K, value: V) -> Result<Option<IVec>>
    where
        K: AsRef<[u8]>,
        V: Into<IVec>,
    {
        let key = key.as_ref();
        let w = self.shared.begin_write();
        // Counting mode: a key sled holds but the filter does not (written by plain sled
        // behind bloomsled's back) stays counted once, instead of being counted in and
        // straight back out into a false negative.
        let counted = self.shared.mode == FilterMode::Counting && self.shared.filters.contains(key);
        w.admit(key)?;
        let old = self.inner.insert(key, value)?;
        if old.is_some() && (counted || self.shared.mode == FilterMode::Plain) {
            w.uncount(key);
        }
        w.finish(1);
        Ok(old)
    }

    /// Retrieves a value; an absent key the filter rejects returns without a store access.
    ///
    /// ```
    /// # let db = bloomsled::Config::new().temporary(true).open()?;
    /// db.insert(&[0], vec![0])?;
    /// assert_eq!(db.get(&[0]), Ok(Some(sled::IVec::from(vec![0]))));
    /// assert_eq!(db.get(&[1]), Ok(None));
    /// # Ok::<(), bloomsled::Error>(())
    /// ```
    #[inline]
    pub fn get<K: AsRef<[u8]>>(&self, key: K) -> Result<Option<IVec>> {
        let key = key.as_ref();
        if !self.shared.probe(key) {
            return Ok(None);
        }
        let v = self.inner.get(key)?;
        if v.is_none() {
            self.shared.note_store_miss();
        }
        Ok(v)
    }

    /// True if the tree holds `key`; filter first, then the store.
    #[inline]
    pub fn contains_key<K: AsRef<[u8]>>(&self, key: K) -> Result<bool> {
        let key = key.as_ref();
        if !self.shared.probe(key) {
            return Ok(false);
        }
        let found = self.inner.contains_key(key)?;
        if !found {
            self.shared.note_store_miss();
        }
        Ok(found)
    }

    /// The filter's answer alone, with no store access: `false` means the key is certainly
    /// absent, `true` that it may be present.
    ///
    /// ```
    /// # let db = bloomsled::Config::new().temporary(true).open()?;
    /// db.insert("seen", "")?;
    /// assert!(db.may_contain("seen"));
    /// # Ok::<(), bloomsled::Error>(())
    /// ```
    #[inline]
    pub fn may_contain<K: AsRef<[u8]>>(&self, key: K) -> bool {
        self.shared.filters.contains(key.as_ref())
    }

    /// `contains_key` for many keys: one batched, prefetched filter probe, then the store
    /// only for the keys the filter could not rule out.
    ///
    /// ```
    /// # let db = bloomsled::Config::new().temporary(true).open()?;
    /// db.insert("a", "1")?;
    /// assert_eq!(db.contains_many(&["a", "b"])?, vec![true, false]);
    /// # Ok::<(), bloomsled::Error>(())
    /// ```
    pub fn contains_many<K: AsRef<[u8]>>(&self, keys: &[K]) -> Result<Vec<bool>> {
        let mut out = self.shared.probe_many(keys);
        self.count_batch(&out);
        for (key, maybe) in keys.iter().zip(out.iter_mut()) {
            if *maybe {
                *maybe = self.inner.contains_key(key)?;
                if !*maybe {
                    self.shared.note_store_miss();
                }
            }
        }
        Ok(out)
    }

    /// `get` for many keys, with the batched filter probe of [`Tree::contains_many`].
    ///
    /// ```
    /// # let db = bloomsled::Config::new().temporary(true).open()?;
    /// db.insert("a", "1")?;
    /// let got = db.get_many(&["a", "b"])?;
    /// assert_eq!(got[0].as_deref(), Some(&b"1"[..]));
    /// assert_eq!(got[1], None);
    /// # Ok::<(), bloomsled::Error>(())
    /// ```
    pub fn get_many<K: AsRef<[u8]>>(&self, keys: &[K]) -> Result<Vec<Option<IVec>>> {
        let maybe = self.shared.probe_many(keys);
        self.count_batch(&maybe);
        keys.iter()
            .zip(maybe)
            .map(|(key, maybe)| {
                if !maybe {
                    return Ok(None);
                }
                let v = self.inner.get(key)?;
                if v.is_none() {
                    self.shared.note_store_miss();
                }
                Ok(v)
            })
            .collect()
    }

    fn count_batch(&self, maybe: &[bool]) {
        let negatives = maybe.iter().filter(|m| !**m).count() as u64;
        let c = &self.shared.counters;
        c.add(SKIPPED, negatives);
        c.add(PASSED, maybe.len() as u64 - negatives);
    }

    /// Removes a key, returning its last value. In counting mode the key is counted out of
    /// the filter (only if sled actually removed it). In plain mode its bits stay set (other
    /// keys may share them) and the stale entry is counted in [`Stats`]; enough of them
    /// trigger a rebuild.
    pub fn remove<K: AsRef<[u8]>>(&self, key: K) -> Result<Option<IVec>> {
        let key = key.as_ref();
        let w = self.shared.begin_write();
        w.before_remove()?;
        let old = self.inner.remove(key)?;
        if old.is_some() {
            w.removed(key);
        }
        w.finish(1);
        Ok(old)
    }

    /// Applies a [`Batch`] atomically; every inserted key reaches the filter first.
    ///
    /// In counting mode the batch runs as a sled transaction, which tells which keys
    /// existed before, so that each key is counted exactly once.
    pub fn apply_batch(&self, batch: Batch) -> Result<()> {
        if self.shared.mode == FilterMode::Counting {
            let r: transaction::TransactionResult<()> = self.transaction(|tx| {
                tx.apply_batch(&batch)?;
                Ok(())
            });
            return r.map_err(|e| match e {
                transaction::TransactionError::Storage(e) => Error::from(e),
                // The closure above never aborts.
                transaction::TransactionError::Abort(()) => {
                    Error::ReportableBug("a batch transaction aborted".into())
                }
            });
        }
        let w = self.shared.begin_write();
        let mut removes = 0;
        for (key, value) in &batch.ops {
            if value.is_some() {
                w.gate_admit(key);
            } else {
                removes += 1;
            }
        }
        w.admit_done()?;
        let n = batch.ops.len() as u64;
        self.inner.apply_batch(batch.into_sled())?;
        w.count_stale(removes);
        w.finish(n);
        Ok(())
    }

    /// Compare and swap, as in sled: sets `key` to `new` if its current value is `old`
    /// (`None` meaning absent). The key reaches the filter before the swap when `new` is
    /// `Some` (a lost race leaves only a false positive).
    ///
    /// ```
    /// # let db = bloomsled::Config::new().temporary(true).open()?;
    /// assert_eq!(db.compare_and_swap(&[1], None as Option<&[u8]>, Some(&[10])), Ok(Ok(())));
    /// assert!(db.compare_and_swap(&[1], None as Option<&[u8]>, Some(&[11]))?.is_err());
    /// # Ok::<(), bloomsled::Error>(())
    /// ```
    pub fn compare_and_swap<K, OV, NV>(
        &self,
        key: K,
        old: Option<OV>,
        new: Option<NV>,
    ) -> CompareAndSwapResult
    where
        K: AsRef<[u8]>,
        OV: AsRef<[u8]>,
        NV: Into<IVec>,
    {
        let key = key.as_ref();
        let inserts = new.is_some();
        let existed = old.is_some();
        let w = self.shared.begin_write();
        if inserts {
            w.admit(key)?;
        } else {
            w.before_remove()?;
        }
        let res = self.inner.compare_and_swap(key, old, new)?;
        match (&res, inserts) {
            // Replaced a value, or lost the race: the key's count did not change.
            (Ok(()), true) if existed => w.uncount(key),
            (Err(_), true) => w.uncount(key),
            (Ok(()), false) if existed => w.removed(key),
            _ => {}
        }
        w.finish(u64::from(res.is_ok()));
        Ok(res)
    }

    /// Fetches the value, applies `f`, and stores the result with compare-and-swap, retrying
    /// on conflict; returns the new value. `f` returning `None` removes the key.
    ///
    /// ```
    /// # let db = bloomsled::Config::new().temporary(true).open()?;
    /// fn increment(old: Option<&[u8]>) -> Option<Vec<u8>> {
    ///     let n = old.map_or(0, |b| b[0]);
    ///     Some(vec![n + 1])
    /// }
    /// assert_eq!(db.update_and_fetch("counter", increment)?.as_deref(), Some(&[1][..]));
    /// assert_eq!(db.update_and_fetch("counter", increment)?.as_deref(), Some(&[2][..]));
    /// # Ok::<(), bloomsled::Error>(())
    /// ```
    pub fn update_and_fetch<K, V, F>(&self, key: K, mut f: F) -> Result<Option<IVec>>
    where
        K: AsRef<[u8]>,
        F: FnMut(Option<&[u8]>) -> Option<V>,
        V: Into<IVec>,
    {
        let (_, new) = self.cas_loop(key.as_ref(), |old| f(old).map(Into::into))?;
        Ok(new)
    }

    /// Like [`Tree::update_and_fetch`], but returns the value before the update.
    pub fn fetch_and_update<K, V, F>(&self, key: K, mut f: F) -> Result<Option<IVec>>
    where
        K: AsRef<[u8]>,
        F: FnMut(Option<&[u8]>) -> Option<V>,
        V: Into<IVec>,
    {
        let (old, _) = self.cas_loop(key.as_ref(), |old| f(old).map(Into::into))?;
        Ok(old)
    }

    /// Applies `f` to the current value with compare-and-swap until no other writer
    /// intervenes; returns (value before, value after).
    fn cas_loop(
        &self,
        key: &[u8],
        mut f: impl FnMut(Option<&[u8]>) -> Option<IVec>,
    ) -> Result<(Option<IVec>, Option<IVec>)> {
        let mut current = self.get(key)?;
        loop {
            let next = f(current.as_deref());
            match self.compare_and_swap(key, current.as_deref(), next.clone())? {
                Ok(()) => return Ok((current, next)),
                Err(CompareAndSwapError { current: cur, .. }) => current = cur,
            }
        }
    }

    /// Merges `value` into `key` with the tree's merge operator (see
    /// [`Tree::set_merge_operator`]) and returns the new value (`None`: the operator
    /// removed the key). The key reaches the filter first; in counting mode the filter then
    /// learns from the operator's call whether the key existed, and corrects its count.
    pub fn merge<K, V>(&self, key: K, value: V) -> Result<Option<IVec>>
    where
        K: AsRef<[u8]>,
        V: AsRef<[u8]>,
    {
        let key = key.as_ref();
        let w = self.shared.begin_write();
        w.admit(key)?;
        MERGED_OVER.with(|c| c.set(None));
        let merged = self.inner.merge(key, value)?;
        // `None` if sled never called the operator (it refuses without one: an error above).
        let existed = MERGED_OVER.with(|c| c.take()).unwrap_or(true);
        match (existed, merged.is_some()) {
            (true, true) => w.uncount(key),
            (false, false) => w.uncount(key),
            (true, false) => {
                w.uncount(key);
                w.removed(key);
            }
            (false, true) => {}
        }
        w.finish(1);
        Ok(merged)
    }

    /// Sets the merge operator used by [`Tree::merge`].
    ///
    /// ```
    /// # let db = bloomsled::Config::new().temporary(true).open()?;
    /// fn concat(_k: &[u8], old: Option<&[u8]>, new: &[u8]) -> Option<Vec<u8>> {
    ///     let mut v = old.map(|o| o.to_vec()).unwrap_or_default();
    ///     v.extend_from_slice(new);
    ///     Some(v)
    /// }
    /// db.set_merge_operator(concat);
    /// db.merge("k", [1])?;
    /// db.merge("k", [2])?;
    /// assert_eq!(db.get("k")?.as_deref(), Some(&[1, 2][..]));
    /// # Ok::<(), bloomsled::Error>(())
    /// ```
    pub fn set_merge_operator(&self, merge_operator: impl MergeOperator + 'static) {
        self.inner
            .set_merge_operator(move |k: &[u8], old: Option<&[u8]>, new: &[u8]| {
                let merged = merge_operator(k, old, new);
                // After the call: a merge the operator itself makes has finished by now.
                MERGED_OVER.with(|c| c.set(Some(old.is_some())));
                merged
            });
    }

    /// Runs `f` as a serializable transaction on this tree (sled may run it more than once).
    /// Keys it inserts reach the filter in every attempt, before the commit.
    ///
    /// ```
    /// use bloomsled::transaction::TransactionResult;
    /// # let db = bloomsled::Config::new().temporary(true).open()?;
    /// let r: TransactionResult<()> = db.transaction(|tx| {
    ///     tx.insert(b"k1", b"v1")?;
    ///     Ok(())
    /// });
    /// r.unwrap();
    /// assert!(db.contains_key(b"k1")?);
    /// # Ok::<(), bloomsled::Error>(())
    /// ```
    pub fn transaction<F, A, E>(&self, f: F) -> transaction::TransactionResult<A, E>
    where
        F: Fn(&TransactionalTree) -> transaction::ConflictableTransactionResult<A, E>,
    {
        transaction::Transactional::transaction(&self, f)
    }

    /// Subscribes to writes of keys starting with `prefix` (sled's `watch_prefix`).
    pub fn watch_prefix<P: AsRef<[u8]>>(&self, prefix: P) -> Subscriber {
        Subscriber::new(self.inner.watch_prefix(prefix))
    }

    /// Flushes the tree's database to disk; returns the bytes written.
    pub fn flush(&self) -> Result<usize> {
        Ok(self.inner.flush()?)
    }

    /// Asynchronous [`Tree::flush`].
    pub async fn flush_async(&self) -> Result<usize> {
        Ok(self.inner.flush_async().await?)
    }

    /// The entry with the greatest key strictly less than `key`.
    pub fn get_lt<K: AsRef<[u8]>>(&self, key: K) -> Result<Option<(IVec, IVec)>> {
        Ok(self.inner.get_lt(key)?)
    }

    /// The entry with the smallest key strictly greater than `key`.
    pub fn get_gt<K: AsRef<[u8]>>(&self, key: K) -> Result<Option<(IVec, IVec)>> {
        Ok(self.inner.get_gt(key)?)
    }

    /// The entry with the smallest key.
    pub fn first(&self) -> Result<Option<(IVec, IVec)>> {
        Ok(self.inner.first()?)
    }

    /// The entry with the greatest key.
    pub fn last(&self) -> Result<Option<(IVec, IVec)>> {
        Ok(self.inner.last()?)
    }

    /// Removes and returns the entry with the greatest key.
    pub fn pop_max(&self) -> Result<Option<(IVec, IVec)>> {
        self.pop(sled::Tree::pop_max)
    }

    /// Removes and returns the entry with the smallest key.
    pub fn pop_min(&self) -> Result<Option<(IVec, IVec)>> {
        self.pop(sled::Tree::pop_min)
    }

    fn pop(
        &self,
        pop: impl FnOnce(&sled::Tree) -> sled::Result<Option<(IVec, IVec)>>,
    ) -> Result<Option<(IVec, IVec)>> {
        let w = self.shared.begin_write();
        w.before_remove()?;
        let kv = pop(&self.inner)?;
        if let Some((k, _)) = &kv {
            w.removed(k);
        }
        w.finish(1);
        Ok(kv)
    }

    /// A double-ended iterator over every entry, in key order.
    pub fn iter(&self) -> Iter {
        Iter::new(self.inner.iter())
    }

    /// A double-ended iterator over the entries whose keys fall in `range`.
    pub fn range<K, R>(&self, range: R) -> Iter
    where
        K: AsRef<[u8]>,
        R: RangeBounds<K>,
    {
        Iter::new(self.inner.range(range))
    }

    /// A double-ended iterator over the entries whose keys start with `prefix`.
    pub fn scan_prefix<P: AsRef<[u8]>>(&self, prefix: P) -> Iter {
        Iter::new(self.inner.scan_prefix(prefix))
    }

    /// Number of entries (O(n), as in sled: it walks the tree).
    pub fn len(&self) -> usize {
        self.inner.len()
    }

    /// True if the tree has no entries.
    pub fn is_empty(&self) -> bool {
        self.inner.is_empty()
    }

    /// Removes every entry, one key at a time as sled does. Counting mode counts each key
    /// out; in plain mode the bits stay set (false positives only) and count as stale, which
    /// triggers a rebuild once they weigh on the false-positive rate.
    pub fn clear(&self) -> Result<()> {
        for key in self.inner.iter().keys() {
            self.remove(key?)?;
        }
        Ok(())
    }

    /// The tree's name.
    pub fn name(&self) -> IVec {
        self.inner.name()
    }

    /// CRC32 of all keys and values (O(n)).
    pub fn checksum(&self) -> Result<u32> {
        Ok(self.inner.checksum()?)
    }

    /// A copy of this tree's filter bits as they are now (probing offline, statistics,
    /// serialization with [`Filter::to_bytes`]). O(filter size). In counting mode these
    /// are the bits lookups read (a counter is non-zero exactly where its bit is set).
    pub fn filter_snapshot(&self) -> Filter {
        self.shared.filters.enter().current().bits().clone()
    }

    /// Rebuilds the filter from the keys now, while reads and writes go on, and returns
    /// what it did. The new filter is sized for the keys (doubling the capacity as often as
    /// needed, never below the configured one); writes during the scan reach both filters
    /// and the new one replaces the old atomically, then is snapshotted. If an automatic
    /// rebuild is running, this waits for it, then rebuilds again.
    ///
    /// Memory: while it runs, the old and the new filter both exist. The old one is kept
    /// afterwards and reused by a later rebuild of the same size, so a tree holds at most
    /// one filter per size it has had (sizes double, so all of them together take less
    /// than twice the largest) plus one spare.
    ///
    /// ```
    /// let db = bloomsled::Config::new().temporary(true).expected_items(100).open()?;
    /// for i in 0..1000u32 {
    ///     db.insert(i.to_be_bytes(), "")?;
    /// }
    /// db.remove(7u32.to_be_bytes())?;
    /// let r = db.rebuild()?;
    /// assert_eq!(r.keys_scanned, 999);
    /// assert!(r.capacity >= 999);
    /// # Ok::<(), bloomsled::Error>(())
    /// ```
    pub fn rebuild(&self) -> Result<RebuildReport> {
        self.shared.rebuild_now(false)
    }

    /// Blocks until no rebuild of this tree is running or pending.
    pub fn wait_for_rebuild(&self) {
        self.shared.wait_for_rebuild()
    }

    /// Writes a snapshot of this tree's filter now, so the next open loads it without a scan
    /// (until the tree is written again). Writers are not held off.
    ///
    /// ```no_run
    /// let db = bloomsled::open("my_db")?;
    /// db.insert("k", "v")?;
    /// let info = db.snapshot()?;
    /// println!("generation {} written, {} bytes", info.generation, info.bytes);
    /// # Ok::<(), bloomsled::Error>(())
    /// ```
    pub fn snapshot(&self) -> Result<SnapshotInfo> {
        self.shared.snapshot()
    }

    /// How this tree's filter was obtained when it was opened: loaded from its snapshot, or
    /// rebuilt from a key scan and why.
    pub fn recovery_report(&self) -> RecoveryReport {
        self.shared.report.clone()
    }

    /// Checks the tree end to end: every CRC of its snapshot file, and every stored key
    /// against the filter (O(keys): it scans the tree).
    ///
    /// ```
    /// # let dir = tempfile::tempdir()?;
    /// let db = bloomsled::Config::new().path(dir.path()).open()?;
    /// db.insert("k", "v")?;
    /// let report = db.verify()?;
    /// assert!(report.is_ok());
    /// assert_eq!(report.keys_checked, 1);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn verify(&self) -> Result<VerifyReport> {
        let mut keys_checked = 0;
        let mut false_negatives = 0;
        for key in self.inner.iter().keys() {
            let key = key?;
            keys_checked += 1;
            if !self.shared.filters.contains(&key) {
                false_negatives += 1;
                log::error!(
                    "bloomsled: tree {:?}: stored key {:?} denied by the filter",
                    self.shared.report.tree,
                    String::from_utf8_lossy(&key)
                );
            }
        }
        Ok(VerifyReport {
            keys_checked,
            false_negatives,
            snapshot: self
                .shared
                .persist
                .as_ref()
                .map(|p| p.verify(self.shared.mode)),
        })
    }

    /// The file holding this tree's filter snapshot (`None` for a temporary database).
    pub fn snapshot_path(&self) -> Option<&std::path::Path> {
        self.shared.persist.as_ref().map(|p| p.snapshot_path())
    }

    /// Filter and lookup statistics. Reads every filter word: O(filter size).
    pub fn stats(&self) -> Stats {
        let s = &self.shared;
        let gate = s.filters.enter();
        let current = gate.current();
        let f = current.bits();
        Stats {
            items: current.items(),
            capacity: f.capacity(),
            num_bits: f.num_bits(),
            num_hashes: f.num_hashes(),
            bits_per_key: f.bits_per_key(),
            fill_ratio: f.fill_ratio(),
            estimated_fpr: f.estimated_fpr(),
            target_fpr: f.target_fpr(),
            lookups: s.counters.sum(SKIPPED) + s.counters.sum(PASSED),
            store_lookups_skipped: s.counters.sum(SKIPPED),
            false_positives: s.counters.sum(FALSE_POSITIVES),
            stale_entries: s.stale(),
            mode: s.mode,
            stuck_counters: current.stuck_counters(),
            rebuilds: s.rebuild.rebuilds.load(Ordering::Relaxed),
            resizes: s.rebuild.resizes.load(Ordering::Relaxed),
            rebuild_in_progress: s.rebuild.in_progress(),
            memory_bytes: current.memory_bytes(),
            allocated_bytes: s.filters.allocated_bytes(),
        }
    }
}

impl IntoIterator for &Tree {
    type Item = Result<(IVec, IVec)>;
    type IntoIter = Iter;

    fn into_iter(self) -> Iter {
        self.iter()
    }
}

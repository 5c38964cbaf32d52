//! `Tree`: a sled tree with its filter in front.

use std::fmt;
use std::ops::RangeBounds;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use sled::{IVec, Iter, MergeOperator, Subscriber};

use super::transaction::{self, TransactionalTree};
use super::Batch;
use crate::error::{Error, Result};
use crate::filter::Filter;
use crate::persist::{Persistence, RecoveryReport, SnapshotInfo, VerifyReport};
use crate::stats::{Counters, Stats};

pub use sled::CompareAndSwapError;

/// The result of [`Tree::compare_and_swap`]: the outer error is a storage failure, the
/// inner one a lost race (the current value is returned).
pub type CompareAndSwapResult = Result<std::result::Result<(), CompareAndSwapError>>;

/// Per-tree state shared by every handle of the tree.
pub(crate) struct TreeShared {
    pub(crate) filter: Filter,
    counters: Counters<4>,
    /// `None` for temporary databases.
    pub(crate) persist: Option<Persistence>,
    pub(crate) report: RecoveryReport,
    /// Automatic snapshot every this many writes (0: off).
    every_writes: u64,
    writes: AtomicU64,
}

// Counter slots. A lookup bumps exactly one of SKIPPED / PASSED, so the hot path pays one
// atomic add; `lookups` is their sum.
const SKIPPED: usize = 0;
const PASSED: usize = 1;
const FALSE_POSITIVES: usize = 2;
const STALE: usize = 3;

impl TreeShared {
    pub(crate) fn new(
        filter: Filter,
        persist: Option<Persistence>,
        report: RecoveryReport,
        every_writes: u64,
    ) -> Self {
        TreeShared {
            filter,
            counters: Counters::default(),
            persist,
            report,
            every_writes,
            writes: AtomicU64::new(0),
        }
    }

    /// Makes `key` visible to the filter. Every path that can create a key calls this
    /// **before** handing the write to sled: a reader that can see the key in sled then
    /// also sees its bits (sled's own release/acquire publishes the earlier `fetch_or`),
    /// and the dirty marker is durable before sled has the key (see [`crate::persist`]).
    /// An error means the write must not be made.
    #[inline]
    pub(crate) fn admit(&self, key: &[u8]) -> Result<()> {
        self.filter.insert(key);
        self.before_write()
    }

    /// The persistence half of [`TreeShared::admit`], once for a batch of keys.
    #[inline]
    pub(crate) fn before_write(&self) -> Result<()> {
        if let Some(p) = &self.persist {
            p.before_write()?;
        }
        Ok(())
    }

    /// Called after a write reached sled: takes the automatic snapshot when one is due.
    #[inline]
    pub(crate) fn after_write(&self) {
        if self.every_writes == 0 {
            return;
        }
        let n = self.writes.fetch_add(1, Ordering::Relaxed) + 1;
        if n % self.every_writes == 0 {
            if let Err(e) = self.snapshot() {
                log::warn!("automatic snapshot of {:?} failed: {e}", self.report.tree);
            }
        }
    }

    /// Writes a snapshot of the filter.
    pub(crate) fn snapshot(&self) -> Result<SnapshotInfo> {
        let p = self
            .persist
            .as_ref()
            .ok_or_else(|| Error::config("a temporary database keeps no snapshots"))?;
        let info = p.snapshot(&self.filter)?;
        log::debug!(
            "snapshot of {:?}: generation {}, {} bytes in {:?}",
            self.report.tree,
            info.generation,
            info.bytes,
            info.duration
        );
        Ok(info)
    }

    /// Deletes the tree's snapshot files and stops persisting it (the tree was dropped).
    pub(crate) fn forget_snapshot(&self) -> Result<()> {
        if let Some(p) = &self.persist {
            p.forget()?;
        }
        Ok(())
    }

    /// Snapshots if the tree was written since its last snapshot.
    pub(crate) fn snapshot_if_dirty(&self) -> Result<Option<SnapshotInfo>> {
        match &self.persist {
            Some(p) if p.is_dirty() => self.snapshot().map(Some),
            _ => Ok(None),
        }
    }

    /// The filter's verdict for a store lookup, counted.
    #[inline]
    fn probe(&self, key: &[u8]) -> bool {
        let maybe = self.filter.contains(key);
        self.counters.add(if maybe { PASSED } else { SKIPPED }, 1);
        maybe
    }

    #[inline]
    fn note_store_miss(&self) {
        self.counters.add(FALSE_POSITIVES, 1);
    }

    pub(crate) fn note_removed(&self) {
        self.counters.add(STALE, 1);
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
            .field("filter", &self.shared.filter)
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
        self.shared.admit(key.as_ref())?;
        let old = self.inner.insert(key, value)?;
        self.shared.after_write();
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
        self.shared.filter.contains(key.as_ref())
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
        let mut out = self.shared.filter.contains_many(keys);
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
        let maybe = self.shared.filter.contains_many(keys);
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

    /// Removes a key, returning its last value. In plain mode its filter bits stay set
    /// (other keys may share them); the stale entry is counted in [`Stats`].
    pub fn remove<K: AsRef<[u8]>>(&self, key: K) -> Result<Option<IVec>> {
        let old = self.inner.remove(key)?;
        if old.is_some() {
            self.shared.note_removed();
        }
        Ok(old)
    }

    /// Applies a [`Batch`] atomically; every inserted key reaches the filter first.
    pub fn apply_batch(&self, batch: Batch) -> Result<()> {
        for key in &batch.inserted {
            self.shared.filter.insert(key);
        }
        self.shared.before_write()?;
        self.inner.apply_batch(batch.inner)?;
        self.shared.after_write();
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
        let removes = new.is_none();
        if !removes {
            self.shared.admit(key)?;
        }
        let res = self.inner.compare_and_swap(key, old, new)?;
        if res.is_ok() {
            if removes {
                self.shared.note_removed();
            } else {
                self.shared.after_write();
            }
        }
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
    /// [`Tree::set_merge_operator`]). The key reaches the filter first.
    pub fn merge<K, V>(&self, key: K, value: V) -> Result<Option<IVec>>
    where
        K: AsRef<[u8]>,
        V: AsRef<[u8]>,
    {
        self.shared.admit(key.as_ref())?;
        let merged = self.inner.merge(key, value)?;
        self.shared.after_write();
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
        self.inner.set_merge_operator(merge_operator)
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
        self.inner.watch_prefix(prefix)
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
        let kv = self.inner.pop_max()?;
        if kv.is_some() {
            self.shared.note_removed();
        }
        Ok(kv)
    }

    /// Removes and returns the entry with the smallest key.
    pub fn pop_min(&self) -> Result<Option<(IVec, IVec)>> {
        let kv = self.inner.pop_min()?;
        if kv.is_some() {
            self.shared.note_removed();
        }
        Ok(kv)
    }

    /// A double-ended iterator over every entry, in key order.
    pub fn iter(&self) -> Iter {
        self.inner.iter()
    }

    /// A double-ended iterator over the entries whose keys fall in `range`.
    pub fn range<K, R>(&self, range: R) -> Iter
    where
        K: AsRef<[u8]>,
        R: RangeBounds<K>,
    {
        self.inner.range(range)
    }

    /// A double-ended iterator over the entries whose keys start with `prefix`.
    pub fn scan_prefix<P: AsRef<[u8]>>(&self, prefix: P) -> Iter {
        self.inner.scan_prefix(prefix)
    }

    /// Number of entries (O(n), as in sled: it walks the tree).
    pub fn len(&self) -> usize {
        self.inner.len()
    }

    /// True if the tree has no entries.
    pub fn is_empty(&self) -> bool {
        self.inner.is_empty()
    }

    /// Removes every entry. Filter bits stay set (false positives only, never a false
    /// negative for a racing insert); they are counted as stale.
    pub fn clear(&self) -> Result<()> {
        let n = self.inner.len() as u64;
        self.inner.clear()?;
        self.shared.counters.add(STALE, n);
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

    /// The filter of this tree (read-only use: probing, statistics, serialization).
    pub fn filter(&self) -> &Filter {
        &self.shared.filter
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
            if !self.shared.filter.contains(&key) {
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
            snapshot: self.shared.persist.as_ref().map(|p| p.verify_file()),
        })
    }

    /// The file holding this tree's filter snapshot (`None` for a temporary database).
    pub fn snapshot_path(&self) -> Option<&std::path::Path> {
        self.shared
            .persist
            .as_ref()
            .map(|p| p.files().snapshot_path())
    }

    /// Filter and lookup statistics. Reads every filter word: O(filter size).
    pub fn stats(&self) -> Stats {
        let s = &self.shared;
        let f = &s.filter;
        Stats {
            items: f.items(),
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
            stale_entries: s.counters.sum(STALE),
            memory_bytes: f.memory_bytes(),
        }
    }
}

impl IntoIterator for &Tree {
    type Item = sled::Result<(IVec, IVec)>;
    type IntoIter = Iter;

    fn into_iter(self) -> Iter {
        self.iter()
    }
}

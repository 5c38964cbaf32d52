//! `Tree`: a sled tree with its filter in front.

use std::cell::Cell;
use std::fmt;
use std::ops::RangeBounds;
use std::sync::Arc;

use sled::{IVec, MergeOperator};

use super::filters::Filters;
use super::state::TreeState;
use super::transaction::{self, TransactionalTree};
use super::write::Writing;
use super::{Batch, Iter, Subscriber};
use crate::error::{Error, Result};
use crate::filter::any::FilterMode;

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
    pub(in crate::store) inner: sled::Tree,
    pub(in crate::store) state: Arc<TreeState>,
}

impl fmt::Debug for Tree {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Tree")
            .field("name", &String::from_utf8_lossy(&self.inner.name()))
            .field("mode", &self.state.mode)
            .finish()
    }
}

/// The store's front door for the layer above (windows): the filters' validated-read
/// protocol and sled's tree for the reads a filter lets through. Nothing above the store
/// reads a `Tree`'s fields.
impl Tree {
    /// The tree's filters: [`Filters::probe_racy`], [`Filters::pinned`],
    /// [`Filters::still`] and [`Filters::contains_many`] read them with the same validation
    /// against a concurrent swap that the tree's own lookups use.
    #[inline(always)]
    pub(crate) fn filters(&self) -> &Filters {
        &self.state.filters
    }

    /// sled's tree, for a read the filter let through (never for a write: writes go
    /// through the tree's own methods, which set the filter's bits first).
    #[inline(always)]
    pub(crate) fn sled_tree(&self) -> &sled::Tree {
        &self.inner
    }
}

impl Tree {
    pub(crate) fn new(inner: sled::Tree, state: Arc<TreeState>) -> Self {
        Tree { inner, state }
    }

    /// Inserts a key to a new value, returning the last value if it was set.
    ///
    /// # Examples
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
        let w = Writing::new(&self.state);
        // Counting mode: a key sled holds but the filter does not (written by plain sled
        // behind bloomsled's back) stays counted once, instead of being counted in and
        // straight back out into a false negative.
        let counted = self.state.mode == FilterMode::Counting && self.state.filters.contains(key);
        w.count_in(key);
        w.mark_dirty()?;
        let old = self.inner.insert(key, value)?;
        if old.is_some() && (counted || self.state.mode == FilterMode::Plain) {
            w.undo_count_in(key);
        }
        w.finish(1);
        Ok(old)
    }

    /// Retrieves a value; an absent key the filter rejects returns without a store access.
    ///
    /// # Examples
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
        if !self.state.probe(key) {
            return Ok(None);
        }
        self.get_from_store(key)
    }

    /// The store's part of [`Tree::get`], out of line: the filter's part stays small enough
    /// to inline into the caller's loop, and a rejected key pays no prologue for sled's call.
    #[inline(never)]
    fn get_from_store(&self, key: &[u8]) -> Result<Option<IVec>> {
        let v = self.inner.get(key)?;
        if v.is_none() {
            self.state.note_store_miss();
        }
        Ok(v)
    }

    /// True if the tree holds `key`; filter first, then the store.
    ///
    /// # Examples
    ///
    /// ```
    /// # let db = bloomsled::Config::new().temporary(true).open()?;
    /// db.insert("k", "v")?;
    /// assert!(db.contains_key("k")?);
    /// assert!(!db.contains_key("other")?);
    /// # Ok::<(), bloomsled::Error>(())
    /// ```
    #[inline]
    pub fn contains_key<K: AsRef<[u8]>>(&self, key: K) -> Result<bool> {
        let key = key.as_ref();
        if !self.state.probe(key) {
            return Ok(false);
        }
        self.contains_in_store(key)
    }

    /// The store's part of [`Tree::contains_key`] (see [`Tree::get_from_store`]).
    #[inline(never)]
    fn contains_in_store(&self, key: &[u8]) -> Result<bool> {
        let found = self.inner.contains_key(key)?;
        if !found {
            self.state.note_store_miss();
        }
        Ok(found)
    }

    /// The filter's answer alone, with no store access: `false` means the key is certainly
    /// absent, `true` that it may be present.
    ///
    /// # Examples
    ///
    /// ```
    /// # let db = bloomsled::Config::new().temporary(true).open()?;
    /// db.insert("seen", "")?;
    /// assert!(db.may_contain("seen"));
    /// # Ok::<(), bloomsled::Error>(())
    /// ```
    #[inline]
    pub fn may_contain<K: AsRef<[u8]>>(&self, key: K) -> bool {
        self.state.filters.contains(key.as_ref())
    }

    /// The store's answer alone: sled's own `get`, without asking the filter first and
    /// without counting in [`Stats`](crate::Stats). Read-only.
    ///
    /// For checking the filter (every key this finds, [`Tree::may_contain`] must accept)
    /// and for measuring what it saves: `get` against this on the same store.
    ///
    /// # Examples
    ///
    /// ```
    /// # let db = bloomsled::Config::new().temporary(true).open()?;
    /// db.insert("k", "v")?;
    /// assert_eq!(db.get_unfiltered("k")?, db.get("k")?);
    /// assert_eq!(db.get_unfiltered("other")?, None);
    /// # Ok::<(), bloomsled::Error>(())
    /// ```
    #[inline]
    pub fn get_unfiltered<K: AsRef<[u8]>>(&self, key: K) -> Result<Option<IVec>> {
        Ok(self.inner.get(key)?)
    }

    /// `contains_key` for many keys: one batched, prefetched filter probe, then the store
    /// only for the keys the filter could not rule out.
    ///
    /// # Examples
    ///
    /// ```
    /// # let db = bloomsled::Config::new().temporary(true).open()?;
    /// db.insert("a", "1")?;
    /// assert_eq!(db.contains_many(&["a", "b"])?, vec![true, false]);
    /// # Ok::<(), bloomsled::Error>(())
    /// ```
    pub fn contains_many<K: AsRef<[u8]>>(&self, keys: &[K]) -> Result<Vec<bool>> {
        let mut out = self.state.probe_many(keys);
        self.count_batch(&out);
        for (key, maybe) in keys.iter().zip(out.iter_mut()) {
            if *maybe {
                *maybe = self.inner.contains_key(key)?;
                if !*maybe {
                    self.state.note_store_miss();
                }
            }
        }
        Ok(out)
    }

    /// `get` for many keys, with the batched filter probe of [`Tree::contains_many`].
    ///
    /// # Examples
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
        let maybe = self.state.probe_many(keys);
        self.count_batch(&maybe);
        keys.iter()
            .zip(maybe)
            .map(|(key, maybe)| {
                if !maybe {
                    return Ok(None);
                }
                let v = self.inner.get(key)?;
                if v.is_none() {
                    self.state.note_store_miss();
                }
                Ok(v)
            })
            .collect()
    }

    fn count_batch(&self, maybe: &[bool]) {
        let negatives = maybe.iter().filter(|m| !**m).count() as u64;
        self.state
            .counters
            .lookups(negatives, maybe.len() as u64 - negatives);
    }

    /// Removes a key, returning its last value. In counting mode the key is counted out of
    /// the filter (only if sled actually removed it). In plain mode its bits stay set (other
    /// keys may share them) and the stale entry is counted in [`Stats`](crate::Stats); enough of them
    /// trigger a rebuild.
    ///
    /// # Examples
    ///
    /// ```
    /// # let db = bloomsled::Config::new().temporary(true).open()?;
    /// db.insert("k", "v")?;
    /// assert_eq!(db.remove("k")?.as_deref(), Some(&b"v"[..]));
    /// assert_eq!(db.remove("k")?, None);
    /// assert!(!db.contains_key("k")?);
    /// # Ok::<(), bloomsled::Error>(())
    /// ```
    pub fn remove<K: AsRef<[u8]>>(&self, key: K) -> Result<Option<IVec>> {
        let key = key.as_ref();
        let w = Writing::new(&self.state);
        w.mark_dirty_for_remove()?;
        let old = self.inner.remove(key)?;
        if old.is_some() {
            w.count_out(key);
        }
        w.finish(1);
        Ok(old)
    }

    /// Applies a [`Batch`] atomically; every inserted key reaches the filter first.
    ///
    /// In counting mode the batch runs as a sled transaction, which tells which keys
    /// existed before, so that each key is counted exactly once.
    ///
    /// # Examples
    ///
    /// ```
    /// # let db = bloomsled::Config::new().temporary(true).open()?;
    /// db.insert("a", "0")?;
    /// let mut batch = bloomsled::Batch::default();
    /// batch.insert("b", "1");
    /// batch.remove("a");
    /// db.apply_batch(batch)?;
    /// assert_eq!(db.get("a")?, None);
    /// assert!(db.may_contain("b") && db.contains_key("b")?);
    /// # Ok::<(), bloomsled::Error>(())
    /// ```
    pub fn apply_batch(&self, batch: Batch) -> Result<()> {
        if self.state.mode == FilterMode::Counting {
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
        let w = Writing::new(&self.state);
        let mut removes = 0;
        for (key, value) in &batch.ops {
            if value.is_some() {
                w.count_in(key);
            } else {
                removes += 1;
            }
        }
        w.mark_dirty()?;
        let n = batch.ops.len() as u64;
        self.inner.apply_batch(batch.into_sled())?;
        w.count_out_plain(removes);
        w.finish(n);
        Ok(())
    }

    /// Compare and swap, as in sled: sets `key` to `new` if its current value is `old`
    /// (`None` meaning absent). The key reaches the filter before the swap when `new` is
    /// `Some` (a lost race leaves only a false positive).
    ///
    /// # Examples
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
        let w = Writing::new(&self.state);
        if inserts {
            w.count_in(key);
            w.mark_dirty()?;
        } else {
            w.mark_dirty_for_remove()?;
        }
        let res = self.inner.compare_and_swap(key, old, new)?;
        match (&res, inserts) {
            // Replaced a value, or lost the race: the key's count did not change.
            (Ok(()), true) if existed => w.undo_count_in(key),
            (Err(_), true) => w.undo_count_in(key),
            (Ok(()), false) if existed => w.count_out(key),
            _ => {}
        }
        w.finish(u64::from(res.is_ok()));
        Ok(res)
    }

    /// Fetches the value, applies `f`, and stores the result with compare-and-swap, retrying
    /// on conflict; returns the new value. `f` returning `None` removes the key.
    ///
    /// # Examples
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
    ///
    /// # Examples
    ///
    /// ```
    /// # let db = bloomsled::Config::new().temporary(true).open()?;
    /// fn increment(old: Option<&[u8]>) -> Option<Vec<u8>> {
    ///     Some(vec![old.map_or(0, |b| b[0]) + 1])
    /// }
    /// assert_eq!(db.fetch_and_update("counter", increment)?, None);
    /// assert_eq!(db.fetch_and_update("counter", increment)?.as_deref(), Some(&[1][..]));
    /// assert_eq!(db.get("counter")?.as_deref(), Some(&[2][..]));
    /// # Ok::<(), bloomsled::Error>(())
    /// ```
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
    ///
    /// # Examples
    ///
    /// ```
    /// # let db = bloomsled::Config::new().temporary(true).open()?;
    /// fn add(_key: &[u8], old: Option<&[u8]>, new: &[u8]) -> Option<Vec<u8>> {
    ///     Some(vec![old.map_or(0, |o| o[0]) + new[0]])
    /// }
    /// db.set_merge_operator(add);
    /// assert_eq!(db.merge("total", [2])?.as_deref(), Some(&[2][..]));
    /// assert_eq!(db.merge("total", [3])?.as_deref(), Some(&[5][..]));
    /// # Ok::<(), bloomsled::Error>(())
    /// ```
    pub fn merge<K, V>(&self, key: K, value: V) -> Result<Option<IVec>>
    where
        K: AsRef<[u8]>,
        V: AsRef<[u8]>,
    {
        let key = key.as_ref();
        let w = Writing::new(&self.state);
        w.count_in(key);
        w.mark_dirty()?;
        MERGED_OVER.with(|c| c.set(None));
        let merged = self.inner.merge(key, value)?;
        // `None` if sled never called the operator (it refuses without one: an error above).
        let existed = MERGED_OVER.with(|c| c.take()).unwrap_or(true);
        match (existed, merged.is_some()) {
            (true, true) => w.undo_count_in(key),
            (false, false) => w.undo_count_in(key),
            (true, false) => {
                w.undo_count_in(key);
                w.count_out(key);
            }
            (false, true) => {}
        }
        w.finish(1);
        Ok(merged)
    }

    /// Sets the merge operator used by [`Tree::merge`].
    ///
    /// # Examples
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
    /// # Examples
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
    ///
    /// # Examples
    ///
    /// ```
    /// # let db = bloomsled::Config::new().temporary(true).open()?;
    /// let events = db.watch_prefix("user/");
    /// db.insert("other", "x")?;
    /// db.insert("user/1", "alice")?;
    /// let event = events.next_timeout(std::time::Duration::from_secs(5)).unwrap();
    /// assert_eq!(event.key(), b"user/1");
    /// # Ok::<(), bloomsled::Error>(())
    /// ```
    pub fn watch_prefix<P: AsRef<[u8]>>(&self, prefix: P) -> Subscriber {
        Subscriber::new(self.inner.watch_prefix(prefix))
    }

    /// Flushes the tree's database to disk; returns the bytes written.
    ///
    /// # Examples
    ///
    /// ```
    /// # let dir = tempfile::tempdir()?;
    /// let db = bloomsled::Config::new().path(dir.path()).open()?;
    /// db.insert("k", "v")?;
    /// // "k" is durable from here on, even if the process is killed next.
    /// assert!(db.flush()? > 0);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn flush(&self) -> Result<usize> {
        Ok(self.inner.flush()?)
    }

    /// Asynchronous [`Tree::flush`].
    ///
    /// # Examples
    ///
    /// ```
    /// async fn save(db: &bloomsled::Db) -> bloomsled::Result<usize> {
    ///     db.insert("k", "v")?;
    ///     db.flush_async().await
    /// }
    /// # Ok::<(), bloomsled::Error>(())
    /// ```
    pub async fn flush_async(&self) -> Result<usize> {
        Ok(self.inner.flush_async().await?)
    }

    /// The entry with the greatest key strictly less than `key`.
    ///
    /// # Examples
    ///
    /// ```
    /// # let db = bloomsled::Config::new().temporary(true).open()?;
    /// for k in [1, 2, 3] {
    ///     db.insert([k], "")?;
    /// }
    /// assert_eq!(db.get_lt([2])?.map(|(k, _)| k.to_vec()), Some(vec![1]));
    /// assert_eq!(db.get_lt([1])?, None);
    /// # Ok::<(), bloomsled::Error>(())
    /// ```
    pub fn get_lt<K: AsRef<[u8]>>(&self, key: K) -> Result<Option<(IVec, IVec)>> {
        Ok(self.inner.get_lt(key)?)
    }

    /// The entry with the smallest key strictly greater than `key`.
    ///
    /// # Examples
    ///
    /// ```
    /// # let db = bloomsled::Config::new().temporary(true).open()?;
    /// for k in [1, 2, 3] {
    ///     db.insert([k], "")?;
    /// }
    /// assert_eq!(db.get_gt([2])?.map(|(k, _)| k.to_vec()), Some(vec![3]));
    /// assert_eq!(db.get_gt([3])?, None);
    /// # Ok::<(), bloomsled::Error>(())
    /// ```
    pub fn get_gt<K: AsRef<[u8]>>(&self, key: K) -> Result<Option<(IVec, IVec)>> {
        Ok(self.inner.get_gt(key)?)
    }

    /// The entry with the smallest key.
    ///
    /// # Examples
    ///
    /// ```
    /// # let db = bloomsled::Config::new().temporary(true).open()?;
    /// assert_eq!(db.first()?, None);
    /// for k in [2, 1, 3] {
    ///     db.insert([k], "")?;
    /// }
    /// assert_eq!(db.first()?.map(|(k, _)| k.to_vec()), Some(vec![1]));
    /// # Ok::<(), bloomsled::Error>(())
    /// ```
    pub fn first(&self) -> Result<Option<(IVec, IVec)>> {
        Ok(self.inner.first()?)
    }

    /// The entry with the greatest key.
    ///
    /// # Examples
    ///
    /// ```
    /// # let db = bloomsled::Config::new().temporary(true).open()?;
    /// assert_eq!(db.last()?, None);
    /// for k in [2, 3, 1] {
    ///     db.insert([k], "")?;
    /// }
    /// assert_eq!(db.last()?.map(|(k, _)| k.to_vec()), Some(vec![3]));
    /// # Ok::<(), bloomsled::Error>(())
    /// ```
    pub fn last(&self) -> Result<Option<(IVec, IVec)>> {
        Ok(self.inner.last()?)
    }

    /// Removes and returns the entry with the greatest key.
    ///
    /// # Examples
    ///
    /// ```
    /// # let db = bloomsled::Config::new().temporary(true).open()?;
    /// for k in [1, 2, 3] {
    ///     db.insert([k], "")?;
    /// }
    /// assert_eq!(db.pop_max()?.map(|(k, _)| k.to_vec()), Some(vec![3]));
    /// assert!(!db.contains_key([3])?);
    /// assert_eq!(db.len(), 2);
    /// # Ok::<(), bloomsled::Error>(())
    /// ```
    pub fn pop_max(&self) -> Result<Option<(IVec, IVec)>> {
        self.pop(sled::Tree::pop_max)
    }

    /// Removes and returns the entry with the smallest key.
    ///
    /// # Examples
    ///
    /// ```
    /// # let db = bloomsled::Config::new().temporary(true).open()?;
    /// for k in [1, 2, 3] {
    ///     db.insert([k], "")?;
    /// }
    /// assert_eq!(db.pop_min()?.map(|(k, _)| k.to_vec()), Some(vec![1]));
    /// assert!(!db.contains_key([1])?);
    /// assert_eq!(db.len(), 2);
    /// # Ok::<(), bloomsled::Error>(())
    /// ```
    pub fn pop_min(&self) -> Result<Option<(IVec, IVec)>> {
        self.pop(sled::Tree::pop_min)
    }

    fn pop(
        &self,
        pop: impl FnOnce(&sled::Tree) -> sled::Result<Option<(IVec, IVec)>>,
    ) -> Result<Option<(IVec, IVec)>> {
        let w = Writing::new(&self.state);
        w.mark_dirty_for_remove()?;
        let kv = pop(&self.inner)?;
        if let Some((k, _)) = &kv {
            w.count_out(k);
        }
        w.finish(1);
        Ok(kv)
    }

    /// A double-ended iterator over every entry, in key order.
    ///
    /// # Examples
    ///
    /// ```
    /// # let db = bloomsled::Config::new().temporary(true).open()?;
    /// db.insert("b", "2")?;
    /// db.insert("a", "1")?;
    /// let keys: Vec<_> = db.iter().keys().collect::<Result<_, _>>()?;
    /// assert_eq!(keys, ["a", "b"].map(bloomsled::IVec::from));
    /// let (last, value) = db.iter().next_back().unwrap()?;
    /// assert_eq!((&last[..], &value[..]), (&b"b"[..], &b"2"[..]));
    /// # Ok::<(), bloomsled::Error>(())
    /// ```
    pub fn iter(&self) -> Iter {
        Iter::new(self.inner.iter())
    }

    /// A double-ended iterator over the entries whose keys fall in `range`.
    ///
    /// # Examples
    ///
    /// ```
    /// # let db = bloomsled::Config::new().temporary(true).open()?;
    /// for k in 0..10u8 {
    ///     db.insert([k], "")?;
    /// }
    /// let keys: Vec<_> = db.range([2u8]..[5u8]).keys().collect::<Result<_, _>>()?;
    /// assert_eq!(keys, [[2], [3], [4]].map(|k| bloomsled::IVec::from(&k)));
    /// assert_eq!(db.range([8u8]..).count(), 2);
    /// # Ok::<(), bloomsled::Error>(())
    /// ```
    pub fn range<K, R>(&self, range: R) -> Iter
    where
        K: AsRef<[u8]>,
        R: RangeBounds<K>,
    {
        Iter::new(self.inner.range(range))
    }

    /// A double-ended iterator over the entries whose keys start with `prefix`.
    ///
    /// # Examples
    ///
    /// ```
    /// # let db = bloomsled::Config::new().temporary(true).open()?;
    /// db.insert("user/1", "alice")?;
    /// db.insert("user/2", "bob")?;
    /// db.insert("group/1", "admins")?;
    /// let users: Vec<_> = db.scan_prefix("user/").values().collect::<Result<_, _>>()?;
    /// assert_eq!(users, ["alice", "bob"].map(bloomsled::IVec::from));
    /// # Ok::<(), bloomsled::Error>(())
    /// ```
    pub fn scan_prefix<P: AsRef<[u8]>>(&self, prefix: P) -> Iter {
        Iter::new(self.inner.scan_prefix(prefix))
    }

    /// Number of entries (O(n), as in sled: it walks the tree).
    ///
    /// # Examples
    ///
    /// ```
    /// # let db = bloomsled::Config::new().temporary(true).open()?;
    /// assert_eq!(db.len(), 0);
    /// db.insert("a", "1")?;
    /// db.insert("b", "2")?;
    /// db.insert("a", "3")?;
    /// assert_eq!(db.len(), 2);
    /// # Ok::<(), bloomsled::Error>(())
    /// ```
    pub fn len(&self) -> usize {
        self.inner.len()
    }

    /// True if the tree has no entries.
    ///
    /// # Examples
    ///
    /// ```
    /// # let db = bloomsled::Config::new().temporary(true).open()?;
    /// assert!(db.is_empty());
    /// db.insert("k", "v")?;
    /// assert!(!db.is_empty());
    /// # Ok::<(), bloomsled::Error>(())
    /// ```
    pub fn is_empty(&self) -> bool {
        self.inner.is_empty()
    }

    /// Removes every entry, one key at a time as sled does. Counting mode counts each key
    /// out; in plain mode the bits stay set (false positives only) and count as stale, which
    /// triggers a rebuild once they weigh on the false-positive rate.
    ///
    /// # Examples
    ///
    /// ```
    /// # let db = bloomsled::Config::new().temporary(true).open()?;
    /// db.insert("a", "1")?;
    /// db.insert("b", "2")?;
    /// db.clear()?;
    /// assert!(db.is_empty());
    /// assert_eq!(db.get("a")?, None);
    /// # Ok::<(), bloomsled::Error>(())
    /// ```
    pub fn clear(&self) -> Result<()> {
        for key in self.inner.iter().keys() {
            self.remove(key?)?;
        }
        Ok(())
    }

    /// The tree's name.
    ///
    /// # Examples
    ///
    /// ```
    /// # let db = bloomsled::Config::new().temporary(true).open()?;
    /// let users = db.open_tree("users")?;
    /// assert_eq!(users.name(), bloomsled::IVec::from("users"));
    /// # Ok::<(), bloomsled::Error>(())
    /// ```
    pub fn name(&self) -> IVec {
        self.inner.name()
    }

    /// CRC32 of all keys and values (O(n)).
    ///
    /// # Examples
    ///
    /// ```
    /// # let db = bloomsled::Config::new().temporary(true).open()?;
    /// let (a, b) = (db.open_tree("a")?, db.open_tree("b")?);
    /// a.insert("k", "v")?;
    /// b.insert("k", "v")?;
    /// assert_eq!(a.checksum()?, b.checksum()?);
    /// b.insert("k", "w")?;
    /// assert_ne!(a.checksum()?, b.checksum()?);
    /// # Ok::<(), bloomsled::Error>(())
    /// ```
    pub fn checksum(&self) -> Result<u32> {
        Ok(self.inner.checksum()?)
    }
}

impl IntoIterator for &Tree {
    type Item = Result<(IVec, IVec)>;
    type IntoIter = Iter;

    fn into_iter(self) -> Iter {
        self.iter()
    }
}

//! A tree's writes: every path that can create a key sets its filter bits before sled
//! stores it (insert, batch, compare-and-swap, update, merge, transaction); removes and
//! clear keep the filter's counts right.

use std::cell::Cell;

use sled::{IVec, MergeOperator};

use super::batch::Batch;
use super::{CompareAndSwapError, CompareAndSwapResult, Tree};
use crate::error::{Error, Result};
use crate::filter::any::FilterMode;
use crate::store::transaction::{self, TransactionalTree};
use crate::store::write::Writing;

thread_local! {
    /// Whether the key existed before the last merge this thread made: set by the wrapper
    /// around the user's merge operator, which sled calls in the merging thread, last for
    /// the attempt it commits.
    static MERGED_OVER: Cell<Option<bool>> = const { Cell::new(None) };
}

impl Tree {
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
        let inserts: Vec<&[u8]> = (batch.ops.iter())
            .filter(|(_, value)| value.is_some())
            .map(|(key, _)| &key[..])
            .collect();
        let removes = (batch.ops.len() - inserts.len()) as u64;
        w.count_in_all(&inserts);
        drop(inserts);
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
    pub(super) fn cas_loop(
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
}

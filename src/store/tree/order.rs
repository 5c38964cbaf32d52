//! A tree's ordered reads and sled's housekeeping, passed through: ranges, neighbours,
//! pops (which remove through the filter), iteration, watching, flush, length, checksum.

use std::ops::RangeBounds;

use sled::IVec;

use super::iter::Iter;
use super::subscriber::Subscriber;
use super::Tree;
use crate::error::Result;
use crate::store::write::Writing;

impl Tree {
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

    /// Flushes the tree's database to disk; returns the bytes written. On return every
    /// write made before the call survives a process crash **and a power cut**: sled's
    /// flush, then one fsync of sled's log (sled 0.34's flush alone ends in
    /// `sync_file_range(2)`, which a power cut can undo: spacejam/sled#1452).
    ///
    /// # Examples
    ///
    /// ```
    /// # let dir = tempfile::tempdir()?;
    /// let db = bloomsled::Config::new().path(dir.path()).open()?;
    /// db.insert("k", "v")?;
    /// // "k" is durable from here on, even if the power is cut next.
    /// assert!(db.flush()? > 0);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn flush(&self) -> Result<usize> {
        match &self.state.persist {
            Some(p) => p.flush_user(),
            None => Ok(self.inner.flush()?),
        }
    }

    /// Asynchronous [`Tree::flush`], as durable. With the `tokio` feature, inside a tokio
    /// runtime, the flush and its fsync run on tokio's blocking pool, off the runtime's
    /// workers (as the rest of the async API); elsewhere sled's own `flush_async` runs and
    /// the fsync that follows blocks the awaiting thread.
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
        #[cfg(feature = "tokio")]
        if tokio::runtime::Handle::try_current().is_ok() {
            let tree = self.clone();
            return crate::blocking::off_the_runtime("Tree::flush_async", move || tree.flush())
                .await;
        }
        let Some(p) = &self.state.persist else {
            return Ok(self.inner.flush_async().await?);
        };
        p.check_poison()?;
        let bytes = match self.inner.flush_async().await {
            Ok(bytes) => bytes,
            Err(e) => return Err(p.flush_failed(e)),
        };
        p.sync_log()?;
        Ok(bytes)
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

    pub(super) fn pop(
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

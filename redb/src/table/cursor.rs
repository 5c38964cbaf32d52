//! `CursorMut`: redb's writing cursor, its inserts putting their key in the filter first.

use std::borrow::Borrow;

use redb::{AccessGuard, CursorError, Key, Value};

use super::Result;
use crate::filters::{Out, TableFilter};

/// A cursor that writes (redb's `CursorMut`): its inserts put their key in the filter first
/// (redb's cursor never overwrites a key: an insert of a key already there is refused as
/// unordered, and counting mode counts its count-in out again at the commit).
///
/// ```
/// use std::ops::Bound;
/// use bloomsled_redb::{Database, TableDefinition};
/// const T: TableDefinition<u64, u64> = TableDefinition::new("t");
/// # let dir = tempfile::tempdir().unwrap();
/// # let db = Database::create(dir.path().join("a.redb"))?;
/// let w = db.begin_write()?;
/// let mut t = w.open_table(T)?;
/// let mut c = t.upper_bound_mut(Bound::<u64>::Unbounded)?;
/// for k in 0..10 {
///     c.insert_before(k, k)?;
/// }
/// c.close()?;
/// # Ok::<(), bloomsled_redb::Error>(())
/// ```
pub struct CursorMut<'a, K: Key + 'static, V: Value + 'static> {
    pub(super) inner: redb::CursorMut<'a, K, V>,
    pub(super) filter: Option<&'a TableFilter>,
    pub(super) log: &'a mut Vec<u64>,
    /// The forgets of the table's write handle (see `Writing`).
    pub(super) pending: &'a mut bloomsled::reuse::Pending,
    /// Counting mode: the hashes of the keys it removed, counted out at the commit.
    pub(super) outs: &'a mut Vec<Out>,
}

impl<K: Key + 'static, V: Value + 'static> CursorMut<'_, K, V> {
    /// Counts `key` in before an insert; its hash, for [`CursorMut::refused`].
    fn admit(&mut self, key: &[u8]) -> Option<u64> {
        let tf = self.filter?;
        let h = tf.insert(key, self.pending);
        self.log.push(h);
        Some(h)
    }

    /// Counting mode: an insert redb refused as unordered changed nothing (redb's cursor
    /// never overwrites: a key equal to a neighbour, one already there, is unordered), so
    /// its count-in is one too many, counted out at the commit. Any other error leaves the
    /// count (too high at worst: the insert may have reached the table).
    fn refused<T>(
        &mut self,
        h: Option<u64>,
        result: std::result::Result<T, CursorError>,
    ) -> std::result::Result<T, CursorError> {
        let counting = self.filter.is_some_and(|tf| tf.counting);
        if let (Some(h), true, Err(CursorError::UnorderedKey)) = (h, counting, &result) {
            self.outs.push(Out { h, extra: true });
        }
        result
    }

    /// Counting mode: the removed pair's key is counted out at the commit.
    fn removed(
        filter: Option<&TableFilter>,
        outs: &mut Vec<Out>,
        pair: &Option<(AccessGuard<'_, K>, AccessGuard<'_, V>)>,
    ) {
        if let (Some(tf), Some((k, _))) = (filter.filter(|tf| tf.counting), pair) {
            outs.push(Out {
                h: bloomsled::hash::hash_key(K::as_bytes(&k.value()).as_ref(), tf.seed()),
                extra: false,
            });
        }
    }

    /// The pair after the cursor, without moving.
    ///
    /// ```
    /// # use std::ops::Bound;
    /// # use bloomsled_redb::{Database, TableDefinition};
    /// # const T: TableDefinition<u64, u64> = TableDefinition::new("t");
    /// # let dir = tempfile::tempdir().unwrap();
    /// # let db = Database::create(dir.path().join("a.redb"))?;
    /// # let w = db.begin_write()?;
    /// # let mut t = w.open_table(T)?;
    /// let mut c = t.lower_bound_mut(Bound::<u64>::Unbounded)?;
    /// assert!(c.peek_next()?.is_none());
    /// # Ok::<(), bloomsled_redb::Error>(())
    /// ```
    #[allow(clippy::type_complexity)]
    pub fn peek_next(&mut self) -> Result<Option<(AccessGuard<'_, K>, AccessGuard<'_, V>)>> {
        self.inner.peek_next()
    }

    /// The pair before the cursor, without moving.
    ///
    /// ```
    /// # use std::ops::Bound;
    /// # use bloomsled_redb::{Database, TableDefinition};
    /// # const T: TableDefinition<u64, u64> = TableDefinition::new("t");
    /// # let dir = tempfile::tempdir().unwrap();
    /// # let db = Database::create(dir.path().join("a.redb"))?;
    /// # let w = db.begin_write()?;
    /// # let mut t = w.open_table(T)?;
    /// let mut c = t.lower_bound_mut(Bound::<u64>::Unbounded)?;
    /// assert!(c.peek_prev()?.is_none());
    /// # Ok::<(), bloomsled_redb::Error>(())
    /// ```
    #[allow(clippy::type_complexity)]
    pub fn peek_prev(&mut self) -> Result<Option<(AccessGuard<'_, K>, AccessGuard<'_, V>)>> {
        self.inner.peek_prev()
    }

    /// Moves past the next pair and returns it.
    ///
    /// ```
    /// # use std::ops::Bound;
    /// # use bloomsled_redb::{Database, TableDefinition};
    /// # const T: TableDefinition<u64, u64> = TableDefinition::new("t");
    /// # let dir = tempfile::tempdir().unwrap();
    /// # let db = Database::create(dir.path().join("a.redb"))?;
    /// # let w = db.begin_write()?;
    /// # let mut t = w.open_table(T)?;
    /// let mut c = t.lower_bound_mut(Bound::<u64>::Unbounded)?;
    /// assert!(c.next()?.is_none());
    /// # Ok::<(), bloomsled_redb::Error>(())
    /// ```
    #[allow(clippy::type_complexity, clippy::should_implement_trait)]
    pub fn next(&mut self) -> Result<Option<(AccessGuard<'_, K>, AccessGuard<'_, V>)>> {
        self.inner.next()
    }

    /// Moves before the previous pair and returns it.
    ///
    /// ```
    /// # use std::ops::Bound;
    /// # use bloomsled_redb::{Database, TableDefinition};
    /// # const T: TableDefinition<u64, u64> = TableDefinition::new("t");
    /// # let dir = tempfile::tempdir().unwrap();
    /// # let db = Database::create(dir.path().join("a.redb"))?;
    /// # let w = db.begin_write()?;
    /// # let mut t = w.open_table(T)?;
    /// let mut c = t.lower_bound_mut(Bound::<u64>::Unbounded)?;
    /// assert!(c.prev()?.is_none());
    /// # Ok::<(), bloomsled_redb::Error>(())
    /// ```
    #[allow(clippy::type_complexity)]
    pub fn prev(&mut self) -> Result<Option<(AccessGuard<'_, K>, AccessGuard<'_, V>)>> {
        self.inner.prev()
    }

    /// Inserts a pair at the cursor, before it (keys must stay in order).
    ///
    /// ```
    /// # use std::ops::Bound;
    /// # use bloomsled_redb::{Database, TableDefinition};
    /// # const T: TableDefinition<u64, u64> = TableDefinition::new("t");
    /// # let dir = tempfile::tempdir().unwrap();
    /// # let db = Database::create(dir.path().join("a.redb"))?;
    /// # let w = db.begin_write()?;
    /// # let mut t = w.open_table(T)?;
    /// let mut c = t.lower_bound_mut(Bound::<u64>::Unbounded)?;
    /// c.insert_before(1, 1)?;
    /// # Ok::<(), bloomsled_redb::Error>(())
    /// ```
    pub fn insert_before<'k, 'v>(
        &mut self,
        key: impl Borrow<K::SelfType<'k>>,
        value: impl Borrow<V::SelfType<'v>>,
    ) -> std::result::Result<(), CursorError> {
        let h = self.admit(K::as_bytes(key.borrow()).as_ref());
        let result = self.inner.insert_before(key, value);
        self.refused(h, result)
    }

    /// Inserts a pair at the cursor, after it (keys must stay in order).
    ///
    /// ```
    /// # use std::ops::Bound;
    /// # use bloomsled_redb::{Database, TableDefinition};
    /// # const T: TableDefinition<u64, u64> = TableDefinition::new("t");
    /// # let dir = tempfile::tempdir().unwrap();
    /// # let db = Database::create(dir.path().join("a.redb"))?;
    /// # let w = db.begin_write()?;
    /// # let mut t = w.open_table(T)?;
    /// let mut c = t.lower_bound_mut(Bound::<u64>::Unbounded)?;
    /// c.insert_after(1, 1)?;
    /// # Ok::<(), bloomsled_redb::Error>(())
    /// ```
    pub fn insert_after<'k, 'v>(
        &mut self,
        key: impl Borrow<K::SelfType<'k>>,
        value: impl Borrow<V::SelfType<'v>>,
    ) -> std::result::Result<(), CursorError> {
        let h = self.admit(K::as_bytes(key.borrow()).as_ref());
        let result = self.inner.insert_after(key, value);
        self.refused(h, result)
    }

    /// Removes the pair after the cursor.
    ///
    /// ```
    /// # use std::ops::Bound;
    /// # use bloomsled_redb::{Database, TableDefinition};
    /// # const T: TableDefinition<u64, u64> = TableDefinition::new("t");
    /// # let dir = tempfile::tempdir().unwrap();
    /// # let db = Database::create(dir.path().join("a.redb"))?;
    /// # let w = db.begin_write()?;
    /// # let mut t = w.open_table(T)?;
    /// let mut c = t.lower_bound_mut(Bound::<u64>::Unbounded)?;
    /// assert!(c.remove_next()?.is_none());
    /// # Ok::<(), bloomsled_redb::Error>(())
    /// ```
    #[allow(clippy::type_complexity)]
    pub fn remove_next(&mut self) -> Result<Option<(AccessGuard<'_, K>, AccessGuard<'_, V>)>> {
        let pair = self.inner.remove_next()?;
        Self::removed(self.filter, self.outs, &pair);
        Ok(pair)
    }

    /// Removes the pair before the cursor.
    ///
    /// ```
    /// # use std::ops::Bound;
    /// # use bloomsled_redb::{Database, TableDefinition};
    /// # const T: TableDefinition<u64, u64> = TableDefinition::new("t");
    /// # let dir = tempfile::tempdir().unwrap();
    /// # let db = Database::create(dir.path().join("a.redb"))?;
    /// # let w = db.begin_write()?;
    /// # let mut t = w.open_table(T)?;
    /// let mut c = t.lower_bound_mut(Bound::<u64>::Unbounded)?;
    /// assert!(c.remove_prev()?.is_none());
    /// # Ok::<(), bloomsled_redb::Error>(())
    /// ```
    #[allow(clippy::type_complexity)]
    pub fn remove_prev(&mut self) -> Result<Option<(AccessGuard<'_, K>, AccessGuard<'_, V>)>> {
        let pair = self.inner.remove_prev()?;
        Self::removed(self.filter, self.outs, &pair);
        Ok(pair)
    }

    /// Ends the cursor, reporting an error it latched.
    ///
    /// ```
    /// # use std::ops::Bound;
    /// # use bloomsled_redb::{Database, TableDefinition};
    /// # const T: TableDefinition<u64, u64> = TableDefinition::new("t");
    /// # let dir = tempfile::tempdir().unwrap();
    /// # let db = Database::create(dir.path().join("a.redb"))?;
    /// # let w = db.begin_write()?;
    /// # let mut t = w.open_table(T)?;
    /// t.lower_bound_mut(Bound::<u64>::Unbounded)?.close()?;
    /// # Ok::<(), bloomsled_redb::Error>(())
    /// ```
    pub fn close(self) -> Result {
        self.inner.close()
    }
}

//! `ReadOnlyTable`: a table in a read transaction, asking its filter before redb.

use std::borrow::Borrow;
use std::ops::{Bound, RangeBounds};

use redb::{
    AccessGuard, Cursor, Key, OwnedAccessGuard, OwnedRange, Range, ReadableTable,
    ReadableTableMetadata, TableDefinition, TableStats, Value,
};

use crate::filters::{Kind, ReadSide};
use crate::transactions::ReadTransaction;

use super::{Result, TableKeys};

/// A table in a read transaction (redb's `ReadOnlyTable`). It keeps the filter it was
/// opened with if that filter is complete for its transaction's snapshot.
///
/// ```
/// use bloomsled_redb::{Database, ReadableDatabase, TableDefinition};
/// const T: TableDefinition<u64, u64> = TableDefinition::new("t");
/// # let dir = tempfile::tempdir().unwrap();
/// # let db = Database::create(dir.path().join("a.redb"))?;
/// # let w = db.begin_write()?; w.open_table(T)?.insert(1, 1)?; w.commit()?;
/// let t = db.begin_read()?.open_table(T)?;
/// assert!(t.get(1)?.is_some());
/// assert!(t.get(2)?.is_none());
/// # Ok::<(), bloomsled_redb::Error>(())
/// ```
pub struct ReadOnlyTable<K: Key + 'static, V: Value + 'static> {
    inner: redb::ReadOnlyTable<K, V>,
    /// The table's counters, and its filter if complete for this snapshot at open
    /// (`None`: filters off).
    filter: Option<ReadSide>,
}

impl<K: Key + 'static, V: Value + 'static> ReadOnlyTable<K, V> {
    pub(crate) fn new(
        inner: redb::ReadOnlyTable<K, V>,
        txn: &ReadTransaction,
        def: TableDefinition<K, V>,
    ) -> Self {
        use redb::TableHandle;
        let shared = txn.shared();
        let filter = shared.table(Kind::Table, def.name()).map(|tf| {
            shared.build_if_needed(&tf, false, || TableKeys::<K, V>::shared(def.name()));
            ReadSide::new(shared, tf, txn.seq())
        });
        ReadOnlyTable { inner, filter }
    }

    /// The value of `key`; `None` from the filter alone if it rules the key out.
    ///
    /// ```
    /// use bloomsled_redb::{Database, ReadableDatabase, TableDefinition};
    /// const T: TableDefinition<u64, u64> = TableDefinition::new("t");
    /// # let dir = tempfile::tempdir().unwrap();
    /// # let db = Database::create(dir.path().join("a.redb"))?;
    /// # let w = db.begin_write()?; w.open_table(T)?; w.commit()?;
    /// assert!(db.begin_read()?.open_table(T)?.get(1)?.is_none());
    /// # Ok::<(), bloomsled_redb::Error>(())
    /// ```
    #[inline]
    pub fn get<'a>(
        &self,
        key: impl Borrow<K::SelfType<'a>>,
    ) -> Result<Option<AccessGuard<'static, V>>> {
        match &self.filter {
            Some(side) => side.get(K::as_bytes(key.borrow()).as_ref(), || {
                self.inner.get(key.borrow())
            }),
            None => self.inner.get(key),
        }
    }

    /// [`ReadOnlyTable::get`] with a value that keeps the transaction alive.
    ///
    /// ```
    /// use bloomsled_redb::{Database, ReadableDatabase, TableDefinition};
    /// const T: TableDefinition<u64, u64> = TableDefinition::new("t");
    /// # let dir = tempfile::tempdir().unwrap();
    /// # let db = Database::create(dir.path().join("a.redb"))?;
    /// # let w = db.begin_write()?; w.open_table(T)?.insert(1, 7)?; w.commit()?;
    /// let v = db.begin_read()?.open_table(T)?.get_owned(1)?.unwrap();
    /// assert_eq!(v.value(), 7);
    /// # Ok::<(), bloomsled_redb::Error>(())
    /// ```
    pub fn get_owned<'a>(
        &self,
        key: impl Borrow<K::SelfType<'a>>,
    ) -> Result<Option<OwnedAccessGuard<V>>> {
        match &self.filter {
            Some(side) => side.get(K::as_bytes(key.borrow()).as_ref(), || {
                self.inner.get_owned(key.borrow())
            }),
            None => self.inner.get_owned(key),
        }
    }

    /// The pairs in `range`.
    ///
    /// ```
    /// use bloomsled_redb::{Database, ReadableDatabase, TableDefinition};
    /// const T: TableDefinition<u64, u64> = TableDefinition::new("t");
    /// # let dir = tempfile::tempdir().unwrap();
    /// # let db = Database::create(dir.path().join("a.redb"))?;
    /// # let w = db.begin_write()?; w.open_table(T)?.insert(1, 7)?; w.commit()?;
    /// assert_eq!(db.begin_read()?.open_table(T)?.range(0..9)?.count(), 1);
    /// # Ok::<(), bloomsled_redb::Error>(())
    /// ```
    pub fn range<'a, KR>(&self, range: impl RangeBounds<KR>) -> Result<Range<'static, K, V>>
    where
        KR: Borrow<K::SelfType<'a>>,
    {
        self.inner.range(range)
    }

    /// The pairs in `range`, keeping the transaction alive.
    ///
    /// ```
    /// use bloomsled_redb::{Database, ReadableDatabase, TableDefinition};
    /// const T: TableDefinition<u64, u64> = TableDefinition::new("t");
    /// # let dir = tempfile::tempdir().unwrap();
    /// # let db = Database::create(dir.path().join("a.redb"))?;
    /// # let w = db.begin_write()?; w.open_table(T)?.insert(1, 7)?; w.commit()?;
    /// assert_eq!(db.begin_read()?.open_table(T)?.range_owned(0..9)?.count(), 1);
    /// # Ok::<(), bloomsled_redb::Error>(())
    /// ```
    pub fn range_owned<'a, KR>(&self, range: impl RangeBounds<KR>) -> Result<OwnedRange<K, V>>
    where
        KR: Borrow<K::SelfType<'a>>,
    {
        self.inner.range_owned(range)
    }

    /// True if this table's lookups ask its filter (false: they all go to redb).
    #[doc(hidden)]
    pub fn filter_in_use(&self) -> bool {
        self.filter.is_some()
    }
}

impl<K: Key + 'static, V: Value + 'static> ReadableTableMetadata for ReadOnlyTable<K, V> {
    fn stats(&self) -> Result<TableStats> {
        self.inner.stats()
    }

    fn len(&self) -> Result<u64> {
        self.inner.len()
    }
}

impl<K: Key + 'static, V: Value + 'static> ReadableTable<K, V> for ReadOnlyTable<K, V> {
    fn get<'a>(&self, key: impl Borrow<K::SelfType<'a>>) -> Result<Option<AccessGuard<'_, V>>> {
        ReadOnlyTable::get(self, key)
    }

    fn range<'a, KR>(&self, range: impl RangeBounds<KR> + 'a) -> Result<Range<'_, K, V>>
    where
        KR: Borrow<K::SelfType<'a>> + 'a,
    {
        self.inner.range(range)
    }

    #[allow(clippy::type_complexity)]
    fn first(&self) -> Result<Option<(AccessGuard<'_, K>, AccessGuard<'_, V>)>> {
        ReadableTable::first(&self.inner)
    }

    #[allow(clippy::type_complexity)]
    fn last(&self) -> Result<Option<(AccessGuard<'_, K>, AccessGuard<'_, V>)>> {
        ReadableTable::last(&self.inner)
    }

    fn lower_bound<'a>(
        &self,
        bound: Bound<impl Borrow<K::SelfType<'a>>>,
    ) -> Result<Cursor<'_, K, V>> {
        self.inner.lower_bound(bound)
    }

    fn upper_bound<'a>(
        &self,
        bound: Bound<impl Borrow<K::SelfType<'a>>>,
    ) -> Result<Cursor<'_, K, V>> {
        self.inner.upper_bound(bound)
    }
}

impl<K: Key + 'static, V: Value + 'static> crate::TableHandle for ReadOnlyTable<K, V> {
    fn name(&self) -> &str {
        redb::TableHandle::name(&self.inner)
    }
}

impl<K: Key + 'static, V: Value + 'static> std::fmt::Debug for ReadOnlyTable<K, V> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.inner.fmt(f)
    }
}

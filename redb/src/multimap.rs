//! Multimap tables: redb's, with `get` of a key the filter rules out answering empty.

use std::borrow::Borrow;
use std::marker::PhantomData;
use std::ops::RangeBounds;
use std::sync::Arc;

use redb::{Key, MultimapTableDefinition, ReadableTableMetadata, StorageError, TableStats};

use crate::filters::{Builder, Keys, Kind, ReadSide};
use crate::transactions::{ReadTransaction, WriteTransaction};
use crate::writing::Writing;

mod values;
pub use values::{MultimapRange, MultimapValue, OwnedMultimapRange, OwnedMultimapValue};

type Result<T = (), E = StorageError> = std::result::Result<T, E>;

/// What redb's `ReadableMultimapTable` is, with [`MultimapValue`] as `get`'s answer.
///
/// ```
/// use bloomsled_redb::{Database, MultimapTableDefinition, ReadableDatabase, ReadableMultimapTable};
/// const M: MultimapTableDefinition<u64, u64> = MultimapTableDefinition::new("m");
/// fn count(t: &impl ReadableMultimapTable<u64, u64>) -> usize {
///     t.iter().unwrap().count()
/// }
/// # let dir = tempfile::tempdir().unwrap();
/// # let db = Database::create(dir.path().join("a.redb"))?;
/// # let w = db.begin_write()?; w.open_multimap_table(M)?; w.commit()?;
/// assert_eq!(count(&db.begin_read()?.open_multimap_table(M)?), 0);
/// # Ok::<(), bloomsled_redb::Error>(())
/// ```
pub trait ReadableMultimapTable<K: Key + 'static, V: Key + 'static>: ReadableTableMetadata {
    /// The values of `key`, in ascending order (empty from the filter alone if it rules
    /// the key out).
    fn get<'a>(&self, key: impl Borrow<K::SelfType<'a>>) -> Result<MultimapValue<'_, V>>;

    /// The keys in `range` with their values.
    fn range<'a, KR>(&self, range: impl RangeBounds<KR> + 'a) -> Result<MultimapRange<'_, K, V>>
    where
        KR: Borrow<K::SelfType<'a>> + 'a;

    /// Every key with its values.
    fn iter(&self) -> Result<MultimapRange<'_, K, V>> {
        self.range::<K::SelfType<'_>>(..)
    }
}

/// A multimap table's keys for its filter's build: its name, its types inside.
pub(crate) struct MultimapKeys<K, V> {
    name: String,
    types: PhantomData<fn() -> (K, V)>,
}

impl<K: Key + 'static, V: Key + 'static> MultimapKeys<K, V> {
    pub(crate) fn shared(name: &str) -> Builder {
        Arc::new(MultimapKeys::<K, V> {
            name: name.to_string(),
            types: PhantomData,
        })
    }
}

impl<K: Key + 'static, V: Key + 'static> Keys for MultimapKeys<K, V> {
    fn len(&self, txn: &redb::ReadTransaction) -> Option<u64> {
        match txn.open_multimap_table(MultimapTableDefinition::<K, V>::new(&self.name)) {
            Ok(t) => t.len().ok(),
            Err(redb::TableError::TableDoesNotExist(_)) => Some(0),
            Err(_) => None,
        }
    }

    fn scan(&self, txn: &redb::ReadTransaction, add: &mut dyn FnMut(&[u8]) -> bool) -> bool {
        use redb::ReadableMultimapTable as _;
        let def = MultimapTableDefinition::<K, V>::new(&self.name);
        let table = match txn.open_multimap_table(def) {
            Ok(t) => t,
            Err(redb::TableError::TableDoesNotExist(_)) => return true,
            Err(_) => return false,
        };
        table
            .iter()
            .is_ok_and(|entries| crate::table::feed_keys(entries, add))
    }
}

/// A multimap table in a write transaction (redb's `MultimapTable`).
///
/// ```
/// use bloomsled_redb::{Database, MultimapTableDefinition};
/// const M: MultimapTableDefinition<&str, u64> = MultimapTableDefinition::new("m");
/// # let dir = tempfile::tempdir().unwrap();
/// # let db = Database::create(dir.path().join("a.redb"))?;
/// let w = db.begin_write()?;
/// assert!(!w.open_multimap_table(M)?.insert("a", 1)?);
/// w.commit()?;
/// # Ok::<(), bloomsled_redb::Error>(())
/// ```
pub struct MultimapTable<'txn, K: Key + 'static, V: Key + 'static> {
    /// Before `inner`: its log reaches the transaction before redb's table is dropped.
    writing: Writing<'txn>,
    inner: redb::MultimapTable<'txn, K, V>,
}

impl<'txn, K: Key + 'static, V: Key + 'static> MultimapTable<'txn, K, V> {
    pub(crate) fn new(inner: redb::MultimapTable<'txn, K, V>, txn: &'txn WriteTransaction) -> Self {
        let name = redb::MultimapTableHandle::name(&inner).to_string();
        let build = MultimapKeys::<K, V>::shared(&name);
        MultimapTable {
            writing: Writing::open(txn, Kind::Multimap, name, build),
            inner,
        }
    }

    /// Adds `value` to `key`'s values; true if it was there. The key enters the filter first.
    ///
    /// ```
    /// # use bloomsled_redb::{Database, MultimapTableDefinition};
    /// # const M: MultimapTableDefinition<u64, u64> = MultimapTableDefinition::new("m");
    /// # let dir = tempfile::tempdir().unwrap();
    /// # let db = Database::create(dir.path().join("a.redb"))?;
    /// let w = db.begin_write()?;
    /// let mut m = w.open_multimap_table(M)?;
    /// assert!(!m.insert(1, 1)?);
    /// assert!(m.insert(1, 1)?);
    /// # Ok::<(), bloomsled_redb::Error>(())
    /// ```
    pub fn insert<'k, 'v>(
        &mut self,
        key: impl Borrow<K::SelfType<'k>>,
        value: impl Borrow<V::SelfType<'v>>,
    ) -> Result<bool> {
        // Counting mode: a key with values already is counted in once; this admit would
        // be one count too many (one redb lookup more per insert, in counting mode only).
        let had = self.writing.counting()
            && self.writing.before_write(|| {
                redb::ReadableMultimapTable::get(&self.inner, key.borrow()).map(|v| !v.is_empty())
            })?;
        let h = self.writing.admit(K::as_bytes(key.borrow()).as_ref());
        let present = self.inner.insert(key, value)?;
        if had {
            self.writing.count_out_hash(h);
        }
        Ok(present)
    }

    /// Removes one value of `key`; true if it was there.
    ///
    /// ```
    /// # use bloomsled_redb::{Database, MultimapTableDefinition};
    /// # const M: MultimapTableDefinition<u64, u64> = MultimapTableDefinition::new("m");
    /// # let dir = tempfile::tempdir().unwrap();
    /// # let db = Database::create(dir.path().join("a.redb"))?;
    /// let w = db.begin_write()?;
    /// let mut m = w.open_multimap_table(M)?;
    /// m.insert(1, 1)?;
    /// assert!(m.remove(1, 1)?);
    /// # Ok::<(), bloomsled_redb::Error>(())
    /// ```
    pub fn remove<'k, 'v>(
        &mut self,
        key: impl Borrow<K::SelfType<'k>>,
        value: impl Borrow<V::SelfType<'v>>,
    ) -> Result<bool> {
        // Counting mode: the key is gone once its last value is. Asked before redb's remove
        // (a key with one value loses it if anything is removed); a panic in it (the key's
        // `compare`) poisons the transaction, as one in redb's remove does (redb's
        // `a_panic_in_insert_or_remove_poisons_the_transaction`, run in counting mode by
        // `.ci/redb-suite --variant`).
        let last = self.writing.counting()
            && self.writing.before_write(|| {
                redb::ReadableMultimapTable::get(&self.inner, key.borrow()).map(|v| v.len() == 1)
            })?;
        let removed = self.inner.remove(key.borrow(), value)?;
        if removed && last {
            self.writing.count_out(K::as_bytes(key.borrow()).as_ref());
        }
        Ok(removed)
    }

    /// Removes every value of `key` and returns them.
    ///
    /// ```
    /// # use bloomsled_redb::{Database, MultimapTableDefinition};
    /// # const M: MultimapTableDefinition<u64, u64> = MultimapTableDefinition::new("m");
    /// # let dir = tempfile::tempdir().unwrap();
    /// # let db = Database::create(dir.path().join("a.redb"))?;
    /// let w = db.begin_write()?;
    /// let mut m = w.open_multimap_table(M)?;
    /// m.insert(1, 1)?;
    /// assert_eq!(m.remove_all(1)?.len(), 1);
    /// # Ok::<(), bloomsled_redb::Error>(())
    /// ```
    pub fn remove_all<'a>(
        &mut self,
        key: impl Borrow<K::SelfType<'a>>,
    ) -> Result<MultimapValue<'_, V>> {
        let h = self.writing.out_hash(K::as_bytes(key.borrow()).as_ref());
        let values = self.inner.remove_all(key)?;
        if !values.is_empty() {
            self.writing.count_out_hash(h);
        }
        Ok(MultimapValue::of(values))
    }
}

impl<K: Key + 'static, V: Key + 'static> ReadableTableMetadata for MultimapTable<'_, K, V> {
    fn stats(&self) -> Result<TableStats> {
        self.inner.stats()
    }

    fn len(&self) -> Result<u64> {
        self.inner.len()
    }
}

impl<K: Key + 'static, V: Key + 'static> ReadableMultimapTable<K, V> for MultimapTable<'_, K, V> {
    fn get<'a>(&self, key: impl Borrow<K::SelfType<'a>>) -> Result<MultimapValue<'_, V>> {
        let found = self.writing.get(K::as_bytes(key.borrow()).as_ref(), || {
            let v = redb::ReadableMultimapTable::get(&self.inner, key.borrow())?;
            Ok::<_, redb::StorageError>((!v.is_empty()).then_some(v))
        })?;
        Ok(found.map_or_else(MultimapValue::empty, MultimapValue::of))
    }

    fn range<'a, KR>(&self, range: impl RangeBounds<KR> + 'a) -> Result<MultimapRange<'_, K, V>>
    where
        KR: Borrow<K::SelfType<'a>> + 'a,
    {
        Ok(MultimapRange::of(redb::ReadableMultimapTable::range(
            &self.inner,
            range,
        )?))
    }
}

impl<K: Key + 'static, V: Key + 'static> crate::MultimapTableHandle for MultimapTable<'_, K, V> {
    fn name(&self) -> &str {
        self.writing.name()
    }
}

impl<K: Key + 'static, V: Key + 'static> std::fmt::Debug for MultimapTable<'_, K, V> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MultimapTable")
            .field("name", &self.writing.name())
            .finish_non_exhaustive()
    }
}

/// A multimap table in a read transaction (redb's `ReadOnlyMultimapTable`).
///
/// ```
/// use bloomsled_redb::{Database, MultimapTableDefinition, ReadableDatabase};
/// const M: MultimapTableDefinition<u64, u64> = MultimapTableDefinition::new("m");
/// # let dir = tempfile::tempdir().unwrap();
/// # let db = Database::create(dir.path().join("a.redb"))?;
/// # let w = db.begin_write()?; w.open_multimap_table(M)?.insert(1, 2)?; w.commit()?;
/// let m = db.begin_read()?.open_multimap_table(M)?;
/// assert_eq!(m.get(1)?.len(), 1);
/// assert!(m.get(3)?.is_empty());
/// # Ok::<(), bloomsled_redb::Error>(())
/// ```
pub struct ReadOnlyMultimapTable<K: Key + 'static, V: Key + 'static> {
    inner: redb::ReadOnlyMultimapTable<K, V>,
    /// The table's counters and the filter it may trust (`None`: filters off).
    filter: Option<ReadSide>,
}

impl<K: Key + 'static, V: Key + 'static> ReadOnlyMultimapTable<K, V> {
    pub(crate) fn new(
        inner: redb::ReadOnlyMultimapTable<K, V>,
        txn: &ReadTransaction,
        def: MultimapTableDefinition<K, V>,
    ) -> Self {
        use redb::MultimapTableHandle;
        let shared = txn.shared();
        let filter = shared.table(Kind::Multimap, def.name()).map(|tf| {
            shared.build_if_needed(&tf, false, || MultimapKeys::<K, V>::shared(def.name()));
            ReadSide::new(shared, tf, txn.seq())
        });
        ReadOnlyMultimapTable { inner, filter }
    }

    /// The values of `key` (empty from the filter alone if it rules the key out).
    ///
    /// ```
    /// # use bloomsled_redb::{Database, MultimapTableDefinition, ReadableDatabase};
    /// # const M: MultimapTableDefinition<u64, u64> = MultimapTableDefinition::new("m");
    /// # let dir = tempfile::tempdir().unwrap();
    /// # let db = Database::create(dir.path().join("a.redb"))?;
    /// # let w = db.begin_write()?; w.open_multimap_table(M)?; w.commit()?;
    /// assert!(db.begin_read()?.open_multimap_table(M)?.get(1)?.is_empty());
    /// # Ok::<(), bloomsled_redb::Error>(())
    /// ```
    pub fn get<'a>(&self, key: impl Borrow<K::SelfType<'a>>) -> Result<MultimapValue<'static, V>> {
        let Some(side) = &self.filter else {
            return Ok(MultimapValue::of(self.inner.get(key)?));
        };
        let found = side.get(K::as_bytes(key.borrow()).as_ref(), || {
            let v = self.inner.get(key.borrow())?;
            Ok::<_, redb::StorageError>((!v.is_empty()).then_some(v))
        })?;
        Ok(found.map_or_else(MultimapValue::empty, MultimapValue::of))
    }

    /// The values of `key`, keeping the transaction alive (empty from the filter alone if
    /// it rules the key out).
    ///
    /// ```
    /// # use bloomsled_redb::{Database, MultimapTableDefinition, ReadableDatabase};
    /// # const M: MultimapTableDefinition<u64, u64> = MultimapTableDefinition::new("m");
    /// # let dir = tempfile::tempdir().unwrap();
    /// # let db = Database::create(dir.path().join("a.redb"))?;
    /// # let w = db.begin_write()?; w.open_multimap_table(M)?; w.commit()?;
    /// assert!(db.begin_read()?.open_multimap_table(M)?.get_owned(1)?.is_empty());
    /// # Ok::<(), bloomsled_redb::Error>(())
    /// ```
    pub fn get_owned<'a>(
        &self,
        key: impl Borrow<K::SelfType<'a>>,
    ) -> Result<OwnedMultimapValue<V>> {
        let Some(side) = &self.filter else {
            return Ok(OwnedMultimapValue::of(self.inner.get_owned(key)?));
        };
        let found = side.get(K::as_bytes(key.borrow()).as_ref(), || {
            let v = self.inner.get_owned(key.borrow())?;
            Ok::<_, redb::StorageError>((!v.is_empty()).then_some(v))
        })?;
        Ok(found.map_or_else(OwnedMultimapValue::empty, OwnedMultimapValue::of))
    }

    /// The keys in `range` with their values.
    ///
    /// ```
    /// # use bloomsled_redb::{Database, MultimapTableDefinition, ReadableDatabase};
    /// # const M: MultimapTableDefinition<u64, u64> = MultimapTableDefinition::new("m");
    /// # let dir = tempfile::tempdir().unwrap();
    /// # let db = Database::create(dir.path().join("a.redb"))?;
    /// # let w = db.begin_write()?; w.open_multimap_table(M)?; w.commit()?;
    /// assert_eq!(db.begin_read()?.open_multimap_table(M)?.range(0..3)?.count(), 0);
    /// # Ok::<(), bloomsled_redb::Error>(())
    /// ```
    pub fn range<'a, KR>(&self, range: impl RangeBounds<KR>) -> Result<MultimapRange<'static, K, V>>
    where
        KR: Borrow<K::SelfType<'a>>,
    {
        Ok(MultimapRange::of(self.inner.range(range)?))
    }

    /// [`ReadOnlyMultimapTable::range`], keeping the transaction alive.
    ///
    /// ```
    /// # use bloomsled_redb::{Database, MultimapTableDefinition, ReadableDatabase};
    /// # const M: MultimapTableDefinition<u64, u64> = MultimapTableDefinition::new("m");
    /// # let dir = tempfile::tempdir().unwrap();
    /// # let db = Database::create(dir.path().join("a.redb"))?;
    /// # let w = db.begin_write()?; w.open_multimap_table(M)?; w.commit()?;
    /// assert_eq!(db.begin_read()?.open_multimap_table(M)?.range_owned(0..3)?.count(), 0);
    /// # Ok::<(), bloomsled_redb::Error>(())
    /// ```
    pub fn range_owned<'a, KR>(
        &self,
        range: impl RangeBounds<KR>,
    ) -> Result<OwnedMultimapRange<K, V>>
    where
        KR: Borrow<K::SelfType<'a>>,
    {
        Ok(OwnedMultimapRange::of(self.inner.range_owned(range)?))
    }
}

impl<K: Key + 'static, V: Key + 'static> ReadableTableMetadata for ReadOnlyMultimapTable<K, V> {
    fn stats(&self) -> Result<TableStats> {
        self.inner.stats()
    }

    fn len(&self) -> Result<u64> {
        self.inner.len()
    }
}

impl<K: Key + 'static, V: Key + 'static> ReadableMultimapTable<K, V>
    for ReadOnlyMultimapTable<K, V>
{
    fn get<'a>(&self, key: impl Borrow<K::SelfType<'a>>) -> Result<MultimapValue<'_, V>> {
        ReadOnlyMultimapTable::get(self, key)
    }

    fn range<'a, KR>(&self, range: impl RangeBounds<KR> + 'a) -> Result<MultimapRange<'_, K, V>>
    where
        KR: Borrow<K::SelfType<'a>> + 'a,
    {
        Ok(MultimapRange::of(self.inner.range(range)?))
    }
}

impl<K: Key + 'static, V: Key + 'static> crate::MultimapTableHandle
    for ReadOnlyMultimapTable<K, V>
{
    fn name(&self) -> &str {
        redb::MultimapTableHandle::name(&self.inner)
    }
}

impl<K: Key + 'static, V: Key + 'static> std::fmt::Debug for ReadOnlyMultimapTable<K, V> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let name = redb::MultimapTableHandle::name(&self.inner);
        f.debug_struct("ReadOnlyMultimapTable")
            .field("name", &name)
            .finish_non_exhaustive()
    }
}

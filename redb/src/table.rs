//! `Table`: redb's, with `get` asking the table's filter first; its cursor and the
//! read-only table in files of their own.

use std::borrow::Borrow;
use std::marker::PhantomData;
use std::ops::{Bound, RangeBounds};
use std::sync::Arc;

use redb::{
    AccessGuard, AccessGuardMut, AccessGuardMutInPlace, Cursor, Key, MutInPlaceValue, Range,
    ReadableTable, ReadableTableMetadata, StorageError, TableDefinition, TableStats, Value,
};

use crate::filters::{Builder, Keys, Kind};
use crate::transactions::WriteTransaction;
use crate::writing::Writing;

mod cursor;
mod entry;
mod extract;
mod read_only;

pub use cursor::CursorMut;
pub use entry::{Entry, OccupiedEntry, VacantEntry};
pub use extract::ExtractIf;
pub use read_only::ReadOnlyTable;

type Result<T = (), E = StorageError> = std::result::Result<T, E>;

/// A table's keys for its filter's build: its name, its types inside.
pub(crate) struct TableKeys<K, V> {
    name: String,
    types: PhantomData<fn() -> (K, V)>,
}

impl<K: Key + 'static, V: Value + 'static> TableKeys<K, V> {
    pub(crate) fn shared(name: &str) -> Builder {
        Arc::new(TableKeys::<K, V> {
            name: name.to_string(),
            types: PhantomData,
        })
    }
}

impl<K: Key + 'static, V: Value + 'static> Keys for TableKeys<K, V> {
    fn len(&self, txn: &redb::ReadTransaction) -> Option<u64> {
        match txn.open_table(TableDefinition::<K, V>::new(&self.name)) {
            Ok(t) => t.len().ok(),
            Err(redb::TableError::TableDoesNotExist(_)) => Some(0),
            Err(_) => None,
        }
    }

    fn scan(&self, txn: &redb::ReadTransaction, add: &mut dyn FnMut(&[u8]) -> bool) -> bool {
        let table = match txn.open_table(TableDefinition::<K, V>::new(&self.name)) {
            Ok(t) => t,
            Err(redb::TableError::TableDoesNotExist(_)) => return true,
            Err(_) => return false,
        };
        table.iter().is_ok_and(|entries| feed_keys(entries, add))
    }
}

/// Feeds each entry's key bytes to `add` while it returns true: true if every key was fed
/// (a table's or a multimap table's entries, whatever they pair the key with).
pub(crate) fn feed_keys<'a, K: Key + 'static, X>(
    entries: impl Iterator<Item = Result<(AccessGuard<'a, K>, X)>>,
    add: &mut dyn FnMut(&[u8]) -> bool,
) -> bool {
    for entry in entries {
        let Ok((k, _)) = entry else {
            return false;
        };
        if !add(K::as_bytes(&k.value()).as_ref()) {
            return false;
        }
    }
    true
}

/// A table in a write transaction (redb's `Table`, same methods).
///
/// Writes put their key in the filter before redb; `get` and `get_mut` of a key the filter
/// rules out answer `None` without touching redb.
///
/// ```
/// use bloomsled_redb::{Database, ReadableTable, TableDefinition};
/// const T: TableDefinition<&str, u64> = TableDefinition::new("t");
/// # let dir = tempfile::tempdir().unwrap();
/// # let db = Database::create(dir.path().join("a.redb"))?;
/// let w = db.begin_write()?;
/// let mut t = w.open_table(T)?;
/// t.insert("a", 1)?;
/// assert_eq!(t.get("a")?.unwrap().value(), 1);
/// assert!(t.get("b")?.is_none());
/// # Ok::<(), bloomsled_redb::Error>(())
/// ```
pub struct Table<'txn, K: Key + 'static, V: Value + 'static> {
    /// Before `inner`: its log reaches the transaction before redb's table is dropped.
    writing: Writing<'txn>,
    inner: redb::Table<'txn, K, V>,
}

impl<'txn, K: Key + 'static, V: Value + 'static> Table<'txn, K, V> {
    pub(crate) fn new(inner: redb::Table<'txn, K, V>, txn: &'txn WriteTransaction) -> Self {
        let name = redb::TableHandle::name(&inner).to_string();
        let build = TableKeys::<K, V>::shared(&name);
        Table {
            writing: Writing::open(txn, Kind::Table, name, build),
            inner,
        }
    }

    /// The value of `key` for in-place change; `None` if absent (the filter may say so).
    ///
    /// ```
    /// use bloomsled_redb::{Database, TableDefinition};
    /// const T: TableDefinition<u64, u64> = TableDefinition::new("t");
    /// # let dir = tempfile::tempdir().unwrap();
    /// # let db = Database::create(dir.path().join("a.redb"))?;
    /// let w = db.begin_write()?;
    /// let mut t = w.open_table(T)?;
    /// t.insert(1, 1)?;
    /// t.get_mut(1)?.unwrap().insert(2)?;
    /// assert!(t.get_mut(9)?.is_none());
    /// # Ok::<(), bloomsled_redb::Error>(())
    /// ```
    pub fn get_mut<'k>(
        &mut self,
        key: impl Borrow<K::SelfType<'k>>,
    ) -> Result<Option<AccessGuardMut<'_, V>>> {
        let inner = &mut self.inner;
        self.writing.get(K::as_bytes(key.borrow()).as_ref(), || {
            inner.get_mut(key.borrow())
        })
    }

    /// Removes and returns the first pair (its key stays in the filter: a false positive,
    /// unless counting mode counts it out when the transaction commits).
    ///
    /// ```
    /// use bloomsled_redb::{Database, TableDefinition};
    /// const T: TableDefinition<u64, u64> = TableDefinition::new("t");
    /// # let dir = tempfile::tempdir().unwrap();
    /// # let db = Database::create(dir.path().join("a.redb"))?;
    /// let w = db.begin_write()?;
    /// let mut t = w.open_table(T)?;
    /// t.insert(1, 1)?;
    /// assert_eq!(t.pop_first()?.unwrap().0.value(), 1);
    /// # Ok::<(), bloomsled_redb::Error>(())
    /// ```
    #[allow(clippy::type_complexity)]
    pub fn pop_first(&mut self) -> Result<Option<(AccessGuard<'_, K>, AccessGuard<'_, V>)>> {
        let pair = self.inner.pop_first()?;
        if let Some((k, _)) = &pair {
            self.writing.count_out(K::as_bytes(&k.value()).as_ref());
        }
        Ok(pair)
    }

    /// Removes and returns the last pair.
    ///
    /// ```
    /// use bloomsled_redb::{Database, TableDefinition};
    /// const T: TableDefinition<u64, u64> = TableDefinition::new("t");
    /// # let dir = tempfile::tempdir().unwrap();
    /// # let db = Database::create(dir.path().join("a.redb"))?;
    /// let w = db.begin_write()?;
    /// let mut t = w.open_table(T)?;
    /// t.insert(1, 1)?;
    /// assert_eq!(t.pop_last()?.unwrap().0.value(), 1);
    /// # Ok::<(), bloomsled_redb::Error>(())
    /// ```
    #[allow(clippy::type_complexity)]
    pub fn pop_last(&mut self) -> Result<Option<(AccessGuard<'_, K>, AccessGuard<'_, V>)>> {
        let pair = self.inner.pop_last()?;
        if let Some((k, _)) = &pair {
            self.writing.count_out(K::as_bytes(&k.value()).as_ref());
        }
        Ok(pair)
    }

    /// Removes the pairs `predicate` selects, as they are iterated: a pair is removed when
    /// the iterator yields it (counting mode counts its key out at the commit); pairs not
    /// read stay.
    ///
    /// ```
    /// use bloomsled_redb::{Database, TableDefinition};
    /// const T: TableDefinition<u64, u64> = TableDefinition::new("t");
    /// # let dir = tempfile::tempdir().unwrap();
    /// # let db = Database::create(dir.path().join("a.redb"))?;
    /// let w = db.begin_write()?;
    /// let mut t = w.open_table(T)?;
    /// t.insert(1, 1)?;
    /// assert_eq!(t.extract_if(|k, _| k == 1)?.count(), 1);
    /// # Ok::<(), bloomsled_redb::Error>(())
    /// ```
    pub fn extract_if<F: for<'f> FnMut(K::SelfType<'f>, V::SelfType<'f>) -> bool>(
        &mut self,
        predicate: F,
    ) -> Result<ExtractIf<'_, K, V, F>> {
        Ok(ExtractIf {
            inner: self.inner.extract_if(predicate)?,
            outs: self.writing.count_outs(),
        })
    }

    /// [`Table::extract_if`] within a range of keys.
    ///
    /// ```
    /// use bloomsled_redb::{Database, TableDefinition};
    /// const T: TableDefinition<u64, u64> = TableDefinition::new("t");
    /// # let dir = tempfile::tempdir().unwrap();
    /// # let db = Database::create(dir.path().join("a.redb"))?;
    /// let w = db.begin_write()?;
    /// let mut t = w.open_table(T)?;
    /// t.insert(1, 1)?;
    /// assert_eq!(t.extract_from_if(0..5, |_, _| true)?.count(), 1);
    /// # Ok::<(), bloomsled_redb::Error>(())
    /// ```
    pub fn extract_from_if<'a, KR, F: for<'f> FnMut(K::SelfType<'f>, V::SelfType<'f>) -> bool>(
        &mut self,
        range: impl RangeBounds<KR> + 'a,
        predicate: F,
    ) -> Result<ExtractIf<'_, K, V, F>>
    where
        KR: Borrow<K::SelfType<'a>> + 'a,
    {
        Ok(ExtractIf {
            inner: self.inner.extract_from_if(range, predicate)?,
            outs: self.writing.count_outs(),
        })
    }

    /// Keeps only the pairs `predicate` accepts.
    ///
    /// ```
    /// use bloomsled_redb::{Database, ReadableTableMetadata, TableDefinition};
    /// const T: TableDefinition<u64, u64> = TableDefinition::new("t");
    /// # let dir = tempfile::tempdir().unwrap();
    /// # let db = Database::create(dir.path().join("a.redb"))?;
    /// let w = db.begin_write()?;
    /// let mut t = w.open_table(T)?;
    /// t.insert(1, 1)?;
    /// t.retain(|k, _| k != 1)?;
    /// assert!(t.is_empty()?);
    /// # Ok::<(), bloomsled_redb::Error>(())
    /// ```
    pub fn retain<F: for<'f> FnMut(K::SelfType<'f>, V::SelfType<'f>) -> bool>(
        &mut self,
        predicate: F,
    ) -> Result {
        if !self.writing.counting() {
            return self.inner.retain(predicate);
        }
        // Counting mode: over every key, the same count-outs as a range's.
        self.retain_in::<K::SelfType<'_>, F>(.., predicate)
    }

    /// [`Table::retain`] within a range of keys.
    ///
    /// ```
    /// use bloomsled_redb::{Database, TableDefinition};
    /// const T: TableDefinition<u64, u64> = TableDefinition::new("t");
    /// # let dir = tempfile::tempdir().unwrap();
    /// # let db = Database::create(dir.path().join("a.redb"))?;
    /// let w = db.begin_write()?;
    /// w.open_table(T)?.retain_in(0..5, |_, _| false)?;
    /// # Ok::<(), bloomsled_redb::Error>(())
    /// ```
    pub fn retain_in<'a, KR, F: for<'f> FnMut(K::SelfType<'f>, V::SelfType<'f>) -> bool>(
        &mut self,
        range: impl RangeBounds<KR> + 'a,
        predicate: F,
    ) -> Result
    where
        KR: Borrow<K::SelfType<'a>> + 'a,
    {
        if !self.writing.counting() {
            return self.inner.retain_in(range, predicate);
        }
        let mut predicate = predicate;
        let mut outs = Vec::new();
        let writing = &self.writing;
        self.inner.retain_in(range, |k, v| {
            let h = writing.out_hash(K::as_bytes(&k).as_ref());
            let keep = predicate(k, v);
            if !keep {
                outs.push(h);
            }
            keep
        })?;
        // Only once redb removed them all: a failed retain counts nothing out.
        outs.into_iter()
            .for_each(|h| self.writing.count_out_hash(h));
        Ok(())
    }

    /// Inserts a pair; returns the old value. The key is in the filter before redb stores it.
    ///
    /// ```
    /// use bloomsled_redb::{Database, TableDefinition};
    /// const T: TableDefinition<u64, u64> = TableDefinition::new("t");
    /// # let dir = tempfile::tempdir().unwrap();
    /// # let db = Database::create(dir.path().join("a.redb"))?;
    /// let w = db.begin_write()?;
    /// let mut t = w.open_table(T)?;
    /// assert!(t.insert(1, 1)?.is_none());
    /// assert_eq!(t.insert(1, 2)?.unwrap().value(), 1);
    /// # Ok::<(), bloomsled_redb::Error>(())
    /// ```
    pub fn insert<'k, 'v>(
        &mut self,
        key: impl Borrow<K::SelfType<'k>>,
        value: impl Borrow<V::SelfType<'v>>,
    ) -> Result<Option<AccessGuard<'_, V>>> {
        let h = self.writing.admit(K::as_bytes(key.borrow()).as_ref());
        let old = self.inner.insert(key, value)?;
        if old.is_some() {
            // The key was there and counted: this admit is one count too many.
            self.writing.count_out_hash(h);
        }
        Ok(old)
    }

    /// Removes a key; returns its value. The key stays in the filter (a false positive),
    /// unless counting mode counts it out when the transaction commits.
    ///
    /// ```
    /// use bloomsled_redb::{Database, TableDefinition};
    /// const T: TableDefinition<u64, u64> = TableDefinition::new("t");
    /// # let dir = tempfile::tempdir().unwrap();
    /// # let db = Database::create(dir.path().join("a.redb"))?;
    /// let w = db.begin_write()?;
    /// let mut t = w.open_table(T)?;
    /// t.insert(1, 1)?;
    /// assert_eq!(t.remove(1)?.unwrap().value(), 1);
    /// # Ok::<(), bloomsled_redb::Error>(())
    /// ```
    pub fn remove<'a>(
        &mut self,
        key: impl Borrow<K::SelfType<'a>>,
    ) -> Result<Option<AccessGuard<'_, V>>> {
        let h = self.writing.out_hash(K::as_bytes(key.borrow()).as_ref());
        let old = self.inner.remove(key)?;
        if old.is_some() {
            self.writing.count_out_hash(h);
        }
        Ok(old)
    }

    /// A mutable cursor at the gap before the first key not below `bound`.
    ///
    /// ```
    /// use std::ops::Bound;
    /// use bloomsled_redb::{Database, TableDefinition};
    /// const T: TableDefinition<u64, u64> = TableDefinition::new("t");
    /// # let dir = tempfile::tempdir().unwrap();
    /// # let db = Database::create(dir.path().join("a.redb"))?;
    /// let w = db.begin_write()?;
    /// let mut t = w.open_table(T)?;
    /// let mut c = t.lower_bound_mut(Bound::<u64>::Unbounded)?;
    /// c.insert_before(1, 1)?;
    /// c.close()?;
    /// # Ok::<(), bloomsled_redb::Error>(())
    /// ```
    pub fn lower_bound_mut<'a>(
        &mut self,
        bound: Bound<impl Borrow<K::SelfType<'a>>>,
    ) -> Result<CursorMut<'_, K, V>> {
        let (filter, log, pending, outs) = self.writing.for_cursor();
        Ok(CursorMut {
            inner: self.inner.lower_bound_mut(bound)?,
            filter,
            log,
            pending,
            outs,
        })
    }

    /// A mutable cursor at the gap after the last key not above `bound`.
    ///
    /// ```
    /// use std::ops::Bound;
    /// use bloomsled_redb::{Database, ReadableTable, TableDefinition};
    /// const T: TableDefinition<u64, u64> = TableDefinition::new("t");
    /// # let dir = tempfile::tempdir().unwrap();
    /// # let db = Database::create(dir.path().join("a.redb"))?;
    /// let w = db.begin_write()?;
    /// let mut t = w.open_table(T)?;
    /// let mut c = t.upper_bound_mut(Bound::<u64>::Unbounded)?;
    /// c.insert_before(7, 1)?;
    /// c.close()?;
    /// assert!(t.get(7)?.is_some());
    /// # Ok::<(), bloomsled_redb::Error>(())
    /// ```
    pub fn upper_bound_mut<'a>(
        &mut self,
        bound: Bound<impl Borrow<K::SelfType<'a>>>,
    ) -> Result<CursorMut<'_, K, V>> {
        let (filter, log, pending, outs) = self.writing.for_cursor();
        Ok(CursorMut {
            inner: self.inner.upper_bound_mut(bound)?,
            filter,
            log,
            pending,
            outs,
        })
    }

    /// The entry of `key` for in-place manipulation. The key is put in the filter first
    /// (if the entry stays vacant, a false positive, except in counting mode, which counts
    /// it out again; as it counts out an occupied entry's removal).
    ///
    /// ```
    /// use bloomsled_redb::{Database, ReadableTable, TableDefinition};
    /// const T: TableDefinition<u64, u64> = TableDefinition::new("t");
    /// # let dir = tempfile::tempdir().unwrap();
    /// # let db = Database::create(dir.path().join("a.redb"))?;
    /// let w = db.begin_write()?;
    /// let mut t = w.open_table(T)?;
    /// t.entry(1)?.or_insert(5)?;
    /// assert_eq!(t.get(1)?.unwrap().value(), 5);
    /// # Ok::<(), bloomsled_redb::Error>(())
    /// ```
    pub fn entry<'a>(&'a mut self, key: K::SelfType<'a>) -> Result<Entry<'a, K, V>> {
        let h = self.writing.admit(K::as_bytes(&key).as_ref());
        let removal = self.writing.out_hash(K::as_bytes(&key).as_ref());
        let entry = self.inner.entry(key)?;
        let mut outs = self.writing.count_outs();
        Ok(match entry {
            redb::Entry::Occupied(inner) => {
                // Counting mode: the key was there and counted; this admit is one too many.
                outs.push(h);
                Entry::Occupied(OccupiedEntry {
                    inner,
                    out: removal,
                    outs,
                })
            }
            redb::Entry::Vacant(inner) => Entry::Vacant(VacantEntry {
                inner: Some(inner),
                out: h,
                outs,
            }),
        })
    }
}

impl<K: Key + 'static, V: MutInPlaceValue + 'static> Table<'_, K, V> {
    /// Reserves `value_length` bytes for the value of `key` (the key enters the filter first;
    /// over an existing key, counting mode counts that extra count out at the commit, for
    /// which it asks redb first whether the key is there).
    ///
    /// ```
    /// use bloomsled_redb::{Database, TableDefinition};
    /// const T: TableDefinition<u64, &[u8]> = TableDefinition::new("t");
    /// # let dir = tempfile::tempdir().unwrap();
    /// # let db = Database::create(dir.path().join("a.redb"))?;
    /// let w = db.begin_write()?;
    /// let mut t = w.open_table(T)?;
    /// t.insert_reserve(1, 3)?.as_mut().copy_from_slice(b"abc");
    /// # Ok::<(), bloomsled_redb::Error>(())
    /// ```
    pub fn insert_reserve<'a>(
        &mut self,
        key: impl Borrow<K::SelfType<'a>>,
        value_length: usize,
    ) -> Result<AccessGuardMutInPlace<'_, V>> {
        // Not poisoning on a panic, as redb's `insert_reserve` does not either.
        let existed = self.writing.counting() && self.inner.get(key.borrow())?.is_some();
        let h = self.writing.admit(K::as_bytes(key.borrow()).as_ref());
        let reserved = self.inner.insert_reserve(key, value_length)?;
        if existed {
            // The key was there and counted: this admit is one count too many.
            self.writing.count_out_hash(h);
        }
        Ok(reserved)
    }
}

impl<K: Key + 'static, V: Value + 'static> ReadableTableMetadata for Table<'_, K, V> {
    fn stats(&self) -> Result<TableStats> {
        self.inner.stats()
    }

    fn len(&self) -> Result<u64> {
        self.inner.len()
    }
}

impl<K: Key + 'static, V: Value + 'static> ReadableTable<K, V> for Table<'_, K, V> {
    fn get<'a>(&self, key: impl Borrow<K::SelfType<'a>>) -> Result<Option<AccessGuard<'_, V>>> {
        self.writing.get(K::as_bytes(key.borrow()).as_ref(), || {
            self.inner.get(key.borrow())
        })
    }

    fn range<'a, KR>(&self, range: impl RangeBounds<KR> + 'a) -> Result<Range<'_, K, V>>
    where
        KR: Borrow<K::SelfType<'a>> + 'a,
    {
        self.inner.range(range)
    }

    #[allow(clippy::type_complexity)]
    fn first(&self) -> Result<Option<(AccessGuard<'_, K>, AccessGuard<'_, V>)>> {
        self.inner.first()
    }

    #[allow(clippy::type_complexity)]
    fn last(&self) -> Result<Option<(AccessGuard<'_, K>, AccessGuard<'_, V>)>> {
        self.inner.last()
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

impl<K: Key + 'static, V: Value + 'static> crate::TableHandle for Table<'_, K, V> {
    fn name(&self) -> &str {
        self.writing.name()
    }
}

impl<K: Key + 'static, V: Value + 'static> std::fmt::Debug for Table<'_, K, V> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.inner.fmt(f)
    }
}

//! `Entry`: redb's, whose removals (and a vacant entry left vacant) are counted out in
//! counting mode.

use std::borrow::Borrow;

use redb::{AccessGuard, AccessGuardMut, Key, Value};

use super::Result;
use crate::filters::Out;
use crate::writing::CountOuts;

/// A table's entry for a key (redb's `Entry`, same variants and methods), from
/// [`Table::entry`](crate::Table::entry).
///
/// ```
/// use bloomsled_redb::{Database, Entry, ReadableTable, TableDefinition};
/// const T: TableDefinition<u64, u64> = TableDefinition::new("t");
/// # let dir = tempfile::tempdir().unwrap();
/// # let db = Database::create(dir.path().join("a.redb"))?;
/// let w = db.begin_write()?;
/// let mut t = w.open_table(T)?;
/// t.insert(1, 1)?;
/// if let Entry::Occupied(e) = t.entry(1)? {
///     assert_eq!(e.remove()?.value(), 1);
/// }
/// assert!(t.get(1)?.is_none());
/// # Ok::<(), bloomsled_redb::Error>(())
/// ```
pub enum Entry<'a, K: Key + 'static, V: Value + 'static> {
    /// The key is in the table.
    Occupied(OccupiedEntry<'a, K, V>),
    /// The key is not in the table.
    Vacant(VacantEntry<'a, K, V>),
}

impl<'a, K: Key + 'static, V: Value + 'static> Entry<'a, K, V> {
    /// The entry's key.
    ///
    /// ```
    /// # use bloomsled_redb::{Database, TableDefinition};
    /// # const T: TableDefinition<u64, u64> = TableDefinition::new("t");
    /// # let dir = tempfile::tempdir().unwrap();
    /// # let db = Database::create(dir.path().join("a.redb"))?;
    /// # let w = db.begin_write()?;
    /// # let mut t = w.open_table(T)?;
    /// assert_eq!(*t.entry(3)?.key(), 3);
    /// # Ok::<(), bloomsled_redb::Error>(())
    /// ```
    pub fn key(&self) -> &K::SelfType<'a> {
        match self {
            Entry::Occupied(e) => e.key(),
            Entry::Vacant(e) => e.key(),
        }
    }

    /// The value, `default` inserted first if the entry is vacant.
    ///
    /// ```
    /// # use bloomsled_redb::{Database, TableDefinition};
    /// # const T: TableDefinition<u64, u64> = TableDefinition::new("t");
    /// # let dir = tempfile::tempdir().unwrap();
    /// # let db = Database::create(dir.path().join("a.redb"))?;
    /// # let w = db.begin_write()?;
    /// # let mut t = w.open_table(T)?;
    /// assert_eq!(t.entry(3)?.or_insert(4)?.value(), 4);
    /// # Ok::<(), bloomsled_redb::Error>(())
    /// ```
    pub fn or_insert<'v>(
        self,
        default: impl Borrow<V::SelfType<'v>>,
    ) -> Result<AccessGuardMut<'a, V>> {
        match self {
            Entry::Occupied(e) => e.into_mut(),
            Entry::Vacant(e) => e.insert(default),
        }
    }

    /// The value, `default()` inserted first if the entry is vacant.
    ///
    /// ```
    /// # use bloomsled_redb::{Database, TableDefinition};
    /// # const T: TableDefinition<u64, u64> = TableDefinition::new("t");
    /// # let dir = tempfile::tempdir().unwrap();
    /// # let db = Database::create(dir.path().join("a.redb"))?;
    /// # let w = db.begin_write()?;
    /// # let mut t = w.open_table(T)?;
    /// assert_eq!(t.entry(3)?.or_insert_with(|| 4)?.value(), 4);
    /// # Ok::<(), bloomsled_redb::Error>(())
    /// ```
    pub fn or_insert_with<'v, F, B>(self, default: F) -> Result<AccessGuardMut<'a, V>>
    where
        F: FnOnce() -> B,
        B: Borrow<V::SelfType<'v>>,
    {
        match self {
            Entry::Occupied(e) => e.into_mut(),
            Entry::Vacant(e) => e.insert(default()),
        }
    }

    /// The value, `default(key)` inserted first if the entry is vacant.
    ///
    /// ```
    /// # use bloomsled_redb::{Database, TableDefinition};
    /// # const T: TableDefinition<u64, u64> = TableDefinition::new("t");
    /// # let dir = tempfile::tempdir().unwrap();
    /// # let db = Database::create(dir.path().join("a.redb"))?;
    /// # let w = db.begin_write()?;
    /// # let mut t = w.open_table(T)?;
    /// assert_eq!(t.entry(3)?.or_insert_with_key(|k| k + 1)?.value(), 4);
    /// # Ok::<(), bloomsled_redb::Error>(())
    /// ```
    pub fn or_insert_with_key<'v, F, B>(self, default: F) -> Result<AccessGuardMut<'a, V>>
    where
        F: FnOnce(&K::SelfType<'a>) -> B,
        B: Borrow<V::SelfType<'v>>,
    {
        match self {
            Entry::Occupied(e) => e.into_mut(),
            Entry::Vacant(e) => {
                let value = default(e.key());
                e.insert(value)
            }
        }
    }

    /// Runs `f` on the value of an occupied entry; a vacant one is returned as it is.
    ///
    /// ```
    /// # use bloomsled_redb::{Database, TableDefinition};
    /// # const T: TableDefinition<u64, u64> = TableDefinition::new("t");
    /// # let dir = tempfile::tempdir().unwrap();
    /// # let db = Database::create(dir.path().join("a.redb"))?;
    /// # let w = db.begin_write()?;
    /// # let mut t = w.open_table(T)?;
    /// t.insert(3, 1)?;
    /// let v = t.entry(3)?.and_modify(|g| g.insert(2).map(drop))?.or_insert(0)?;
    /// assert_eq!(v.value(), 2);
    /// # Ok::<(), bloomsled_redb::Error>(())
    /// ```
    pub fn and_modify<F>(self, f: F) -> Result<Self>
    where
        F: FnOnce(&mut AccessGuardMut<'_, V>) -> Result<()>,
    {
        match self {
            Entry::Occupied(mut e) => {
                f(&mut e.get_mut()?)?;
                Ok(Entry::Occupied(e))
            }
            vacant => Ok(vacant),
        }
    }
}

/// An entry whose key is in the table (redb's `OccupiedEntry`): its removal counts the key
/// out at the commit, in counting mode.
pub struct OccupiedEntry<'a, K: Key + 'static, V: Value + 'static> {
    pub(super) inner: redb::OccupiedEntry<'a, K, V>,
    /// The removal's count-out (`None` in plain mode).
    pub(super) out: Option<Out>,
    pub(super) outs: CountOuts<'a>,
}

impl<'a, K: Key + 'static, V: Value + 'static> OccupiedEntry<'a, K, V> {
    /// The entry's key.
    pub fn key(&self) -> &K::SelfType<'a> {
        self.inner.key()
    }

    /// The entry's value.
    pub fn get(&self) -> Result<AccessGuard<'_, V>> {
        self.inner.get()
    }

    /// The entry's value, to change in place.
    pub fn get_mut(&mut self) -> Result<AccessGuardMut<'_, V>> {
        self.inner.get_mut()
    }

    /// The entry's value, to change in place, borrowed as long as the table.
    pub fn into_mut(self) -> Result<AccessGuardMut<'a, V>> {
        self.inner.into_mut()
    }

    /// Replaces the value; returns the old one (the key stays, counted once).
    pub fn insert<'v>(
        &mut self,
        value: impl Borrow<V::SelfType<'v>>,
    ) -> Result<AccessGuard<'_, V>> {
        self.inner.insert(value)
    }

    /// Removes the entry; returns its value. Counting mode counts the key out at the commit.
    ///
    /// ```
    /// # use bloomsled_redb::{Database, Entry, TableDefinition};
    /// # const T: TableDefinition<u64, u64> = TableDefinition::new("t");
    /// # let dir = tempfile::tempdir().unwrap();
    /// # let db = Database::create(dir.path().join("a.redb"))?;
    /// # let w = db.begin_write()?;
    /// # let mut t = w.open_table(T)?;
    /// t.insert(3, 1)?;
    /// let Entry::Occupied(e) = t.entry(3)? else { unreachable!() };
    /// assert_eq!(e.remove()?.value(), 1);
    /// # Ok::<(), bloomsled_redb::Error>(())
    /// ```
    pub fn remove(self) -> Result<AccessGuard<'a, V>> {
        let OccupiedEntry {
            inner,
            out,
            mut outs,
        } = self;
        let v = inner.remove()?;
        outs.push(out);
        Ok(v)
    }

    /// Removes the entry; returns its key and value (counted out as by
    /// [`OccupiedEntry::remove`]).
    #[allow(clippy::type_complexity)]
    pub fn remove_entry(self) -> Result<(K::SelfType<'a>, AccessGuard<'a, V>)> {
        let OccupiedEntry {
            inner,
            out,
            mut outs,
        } = self;
        let pair = inner.remove_entry()?;
        outs.push(out);
        Ok(pair)
    }
}

/// An entry whose key is not in the table (redb's `VacantEntry`). [`Table::entry`]
/// counted the key in; if the entry is given up (dropped, or [`VacantEntry::into_key`])
/// without an insert, counting mode counts it out again at the commit.
///
/// [`Table::entry`]: crate::Table::entry
pub struct VacantEntry<'a, K: Key + 'static, V: Value + 'static> {
    /// `None` once consumed.
    pub(super) inner: Option<redb::VacantEntry<'a, K, V>>,
    /// The count-in of `Table::entry`, counted out unless an insert stored the key.
    pub(super) out: Option<Out>,
    pub(super) outs: CountOuts<'a>,
}

impl<'a, K: Key + 'static, V: Value + 'static> VacantEntry<'a, K, V> {
    fn inner(&self) -> &redb::VacantEntry<'a, K, V> {
        self.inner
            .as_ref()
            .expect("a vacant entry is consumed only by value")
    }

    /// The entry's key.
    pub fn key(&self) -> &K::SelfType<'a> {
        self.inner().key()
    }

    /// The entry's key, the entry given up (nothing inserted).
    pub fn into_key(mut self) -> K::SelfType<'a> {
        let inner = self
            .inner
            .take()
            .expect("a vacant entry is consumed only by value");
        inner.into_key()
    }

    /// Inserts `value` under the entry's key; returns the value to change in place.
    pub fn insert<'v>(
        mut self,
        value: impl Borrow<V::SelfType<'v>>,
    ) -> Result<AccessGuardMut<'a, V>> {
        let inner = self
            .inner
            .take()
            .expect("a vacant entry is consumed only by value");
        // From here the key may be stored (redb's insert may fail after storing it, in
        // its lookup of the new value): its count-in stays, a count too high at worst.
        self.out = None;
        inner.insert(value)
    }
}

impl<K: Key + 'static, V: Value + 'static> Drop for VacantEntry<'_, K, V> {
    fn drop(&mut self) {
        // Given up before any insert was tried: nothing was stored, the count-in of
        // `Table::entry` was one too many.
        self.outs.push(self.out.take());
    }
}

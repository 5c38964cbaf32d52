//! The values of a multimap key, and the ranges that yield them: redb's types, or none when
//! the filter ruled the key out. A range yields this crate's value types, so that values
//! from `get` and from a range are one type, as in redb.

use redb::{AccessGuard, Key, OwnedAccessGuard, StorageError};

type Result<T = (), E = StorageError> = std::result::Result<T, E>;

/// The values of one key (redb's `MultimapValue`), or none when the filter ruled it out.
///
/// ```
/// use bloomsled_redb::{Database, MultimapTableDefinition, ReadableMultimapTable};
/// const M: MultimapTableDefinition<u64, u64> = MultimapTableDefinition::new("m");
/// # let dir = tempfile::tempdir().unwrap();
/// # let db = Database::create(dir.path().join("a.redb"))?;
/// let w = db.begin_write()?;
/// let mut m = w.open_multimap_table(M)?;
/// m.insert(1, 10)?;
/// m.insert(1, 11)?;
/// let v = m.get(1)?;
/// assert_eq!(v.len(), 2);
/// assert_eq!(v.map(|g| g.unwrap().value()).collect::<Vec<_>>(), [10, 11]);
/// assert!(m.get(2)?.is_empty());
/// # Ok::<(), bloomsled_redb::Error>(())
/// ```
pub struct MultimapValue<'a, V: Key + 'static> {
    inner: Option<redb::MultimapValue<'a, V>>,
}

impl<'a, V: Key + 'static> MultimapValue<'a, V> {
    pub(super) fn empty() -> Self {
        MultimapValue { inner: None }
    }

    pub(super) fn of(inner: redb::MultimapValue<'a, V>) -> Self {
        MultimapValue { inner: Some(inner) }
    }

    /// How many values remain.
    ///
    /// ```
    /// # use bloomsled_redb::{Database, MultimapTableDefinition, ReadableMultimapTable};
    /// # const M: MultimapTableDefinition<u64, u64> = MultimapTableDefinition::new("m");
    /// # let dir = tempfile::tempdir().unwrap();
    /// # let db = Database::create(dir.path().join("a.redb"))?;
    /// # let w = db.begin_write()?;
    /// # let m = w.open_multimap_table(M)?;
    /// assert_eq!(m.get(1)?.len(), 0);
    /// # Ok::<(), bloomsled_redb::Error>(())
    /// ```
    pub fn len(&self) -> u64 {
        self.inner.as_ref().map_or(0, |v| v.len())
    }

    /// True if no value remains.
    ///
    /// ```
    /// # use bloomsled_redb::{Database, MultimapTableDefinition, ReadableMultimapTable};
    /// # const M: MultimapTableDefinition<u64, u64> = MultimapTableDefinition::new("m");
    /// # let dir = tempfile::tempdir().unwrap();
    /// # let db = Database::create(dir.path().join("a.redb"))?;
    /// # let w = db.begin_write()?;
    /// # let m = w.open_multimap_table(M)?;
    /// assert!(m.get(1)?.is_empty());
    /// # Ok::<(), bloomsled_redb::Error>(())
    /// ```
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

impl<'a, V: Key + 'static> Iterator for MultimapValue<'a, V> {
    type Item = Result<AccessGuard<'a, V>>;

    fn next(&mut self) -> Option<Self::Item> {
        self.inner.as_mut()?.next()
    }
}

impl<V: Key + 'static> DoubleEndedIterator for MultimapValue<'_, V> {
    fn next_back(&mut self) -> Option<Self::Item> {
        self.inner.as_mut()?.next_back()
    }
}

/// The values of one key, keeping the transaction alive (redb's `OwnedMultimapValue`), or
/// none when the filter ruled the key out.
///
/// ```
/// use bloomsled_redb::{Database, MultimapTableDefinition, ReadableDatabase};
/// const M: MultimapTableDefinition<u64, u64> = MultimapTableDefinition::new("m");
/// # let dir = tempfile::tempdir().unwrap();
/// # let db = Database::create(dir.path().join("a.redb"))?;
/// # let w = db.begin_write()?; w.open_multimap_table(M)?.insert(1, 10)?; w.commit()?;
/// let v = db.begin_read()?.open_multimap_table(M)?.get_owned(1)?;
/// assert_eq!(v.len(), 1);
/// assert_eq!(v.map(|g| g.unwrap().value()).collect::<Vec<_>>(), [10]);
/// # Ok::<(), bloomsled_redb::Error>(())
/// ```
pub struct OwnedMultimapValue<V: Key + 'static> {
    inner: Option<redb::OwnedMultimapValue<V>>,
}

impl<V: Key + 'static> OwnedMultimapValue<V> {
    pub(super) fn empty() -> Self {
        OwnedMultimapValue { inner: None }
    }

    pub(super) fn of(inner: redb::OwnedMultimapValue<V>) -> Self {
        OwnedMultimapValue { inner: Some(inner) }
    }

    /// How many values remain.
    ///
    /// ```
    /// # use bloomsled_redb::{Database, MultimapTableDefinition, ReadableDatabase};
    /// # const M: MultimapTableDefinition<u64, u64> = MultimapTableDefinition::new("m");
    /// # let dir = tempfile::tempdir().unwrap();
    /// # let db = Database::create(dir.path().join("a.redb"))?;
    /// # let w = db.begin_write()?; w.open_multimap_table(M)?; w.commit()?;
    /// assert_eq!(db.begin_read()?.open_multimap_table(M)?.get_owned(1)?.len(), 0);
    /// # Ok::<(), bloomsled_redb::Error>(())
    /// ```
    pub fn len(&self) -> u64 {
        self.inner.as_ref().map_or(0, |v| v.len())
    }

    /// True if no value remains.
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
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

impl<V: Key + 'static> Iterator for OwnedMultimapValue<V> {
    type Item = Result<OwnedAccessGuard<V>>;

    fn next(&mut self) -> Option<Self::Item> {
        self.inner.as_mut()?.next()
    }
}

impl<V: Key + 'static> DoubleEndedIterator for OwnedMultimapValue<V> {
    fn next_back(&mut self) -> Option<Self::Item> {
        self.inner.as_mut()?.next_back()
    }
}

/// The keys of a range with their values (redb's `MultimapRange`), each key's values a
/// [`MultimapValue`].
///
/// ```
/// use bloomsled_redb::{Database, MultimapTableDefinition, MultimapValue, ReadableMultimapTable};
/// const M: MultimapTableDefinition<u64, u64> = MultimapTableDefinition::new("m");
/// # let dir = tempfile::tempdir().unwrap();
/// # let db = Database::create(dir.path().join("a.redb"))?;
/// let w = db.begin_write()?;
/// let mut m = w.open_multimap_table(M)?;
/// m.insert(1, 10)?;
/// let (k, v): (_, MultimapValue<u64>) = m.iter()?.next().unwrap()?;
/// assert_eq!((k.value(), v.len()), (1, 1));
/// # Ok::<(), bloomsled_redb::Error>(())
/// ```
pub struct MultimapRange<'a, K: Key + 'static, V: Key + 'static> {
    inner: redb::MultimapRange<'a, K, V>,
}

impl<'a, K: Key + 'static, V: Key + 'static> MultimapRange<'a, K, V> {
    pub(super) fn of(inner: redb::MultimapRange<'a, K, V>) -> Self {
        MultimapRange { inner }
    }
}

impl<'a, K: Key + 'static, V: Key + 'static> Iterator for MultimapRange<'a, K, V> {
    type Item = Result<(AccessGuard<'a, K>, MultimapValue<'a, V>)>;

    fn next(&mut self) -> Option<Self::Item> {
        let entry = self.inner.next()?;
        Some(entry.map(|(k, v)| (k, MultimapValue::of(v))))
    }
}

impl<K: Key + 'static, V: Key + 'static> DoubleEndedIterator for MultimapRange<'_, K, V> {
    fn next_back(&mut self) -> Option<Self::Item> {
        let entry = self.inner.next_back()?;
        Some(entry.map(|(k, v)| (k, MultimapValue::of(v))))
    }
}

/// A [`MultimapRange`] keeping the transaction alive (redb's `OwnedMultimapRange`), each
/// key's values an [`OwnedMultimapValue`].
///
/// ```
/// use bloomsled_redb::{Database, MultimapTableDefinition, ReadableDatabase};
/// const M: MultimapTableDefinition<u64, u64> = MultimapTableDefinition::new("m");
/// # let dir = tempfile::tempdir().unwrap();
/// # let db = Database::create(dir.path().join("a.redb"))?;
/// # let w = db.begin_write()?; w.open_multimap_table(M)?.insert(1, 10)?; w.commit()?;
/// let mut r = db.begin_read()?.open_multimap_table(M)?.range_owned(0..9)?;
/// let (k, v) = r.next().unwrap()?;
/// assert_eq!((k.value(), v.len()), (1, 1));
/// # Ok::<(), bloomsled_redb::Error>(())
/// ```
pub struct OwnedMultimapRange<K: Key + 'static, V: Key + 'static> {
    inner: redb::OwnedMultimapRange<K, V>,
}

impl<K: Key + 'static, V: Key + 'static> OwnedMultimapRange<K, V> {
    pub(super) fn of(inner: redb::OwnedMultimapRange<K, V>) -> Self {
        OwnedMultimapRange { inner }
    }
}

impl<K: Key + 'static, V: Key + 'static> Iterator for OwnedMultimapRange<K, V> {
    type Item = Result<(OwnedAccessGuard<K>, OwnedMultimapValue<V>)>;

    fn next(&mut self) -> Option<Self::Item> {
        let entry = self.inner.next()?;
        Some(entry.map(|(k, v)| (k, OwnedMultimapValue::of(v))))
    }
}

impl<K: Key + 'static, V: Key + 'static> DoubleEndedIterator for OwnedMultimapRange<K, V> {
    fn next_back(&mut self) -> Option<Self::Item> {
        let entry = self.inner.next_back()?;
        Some(entry.map(|(k, v)| (k, OwnedMultimapValue::of(v))))
    }
}

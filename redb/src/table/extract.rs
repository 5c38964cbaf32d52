//! `ExtractIf`: redb's, noting each key it yields for counting mode's count-out.

use redb::{AccessGuard, Key, Value};

use super::Result;
use crate::writing::CountOuts;

/// The iterator of [`Table::extract_if`](crate::Table::extract_if) (redb's `ExtractIf`,
/// same methods): each pair it yields is removed, and in counting mode its key is counted
/// out when the transaction commits. Pairs not read are neither removed nor counted out.
///
/// ```
/// use bloomsled_redb::{Database, ReadableTableMetadata, TableDefinition};
/// const T: TableDefinition<u64, u64> = TableDefinition::new("t");
/// # let dir = tempfile::tempdir().unwrap();
/// # let db = Database::create(dir.path().join("a.redb"))?;
/// let w = db.begin_write()?;
/// let mut t = w.open_table(T)?;
/// t.insert(1, 1)?;
/// t.insert(2, 2)?;
/// let mut it = t.extract_if(|_, _| true)?;
/// assert_eq!(it.next().unwrap()?.0.value(), 1);
/// it.close()?;
/// assert_eq!(t.len()?, 1);
/// # Ok::<(), bloomsled_redb::Error>(())
/// ```
#[must_use = "iterators are lazy and remove nothing unless consumed"]
pub struct ExtractIf<
    'a,
    K: Key + 'static,
    V: Value + 'static,
    F: for<'f> FnMut(K::SelfType<'f>, V::SelfType<'f>) -> bool,
> {
    pub(super) inner: redb::ExtractIf<'a, K, V, F>,
    pub(super) outs: CountOuts<'a>,
}

impl<K, V, F> ExtractIf<'_, K, V, F>
where
    K: Key + 'static,
    V: Value + 'static,
    F: for<'f> FnMut(K::SelfType<'f>, V::SelfType<'f>) -> bool,
{
    /// Ends the iterator, reporting an error redb met while finishing the removals of the
    /// pairs already yielded (those stay removed; unread pairs are not removed).
    ///
    /// ```
    /// use bloomsled_redb::{Database, TableDefinition};
    /// const T: TableDefinition<u64, u64> = TableDefinition::new("t");
    /// # let dir = tempfile::tempdir().unwrap();
    /// # let db = Database::create(dir.path().join("a.redb"))?;
    /// let w = db.begin_write()?;
    /// w.open_table(T)?.extract_if(|_, _| true)?.close()?;
    /// # Ok::<(), bloomsled_redb::Error>(())
    /// ```
    pub fn close(self) -> Result {
        self.inner.close()
    }

    /// A yielded pair is removed: its key is counted out at the commit (counting mode).
    fn yielded<'g>(
        &mut self,
        item: Option<Result<(AccessGuard<'g, K>, AccessGuard<'g, V>)>>,
    ) -> Option<Result<(AccessGuard<'g, K>, AccessGuard<'g, V>)>> {
        if let Some(Ok((k, _))) = &item {
            self.outs.removed(K::as_bytes(&k.value()).as_ref());
        }
        item
    }
}

impl<'a, K, V, F> Iterator for ExtractIf<'a, K, V, F>
where
    K: Key + 'static,
    V: Value + 'static,
    F: for<'f> FnMut(K::SelfType<'f>, V::SelfType<'f>) -> bool,
{
    type Item = Result<(AccessGuard<'a, K>, AccessGuard<'a, V>)>;

    fn next(&mut self) -> Option<Self::Item> {
        let item = self.inner.next();
        self.yielded(item)
    }
}

impl<K, V, F> DoubleEndedIterator for ExtractIf<'_, K, V, F>
where
    K: Key + 'static,
    V: Value + 'static,
    F: for<'f> FnMut(K::SelfType<'f>, V::SelfType<'f>) -> bool,
{
    fn next_back(&mut self) -> Option<Self::Item> {
        let item = self.inner.next_back();
        self.yielded(item)
    }
}

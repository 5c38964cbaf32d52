//! `ReadTransaction`: redb's, its tables asking their filters when complete for its snapshot.

use std::sync::Arc;

use redb::{
    Key, MultimapTableDefinition, ReadOnlyUntypedMultimapTable, ReadOnlyUntypedTable, StorageError,
    TableDefinition, TableError, TransactionError, UntypedMultimapTableHandle, UntypedTableHandle,
    Value,
};

use crate::filters::Shared;
use crate::multimap::ReadOnlyMultimapTable;
use crate::persist;
use crate::table::ReadOnlyTable;
use crate::{MultimapTableHandle, TableHandle};

/// A read transaction (redb's `ReadTransaction`): it sees the state of its `begin_read`.
///
/// ```
/// use bloomsled_redb::{Database, ReadableDatabase};
/// # let dir = tempfile::tempdir().unwrap();
/// # let db = Database::create(dir.path().join("a.redb"))?;
/// let r = db.begin_read()?;
/// r.close()?;
/// # Ok::<(), bloomsled_redb::Error>(())
/// ```
pub struct ReadTransaction {
    inner: redb::ReadTransaction,
    shared: Arc<Shared>,
    /// Commits that had returned before it began: its state is at least theirs.
    seq: u64,
}

impl ReadTransaction {
    pub(crate) fn new(inner: redb::ReadTransaction, shared: Arc<Shared>, seq: u64) -> Self {
        ReadTransaction { inner, shared, seq }
    }

    pub(crate) fn shared(&self) -> &Arc<Shared> {
        &self.shared
    }

    pub(crate) fn seq(&self) -> u64 {
        self.seq
    }

    /// Opens a table. Its filter is used only if complete for this transaction's state;
    /// if the table has none yet, it is built now from a scan (first use).
    ///
    /// ```
    /// use bloomsled_redb::{Database, ReadableDatabase, ReadableTable, TableDefinition};
    /// const T: TableDefinition<u64, u64> = TableDefinition::new("t");
    /// # let dir = tempfile::tempdir().unwrap();
    /// # let db = Database::create(dir.path().join("a.redb"))?;
    /// # let w = db.begin_write()?; w.open_table(T)?; w.commit()?;
    /// let r = db.begin_read()?;
    /// assert!(r.open_table(T)?.get(1)?.is_none());
    /// # Ok::<(), bloomsled_redb::Error>(())
    /// ```
    pub fn open_table<K: Key + 'static, V: Value + 'static>(
        &self,
        definition: TableDefinition<K, V>,
    ) -> Result<ReadOnlyTable<K, V>, TableError> {
        let inner = self.inner.open_table(definition)?;
        Ok(ReadOnlyTable::new(inner, self, definition))
    }

    /// Opens a table without its types (no lookups: redb's own).
    ///
    /// ```
    /// use bloomsled_redb::{Database, ReadableDatabase, ReadableTableMetadata, TableDefinition};
    /// const T: TableDefinition<u64, u64> = TableDefinition::new("t");
    /// # let dir = tempfile::tempdir().unwrap();
    /// # let db = Database::create(dir.path().join("a.redb"))?;
    /// # let w = db.begin_write()?; w.open_table(T)?; w.commit()?;
    /// assert_eq!(db.begin_read()?.open_untyped_table(T)?.len()?, 0);
    /// # Ok::<(), bloomsled_redb::Error>(())
    /// ```
    pub fn open_untyped_table(
        &self,
        handle: impl TableHandle,
    ) -> Result<ReadOnlyUntypedTable, TableError> {
        self.inner
            .open_untyped_table(TableDefinition::<(), ()>::new(handle.name()))
    }

    /// Opens a multimap table (see [`ReadTransaction::open_table`]).
    ///
    /// ```
    /// use bloomsled_redb::{Database, MultimapTableDefinition, ReadableDatabase};
    /// const M: MultimapTableDefinition<u64, u64> = MultimapTableDefinition::new("m");
    /// # let dir = tempfile::tempdir().unwrap();
    /// # let db = Database::create(dir.path().join("a.redb"))?;
    /// # let w = db.begin_write()?; w.open_multimap_table(M)?; w.commit()?;
    /// assert!(db.begin_read()?.open_multimap_table(M)?.get(1)?.is_empty());
    /// # Ok::<(), bloomsled_redb::Error>(())
    /// ```
    pub fn open_multimap_table<K: Key + 'static, V: Key + 'static>(
        &self,
        definition: MultimapTableDefinition<K, V>,
    ) -> Result<ReadOnlyMultimapTable<K, V>, TableError> {
        let inner = self.inner.open_multimap_table(definition)?;
        Ok(ReadOnlyMultimapTable::new(inner, self, definition))
    }

    /// Opens a multimap table without its types.
    ///
    /// ```
    /// use bloomsled_redb::{Database, MultimapTableDefinition, ReadableDatabase};
    /// const M: MultimapTableDefinition<u64, u64> = MultimapTableDefinition::new("m");
    /// # let dir = tempfile::tempdir().unwrap();
    /// # let db = Database::create(dir.path().join("a.redb"))?;
    /// # let w = db.begin_write()?; w.open_multimap_table(M)?; w.commit()?;
    /// db.begin_read()?.open_untyped_multimap_table(M)?;
    /// # Ok::<(), bloomsled_redb::Error>(())
    /// ```
    pub fn open_untyped_multimap_table(
        &self,
        handle: impl MultimapTableHandle,
    ) -> Result<ReadOnlyUntypedMultimapTable, TableError> {
        self.inner
            .open_untyped_multimap_table(MultimapTableDefinition::<(), ()>::new(handle.name()))
    }

    /// The tables' names (bloomsled's own, under [`crate::RESERVED_PREFIX`], are not listed).
    ///
    /// ```
    /// # use bloomsled_redb::ReadableDatabase;
    /// # let dir = tempfile::tempdir().unwrap();
    /// # let db = bloomsled_redb::Database::create(dir.path().join("a.redb"))?;
    /// assert_eq!(db.begin_read()?.list_tables()?.count(), 0);
    /// # Ok::<(), bloomsled_redb::Error>(())
    /// ```
    pub fn list_tables(
        &self,
    ) -> Result<impl Iterator<Item = UntypedTableHandle> + '_, StorageError> {
        Ok(self
            .inner
            .list_tables()?
            .filter(|t| !persist::reserved(redb::TableHandle::name(t))))
    }

    /// The multimap tables' names.
    ///
    /// ```
    /// # use bloomsled_redb::ReadableDatabase;
    /// # let dir = tempfile::tempdir().unwrap();
    /// # let db = bloomsled_redb::Database::create(dir.path().join("a.redb"))?;
    /// assert_eq!(db.begin_read()?.list_multimap_tables()?.count(), 0);
    /// # Ok::<(), bloomsled_redb::Error>(())
    /// ```
    pub fn list_multimap_tables(
        &self,
    ) -> Result<impl Iterator<Item = UntypedMultimapTableHandle> + '_, StorageError> {
        self.inner.list_multimap_tables()
    }

    /// Ends the transaction; an error if a table or range of it is still alive.
    ///
    /// ```
    /// # use bloomsled_redb::ReadableDatabase;
    /// # let dir = tempfile::tempdir().unwrap();
    /// # let db = bloomsled_redb::Database::create(dir.path().join("a.redb"))?;
    /// db.begin_read()?.close()?;
    /// # Ok::<(), bloomsled_redb::Error>(())
    /// ```
    pub fn close(self) -> Result<(), TransactionError> {
        self.inner.close()
    }
}

impl std::fmt::Debug for ReadTransaction {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ReadTransaction").finish_non_exhaustive()
    }
}

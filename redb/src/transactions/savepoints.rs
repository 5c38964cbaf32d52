//! `WriteTransaction`'s savepoints: redb's, and a restore that distrusts every filter and
//! ends this session's journals (the keys removed since the savepoint come back).

use redb::{Savepoint, SavepointError, StorageError, TableError};

use super::WriteTransaction;
use crate::persist;

impl WriteTransaction {
    /// Makes a persistent savepoint; returns its id.
    ///
    /// ```
    /// # let dir = tempfile::tempdir().unwrap();
    /// # let db = bloomsled_redb::Database::create(dir.path().join("a.redb"))?;
    /// let w = db.begin_write()?;
    /// let id = w.persistent_savepoint()?;
    /// w.commit()?;
    /// # let _ = id;
    /// # Ok::<(), bloomsled_redb::Error>(())
    /// ```
    pub fn persistent_savepoint(&self) -> Result<u64, SavepointError> {
        self.inner.persistent_savepoint()
    }

    /// The persistent savepoint `id`.
    ///
    /// ```
    /// # let dir = tempfile::tempdir().unwrap();
    /// # let db = bloomsled_redb::Database::create(dir.path().join("a.redb"))?;
    /// # let w = db.begin_write()?;
    /// # let id = w.persistent_savepoint()?;
    /// # w.commit()?;
    /// let w = db.begin_write()?;
    /// let s = w.get_persistent_savepoint(id)?;
    /// # drop(s);
    /// # Ok::<(), bloomsled_redb::Error>(())
    /// ```
    pub fn get_persistent_savepoint(&self, id: u64) -> Result<Savepoint, SavepointError> {
        self.inner.get_persistent_savepoint(id)
    }

    /// Deletes the persistent savepoint `id`; false if there was none.
    ///
    /// ```
    /// # let dir = tempfile::tempdir().unwrap();
    /// # let db = bloomsled_redb::Database::create(dir.path().join("a.redb"))?;
    /// let w = db.begin_write()?;
    /// assert!(!w.delete_persistent_savepoint(7)?);
    /// # Ok::<(), bloomsled_redb::Error>(())
    /// ```
    pub fn delete_persistent_savepoint(&self, id: u64) -> Result<bool, SavepointError> {
        self.inner.delete_persistent_savepoint(id)
    }

    /// The ids of the persistent savepoints.
    ///
    /// ```
    /// # let dir = tempfile::tempdir().unwrap();
    /// # let db = bloomsled_redb::Database::create(dir.path().join("a.redb"))?;
    /// let w = db.begin_write()?;
    /// assert_eq!(w.list_persistent_savepoints()?.count(), 0);
    /// # Ok::<(), bloomsled_redb::Error>(())
    /// ```
    pub fn list_persistent_savepoints(
        &self,
    ) -> Result<impl Iterator<Item = u64> + '_, StorageError> {
        self.inner.list_persistent_savepoints()
    }

    /// Makes an ephemeral savepoint (lives while the returned value does).
    ///
    /// ```
    /// # let dir = tempfile::tempdir().unwrap();
    /// # let db = bloomsled_redb::Database::create(dir.path().join("a.redb"))?;
    /// let w = db.begin_write()?;
    /// let s = w.ephemeral_savepoint()?;
    /// # drop(s);
    /// # Ok::<(), bloomsled_redb::Error>(())
    /// ```
    pub fn ephemeral_savepoint(&self) -> Result<Savepoint, SavepointError> {
        self.inner.ephemeral_savepoint()
    }

    /// Restores the savepoint: the keys removed since come back. Every table's filter is
    /// distrusted from now until it is rebuilt after this transaction ends (see
    /// `docs/redb.md`, "Savepoints").
    ///
    /// ```
    /// use bloomsled_redb::{Database, TableDefinition};
    /// const T: TableDefinition<u64, u64> = TableDefinition::new("t");
    /// # let dir = tempfile::tempdir().unwrap();
    /// # let db = Database::create(dir.path().join("a.redb"))?;
    /// let w = db.begin_write()?;
    /// w.open_table(T)?.insert(1, 1)?;
    /// w.commit()?;
    /// let w = db.begin_write()?;
    /// let s = w.ephemeral_savepoint()?;
    /// w.open_table(T)?.remove(1)?;
    /// w.commit()?;
    /// let mut w = db.begin_write()?;
    /// w.restore_savepoint(&s)?;
    /// w.commit()?;
    /// assert!(db.get_latest(T, 1)?.is_some());
    /// # Ok::<(), bloomsled_redb::Error>(())
    /// ```
    pub fn restore_savepoint(&mut self, savepoint: &Savepoint) -> Result<(), SavepointError> {
        self.unsettle();
        self.inner.restore_savepoint(savepoint)?;
        // The restored state may hold records of an older close: none is kept, in this
        // same transaction.
        persist::forget_all(&self.inner).map_err(|e| match e {
            TableError::Storage(e) => SavepointError::Storage(e),
            other => SavepointError::Storage(StorageError::Corrupted(other.to_string())),
        })?;
        self.unmarked.lock().unwrap_or_else(|e| e.into_inner()).1 = true;
        // No journal of this session stands for the restored state: none is continued.
        self.shared.journals.stop_all();
        Ok(())
    }
}

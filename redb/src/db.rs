//! `Database` and `ReadOnlyDatabase`: redb's, with the tables' filters beside them (`Builder`
//! in `db/builder.rs`).

use std::borrow::Borrow;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::Ordering::SeqCst;

use redb::{
    CacheStats, CompactionError, ConcurrencyMode, DatabaseError, Key, OwnedAccessGuard,
    TableDefinition, TableError, TransactionError, Value,
};

use crate::Error;
use crate::filters::{Kind, Shared, Source, Tuning};
use crate::persist;
use crate::sync::RwLock;
use crate::transactions::{ReadTransaction, WriteTransaction};

mod builder;
mod stats;
pub(crate) mod taint;

pub use crate::filters::FilterSource;
pub use builder::Builder;
#[cfg(feature = "metrics")]
pub use stats::TABLE_SERIES;
pub use stats::TableFilterStats;

/// What redb's `ReadableDatabase` is: a database that begins read transactions.
///
/// ```
/// use bloomsled_redb::{Database, ReadableDatabase};
/// # let dir = tempfile::tempdir().unwrap();
/// let db = Database::create(dir.path().join("a.redb"))?;
/// let txn = db.begin_read()?;
/// # drop(txn);
/// # Ok::<(), bloomsled_redb::Error>(())
/// ```
pub trait ReadableDatabase {
    /// Begins a read transaction: it sees the data committed before this call.
    fn begin_read(&self) -> Result<ReadTransaction, TransactionError>;

    /// redb's cache statistics.
    fn cache_stats(&self) -> CacheStats;
}

/// A redb database with a Bloom filter per table: redb's `Database`, same methods.
///
/// ```
/// use bloomsled_redb::{Database, ReadableDatabase, ReadableTable, TableDefinition};
/// const T: TableDefinition<&str, u64> = TableDefinition::new("t");
/// # let dir = tempfile::tempdir().unwrap();
/// let db = Database::create(dir.path().join("a.redb"))?;
/// let w = db.begin_write()?;
/// w.open_table(T)?.insert("a", &1)?;
/// w.commit()?;
/// let r = db.begin_read()?;
/// assert_eq!(r.open_table(T)?.get("a")?.unwrap().value(), 1);
/// assert!(r.open_table(T)?.get("b")?.is_none()); // answered by the filter
/// # Ok::<(), bloomsled_redb::Error>(())
/// ```
pub struct Database {
    shared: Arc<Shared>,
    /// False over a user's `StorageBackend`: its writes stay exactly redb's (no close is
    /// written), as a backend that records or replays them expects.
    close_writes: bool,
}

/// The redb handle inside `shared` (`Some` until the user's handle is dropped or closed).
fn rw(shared: &Shared) -> &RwLock<Option<redb::Database>> {
    match &shared.source {
        Source::ReadWrite(db) => db,
        Source::ReadOnly(_) => unreachable!("a Database's source is read-write"),
    }
}

fn ro(shared: &Shared) -> &RwLock<Option<redb::ReadOnlyDatabase>> {
    match &shared.source {
        Source::ReadOnly(db) => db,
        Source::ReadWrite(_) => unreachable!("a ReadOnlyDatabase's source is read-only"),
    }
}

const OPEN: &str = "the redb handle lives as long as the user's handle";

impl Database {
    fn wrap(
        inner: redb::Database,
        mode: ConcurrencyMode,
        tuning: Tuning,
        close_writes: bool,
        path: Option<&Path>,
    ) -> Database {
        let on_disk = persist::read_on_disk_of(&inner);
        let source = Source::ReadWrite(RwLock::new(Some(inner)));
        let enabled = mode == ConcurrencyMode::ExclusiveWriter;
        // Crash journals beside a file opened by path, unless it is a user's backend
        // (whose writes stay exactly redb's).
        let journals = path
            .filter(|_| close_writes)
            .map(crate::filters::journals::dir_of);
        let path = path.map(Path::to_path_buf);
        Database {
            shared: Arc::new(Shared::new(enabled, source, on_disk, path, journals).tuned(tuning)),
            close_writes,
        }
    }

    /// Marks the file after a write that failed (see `db/taint.rs`).
    fn taint_if(&self, failed: bool) {
        if let (true, Some(path)) = (failed, &self.shared.path) {
            taint::mark(path);
        }
    }

    /// How this handle's tables got their filters so far: loaded from the clean close that
    /// wrote them (no key read), or built from a scan of their keys. A close writes the
    /// filters of tables of at least 256 keys; smaller ones are scanned.
    ///
    /// ```
    /// use bloomsled_redb::{Database, ReadableDatabase, TableDefinition};
    /// const T: TableDefinition<u64, u64> = TableDefinition::new("t");
    /// # let dir = tempfile::tempdir().unwrap();
    /// # let path = dir.path().join("a.redb");
    /// let db = Database::create(&path)?;
    /// let w = db.begin_write()?;
    /// {
    ///     let mut t = w.open_table(T)?;
    ///     for i in 0..1_000 {
    ///         t.insert(i, i)?;
    ///     }
    /// }
    /// w.commit()?;
    /// drop(db); // a clean close writes the filter
    /// let db = Database::open(&path)?;
    /// assert!(db.begin_read()?.open_table(T)?.get(5_000)?.is_none());
    /// assert_eq!(db.filter_stats().loaded, 1);
    /// assert_eq!(db.filter_stats().scanned, 0);
    /// # Ok::<(), bloomsled_redb::Error>(())
    /// ```
    pub fn filter_stats(&self) -> FilterStats {
        FilterStats {
            loaded: self.shared.loaded.load(SeqCst),
            replayed: self.shared.replayed.load(SeqCst),
            scanned: self.shared.scanned.load(SeqCst),
            mode: match self.shared.counting {
                true => bloomsled::FilterMode::Counting,
                false => bloomsled::FilterMode::Plain,
            },
        }
    }

    fn with<T>(&self, f: impl FnOnce(&redb::Database) -> T) -> T {
        let db = rw(&self.shared).read().unwrap_or_else(|e| e.into_inner());
        f(db.as_ref().expect(OPEN))
    }

    fn with_mut<T>(&mut self, f: impl FnOnce(&mut redb::Database) -> T) -> T {
        let mut db = rw(&self.shared).write().unwrap_or_else(|e| e.into_inner());
        f(db.as_mut().expect(OPEN))
    }

    fn take(&self) -> Option<redb::Database> {
        rw(&self.shared)
            .write()
            .unwrap_or_else(|e| e.into_inner())
            .take()
    }

    /// Opens the database at `path`, creating it if it does not exist (redb's `create`).
    ///
    /// ```
    /// # let dir = tempfile::tempdir().unwrap();
    /// let db = bloomsled_redb::Database::create(dir.path().join("a.redb"))?;
    /// # drop(db);
    /// # Ok::<(), bloomsled_redb::Error>(())
    /// ```
    pub fn create(path: impl AsRef<Path>) -> Result<Database, DatabaseError> {
        Builder::new().create(path)
    }

    /// Opens an existing database.
    ///
    /// ```
    /// # let dir = tempfile::tempdir().unwrap();
    /// # let path = dir.path().join("a.redb");
    /// # drop(bloomsled_redb::Database::create(&path)?);
    /// let db = bloomsled_redb::Database::open(&path)?;
    /// # drop(db);
    /// # Ok::<(), bloomsled_redb::Error>(())
    /// ```
    pub fn open(path: impl AsRef<Path>) -> Result<Database, DatabaseError> {
        Builder::new().open(path)
    }

    /// A [`Builder`] with redb's defaults.
    ///
    /// ```
    /// # let dir = tempfile::tempdir().unwrap();
    /// let db = bloomsled_redb::Database::builder().create(dir.path().join("a.redb"))?;
    /// # drop(db);
    /// # Ok::<(), bloomsled_redb::Error>(())
    /// ```
    pub fn builder() -> Builder {
        Builder::new()
    }

    /// Begins a write transaction (one at a time; waits for the current one).
    ///
    /// ```
    /// # let dir = tempfile::tempdir().unwrap();
    /// # let db = bloomsled_redb::Database::create(dir.path().join("a.redb"))?;
    /// let w = db.begin_write()?;
    /// w.commit()?;
    /// # Ok::<(), bloomsled_redb::Error>(())
    /// ```
    pub fn begin_write(&self) -> Result<WriteTransaction, TransactionError> {
        let inner = self.with(|db| db.begin_write())?;
        Ok(WriteTransaction::new(inner, self.shared.clone()))
    }

    /// [`Database::begin_write`], or `TransactionError::WouldBlock` if a write is in progress.
    ///
    /// ```
    /// # let dir = tempfile::tempdir().unwrap();
    /// # let db = bloomsled_redb::Database::create(dir.path().join("a.redb"))?;
    /// let w = db.try_begin_write()?;
    /// assert!(db.try_begin_write().is_err());
    /// # drop(w);
    /// # Ok::<(), bloomsled_redb::Error>(())
    /// ```
    pub fn try_begin_write(&self) -> Result<WriteTransaction, TransactionError> {
        let inner = self.with(|db| db.try_begin_write())?;
        Ok(WriteTransaction::new(inner, self.shared.clone()))
    }

    /// The value of `key` in the latest committed state of `table`, for a request handler.
    ///
    /// Asks the table's filter before any transaction exists: a key it rules out answers
    /// `None` without `begin_read`. Otherwise it is `begin_read` + `open_table` + `get_owned`
    /// (a table that does not exist answers `None`). An absent answer is exact for the state
    /// after every commit that returned before this call: each key was in the filter before
    /// its commit began (see `docs/redb.md`, "The per-request path").
    ///
    /// ```
    /// use bloomsled_redb::{Database, TableDefinition};
    /// const T: TableDefinition<&str, u64> = TableDefinition::new("t");
    /// # let dir = tempfile::tempdir().unwrap();
    /// let db = Database::create(dir.path().join("a.redb"))?;
    /// let w = db.begin_write()?;
    /// w.open_table(T)?.insert("a", &1)?;
    /// w.commit()?;
    /// assert_eq!(db.get_latest(T, "a")?.unwrap().value(), 1);
    /// assert!(db.get_latest(T, "b")?.is_none());
    /// # Ok::<(), bloomsled_redb::Error>(())
    /// ```
    pub fn get_latest<'a, K: Key + 'static, V: Value + 'static>(
        &self,
        table: TableDefinition<K, V>,
        key: impl Borrow<K::SelfType<'a>>,
    ) -> Result<Option<OwnedAccessGuard<V>>, Error> {
        use redb::TableHandle;
        let absent = {
            let bytes = K::as_bytes(key.borrow());
            self.shared
                .rules_out_latest(Kind::Table, table.name(), bytes.as_ref())
        };
        if absent {
            return Ok(None);
        }
        let txn = self.begin_read()?;
        let t = match txn.open_table(table) {
            Ok(t) => t,
            Err(TableError::TableDoesNotExist(_)) => return Ok(None),
            Err(e) => return Err(e.into()),
        };
        Ok(t.get_owned(key)?)
    }

    /// Verifies the file and repairs it if needed (redb's `check_integrity`).
    ///
    /// ```
    /// # let dir = tempfile::tempdir().unwrap();
    /// let mut db = bloomsled_redb::Database::create(dir.path().join("a.redb"))?;
    /// assert!(db.check_integrity()?);
    /// # Ok::<(), bloomsled_redb::Error>(())
    /// ```
    pub fn check_integrity(&mut self) -> Result<bool, DatabaseError> {
        self.without_builds(|db| db.check_integrity())
    }

    /// Compacts the file (redb's `compact`). Filters are untouched: compaction moves no key.
    ///
    /// ```
    /// # let dir = tempfile::tempdir().unwrap();
    /// let mut db = bloomsled_redb::Database::create(dir.path().join("a.redb"))?;
    /// db.compact()?;
    /// # Ok::<(), bloomsled_redb::Error>(())
    /// ```
    pub fn compact(&mut self) -> Result<bool, CompactionError> {
        self.without_builds(|db| db.compact())
    }

    /// `f` on redb's handle with no build running (each holds a read transaction, which
    /// redb's `compact` and `check_integrity` refuse): builds in flight are stopped, and
    /// their tables build again at their next use.
    fn without_builds<T>(&mut self, f: impl FnOnce(&mut redb::Database) -> T) -> T {
        self.shared.builds.stop();
        let out = self.with_mut(f);
        self.shared.builds.resume();
        out
    }

    /// Waits until no filter build runs: each table opened so far that had no trusted
    /// filter has one now (unless its build failed or was stopped; its lookups then go to
    /// redb). A table that needs a scan (written since the last clean close, or never
    /// closed cleanly) is built in the background at its first use, while redb answers
    /// its lookups; a service calls this before it takes traffic, or a test before it
    /// counts `filter_stats`.
    ///
    /// ```
    /// use bloomsled_redb::{Database, ReadableDatabase, TableDefinition};
    /// const T: TableDefinition<u64, u64> = TableDefinition::new("t");
    /// # let dir = tempfile::tempdir().unwrap();
    /// let db = Database::create(dir.path().join("a.redb"))?;
    /// let w = db.begin_write()?;
    /// w.open_table(T)?.insert(1, 1)?;
    /// w.commit()?;
    /// db.wait_for_filters();
    /// assert_eq!(db.filter_stats().scanned, 1);
    /// # Ok::<(), bloomsled_redb::Error>(())
    /// ```
    pub fn wait_for_filters(&self) {
        self.shared.builds.wait();
    }

    /// Closes the database as a drop does (builds in flight finish, complete filters are
    /// written), and releases its file now (redb's `close`).
    ///
    /// ```
    /// # let dir = tempfile::tempdir().unwrap();
    /// let db = bloomsled_redb::Database::create(dir.path().join("a.redb"))?;
    /// db.close()?;
    /// # Ok::<(), bloomsled_redb::Error>(())
    /// ```
    pub fn close(self) -> Result<(), DatabaseError> {
        self.shared.builds.finish();
        let db = self.take().expect(OPEN);
        self.write_close(&db);
        let closed = db.close();
        self.taint_if(
            matches!(&closed, Err(DatabaseError::Storage(e)) if taint::is_write_failure(e)),
        );
        closed
    }

    /// Writes each table's filter that is complete for the latest committed state, with its
    /// record, in one commit (unless a write transaction is still alive or redb's write lock
    /// is held, or the database is over a user's `StorageBackend`: then the next open
    /// scans). The builds in flight finished first.
    fn write_close(&self, db: &redb::Database) {
        // Filters off (another process may write the file): no close; records of tables
        // untouched since the last one stay true.
        if !self.close_writes || !self.shared.enabled || self.shared.writers.load(SeqCst) > 0 {
            return;
        }
        let mut clean = self.shared.clean_filters();
        clean.retain(|(_, built, _)| built.items() >= persist::MIN_ITEMS);
        let (records, marks, old) = {
            let on_disk = self.shared.on_disk();
            (
                !on_disk.keys.is_empty(),
                !on_disk.marked.is_empty(),
                on_disk.close,
            )
        };
        if !clean.is_empty() || records || marks {
            // An error leaves the last committed records, which stay true: a failed close
            // costs a scan at the next open, never a stale filter. A failed write marks the
            // file, so that it is rewritten before it is opened again in this process. The
            // journals stay until a close committed (the next open may replay them).
            let written = persist::write_close(db, &clean);
            self.taint_if(matches!(
                written,
                Err(redb::Error::Io(_) | redb::Error::PreviousIo)
            ));
            if written.is_ok() {
                self.shared.retire_journals(old);
            }
        }
    }

    /// How many commits this handle has made (a test and bench aid).
    #[doc(hidden)]
    pub fn commits(&self) -> u64 {
        self.shared.finished.load(SeqCst)
    }
}

impl ReadableDatabase for Database {
    fn begin_read(&self) -> Result<ReadTransaction, TransactionError> {
        let seq = self.shared.finished.load(SeqCst);
        let inner = self.with(redb::ReadableDatabase::begin_read)?;
        Ok(ReadTransaction::new(inner, self.shared.clone(), seq))
    }

    fn cache_stats(&self) -> CacheStats {
        self.with(redb::ReadableDatabase::cache_stats)
    }
}

impl Drop for Database {
    /// Closes cleanly: lets the builds in flight finish, writes each table's filter that
    /// is complete (see `write_close`), then drops redb's handle now, as dropping redb's
    /// `Database` does, even while transactions (which hold the filters) live on.
    fn drop(&mut self) {
        self.shared.builds.finish();
        let Some(db) = self.take() else {
            return;
        };
        self.write_close(&db);
        // redb's close, as its drop would do it, but with its error seen: a failed write
        // there marks the file too.
        let closed = db.close();
        self.taint_if(
            matches!(&closed, Err(DatabaseError::Storage(e)) if taint::is_write_failure(e)),
        );
    }
}

/// How a database's tables got their filters (see [`Database::filter_stats`]).
///
/// ```
/// let s = bloomsled_redb::FilterStats::default();
/// assert_eq!((s.loaded, s.replayed, s.scanned), (0, 0, 0));
/// ```
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct FilterStats {
    /// Filters loaded from the clean close that wrote them, without reading a key.
    pub loaded: u64,
    /// Filters of tables written since the last clean close, brought back after a crash
    /// from the filter that close stored (the empty filter, for a table made since) plus
    /// the tables' crash journals, without reading a key (see
    /// [`Database::table_filter_source`]).
    pub replayed: u64,
    /// Filters built from a scan of their table's keys (first use with no clean record,
    /// after a restore or rename, or grown past their capacity).
    pub scanned: u64,
    /// The tables' filters: plain, or counting (`Builder::set_counting`).
    pub mode: bloomsled::FilterMode,
}

impl std::fmt::Debug for Database {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Database").finish_non_exhaustive()
    }
}

/// A database opened read-only (redb's `ReadOnlyDatabase`). Its filters are built at first
/// use; in `ConcurrencyMode::ExclusiveWriter` no process writes the file while it is open.
///
/// ```
/// use bloomsled_redb::{Database, ReadOnlyDatabase};
/// # let dir = tempfile::tempdir().unwrap();
/// # let path = dir.path().join("a.redb");
/// drop(Database::create(&path)?);
/// let db = ReadOnlyDatabase::open(&path)?;
/// # drop(db);
/// # Ok::<(), bloomsled_redb::Error>(())
/// ```
pub struct ReadOnlyDatabase {
    shared: Arc<Shared>,
}

impl ReadOnlyDatabase {
    fn wrap(
        inner: redb::ReadOnlyDatabase,
        mode: ConcurrencyMode,
        tuning: Tuning,
    ) -> ReadOnlyDatabase {
        let on_disk = persist::read_on_disk_of(&inner);
        let source = Source::ReadOnly(RwLock::new(Some(inner)));
        let enabled = mode == ConcurrencyMode::ExclusiveWriter;
        ReadOnlyDatabase {
            // No journal is made or replayed by a read-only handle.
            shared: Arc::new(Shared::new(enabled, source, on_disk, None, None).tuned(tuning)),
        }
    }

    fn with<T>(&self, f: impl FnOnce(&redb::ReadOnlyDatabase) -> T) -> T {
        let db = ro(&self.shared).read().unwrap_or_else(|e| e.into_inner());
        f(db.as_ref().expect(OPEN))
    }

    fn take(&self) -> Option<redb::ReadOnlyDatabase> {
        ro(&self.shared)
            .write()
            .unwrap_or_else(|e| e.into_inner())
            .take()
    }

    /// Opens an existing database read-only.
    ///
    /// ```
    /// # let dir = tempfile::tempdir().unwrap();
    /// # let path = dir.path().join("a.redb");
    /// # drop(bloomsled_redb::Database::create(&path)?);
    /// let db = bloomsled_redb::ReadOnlyDatabase::open(&path)?;
    /// # drop(db);
    /// # Ok::<(), bloomsled_redb::Error>(())
    /// ```
    pub fn open(path: impl AsRef<Path>) -> Result<ReadOnlyDatabase, DatabaseError> {
        Builder::new().open_read_only(path)
    }

    /// Closes the database now (redb's `close`).
    ///
    /// ```
    /// # let dir = tempfile::tempdir().unwrap();
    /// # let path = dir.path().join("a.redb");
    /// # drop(bloomsled_redb::Database::create(&path)?);
    /// bloomsled_redb::ReadOnlyDatabase::open(&path)?.close()?;
    /// # Ok::<(), bloomsled_redb::Error>(())
    /// ```
    pub fn close(self) -> Result<(), DatabaseError> {
        self.shared.builds.stop();
        self.take().expect(OPEN).close()
    }

    /// Waits until no filter build runs (see [`Database::wait_for_filters`]).
    ///
    /// ```
    /// # let dir = tempfile::tempdir().unwrap();
    /// # let path = dir.path().join("a.redb");
    /// # drop(bloomsled_redb::Database::create(&path)?);
    /// let db = bloomsled_redb::ReadOnlyDatabase::open(&path)?;
    /// db.wait_for_filters();
    /// # Ok::<(), bloomsled_redb::Error>(())
    /// ```
    pub fn wait_for_filters(&self) {
        self.shared.builds.wait();
    }
}

impl Drop for ReadOnlyDatabase {
    fn drop(&mut self) {
        self.shared.builds.stop();
        drop(self.take());
    }
}

impl ReadableDatabase for ReadOnlyDatabase {
    fn begin_read(&self) -> Result<ReadTransaction, TransactionError> {
        let inner = self.with(redb::ReadableDatabase::begin_read)?;
        Ok(ReadTransaction::new(inner, self.shared.clone(), 0))
    }

    fn cache_stats(&self) -> CacheStats {
        self.with(redb::ReadableDatabase::cache_stats)
    }
}

//! `Builder`: redb's, its `create` and `open` giving a `Database` with its tables' filters.

use std::fs::File;
use std::path::Path;

use redb::{ConcurrencyMode, DatabaseError, RepairSession, StorageBackend};

use super::{Database, ReadOnlyDatabase};
use crate::filters::Tuning;

/// Configuration of a database (redb's `Builder`, same setters).
///
/// ```
/// # let dir = tempfile::tempdir().unwrap();
/// let db = bloomsled_redb::Builder::new()
///     .set_cache_size(64 << 20)
///     .create(dir.path().join("a.redb"))?;
/// # drop(db);
/// # Ok::<(), bloomsled_redb::Error>(())
/// ```
pub struct Builder {
    inner: redb::Builder,
    mode: ConcurrencyMode,
    tuning: Tuning,
}

/// This crate's defaults: plain filters, hits bypass after 64. Built with
/// `--cfg bloomsled_redb_variant` (only `.ci/redb-suite --variant` does), counting mode and a
/// bypass after every hit, so that redb's own tests, which open databases with these
/// defaults, run through both.
impl Default for Tuning {
    fn default() -> Self {
        let variant = cfg!(bloomsled_redb_variant);
        Tuning {
            counting: variant,
            bypass_after_hits: if variant {
                1
            } else {
                crate::DEFAULT_BYPASS_AFTER_HITS
            },
        }
    }
}

impl Default for Builder {
    fn default() -> Self {
        Builder::new()
    }
}

impl Builder {
    /// redb's defaults (a 1 GiB cache).
    ///
    /// ```
    /// let b = bloomsled_redb::Builder::new();
    /// # drop(b);
    /// ```
    pub fn new() -> Self {
        Builder {
            inner: redb::Builder::new(),
            mode: ConcurrencyMode::default(),
            tuning: Tuning::default(),
        }
    }

    /// Counting mode (off by default): every table's filter is the core's
    /// [`bloomsled::CountingFilter`] (4-bit counters behind the bits, about 5× the plain
    /// filter's memory), and a key removed by a committed transaction is counted out, so
    /// removals do not leave false positives behind. A read transaction whose snapshot is
    /// older than the latest commit that counted keys out of a table asks redb for the keys
    /// the filter rules out of that table (its snapshot may still hold them): never a false
    /// negative. A clean close stores counting filters; after a crash a counting table is
    /// rebuilt from a scan (see `docs/redb.md`, "Counting mode").
    ///
    /// ```
    /// use bloomsled_redb::{Builder, ReadableDatabase, TableDefinition};
    /// const T: TableDefinition<u64, u64> = TableDefinition::new("t");
    /// # let dir = tempfile::tempdir().unwrap();
    /// let db = Builder::new().set_counting(true).create(dir.path().join("a.redb"))?;
    /// let w = db.begin_write()?;
    /// w.open_table(T)?.insert(1, 1)?;
    /// w.commit()?;
    /// let w = db.begin_write()?;
    /// w.open_table(T)?.remove(1)?;
    /// w.commit()?;
    /// // Key 1 is counted out: the filter answers without asking redb.
    /// assert!(db.begin_read()?.open_table(T)?.get(1)?.is_none());
    /// let s = db.table_filter_stats(T).unwrap();
    /// assert_eq!((s.items, s.ruled_out, s.store_lookups), (0, 1, 0));
    /// assert_eq!(db.filter_stats().mode, bloomsled_redb::FilterMode::Counting);
    /// # Ok::<(), bloomsled_redb::Error>(())
    /// ```
    pub fn set_counting(&mut self, enabled: bool) -> &mut Self {
        self.tuning.counting = enabled;
        self
    }

    /// After `hits` lookups in a row through one table handle found their keys (the filter
    /// asked each time), that handle stops asking the filter and goes straight to redb, until
    /// a lookup finds nothing; then it asks the filter again. `0`: always ask the filter.
    /// Default [`crate::DEFAULT_BYPASS_AFTER_HITS`] (64).
    ///
    /// A key the filter passes costs its probe on top of redb's `get`: a cache miss in a
    /// filter far larger than the caches, about a tenth of a present `get` at 1M keys. A
    /// stream of lookups that find their keys (a cache that hits) pays it for nothing;
    /// RocksDB offers the same trade as `optimize_filters_for_hits`. Answers do not change:
    /// redb answers every bypassed lookup. What it costs: a lookup of an absent key that
    /// arrives during a bypass reads redb once (and ends the bypass), so redb sees at most
    /// one absent key per `hits` lookups that found theirs, whatever order an adversary
    /// picks: a flood of absent keys is still ruled out by the filter. Bypassed lookups count
    /// as store lookups and in [`crate::TableFilterStats::bypassed`]. Each table handle, in a
    /// read or a write transaction, keeps its own streak (a handle opened per request starts
    /// with the filter); [`Database::get_latest`] always asks the filter.
    ///
    /// ```
    /// use bloomsled_redb::{Builder, ReadableDatabase, TableDefinition};
    /// const T: TableDefinition<u64, u64> = TableDefinition::new("t");
    /// # let dir = tempfile::tempdir().unwrap();
    /// let db = Builder::new().set_bypass_after_hits(2).create(dir.path().join("a.redb"))?;
    /// let w = db.begin_write()?;
    /// w.open_table(T)?.insert(1, 1)?;
    /// w.commit()?;
    /// let t = db.begin_read()?.open_table(T)?;
    /// for _ in 0..3 {
    ///     assert!(t.get(1)?.is_some()); // the third skips the filter
    /// }
    /// assert!(t.get(2)?.is_none()); // redb answers, and the filter is asked again
    /// assert!(t.get(3)?.is_none()); // the filter alone
    /// let s = db.table_filter_stats(T).unwrap();
    /// assert_eq!((s.bypassed, s.store_lookups, s.ruled_out), (2, 4, 1));
    /// # Ok::<(), bloomsled_redb::Error>(())
    /// ```
    pub fn set_bypass_after_hits(&mut self, hits: u32) -> &mut Self {
        self.tuning.bypass_after_hits = hits;
        self
    }

    /// Called when an open needs a repair.
    ///
    /// ```
    /// let mut b = bloomsled_redb::Builder::new();
    /// b.set_repair_callback(|s| drop(s.progress()));
    /// ```
    pub fn set_repair_callback(
        &mut self,
        callback: impl Fn(&mut RepairSession) + 'static,
    ) -> &mut Self {
        self.inner.set_repair_callback(callback);
        self
    }

    /// The cache size in bytes.
    ///
    /// ```
    /// bloomsled_redb::Builder::new().set_cache_size(1 << 20);
    /// ```
    pub fn set_cache_size(&mut self, bytes: usize) -> &mut Self {
        self.inner.set_cache_size(bytes);
        self
    }

    /// Who else may open the file. In any mode but `ExclusiveWriter` another process may
    /// write it, so the filters are off: every lookup goes to redb.
    ///
    /// ```
    /// use bloomsled_redb::{Builder, ConcurrencyMode};
    /// Builder::new().set_concurrency_mode(ConcurrencyMode::ExclusiveWriter);
    /// ```
    pub fn set_concurrency_mode(&mut self, mode: ConcurrencyMode) -> &mut Self {
        self.inner.set_concurrency_mode(mode);
        self.mode = mode;
        self
    }

    /// Whether an open verifies every checksum.
    ///
    /// ```
    /// bloomsled_redb::Builder::new().set_check_integrity_on_open(true);
    /// ```
    pub fn set_check_integrity_on_open(&mut self, enabled: bool) -> &mut Self {
        self.inner.set_check_integrity_on_open(enabled);
        self
    }

    /// Opens or creates the database at `path`, then fsyncs the folder that names it (redb
    /// fsyncs the file but never its folder, so a power cut could take a new file's name,
    /// and every commit in it, with it; see `docs/redb.md`, "Power cuts").
    ///
    /// ```
    /// # let dir = tempfile::tempdir().unwrap();
    /// let db = bloomsled_redb::Builder::new().create(dir.path().join("a.redb"))?;
    /// # drop(db);
    /// # Ok::<(), bloomsled_redb::Error>(())
    /// ```
    pub fn create(&self, path: impl AsRef<Path>) -> Result<Database, DatabaseError> {
        let path = path.as_ref();
        super::taint::heal(path)?;
        let inner = self.inner.create(path)?;
        sync_folder_of(path)?;
        Ok(self.wrap(inner, true, Some(path)))
    }

    /// Opens an existing database, then fsyncs the folder that names it (a file made by a
    /// process that died before its own folder fsync may have a name that is not durable
    /// yet).
    ///
    /// ```
    /// # let dir = tempfile::tempdir().unwrap();
    /// # let path = dir.path().join("a.redb");
    /// # drop(bloomsled_redb::Database::create(&path)?);
    /// let db = bloomsled_redb::Builder::new().open(&path)?;
    /// # drop(db);
    /// # Ok::<(), bloomsled_redb::Error>(())
    /// ```
    pub fn open(&self, path: impl AsRef<Path>) -> Result<Database, DatabaseError> {
        let path = path.as_ref();
        super::taint::heal(path)?;
        let inner = self.inner.open(path)?;
        sync_folder_of(path)?;
        Ok(self.wrap(inner, true, Some(path)))
    }

    /// Opens an existing database read-only.
    ///
    /// ```
    /// # let dir = tempfile::tempdir().unwrap();
    /// # let path = dir.path().join("a.redb");
    /// # drop(bloomsled_redb::Database::create(&path)?);
    /// let db = bloomsled_redb::Builder::new().open_read_only(&path)?;
    /// # drop(db);
    /// # Ok::<(), bloomsled_redb::Error>(())
    /// ```
    pub fn open_read_only(
        &self,
        path: impl AsRef<Path>,
    ) -> Result<ReadOnlyDatabase, DatabaseError> {
        Ok(self.wrap_read_only(self.inner.open_read_only(path)?))
    }

    /// [`Builder::open_read_only`] over a storage backend.
    ///
    /// ```
    /// # let dir = tempfile::tempdir().unwrap();
    /// # let path = dir.path().join("a.redb");
    /// # drop(bloomsled_redb::Database::create(&path)?);
    /// use bloomsled_redb::backends::FileBackend;
    /// let file = std::fs::File::open(&path)?;
    /// let db = bloomsled_redb::Builder::new()
    ///     .open_read_only_with_backend(FileBackend::new(file)?)?;
    /// # drop(db);
    /// # Ok::<(), bloomsled_redb::Error>(())
    /// ```
    pub fn open_read_only_with_backend(
        &self,
        backend: impl StorageBackend,
    ) -> Result<ReadOnlyDatabase, DatabaseError> {
        Ok(self.wrap_read_only(self.inner.open_read_only_with_backend(backend)?))
    }

    /// Opens or creates a database in an open file.
    ///
    /// ```
    /// # let dir = tempfile::tempdir().unwrap();
    /// let file = tempfile::tempfile_in(dir.path())?;
    /// let db = bloomsled_redb::Builder::new().create_file(file)?;
    /// # drop(db);
    /// # Ok::<(), bloomsled_redb::Error>(())
    /// ```
    pub fn create_file(&self, file: File) -> Result<Database, DatabaseError> {
        #[allow(deprecated)]
        Ok(self.wrap(self.inner.create_file(file)?, true, None))
    }

    /// Opens or creates a database over a storage backend.
    ///
    /// ```
    /// use bloomsled_redb::backends::InMemoryBackend;
    /// let db = bloomsled_redb::Builder::new().create_with_backend(InMemoryBackend::new())?;
    /// # drop(db);
    /// # Ok::<(), bloomsled_redb::Error>(())
    /// ```
    pub fn create_with_backend(
        &self,
        backend: impl StorageBackend,
    ) -> Result<Database, DatabaseError> {
        Ok(self.wrap(self.inner.create_with_backend(backend)?, false, None))
    }
}

/// Fsyncs the folder holding `path`, so that the file's name is as durable as its commits.
/// redb makes a new file with `O_CREAT` and fsyncs its data at each durable commit, but a
/// file system that follows POSIX to the letter keeps a new name only once its folder was
/// fsynced: without this, a power cut can take the whole database with it. One fsync per
/// open. Only on Unix (elsewhere a folder cannot be opened to be synced; NTFS journals its
/// names). An error names the folder; the database is not opened.
fn sync_folder_of(path: &Path) -> Result<(), DatabaseError> {
    #[cfg(unix)]
    {
        let dir = match path.parent() {
            Some(p) if !p.as_os_str().is_empty() => p,
            _ => Path::new("."),
        };
        File::open(dir).and_then(|d| d.sync_all()).map_err(|e| {
            let what = format!(
                "fsync of the folder {} that names the database: {e}",
                dir.display()
            );
            DatabaseError::Storage(redb::StorageError::Io(std::io::Error::new(e.kind(), what)))
        })?;
    }
    #[cfg(not(unix))]
    let _ = path;
    Ok(())
}

impl Builder {
    /// A handle over `inner` with this builder's settings (`close_writes`: a clean close
    /// stores the filters; `path`: the file, for the crash journals beside it).
    fn wrap(&self, inner: redb::Database, close_writes: bool, path: Option<&Path>) -> Database {
        Database::wrap(inner, self.mode, self.tuning, close_writes, path)
    }

    /// A read-only handle over `inner` with this builder's settings.
    fn wrap_read_only(&self, inner: redb::ReadOnlyDatabase) -> ReadOnlyDatabase {
        ReadOnlyDatabase::wrap(inner, self.mode, self.tuning)
    }
}

//! redb 4 with a Bloom filter per table: a lookup of a key the filter rules out answers
//! without touching redb.
//!
//! The API is redb's, same names and types, so switching is a change of import: `Database`,
//! `Builder`, transactions and tables wrap redb's and ask the table's filter (the core's
//! [`bloomsled::Filter`], seeded secretly per table) before a single-key lookup; every other
//! type is redb's own, re-exported (but `Entry` and `ExtractIf`, which remove keys). Every
//! write that can create a key puts it in the filter before redb stores it: no false
//! negative, ever. Removals and aborts leave false positives only (counting mode,
//! `Builder::set_counting`, counts committed removals out); restoring a savepoint, renaming
//! or deleting a table distrusts the filters until they are rebuilt from a scan. The design
//! is in `docs/redb.md`.
//!
//! ```
//! use bloomsled_redb::{Database, ReadableDatabase, ReadableTable, TableDefinition};
//! const URLS: TableDefinition<&str, u64> = TableDefinition::new("urls");
//! # let dir = tempfile::tempdir().unwrap();
//! let db = Database::create(dir.path().join("seen.redb"))?;
//! let w = db.begin_write()?;
//! w.open_table(URLS)?.insert("https://example.com/", &1)?;
//! w.commit()?;
//!
//! // In a request handler: the filter answers before any transaction exists.
//! assert!(db.get_latest(URLS, "https://example.com/other")?.is_none());
//! assert_eq!(db.get_latest(URLS, "https://example.com/")?.unwrap().value(), 1);
//!
//! // redb's own way, same code as with redb.
//! let r = db.begin_read()?;
//! assert!(r.open_table(URLS)?.get("https://example.com/other")?.is_none());
//! # Ok::<(), bloomsled_redb::Error>(())
//! ```
#![forbid(unsafe_code)]
#![deny(missing_docs)]

mod db;
mod filters;
mod multimap;
mod persist;
mod sync;
mod table;
mod transactions;
mod writing;

#[cfg(feature = "metrics")]
pub use db::TABLE_SERIES;
pub use db::{
    Builder, Database, FilterSource, FilterStats, ReadOnlyDatabase, ReadableDatabase,
    TableFilterStats,
};
pub use multimap::{
    MultimapRange, MultimapTable, MultimapValue, OwnedMultimapRange, OwnedMultimapValue,
    ReadOnlyMultimapTable, ReadableMultimapTable,
};
pub use persist::RESERVED_PREFIX;
pub use table::{CursorMut, Entry, ExtractIf, OccupiedEntry, ReadOnlyTable, Table, VacantEntry};
pub use transactions::{ReadTransaction, WriteTransaction};

/// The default of [`Builder::set_bypass_after_hits`]: after 64 lookups in a row through one
/// table handle found their keys, it skips the filter until a lookup finds nothing.
///
/// ```
/// assert_eq!(bloomsled_redb::DEFAULT_BYPASS_AFTER_HITS, 64);
/// ```
pub const DEFAULT_BYPASS_AFTER_HITS: u32 = 64;

/// The core's filter mode and counter ceiling, as [`FilterStats`] and [`TableFilterStats`]
/// report them (counting mode: `Builder::set_counting`).
pub use bloomsled::{COUNTER_MAX, FilterMode};

pub use redb::backends;
pub use redb::{
    AccessGuard, AccessGuardMut, AccessGuardMutInPlace, BackendError, CacheStats, CommitError,
    CompactionError, ConcurrencyMode, Cursor, CursorError, DatabaseError, DatabaseStats,
    Durability, Error, Key, MultimapTableDefinition, MutInPlaceValue, OwnedAccessGuard, OwnedRange,
    Range, ReadOnlyUntypedMultimapTable, ReadOnlyUntypedTable, ReadableTable,
    ReadableTableMetadata, RepairSession, Result, Savepoint, SavepointError, SetDurabilityError,
    StorageBackend, StorageError, TableDefinition, TableError, TableStats, TransactionError,
    TypeName, UntypedMultimapTableHandle, UntypedTableHandle, Value,
};

/// A table's name (redb's `TableHandle`): a definition, an open table or a listed name.
///
/// ```
/// use bloomsled_redb::{TableDefinition, TableHandle};
/// const T: TableDefinition<u64, u64> = TableDefinition::new("t");
/// assert_eq!(T.name(), "t");
/// ```
pub trait TableHandle {
    /// The table's name.
    fn name(&self) -> &str;
}

/// A multimap table's name (redb's `MultimapTableHandle`).
///
/// ```
/// use bloomsled_redb::{MultimapTableDefinition, MultimapTableHandle};
/// const M: MultimapTableDefinition<u64, u64> = MultimapTableDefinition::new("m");
/// assert_eq!(M.name(), "m");
/// ```
pub trait MultimapTableHandle {
    /// The table's name.
    fn name(&self) -> &str;
}

impl<K: Key + 'static, V: Value + 'static> TableHandle for TableDefinition<'_, K, V> {
    fn name(&self) -> &str {
        redb::TableHandle::name(self)
    }
}

impl TableHandle for UntypedTableHandle {
    fn name(&self) -> &str {
        redb::TableHandle::name(self)
    }
}

impl TableHandle for ReadOnlyUntypedTable {
    fn name(&self) -> &str {
        redb::TableHandle::name(self)
    }
}

impl<K: Key + 'static, V: Key + 'static> MultimapTableHandle for MultimapTableDefinition<'_, K, V> {
    fn name(&self) -> &str {
        redb::MultimapTableHandle::name(self)
    }
}

impl MultimapTableHandle for UntypedMultimapTableHandle {
    fn name(&self) -> &str {
        redb::MultimapTableHandle::name(self)
    }
}

impl MultimapTableHandle for ReadOnlyUntypedMultimapTable {
    fn name(&self) -> &str {
        redb::MultimapTableHandle::name(self)
    }
}

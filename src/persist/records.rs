//! The store boundary of persistence: what the meta tree ([`super::Meta`]) and recovery
//! ask of the store that holds the data, and nothing more. The persistence layer names no
//! store; each store implements these traits in its own layer (sled's:
//! `src/store/records.rs`), and its own error texts and step names come with it.

use super::poison::FileFault;
use crate::error::{Error, Result};

/// What [`RecordStore::for_each_with_prefix`] calls with each record's key and value.
pub(crate) type EachRecord<'a> = dyn FnMut(&[u8], &[u8]) -> Result<()> + 'a;

/// A record store with a durable flush: small records by key, kept in the store beside
/// the data they vouch for (so that restoring the data restores its records), and a flush
/// after which every record written before it survives a power cut, or an error.
///
/// A durable flush is [`RecordStore::flush`] then [`RecordStore::sync`]; the caller
/// (`Meta`) checks the database's poison before each, and poisons it with the fault either
/// returns (a failed sync is never forgotten: after it nothing is acknowledged).
///
/// A second store implements it the same way. redb's, say, over a table of the database
/// file (a sketch: `bloomsled-redb` keeps its own records today):
///
/// ```ignore
/// impl RecordStore for RedbRecords {
///     fn get(&self, key: &[u8]) -> Result<Option<Vec<u8>>> {
///         let read = self.db.begin_read()?;
///         let table = read.open_table(RECORDS)?;
///         Ok(table.get(key)?.map(|v| v.value().to_vec()))
///     }
///     fn insert(&self, key: &[u8], value: &[u8]) -> Result<()> {
///         self.write(|table| table.insert(key, value).map(drop)) // a commit, not durable
///     }
///     // remove, for_each_with_prefix, is_empty: the same over the table
///     fn flush(&self) -> std::result::Result<usize, FileFault> {
///         // a commit with `Durability::Immediate`: redb's commit fsyncs the file
///         self.commit_durably().map_err(|e| self.fault("redb's commit", e))
///     }
///     fn sync(&self) -> std::result::Result<(), FileFault> {
///         Ok(()) // the commit was durable
///     }
///     // …
/// }
/// ```
pub(crate) trait RecordStore: Send + Sync {
    /// The record under `key`, if any.
    fn get(&self, key: &[u8]) -> Result<Option<Vec<u8>>>;

    /// Stores `value` under `key` (durable only after a durable flush).
    fn insert(&self, key: &[u8], value: &[u8]) -> Result<()>;

    /// Deletes the record under `key`, if any (durable only after a durable flush).
    fn remove(&self, key: &[u8]) -> Result<()>;

    /// Calls `each` with every record whose key starts with `prefix`, in key order; the
    /// first error (the store's or `each`'s) ends the scan. `each` may write records.
    fn for_each_with_prefix(&self, prefix: &[u8], each: &mut EachRecord<'_>) -> Result<()>;

    /// True if the store holds no record.
    fn is_empty(&self) -> Result<bool>;

    /// The error of a read of the store at open (`e` from one of the reads above): an I/O
    /// error names the store.
    fn read_failed(&self, e: Error) -> Error;

    /// Makes durable what creating the store left undurable (its files' names, settings
    /// written once), before anything persistence makes durable: called once, at open.
    fn open_durably(&mut self) -> std::result::Result<(), FileFault>;

    /// The store's flush: every write before it is written out (durable against a process
    /// crash, not necessarily a power cut: that is [`RecordStore::sync`]'s). Returns the
    /// store's count of bytes.
    fn flush(&self) -> std::result::Result<usize, FileFault>;

    /// Makes durable what the store's flush wrote (also after a flush the store ran
    /// itself, as sled's transactions do at their commit).
    fn sync(&self) -> std::result::Result<(), FileFault>;

    /// The fault of a flush the caller ran itself through the store's own API, which
    /// failed with `error`.
    fn flush_fault(&self, error: String) -> FileFault;
}

/// What recovery asks of a tree's keys before its filter exists: whether it holds any (an
/// empty tree without a record is a new one).
pub(crate) trait TreeKeys {
    /// True if the tree holds no key.
    fn is_empty(&self) -> Result<bool>;
}

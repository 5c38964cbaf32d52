//! Filters that survive a clean close: bloomsled's tables inside the user's redb file, in
//! the core's formats, judged by the core's rule (`bloomsled::persist::judge_stored`, which
//! is `trust::judge`, the rule sled's snapshots go through).
//!
//! * `__bloomsled_filters`: per table, its filter as the core's snapshot (header and pages,
//!   as a snapshot file holds them: database id, the table's tree id, a random snapshot id,
//!   the sequence of the close that wrote it, all under the header's CRC).
//! * `__bloomsled_records`: per table, the core's tree record (104 bytes, CRC'd) naming that
//!   snapshot, clean (`dirty < sequence`); under [`DATABASE`] the core's database record
//!   (a random id drawn at the first close); under [`CLOSE`] the last clean close's
//!   sequence and random nonce, in the same 36-byte form (the journals' database id).
//!
//! A record exists only while its table is clean: the first write transaction that touches a
//! table (opens it for writing, deletes or renames it) removes its record **in that same
//! transaction**, so redb commits (or loses) the data and the mark together; a savepoint
//! restore removes every record in its transaction. A clean close writes, in one commit, the
//! snapshot and record of every table whose filter is complete for the latest state and was
//! written since the previous close (or whose record this session did not trust: it was
//! scanned); the records of tables untouched since stay as they are, with their snapshots. At open, a table's filter is loaded instead of scanned only if the
//! core's rule trusts its snapshot for its record and this database's id, and the record's
//! tree id and seed are the table's ([`table_tree`]). Anything else (bytes of an older
//! version of this crate included): a scan, as at first use.
//!
//! Why a record needs no "last close" of its own: every record present in a committed state
//! is current. A commit that makes a table's stored filter incomplete removes its record in
//! that commit, a restore removes them all in its commit, and a close writes a new snapshot
//! id for every filter it stores; so a record of an older close is in a state only if its
//! table was untouched since, and then its filter is complete. A record or snapshot put back
//! alone names another snapshot id (refused); both put back together by hand are a write by
//! plain redb, outside the contract as any other. So records carry the core's fields and no
//! close: re-stamping them at each close would rewrite every stored snapshot (the record's
//! sequence is the snapshot's), and adds nothing. The close's sequence and nonce remain for
//! the crash journals (`marks.rs`), whose files outlive the commits that name them.
//!
//! Names beginning with [`RESERVED_PREFIX`] are bloomsled's: hidden from `list_tables`.

use std::collections::{HashMap, HashSet};

use bloomsled::persist::{self as core, StoredIds};
use redb::{ReadableTable as _, TableDefinition};

use crate::filters::{Bits, Built, Kind};

mod marks;
pub(crate) use marks::{
    Mark, RawMark, marked_filter, raw_mark, remove_mark, write_base, write_mark,
};

/// Table names beginning with this are bloomsled's own (its filters and their records),
/// hidden from `list_tables`; a user's table must not use it.
///
/// ```
/// use bloomsled_redb::{Database, ReadableDatabase, TableDefinition};
/// const T: TableDefinition<u64, u64> = TableDefinition::new("t");
/// # let dir = tempfile::tempdir().unwrap();
/// # let path = dir.path().join("a.redb");
/// let db = Database::create(&path)?;
/// let w = db.begin_write()?;
/// w.open_table(T)?.insert(1, 1)?;
/// w.commit()?;
/// drop(db); // writes bloomsled's tables
/// let db = Database::open(&path)?;
/// let r = db.begin_read()?;
/// assert!(r.list_tables()?.all(|t| {
///     !bloomsled_redb::TableHandle::name(&t).starts_with(bloomsled_redb::RESERVED_PREFIX)
/// }));
/// # Ok::<(), bloomsled_redb::Error>(())
/// ```
pub const RESERVED_PREFIX: &str = "__bloomsled_";

/// A table whose filter holds fewer keys is not written at close: its scan at the next open
/// costs less than the pages its filter would take in the file.
pub(crate) const MIN_ITEMS: u64 = 256;

pub(crate) const RECORDS: TableDefinition<&str, &[u8]> =
    TableDefinition::new("__bloomsled_records");
pub(crate) const FILTERS: TableDefinition<&str, &[u8]> =
    TableDefinition::new("__bloomsled_filters");
pub(crate) const MARKS: TableDefinition<&str, &[u8]> = TableDefinition::new("__bloomsled_journals");

/// The database record's key in `RECORDS` (table keys all begin with `t/` or `m/`).
const DATABASE: &str = "database";
/// The last clean close's key in `RECORDS`.
const CLOSE: &str = "close";

/// True if `name` is bloomsled's own table.
pub(crate) fn reserved(name: &str) -> bool {
    name.starts_with(RESERVED_PREFIX)
}

/// A table's key in both of bloomsled's tables.
pub(crate) fn key(kind: Kind, name: &str) -> String {
    match kind {
        Kind::Table => format!("t/{name}"),
        Kind::Multimap => format!("m/{name}"),
    }
}

/// One clean close: its sequence number and a random nonce (so the journals of another
/// history with the same sequence are not taken for this one's).
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) struct Close {
    pub(crate) sequence: u64,
    pub(crate) nonce: u64,
}

impl Close {
    /// The close's id, `sequence ‖ nonce`: its database record's, and the database id of
    /// the journals (and their marks) that extend it.
    pub(crate) fn id(self) -> [u8; 16] {
        join(self.sequence, self.nonce)
    }

    /// The close as the core's database record of id [`Close::id`] (its CRC, no format of
    /// this crate).
    fn encode(self) -> Vec<u8> {
        core::encode_database(self.id())
    }

    fn decode(bytes: &[u8]) -> Option<Close> {
        let (sequence, nonce) = split(core::decode_database(bytes).ok()?);
        Some(Close { sequence, nonce })
    }
}

/// The 16 bytes of two words.
pub(crate) fn join(a: u64, b: u64) -> [u8; 16] {
    let mut out = [0u8; 16];
    out[..8].copy_from_slice(&a.to_le_bytes());
    out[8..].copy_from_slice(&b.to_le_bytes());
    out
}

/// The two words of 16 bytes.
pub(crate) fn split(id: [u8; 16]) -> (u64, u64) {
    let mut a = [0u8; 8];
    let mut b = [0u8; 8];
    a.copy_from_slice(&id[..8]);
    b.copy_from_slice(&id[8..]);
    (u64::from_le_bytes(a), u64::from_le_bytes(b))
}

/// A table's tree id under `seed`: the xxh3 of its key under that seed, and the seed (its
/// snapshots', records' and journals' id). Derived, so a record or snapshot moved under
/// another table's key is refused.
pub(crate) fn table_tree(key: &str, seed: u64) -> [u8; 16] {
    join(bloomsled::hash::hash_key(key.as_bytes(), seed), seed)
}

pub(crate) fn random_id() -> Result<[u8; 16], redb::StorageError> {
    let draw = || {
        bloomsled::hash::secret_seed()
            .map_err(|e| redb::StorageError::Io(std::io::Error::other(e.to_string())))
    };
    Ok(join(draw()?, draw()?))
}

/// What a table's record names: the seed and the snapshot (id and sequence).
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) struct Record {
    pub(crate) seed: u64,
    pub(crate) snapshot: [u8; 16],
    pub(crate) sequence: u64,
}

impl Record {
    /// What `bytes` names, if it is the core's record of table `key` (its tree id).
    fn decode(key: &str, bytes: &[u8], database: [u8; 16]) -> Option<Record> {
        let (ids, seed) = core::decode_record(bytes, database).ok()?;
        (ids.tree == table_tree(key, seed)).then_some(Record {
            seed,
            snapshot: ids.snapshot,
            sequence: ids.sequence,
        })
    }
}

/// The last clean close, the database id and their raw bytes (what a build compares
/// between its two transactions), if both decode.
fn head(
    records: &impl redb::ReadableTable<&'static str, &'static [u8]>,
) -> Option<(Close, [u8; 16], Vec<u8>)> {
    let close = records.get(CLOSE).ok()??.value().to_vec();
    let database = records.get(DATABASE).ok()??.value().to_vec();
    let c = Close::decode(&close)?;
    let d = core::decode_database(&database).ok()?;
    Some((c, d, [close, database].concat()))
}

/// What a read of bloomsled's tables found at open: the keys that have a record (a write
/// must remove them), and the seeds records give (a table made anew takes its record's seed,
/// so the filter it may load hashes as its writers do); the last clean close, the records
/// of this database and the journal marks naming that close (a session's journals extend
/// them), and the keys that have a mark at all (a delete, rename or restore removes them).
#[derive(Default)]
pub(crate) struct OnDisk {
    pub(crate) keys: HashSet<String>,
    pub(crate) seeds: HashMap<String, u64>,
    pub(crate) close: Option<Close>,
    pub(crate) records: HashMap<String, Record>,
    pub(crate) marks: HashMap<String, Mark>,
    pub(crate) marked: HashSet<String>,
}

/// Reads the records of `txn`'s state; nothing on any error (nothing is then trusted).
pub(crate) fn read_on_disk(txn: &redb::ReadTransaction) -> OnDisk {
    let mut on_disk = OnDisk::default();
    let Ok(records) = txn.open_table(RECORDS) else {
        return on_disk;
    };
    let head = head(&records);
    let Ok(iter) = records.iter() else {
        return on_disk;
    };
    for entry in iter {
        let Ok((k, v)) = entry else {
            return OnDisk::default();
        };
        let k = k.value();
        if k == CLOSE || k == DATABASE {
            continue;
        }
        on_disk.keys.insert(k.to_string());
        if let Some(r) = head
            .as_ref()
            .and_then(|h| Record::decode(k, v.value(), h.1))
        {
            on_disk.seeds.insert(k.to_string(), r.seed);
            on_disk.records.insert(k.to_string(), r);
        }
    }
    on_disk.close = head.map(|h| h.0);
    read_marks(txn, &mut on_disk);
    on_disk
}

/// Adds the journal marks of `txn`'s state to `on_disk` (whose close is read): nothing on
/// an error (no journal is then replayed or continued; a later delete of a mark it missed
/// finds none to delete, and that mark names journals no writer continues: a scan).
fn read_marks(txn: &redb::ReadTransaction, on_disk: &mut OnDisk) {
    let Ok(marks) = txn.open_table(MARKS) else {
        return;
    };
    let Ok(iter) = marks.iter() else {
        return;
    };
    for entry in iter {
        let Ok((k, v)) = entry else {
            return;
        };
        let k = k.value().to_string();
        on_disk.marked.insert(k.clone());
        let valid = Mark::decode(v.value(), &k)
            .filter(|m| Some(m.close) == on_disk.close && !on_disk.keys.contains(&k));
        if let Some(m) = valid {
            on_disk.seeds.insert(k.clone(), m.base.seed);
            on_disk.marks.insert(k, m);
        }
    }
}

/// A table's record and the head as `txn` sees them, raw (a build compares them between
/// its two transactions).
pub(crate) fn raw_record(txn: &redb::ReadTransaction, key: &str) -> Option<(Vec<u8>, Vec<u8>)> {
    let records = txn.open_table(RECORDS).ok()?;
    let (_, _, head) = head(&records)?;
    let record = records.get(key).ok()??.value().to_vec();
    Some((head, record))
}

/// The table's filter from its record in `txn`'s state, if the core's rule trusts its
/// snapshot and the record is the table's (tree id and seed), and it is of the kind asked
/// for (`counting`: the core's counting kind; a filter of the other mode is refused, and
/// the table scanned).
pub(crate) fn load(
    txn: &redb::ReadTransaction,
    key: &str,
    seed: u64,
    counting: bool,
) -> Option<Bits> {
    let records = txn.open_table(RECORDS).ok()?;
    let (_, database, _) = head(&records)?;
    let record = records.get(key).ok()??;
    let named = Record::decode(key, record.value(), database)?;
    if named.seed != seed {
        return None;
    }
    let filters = txn.open_table(FILTERS).ok()?;
    let bytes = filters.get(key).ok()?;
    let snapshot = bytes.as_ref().map(|b| b.value());
    match counting {
        true => core::judge_stored_counting(record.value(), database, snapshot)
            .ok()
            .map(Bits::Counting),
        false => core::judge_stored(record.value(), database, snapshot)
            .ok()
            .map(Bits::Plain),
    }
}

/// Removes the records of `keys` in `txn` (their tables are being written).
pub(crate) fn mark_dirty<'k>(
    txn: &redb::WriteTransaction,
    keys: impl IntoIterator<Item = &'k str>,
) -> Result<(), redb::TableError> {
    let mut records = txn.open_table(RECORDS)?;
    for k in keys {
        records.remove(k)?;
    }
    Ok(())
}

/// Removes every record and journal mark in `txn` (after a savepoint restore brought back
/// older ones). The database record and close go too: the next close draws both anew.
pub(crate) fn forget_all(txn: &redb::WriteTransaction) -> Result<(), redb::TableError> {
    txn.delete_table(RECORDS)?;
    txn.delete_table(MARKS)?;
    Ok(())
}

/// The clean close: in one commit, the snapshots and records of `clean` whose tables have
/// no record (written since the last close) or one this session did not trust (its table
/// was scanned), the records of the others kept with their snapshots, a new close and the
/// database record (drawn now if there is none: no record of before is then kept).
/// Records that do not decode are dropped, and so are snapshots without a record and every
/// journal mark.
pub(crate) fn write_close(db: &redb::Database, clean: &[Clean]) -> Result<(), redb::Error> {
    // Never wait: a leaked table of a failed commit may hold redb's write lock for good.
    let txn = db.try_begin_write()?;
    {
        let mut records = txn.open_table(RECORDS)?;
        let mut filters = txn.open_table(FILTERS)?;
        let old = records.get(CLOSE)?.and_then(|v| Close::decode(v.value()));
        let database = records
            .get(DATABASE)?
            .and_then(|v| core::decode_database(v.value()).ok());
        let close = Close {
            sequence: old.map_or(1, |c| c.sequence.wrapping_add(1).max(1)),
            nonce: bloomsled::hash::secret_seed()
                .map_err(|e| redb::StorageError::Io(std::io::Error::other(e.to_string())))?,
        };
        // A table built this session other than from its record was scanned: its record
        // was not trusted (an older one put back, say), so its filter is rewritten.
        let scanned: HashSet<&str> = clean
            .iter()
            .filter(|c| !c.2)
            .map(|c| c.0.as_str())
            .collect();
        let mut kept: Vec<(String, Vec<u8>)> = Vec::new();
        if let Some(database) = database {
            for entry in records.iter()? {
                let (k, v) = entry?;
                let k = k.value().to_string();
                let valid = Record::decode(&k, v.value(), database).is_some();
                if valid && !scanned.contains(k.as_str()) {
                    kept.push((k, v.value().to_vec()));
                }
            }
        }
        let database = match database {
            Some(d) => d,
            None => random_id()?,
        };
        records.retain(|_, _| false)?;
        for (k, r) in &kept {
            records.insert(k.as_str(), r.as_slice())?;
        }
        // A table whose record was kept is untouched since the close that stored its
        // filter: that snapshot is complete for this state (the filter in memory may hold
        // more, keys of aborted writes), so it stays as it is.
        let kept_keys: HashSet<&str> = kept.iter().map(|(k, _)| k.as_str()).collect();
        for (k, built, _) in clean
            .iter()
            .filter(|(k, _, _)| !kept_keys.contains(k.as_str()))
        {
            let f = built.filter();
            let ids = StoredIds {
                database,
                tree: table_tree(k, f.seed()),
                snapshot: random_id()?,
                sequence: close.sequence,
            };
            let (snapshot, record) = match built.counting() {
                Some(c) => (
                    core::encode_counting_snapshot(c, &ids),
                    core::encode_counting_record(c, &ids),
                ),
                None => (core::encode_snapshot(f, &ids), core::encode_record(f, &ids)),
            };
            filters.insert(k.as_str(), snapshot.as_slice())?;
            records.insert(k.as_str(), record.as_slice())?;
        }
        let orphans: Vec<String> = filters
            .iter()?
            .filter_map(|e| e.ok().map(|(k, _)| k.value().to_string()))
            .filter(|k| records.get(k.as_str()).ok().flatten().is_none())
            .collect();
        for k in orphans {
            filters.remove(k.as_str())?;
        }
        records.insert(CLOSE, close.encode().as_slice())?;
        records.insert(DATABASE, core::encode_database(database).as_slice())?;
    }
    // The journals extend the old close's filters: their marks go with it.
    txn.delete_table(MARKS)?;
    txn.commit()?;
    Ok(())
}

/// A table's filter complete for the latest committed state, at a clean close: its key,
/// the filter, and whether it was loaded from the table's record in this session (the
/// record then judged and trusted).
pub(crate) type Clean = (String, std::sync::Arc<Built>, bool);

/// Reads bloomsled's records of `db`'s latest state.
pub(crate) fn read_on_disk_of(db: &impl redb::ReadableDatabase) -> OnDisk {
    db.begin_read()
        .map_or_else(|_| OnDisk::default(), |t| read_on_disk(&t))
}

#[cfg(test)]
mod tests {
    use super::*;
    use bloomsled::Filter;
    use proptest::prelude::*;

    proptest! {
        /// Any bytes: a close, a record or `None`; never a panic.
        #[test]
        fn any_bytes_decode_or_not_without_a_panic(
            bytes in proptest::collection::vec(any::<u8>(), 0..160),
        ) {
            let _ = Close::decode(&bytes);
            let _ = Record::decode("t/x", &bytes, [1; 16]);
        }
    }

    #[test]
    fn a_record_under_another_tables_key_is_not_the_tables() {
        let f = Filter::new(100, 0.01).unwrap();
        let ids = StoredIds {
            database: [1; 16],
            tree: table_tree("t/a", f.seed()),
            snapshot: [3; 16],
            sequence: 1,
        };
        let r = core::encode_record(&f, &ids);
        assert!(Record::decode("t/a", &r, [1; 16]).is_some());
        assert!(Record::decode("t/b", &r, [1; 16]).is_none());
        assert!(Record::decode("m/a", &r, [1; 16]).is_none());
    }
}

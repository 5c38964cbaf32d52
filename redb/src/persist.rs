//! Filters that survive a clean close: bloomsled's two tables inside the user's redb file.
//!
//! * `__bloomsled_filters`: per table, its filter as the core's [`Filter::to_bytes`] writes it
//!   (a stable, checksummed form; this crate adds no filter format of its own).
//! * `__bloomsled_records`: per table, a small **record** saying "the filter in
//!   `__bloomsled_filters` is this table's, clean as of close N" (the close's sequence and a
//!   random nonce, the table's seed, the length and xxh3 of the filter's bytes), and one
//!   **header** naming the last clean close.
//!
//! A record exists only while its table is clean: the first write transaction that touches a
//! table (opens it for writing, deletes or renames it) removes its record **in that same
//! transaction**, so redb commits (or loses) the data and the mark together; a savepoint
//! restore removes every record in its transaction. A clean close writes, in one commit, the
//! filter and record of every table whose filter is complete for the latest state and was
//! written since the previous close, re-stamps the records of tables untouched since (their
//! filters' bytes stay), and a new header. At open, a
//! table's filter is loaded instead of scanned only if its record decodes, names the header's
//! close, carries the table's seed, and the bytes match its length and xxh3 and decode with
//! [`Filter::from_bytes`] to that seed. Anything else: a scan, as at first use.
//!
//! * `__bloomsled_journals`: per table written since the last clean close whose filter that
//!   close stored, a **mark**: "crash journals `1..=last` (`journals.rs`) extend the
//!   filter close N stored for this table (its seed, length and xxh3)"; per table made
//!   since that close, an **empty mark** (its own magic): "crash journals `1..=last` extend
//!   the empty filter of this seed (the length and xxh3 of its bytes)", first written by the
//!   transaction that made the table. Written in the first transaction of each session
//!   that writes the table, with the data, and removed by a delete, rename or restore (in
//!   its transaction) and by the next clean close.
//!
//! Names beginning with [`RESERVED_PREFIX`] are bloomsled's: hidden from `list_tables`.

use std::collections::{HashMap, HashSet};

use bloomsled::Filter;
use redb::{ReadableTable as _, TableDefinition};

use crate::filters::{Built, Kind};

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

/// The header's key in `RECORDS` (table keys all begin with `t/` or `m/`).
const HEADER: &str = "close";
const RECORD_MAGIC: &[u8; 4] = b"BSR1";
const HEADER_MAGIC: &[u8; 4] = b"BSH1";
/// Bytes of a record (magic, 5 fields, check word).
#[cfg(test)]
const RECORD_LEN: usize = 4 + 8 * 6;
const MARK_MAGIC: &[u8; 4] = b"BSJ1";
/// A mark whose journals extend the empty filter (the table was made after the close); no
/// flipped bit makes one magic the other.
const EMPTY_MARK_MAGIC: &[u8; 4] = b"BSJE";
/// Bytes of a mark (magic, 6 fields, check word).
#[cfg(test)]
const MARK_LEN: usize = 4 + 8 * 7;

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

/// One clean close: its sequence number and a random nonce (so a record of another history
/// with the same sequence is not taken for this one's).
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) struct Close {
    pub(crate) sequence: u64,
    pub(crate) nonce: u64,
}

/// A table's record: its filter is clean as of `close`.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) struct Record {
    pub(crate) close: Close,
    pub(crate) seed: u64,
    pub(crate) len: u64,
    pub(crate) digest: u64,
}

fn words(bytes: &[u8]) -> impl Iterator<Item = u64> + '_ {
    bytes
        .chunks_exact(8)
        .map(|c| u64::from_le_bytes(c.try_into().unwrap_or_default()))
}

fn check(fields: &[u64]) -> u64 {
    let bytes: Vec<u8> = fields.iter().flat_map(|w| w.to_le_bytes()).collect();
    bloomsled::hash::hash_key(&bytes, 0x6273_7265_6362)
}

/// `magic`, the little-endian `fields`, then their [`check`] word: the form of every value
/// this module stores (header, records, marks).
fn seal(magic: &[u8; 4], fields: &[u64]) -> Vec<u8> {
    let mut out = magic.to_vec();
    for w in fields.iter().chain([check(fields)].iter()) {
        out.extend_from_slice(&w.to_le_bytes());
    }
    out
}

/// The `n` fields of a value [`seal`] wrote with `magic`; `None` for anything else (another
/// length or magic, a check word that does not match).
fn unseal(bytes: &[u8], magic: &[u8; 4], n: usize) -> Option<Vec<u64>> {
    if bytes.len() != 4 + 8 * (n + 1) || &bytes[..4] != magic {
        return None;
    }
    let w: Vec<u64> = words(&bytes[4..]).collect();
    (check(&w[..n]) == w[n]).then_some(w)
}

impl Record {
    pub(crate) fn encode(&self) -> Vec<u8> {
        let c = self.close;
        seal(
            RECORD_MAGIC,
            &[c.sequence, c.nonce, self.seed, self.len, self.digest],
        )
    }

    /// `None` for anything that is not a record this version wrote, intact.
    pub(crate) fn decode(bytes: &[u8]) -> Option<Record> {
        Some(Record::from_words(&unseal(bytes, RECORD_MAGIC, 5)?))
    }

    /// A record's five words, in [`Record::encode`]'s order (also the head of a mark's).
    fn from_words(w: &[u64]) -> Record {
        Record {
            close: Close {
                sequence: w[0],
                nonce: w[1],
            },
            seed: w[2],
            len: w[3],
            digest: w[4],
        }
    }
}

/// A table's journal mark: written since the clean close `base` names, its crash journals
/// `1..=last` extend the filter `base` names (the table's seed, the filter bytes' length
/// and xxh3): the one that close stored for the table, or, if `empty`, the empty filter of
/// the table's seed at its first sizing (the table did not exist when the transaction
/// that wrote the chain's first mark began: see `filters/journals.rs`).
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) struct Mark {
    pub(crate) base: Record,
    pub(crate) empty: bool,
    pub(crate) last: u64,
}

impl Mark {
    pub(crate) fn encode(&self) -> Vec<u8> {
        let r = self.base;
        seal(
            if self.empty {
                EMPTY_MARK_MAGIC
            } else {
                MARK_MAGIC
            },
            &[
                r.close.sequence,
                r.close.nonce,
                r.seed,
                r.len,
                r.digest,
                self.last,
            ],
        )
    }

    /// `None` for anything that is not a mark this version wrote, intact.
    pub(crate) fn decode(bytes: &[u8]) -> Option<Mark> {
        let (w, empty) = match unseal(bytes, MARK_MAGIC, 6) {
            Some(w) => (w, false),
            None => (unseal(bytes, EMPTY_MARK_MAGIC, 6)?, true),
        };
        Some(Mark {
            base: Record::from_words(&w),
            empty,
            last: w[5],
        })
    }
}

fn encode_header(close: Close) -> Vec<u8> {
    seal(HEADER_MAGIC, &[close.sequence, close.nonce])
}

fn decode_header(bytes: &[u8]) -> Option<Close> {
    let w = unseal(bytes, HEADER_MAGIC, 2)?;
    Some(Close {
        sequence: w[0],
        nonce: w[1],
    })
}

/// The xxh3 of a filter's bytes, as its record keeps it.
pub(crate) fn digest(bytes: &[u8]) -> u64 {
    bloomsled::hash::hash_key(bytes, 0)
}

/// What a read of bloomsled's tables found at open: the keys that have a record (a write
/// must remove them), and the seeds records give (a table made anew takes its record's seed,
/// so the filter it may load hashes as its writers do); the last clean close, the records
/// valid under it and the journal marks naming it (a session's journals extend them), and
/// the keys that have a mark at all (a delete, rename or restore removes them).
#[derive(Default)]
pub(crate) struct OnDisk {
    pub(crate) keys: HashSet<String>,
    pub(crate) seeds: HashMap<String, u64>,
    pub(crate) header: Option<Close>,
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
    let header = records
        .get(HEADER)
        .ok()
        .flatten()
        .and_then(|v| decode_header(v.value()));
    let Ok(iter) = records.iter() else {
        return on_disk;
    };
    for entry in iter {
        let Ok((k, v)) = entry else {
            return OnDisk::default();
        };
        let k = k.value();
        if k == HEADER {
            continue;
        }
        on_disk.keys.insert(k.to_string());
        if let Some(r) = Record::decode(v.value()).filter(|r| Some(r.close) == header) {
            on_disk.seeds.insert(k.to_string(), r.seed);
            on_disk.records.insert(k.to_string(), r);
        }
    }
    on_disk.header = header;
    read_marks(txn, &mut on_disk);
    on_disk
}

/// Adds the journal marks of `txn`'s state to `on_disk` (whose header is read): nothing on
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
        let valid = Mark::decode(v.value())
            .filter(|m| Some(m.base.close) == on_disk.header && !on_disk.keys.contains(&k));
        if let Some(m) = valid {
            on_disk.seeds.insert(k.clone(), m.base.seed);
            on_disk.marks.insert(k, m);
        }
    }
}

/// A table's header and journal mark, raw, as a replay compares them between its two
/// transactions.
pub(crate) type RawMark = (Vec<u8>, Vec<u8>);

/// A table's journal mark and the header as `txn` sees them, raw (a replay compares them
/// between its two transactions).
pub(crate) fn raw_mark(txn: &redb::ReadTransaction, key: &str) -> Option<RawMark> {
    let records = txn.open_table(RECORDS).ok()?;
    let header = records.get(HEADER).ok()??.value().to_vec();
    if records.get(key).ok()?.is_some() {
        return None; // a record and a mark are never both committed: trust neither here
    }
    let marks = txn.open_table(MARKS).ok()?;
    let mark = marks.get(key).ok()??.value().to_vec();
    Some((header, mark))
}

/// The table's journal mark in `txn`'s state, if it names the last clean close and the
/// table's seed, with the raw mark and header; and the filter that close stored for the
/// table, if the stored bytes have the mark's length and xxh3 and decode to that seed
/// (`None` for a mark of the empty filter: the caller checks that base).
pub(crate) fn marked_filter(
    txn: &redb::ReadTransaction,
    key: &str,
    seed: u64,
) -> Option<(Mark, Option<Filter>, RawMark)> {
    let raw = raw_mark(txn, key)?;
    let close = decode_header(&raw.0)?;
    let mark = Mark::decode(&raw.1)?;
    if mark.base.close != close || mark.base.seed != seed {
        return None;
    }
    if mark.empty {
        return Some((mark, None, raw));
    }
    let filter = stored_filter(txn, key, seed, mark.base.len, mark.base.digest)?;
    Some((mark, Some(filter), raw))
}

/// The filter bytes stored for `key` in `txn`'s state, if they have `len` and `digest` (as
/// a record or a mark names them) and decode to `seed`.
fn stored_filter(
    txn: &redb::ReadTransaction,
    key: &str,
    seed: u64,
    len: u64,
    digest_of_bytes: u64,
) -> Option<Filter> {
    let filters = txn.open_table(FILTERS).ok()?;
    let bytes = filters.get(key).ok()??;
    let bytes = bytes.value();
    if bytes.len() as u64 != len || digest(bytes) != digest_of_bytes {
        return None;
    }
    let filter = Filter::from_bytes(bytes).ok()?;
    (filter.seed() == seed).then_some(filter)
}

/// Writes the journal mark of `key` in `txn` (the first write of a session to its table).
pub(crate) fn write_mark(
    txn: &redb::WriteTransaction,
    key: &str,
    mark: &Mark,
) -> Result<(), redb::TableError> {
    let mut marks = txn.open_table(MARKS)?;
    marks.insert(key, mark.encode().as_slice())?;
    Ok(())
}

/// Removes the journal mark of `key` in `txn` (a delete or rename of its table, or a write
/// no journal covers).
pub(crate) fn remove_mark(txn: &redb::WriteTransaction, key: &str) -> Result<(), redb::TableError> {
    let mut marks = txn.open_table(MARKS)?;
    marks.remove(key)?;
    Ok(())
}

/// A table's record and header as `txn` sees them, raw (a build compares them between its
/// two transactions).
pub(crate) fn raw_record(txn: &redb::ReadTransaction, key: &str) -> Option<(Vec<u8>, Vec<u8>)> {
    let records = txn.open_table(RECORDS).ok()?;
    let header = records.get(HEADER).ok()??.value().to_vec();
    let record = records.get(key).ok()??.value().to_vec();
    Some((header, record))
}

/// The table's filter from its record in `txn`'s state, if every check passes.
pub(crate) fn load(txn: &redb::ReadTransaction, key: &str, seed: u64) -> Option<Filter> {
    let (header, record) = raw_record(txn, key)?;
    let close = decode_header(&header)?;
    let record = Record::decode(&record)?;
    if record.close != close || record.seed != seed {
        return None;
    }
    stored_filter(txn, key, seed, record.len, record.digest)
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
/// older ones).
pub(crate) fn forget_all(txn: &redb::WriteTransaction) -> Result<(), redb::TableError> {
    txn.delete_table(RECORDS)?;
    txn.delete_table(MARKS)?;
    Ok(())
}

/// The clean close: in one commit, the filters of `clean` (key, filter: each complete for
/// the latest state), records re-stamped for tables untouched since the last close, and a
/// new header. Records that are not valid under the old header are dropped, and so are
/// filters without a record and every journal mark.
pub(crate) fn write_close(
    db: &redb::Database,
    clean: &[(String, std::sync::Arc<Built>)],
) -> Result<(), redb::Error> {
    // Never wait: a leaked table of a failed commit may hold redb's write lock for good.
    let txn = db.try_begin_write()?;
    {
        let mut records = txn.open_table(RECORDS)?;
        let mut filters = txn.open_table(FILTERS)?;
        let old = records.get(HEADER)?.and_then(|v| decode_header(v.value()));
        let close = Close {
            sequence: old.map_or(1, |c| c.sequence.wrapping_add(1)),
            nonce: bloomsled::hash::secret_seed()
                .map_err(|e| redb::StorageError::Io(std::io::Error::other(e.to_string())))?,
        };
        let mut kept: Vec<(String, Record)> = Vec::new();
        for entry in records.iter()? {
            let (k, v) = entry?;
            let k = k.value().to_string();
            if let Some(r) = Record::decode(v.value()).filter(|r| Some(r.close) == old) {
                kept.push((k, r));
            }
        }
        records.retain(|_, _| false)?;
        for (k, r) in &kept {
            records.insert(k.as_str(), Record { close, ..*r }.encode().as_slice())?;
        }
        // A table whose record was kept is untouched since the last close: the filter that
        // close wrote is complete for this state (the one in memory may hold more, keys of
        // aborted writes), so its bytes stay as they are.
        let kept_keys: HashSet<&str> = kept.iter().map(|(k, _)| k.as_str()).collect();
        for (k, built) in clean
            .iter()
            .filter(|(k, _)| !kept_keys.contains(k.as_str()))
        {
            let f = built.filter();
            let bytes = f.to_bytes();
            let r = Record {
                close,
                seed: f.seed(),
                len: bytes.len() as u64,
                digest: digest(&bytes),
            };
            filters.insert(k.as_str(), bytes.as_slice())?;
            records.insert(k.as_str(), r.encode().as_slice())?;
        }
        let orphans: Vec<String> = filters
            .iter()?
            .filter_map(|e| e.ok().map(|(k, _)| k.value().to_string()))
            .filter(|k| records.get(k.as_str()).ok().flatten().is_none())
            .collect();
        for k in orphans {
            filters.remove(k.as_str())?;
        }
        records.insert(HEADER, encode_header(close).as_slice())?;
    }
    // The journals extend the old close's filters: their marks go with it.
    txn.delete_table(MARKS)?;
    txn.commit()?;
    Ok(())
}

/// Reads bloomsled's records of `db`'s latest state.
pub(crate) fn read_on_disk_of(db: &impl redb::ReadableDatabase) -> OnDisk {
    db.begin_read()
        .map_or_else(|_| OnDisk::default(), |t| read_on_disk(&t))
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        /// Any bytes: a record, header or mark, or `None`; never a panic. A record or mark
        /// read back is the one written, and a flipped bit anywhere makes it unreadable.
        #[test]
        fn records_decode_only_what_was_encoded(
            bytes in proptest::collection::vec(any::<u8>(), 0..80),
            fields in any::<[u64; 5]>(),
            flip in 0usize..(RECORD_LEN * 8),
        ) {
            let _ = Record::decode(&bytes);
            let _ = decode_header(&bytes);
            let r = Record {
                close: Close { sequence: fields[0], nonce: fields[1] },
                seed: fields[2],
                len: fields[3],
                digest: fields[4],
            };
            let mut enc = r.encode();
            prop_assert_eq!(Record::decode(&enc), Some(r));
            prop_assert_eq!(decode_header(&enc), None);
            enc[flip / 8] ^= 1 << (flip % 8);
            prop_assert_eq!(Record::decode(&enc), None);
            let h = encode_header(r.close);
            prop_assert_eq!(decode_header(&h), Some(r.close));
            prop_assert_eq!(Record::decode(&h), None);
            // A journal mark likewise, and never read as a record or header.
            let _ = Mark::decode(&bytes);
            let m = Mark { base: r, empty: false, last: fields[0] ^ 1 };
            let e = Mark { empty: true, ..m };
            let mut enc = e.encode();
            prop_assert_eq!(Mark::decode(&enc), Some(e));
            prop_assert_eq!(Record::decode(&enc), None);
            enc[flip / 8 % MARK_LEN] ^= 1 << (flip % 8);
            prop_assert_eq!(Mark::decode(&enc), None);
            let mut enc = m.encode();
            prop_assert_eq!(Mark::decode(&enc), Some(m));
            prop_assert_eq!(Record::decode(&enc), None);
            prop_assert_eq!(decode_header(&enc), None);
            prop_assert_eq!(Mark::decode(&r.encode()), None);
            enc[flip / 8 % MARK_LEN] ^= 1 << (flip % 8);
            prop_assert_eq!(Mark::decode(&enc), None);
        }
    }
}

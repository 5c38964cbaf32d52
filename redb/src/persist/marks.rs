//! The crash journals' marks in `__bloomsled_journals` (see `filters/journals.rs`): per
//! table written since the last clean close, "journals `1..=last` extend the filter that
//! close left stored for this table" (named by the core's snapshot id and sequence, as its
//! record named it), or, an **empty mark**, "extend the empty filter of this seed".
//!
//! A mark is the core's record of a journal chain ([`JournalChain`], its 96 bytes and CRC):
//! its binding is the one the chain's journals carry (the close as the database id, the
//! table's tree id, the snapshot id, the seed), with the snapshot's sequence and the
//! chain's last journal. What it names is judged by the core's rule
//! (`bloomsled::persist::judge_named`), as a record is; this crate binds it to redb's
//! commits.

use bloomsled::persist::{JournalBinding, JournalChain, StoredIds};

use super::{Close, FILTERS, MARKS, RECORDS, Record, head, split, table_tree};

/// A table's journal mark: written since clean close `close`, its crash journals
/// `1..=last` extend the filter `base` names (the snapshot that close left stored for the
/// table, with the table's seed), or, if `empty`, the empty filter of `base`'s seed (the
/// table did not exist when the transaction that wrote the chain's first mark began: see
/// `filters/journals.rs`; `base` then names no snapshot: zero id, sequence 0).
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) struct Mark {
    pub(crate) close: Close,
    pub(crate) base: Record,
    pub(crate) empty: bool,
    pub(crate) last: u64,
}

impl Mark {
    /// The core's record of this chain for table `key`; its binding is its journals'.
    pub(crate) fn chain(&self, key: &str) -> JournalChain {
        JournalChain {
            binding: JournalBinding {
                database: self.close.id(),
                tree: table_tree(key, self.base.seed),
                base: self.base.snapshot,
                seed: self.base.seed,
            },
            base_sequence: self.base.sequence,
            empty: self.empty,
            last: self.last,
        }
    }

    pub(crate) fn encode(&self, key: &str) -> Vec<u8> {
        self.chain(key).encode()
    }

    /// `None` for anything that is not an intact chain record of table `key` (a mark moved
    /// under another table's key names another tree).
    pub(crate) fn decode(bytes: &[u8], key: &str) -> Option<Mark> {
        let c = JournalChain::decode(bytes).ok()?;
        let b = c.binding;
        if b.tree != table_tree(key, b.seed) {
            return None;
        }
        let (sequence, nonce) = split(b.database);
        Some(Mark {
            close: Close { sequence, nonce },
            base: Record {
                seed: b.seed,
                snapshot: b.base,
                sequence: c.base_sequence,
            },
            empty: c.empty,
            last: c.last,
        })
    }
}

/// A table's journal mark and the records' head (close and database) as `txn` sees them,
/// raw, as a replay compares them between its two transactions.
pub(crate) type RawMark = (Vec<u8>, Vec<u8>);

/// A table's journal mark and the head as `txn` sees them, raw.
pub(crate) fn raw_mark(txn: &redb::ReadTransaction, key: &str) -> Option<RawMark> {
    let records = txn.open_table(RECORDS).ok()?;
    let (_, _, head) = head(&records)?;
    if records.get(key).ok()?.is_some() {
        return None; // a record and a mark are never both committed: trust neither here
    }
    let marks = txn.open_table(MARKS).ok()?;
    let mark = marks.get(key).ok()??.value().to_vec();
    Some((head, mark))
}

/// The table's journal mark in `txn`'s state, if it names the last clean close and the
/// table's seed, with the raw mark and head; and the filter that close left stored for
/// the table, if the core's rule trusts the stored snapshot for what the mark names
/// (`None` for an empty mark: the caller checks that base).
pub(crate) fn marked_filter(
    txn: &redb::ReadTransaction,
    key: &str,
    seed: u64,
) -> Option<(Mark, Option<bloomsled::Filter>, RawMark)> {
    let records = txn.open_table(RECORDS).ok()?;
    let (close, database, _) = head(&records)?;
    let raw = raw_mark(txn, key)?;
    let mark = Mark::decode(&raw.1, key)?;
    if mark.close != close || mark.base.seed != seed {
        return None;
    }
    if mark.empty {
        return Some((mark, None, raw));
    }
    let ids = StoredIds {
        database,
        tree: table_tree(key, seed),
        snapshot: mark.base.snapshot,
        sequence: mark.base.sequence,
    };
    let filters = txn.open_table(FILTERS).ok()?;
    let bytes = filters.get(key).ok()?;
    let filter = bloomsled::persist::judge_named(&ids, seed, bytes.as_ref().map(|b| b.value()));
    Some((mark, Some(filter.ok()?), raw))
}

/// Writes the journal mark of `key` in `txn` (the first write of a session to its table).
pub(crate) fn write_mark(
    txn: &redb::WriteTransaction,
    key: &str,
    mark: &Mark,
) -> Result<(), redb::TableError> {
    let mut marks = txn.open_table(MARKS)?;
    marks.insert(key, mark.encode(key).as_slice())?;
    Ok(())
}

/// Writes `filter` in `txn` as the base of the journal chain `mark` starts for table `key`,
/// which the last clean close did not store (too small: see `filters/journals.rs`): a
/// snapshot under the ids the mark names, judged at a replay as a close's is (and removed,
/// having no record, by the next clean close). `false`, nothing written, if the records'
/// head does not decode or names another close.
pub(crate) fn write_base(
    txn: &redb::WriteTransaction,
    key: &str,
    mark: &Mark,
    filter: &bloomsled::Filter,
) -> Result<bool, redb::TableError> {
    let Some((close, database, _)) = head(&txn.open_table(RECORDS)?) else {
        return Ok(false);
    };
    if close != mark.close || mark.empty || filter.seed() != mark.base.seed {
        return Ok(false);
    }
    let ids = StoredIds {
        database,
        tree: table_tree(key, mark.base.seed),
        snapshot: mark.base.snapshot,
        sequence: mark.base.sequence,
    };
    let snapshot = bloomsled::persist::encode_snapshot(filter, &ids);
    txn.open_table(FILTERS)?.insert(key, snapshot.as_slice())?;
    Ok(true)
}

/// Removes the journal mark of `key` in `txn` (a delete or rename of its table, or a write
/// no journal covers).
pub(crate) fn remove_mark(txn: &redb::WriteTransaction, key: &str) -> Result<(), redb::TableError> {
    let mut marks = txn.open_table(MARKS)?;
    marks.remove(key)?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// Bytes of the core's chain record.
    const CHAIN_LEN: usize = 96;

    proptest! {
        /// Any bytes: a mark or `None`, never a panic. A mark read back is the one written,
        /// a flipped bit anywhere makes it unreadable, a mark read under another table's key
        /// is refused, and no mark reads as the close or database record or the other way
        /// round.
        #[test]
        fn marks_decode_only_what_was_encoded(
            bytes in proptest::collection::vec(any::<u8>(), 0..120),
            w in any::<[u64; 6]>(),
            id in any::<[u8; 16]>(),
            flip in 0usize..(CHAIN_LEN * 8),
        ) {
            let _ = Mark::decode(&bytes, "t/a");
            let m = Mark {
                close: Close { sequence: w[0], nonce: w[1] },
                base: Record { seed: w[2], snapshot: id, sequence: w[3] },
                empty: false,
                last: w[4],
            };
            let empty = Mark {
                empty: true,
                base: Record { snapshot: [0; 16], sequence: 0, ..m.base },
                ..m
            };
            for m in [m, empty] {
                let mut enc = m.encode("t/a");
                prop_assert_eq!(enc.len(), CHAIN_LEN);
                prop_assert_eq!(Mark::decode(&enc, "t/a"), Some(m));
                prop_assert_eq!(Mark::decode(&enc, "t/b"), None);
                prop_assert!(bloomsled::persist::decode_database(&enc).is_err());
                enc[flip / 8] ^= 1 << (flip % 8);
                prop_assert_eq!(Mark::decode(&enc, "t/a"), None);
            }
            // An empty mark that names a snapshot is never written, and never read.
            if id != [0; 16] {
                let named = Mark { empty: true, ..m };
                prop_assert_eq!(Mark::decode(&named.encode("t/a"), "t/a"), None);
            }
            let close = m.close.encode();
            prop_assert_eq!(Close::decode(&close), Some(m.close));
            prop_assert_eq!(Mark::decode(&close, "t/a"), None);
        }
    }
}

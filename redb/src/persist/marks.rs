//! The crash journals' marks in `__bloomsled_journals` (see `filters/journals.rs`): per
//! table written since the last clean close, "journals `1..=last` extend the filter that
//! close left stored for this table" (named by the core's snapshot id and sequence, as its
//! record named it), or, an **empty mark**, "extend the empty filter of this seed".
//!
//! A mark is this crate's value (magic, seven words, a check word): the core has no record
//! of a journal chain bound to a store's commits. What it names is judged by the core's
//! rule (`bloomsled::persist::judge_named`), as a record is.

use bloomsled::persist::StoredIds;

use super::{Close, FILTERS, MARKS, RECORDS, Record, head, table_tree};

const MARK_MAGIC: &[u8; 4] = b"BSJ2";
/// A mark whose journals extend the empty filter (the table was made after the close); no
/// flipped bit makes one magic the other.
const EMPTY_MARK_MAGIC: &[u8; 4] = b"BSJF";
/// Words of a mark before its check word.
const WORDS: usize = 7;
/// Bytes of a mark (magic, the words, check word).
#[cfg(test)]
const MARK_LEN: usize = 4 + 8 * (WORDS + 1);

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

fn check(words: &[u64]) -> u64 {
    let bytes: Vec<u8> = words.iter().flat_map(|w| w.to_le_bytes()).collect();
    bloomsled::hash::hash_key(&bytes, 0x6273_7265_6362)
}

fn word(bytes: &[u8], i: usize) -> u64 {
    let mut w = [0u8; 8];
    w.copy_from_slice(&bytes[4 + 8 * i..12 + 8 * i]);
    u64::from_le_bytes(w)
}

impl Mark {
    fn words(&self) -> [u64; WORDS] {
        let (lo, hi) = super::split(self.base.snapshot);
        let c = self.close;
        let b = self.base;
        [c.sequence, c.nonce, b.seed, lo, hi, b.sequence, self.last]
    }

    pub(crate) fn encode(&self) -> Vec<u8> {
        let mut out = if self.empty {
            EMPTY_MARK_MAGIC
        } else {
            MARK_MAGIC
        }
        .to_vec();
        let w = self.words();
        for x in w.iter().chain([check(&w)].iter()) {
            out.extend_from_slice(&x.to_le_bytes());
        }
        out
    }

    /// `None` for anything that is not a mark this version wrote, intact.
    pub(crate) fn decode(bytes: &[u8]) -> Option<Mark> {
        if bytes.len() != 4 + 8 * (WORDS + 1) {
            return None;
        }
        let empty = match &bytes[..4] {
            m if m == MARK_MAGIC => false,
            m if m == EMPTY_MARK_MAGIC => true,
            _ => return None,
        };
        let w: Vec<u64> = (0..=WORDS).map(|i| word(bytes, i)).collect();
        if check(&w[..WORDS]) != w[WORDS] {
            return None;
        }
        Some(Mark {
            close: Close {
                sequence: w[0],
                nonce: w[1],
            },
            base: Record {
                seed: w[2],
                snapshot: super::join(w[3], w[4]),
                sequence: w[5],
            },
            empty,
            last: w[6],
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
    let mark = Mark::decode(&raw.1)?;
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
    marks.insert(key, mark.encode().as_slice())?;
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

    proptest! {
        /// Any bytes: a mark or `None`, never a panic. A mark read back is the one written,
        /// a flipped bit anywhere makes it unreadable, and no mark reads as the close or
        /// database record (the core's) or the other way round.
        #[test]
        fn marks_decode_only_what_was_encoded(
            bytes in proptest::collection::vec(any::<u8>(), 0..80),
            w in any::<[u64; 6]>(),
            id in any::<[u8; 16]>(),
            flip in 0usize..(MARK_LEN * 8),
        ) {
            let _ = Mark::decode(&bytes);
            let m = Mark {
                close: Close { sequence: w[0], nonce: w[1] },
                base: Record { seed: w[2], snapshot: id, sequence: w[3] },
                empty: false,
                last: w[4],
            };
            for m in [m, Mark { empty: true, ..m }] {
                let mut enc = m.encode();
                prop_assert_eq!(Mark::decode(&enc), Some(m));
                prop_assert!(bloomsled::persist::decode_database(&enc).is_err());
                enc[flip / 8] ^= 1 << (flip % 8);
                prop_assert_eq!(Mark::decode(&enc), None);
            }
            let close = m.close.encode();
            prop_assert_eq!(Close::decode(&close), Some(m.close));
            prop_assert_eq!(Mark::decode(&close), None);
        }
    }
}

//! A filter a store keeps in its own records, judged by the core's rule: the bytes are the
//! core's (a snapshot as a snapshot file holds it, a [`crate::persist`] tree record, a
//! database record), and the decision is `trust::judge`, the one sled's trees go through.
//!
//! A store that keeps a filter beside its data (`bloomsled-redb` does, per table) stores:
//! 1. once, a database record ([`encode_database`]) under a key of its own, with a random
//!    id drawn at first use;
//! 2. per filter, [`encode_snapshot`] and [`encode_record`] of the same [`StoredIds`] (a
//!    tree id, a fresh random snapshot id, a sequence ≥ 1), written with the data they
//!    vouch for, and the record removed by the first write that makes the filter
//!    incomplete, in that write's own commit;
//! 3. at open, loads the filter with [`judge_stored`]: any [`Distrust`] means a scan.
//!
//! A record says the tree was written after no sequence: a store keeps a record only while
//! its filter is complete, which is the core's `dirty < sequence`.

use super::trust::{judge, Identity, Trusted};
use crate::error::{DecodeError, Distrust, Error};
use crate::filter::{CountingFilter, Filter, FilterMode};
use crate::format::{
    self, filter_kind, DbRecord, Header, SnapshotMeta, TreeRecord, DEFAULT_PAGE_SIZE,
    FILTER_KIND_BLOCKED, FILTER_KIND_COUNTING,
};
use zerocopy::little_endian::{U32, U64};
use zerocopy::{FromZeros, IntoBytes};

/// What ties a stored filter to its record: the database, the tree, the snapshot and its
/// sequence, as the core's snapshot header and tree record carry them.
///
/// ```
/// let ids = bloomsled::persist::StoredIds {
///     database: [1; 16],
///     tree: [2; 16],
///     snapshot: [3; 16],
///     sequence: 1,
/// };
/// assert_eq!(ids.sequence, 1);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StoredIds {
    /// The database's id (its database record's).
    pub database: [u8; 16],
    /// The tree's (or table's) id.
    pub tree: [u8; 16],
    /// This snapshot's id: random, new for every filter stored.
    pub snapshot: [u8; 16],
    /// The snapshot's sequence (at least 1).
    pub sequence: u64,
}

/// The core's database record of `database` (36 bytes, CRC'd).
///
/// ```
/// use bloomsled::persist::{decode_database, encode_database};
/// let bytes = encode_database([7; 16]);
/// assert_eq!(decode_database(&bytes)?, [7; 16]);
/// # Ok::<(), bloomsled::DecodeError>(())
/// ```
pub fn encode_database(database: [u8; 16]) -> Vec<u8> {
    DbRecord::new(database).as_bytes().to_vec()
}

/// The id of a database record [`encode_database`] wrote; a [`DecodeError`] for any other
/// bytes (never a panic).
///
/// ```
/// assert!(bloomsled::persist::decode_database(b"not a record").is_err());
/// ```
pub fn decode_database(bytes: &[u8]) -> Result<[u8; 16], DecodeError> {
    Ok(DbRecord::decode(bytes)?.db_id)
}

/// `filter`'s snapshot under `ids`: the core's header (with its CRC) and pages, as a
/// snapshot file holds it.
///
/// ```
/// use bloomsled::persist::{encode_record, encode_snapshot, judge_stored, StoredIds};
/// let f = bloomsled::Filter::new(100, 0.01)?;
/// f.insert(b"k");
/// let ids = StoredIds { database: [1; 16], tree: [2; 16], snapshot: [3; 16], sequence: 1 };
/// let (record, snapshot) = (encode_record(&f, &ids), encode_snapshot(&f, &ids));
/// let g = judge_stored(&record, [1; 16], Some(&snapshot))?;
/// assert!(g.contains(b"k"));
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub fn encode_snapshot(filter: &Filter, ids: &StoredIds) -> Vec<u8> {
    let mut meta = SnapshotMeta::of(filter, FILTER_KIND_BLOCKED, filter.items());
    meta.db_id = ids.database;
    meta.tree_id = ids.tree;
    meta.snapshot_id = ids.snapshot;
    meta.sequence = ids.sequence;
    format::encode(&meta, &filter.words(), DEFAULT_PAGE_SIZE)
}

/// The core's tree record (104 bytes, CRC'd) naming `filter`'s snapshot under `ids`, clean
/// (written after no sequence); its sizing is the filter's (capacity, bits per key, k).
///
/// ```
/// let f = bloomsled::Filter::new(100, 0.01)?;
/// let ids = bloomsled::persist::StoredIds {
///     database: [1; 16], tree: [2; 16], snapshot: [3; 16], sequence: 1,
/// };
/// assert_eq!(bloomsled::persist::encode_record(&f, &ids).len(), 104);
/// # Ok::<(), bloomsled::Error>(())
/// ```
pub fn encode_record(filter: &Filter, ids: &StoredIds) -> Vec<u8> {
    sized_record(filter, ids, FilterMode::Plain)
}

/// [`encode_snapshot`] of a counting filter: the snapshot kind `FILTER_KIND_COUNTING`,
/// its counters as the words (the bits are derived from them at load).
///
/// ```
/// use bloomsled::persist::{
///     encode_counting_record, encode_counting_snapshot, judge_stored_counting, StoredIds,
/// };
/// let f = bloomsled::CountingFilter::new(100, 0.01)?;
/// f.insert(b"k");
/// f.insert(b"gone");
/// f.remove(b"gone");
/// let ids = StoredIds { database: [1; 16], tree: [2; 16], snapshot: [3; 16], sequence: 1 };
/// let record = encode_counting_record(&f, &ids);
/// let snapshot = encode_counting_snapshot(&f, &ids);
/// let g = judge_stored_counting(&record, [1; 16], Some(&snapshot))?;
/// assert!(g.contains(b"k"));
/// assert_eq!(g.items(), 1);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub fn encode_counting_snapshot(filter: &CountingFilter, ids: &StoredIds) -> Vec<u8> {
    let mut meta = SnapshotMeta::of(filter.bits(), FILTER_KIND_COUNTING, filter.items());
    meta.db_id = ids.database;
    meta.tree_id = ids.tree;
    meta.snapshot_id = ids.snapshot;
    meta.sequence = ids.sequence;
    let words = filter.try_counter_words().unwrap_or_default();
    format::encode(&meta, &words, DEFAULT_PAGE_SIZE)
}

/// [`encode_record`] of a counting filter: the record names the counting kind, so only a
/// counting snapshot is trusted for it ([`judge_stored_counting`]).
///
/// ```
/// let f = bloomsled::CountingFilter::new(100, 0.01)?;
/// let ids = bloomsled::persist::StoredIds {
///     database: [1; 16], tree: [2; 16], snapshot: [3; 16], sequence: 1,
/// };
/// let record = bloomsled::persist::encode_counting_record(&f, &ids);
/// assert!(bloomsled::persist::judge_stored(&record, [1; 16], None).is_err());
/// # Ok::<(), bloomsled::Error>(())
/// ```
pub fn encode_counting_record(filter: &CountingFilter, ids: &StoredIds) -> Vec<u8> {
    sized_record(filter.bits(), ids, FilterMode::Counting)
}

/// The record of `filter` (its bits, in either mode) under `ids`, naming `mode`.
fn sized_record(filter: &Filter, ids: &StoredIds, mode: FilterMode) -> Vec<u8> {
    let mut r = clean_record(ids, filter.seed());
    r.filter_kind = U32::new(filter_kind(mode));
    r.capacity = U64::new(filter.capacity());
    let bits_per_key = filter.num_bits() as f64 / filter.capacity().max(1) as f64;
    r.sizing = U64::new(bits_per_key.to_bits());
    r.num_hashes = U32::new(filter.num_hashes());
    r.encode().to_vec()
}

/// A plain, clean record of `ids` and `seed` (sizing as bits per key, to be filled in).
fn clean_record(ids: &StoredIds, seed: u64) -> TreeRecord {
    let mut r = TreeRecord::new_zeroed();
    r.filter_kind = U32::new(filter_kind(FilterMode::Plain));
    r.tree_id = ids.tree;
    r.snapshot_id = ids.snapshot;
    r.snapshot_sequence = U64::new(ids.sequence);
    r.sizing_kind = U32::new(2);
    r.seed = U64::new(seed);
    r
}

/// The ids and seed a record [`encode_record`] wrote names (`database` as given: a record
/// does not carry it); a [`DecodeError`] for any other bytes.
///
/// ```
/// use bloomsled::persist::{decode_record, encode_record, StoredIds};
/// let f = bloomsled::Filter::new(100, 0.01)?;
/// let ids = StoredIds { database: [1; 16], tree: [2; 16], snapshot: [3; 16], sequence: 4 };
/// assert_eq!(decode_record(&encode_record(&f, &ids), [1; 16])?, (ids, f.seed()));
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub fn decode_record(record: &[u8], database: [u8; 16]) -> Result<(StoredIds, u64), DecodeError> {
    let r = TreeRecord::decode(record)?;
    let ids = StoredIds {
        database,
        tree: r.tree_id,
        snapshot: r.snapshot_id,
        sequence: r.snapshot_sequence.get(),
    };
    Ok((ids, r.seed.get()))
}

/// The filter of `snapshot` if the core's rule (the one sled's snapshots are judged by)
/// trusts it for `record` in database `database`: the record decodes (its CRC), says the
/// tree was not written after the snapshot, and names a plain filter; the snapshot decodes
/// (header and page CRCs), and its database id is `database`, its tree id, snapshot id and
/// sequence the record's. Otherwise the reason; never a panic on any bytes.
///
/// ```
/// use bloomsled::persist::{encode_record, encode_snapshot, judge_stored, StoredIds};
/// use bloomsled::Distrust;
/// let f = bloomsled::Filter::new(100, 0.01)?;
/// let ids = StoredIds { database: [1; 16], tree: [2; 16], snapshot: [3; 16], sequence: 1 };
/// let (record, snapshot) = (encode_record(&f, &ids), encode_snapshot(&f, &ids));
/// assert_eq!(judge_stored(&record, [9; 16], Some(&snapshot)).unwrap_err(), Distrust::ForeignDatabase);
/// assert_eq!(judge_stored(&record, [1; 16], None).unwrap_err(), Distrust::Missing);
/// # Ok::<(), bloomsled::Error>(())
/// ```
pub fn judge_stored(
    record: &[u8],
    database: [u8; 16],
    snapshot: Option<&[u8]>,
) -> Result<Filter, Distrust> {
    let record = TreeRecord::decode(record).map_err(Distrust::RecordUnreadable)?;
    let (h, words) = judge_words(&record, database, snapshot, FilterMode::Plain)?;
    Filter::of_snapshot(&h, &words).map_err(refusal)
}

/// [`judge_stored`] for a filter stored by [`encode_counting_snapshot`] and
/// [`encode_counting_record`]: the same rule, and the record and snapshot must name the
/// counting kind (a plain filter is refused, as a counting one is by [`judge_stored`]).
///
/// ```
/// use bloomsled::persist::{encode_record, encode_snapshot, judge_stored_counting, StoredIds};
/// let f = bloomsled::Filter::new(100, 0.01)?;
/// let ids = StoredIds { database: [1; 16], tree: [2; 16], snapshot: [3; 16], sequence: 1 };
/// let (record, snapshot) = (encode_record(&f, &ids), encode_snapshot(&f, &ids));
/// assert!(judge_stored_counting(&record, [1; 16], Some(&snapshot)).is_err());
/// # Ok::<(), bloomsled::Error>(())
/// ```
pub fn judge_stored_counting(
    record: &[u8],
    database: [u8; 16],
    snapshot: Option<&[u8]>,
) -> Result<CountingFilter, Distrust> {
    let record = TreeRecord::decode(record).map_err(Distrust::RecordUnreadable)?;
    let (h, words) = judge_words(&record, database, snapshot, FilterMode::Counting)?;
    CountingFilter::from_counter_words(
        &words,
        h.num_hashes.get(),
        h.seed.get(),
        h.capacity.get(),
        h.items.get(),
    )
    .map_err(refusal)
}

/// Why a snapshot that passed the rule still makes no filter.
fn refusal(e: Error) -> Distrust {
    match e {
        Error::OutOfMemory { bytes, .. } => Distrust::Decode(DecodeError::TooLarge { bytes }),
        Error::Decode(d) => Distrust::Decode(d),
        e => Distrust::Decode(DecodeError::Inconsistent(e.to_string())),
    }
}

/// [`judge_stored`] for a record the store no longer keeps but whose ids and seed it kept
/// (a crash journal's mark names the filter its journals extend this way): the same rule,
/// against a clean record of `ids` and `seed`.
///
/// ```
/// use bloomsled::persist::{encode_snapshot, judge_named, StoredIds};
/// let f = bloomsled::Filter::new(100, 0.01)?;
/// let ids = StoredIds { database: [1; 16], tree: [2; 16], snapshot: [3; 16], sequence: 1 };
/// let snapshot = encode_snapshot(&f, &ids);
/// assert!(judge_named(&ids, f.seed(), Some(&snapshot)).is_ok());
/// let other = StoredIds { snapshot: [4; 16], ..ids };
/// assert!(judge_named(&other, f.seed(), Some(&snapshot)).is_err());
/// # Ok::<(), bloomsled::Error>(())
/// ```
pub fn judge_named(
    ids: &StoredIds,
    seed: u64,
    snapshot: Option<&[u8]>,
) -> Result<Filter, Distrust> {
    let (h, words) = judge_words(
        &clean_record(ids, seed),
        ids.database,
        snapshot,
        FilterMode::Plain,
    )?;
    Filter::of_snapshot(&h, &words).map_err(refusal)
}

/// `trust::judge` over the snapshot's bytes for a filter of `mode`: its header and words,
/// whose seed must be the record's.
fn judge_words(
    record: &TreeRecord,
    database: [u8; 16],
    snapshot: Option<&[u8]>,
    mode: FilterMode,
) -> Result<(Header, Vec<u64>), Distrust> {
    let identity = Identity {
        db_id: database,
        mode,
    };
    let read = || -> Result<(Header, Vec<u64>), Distrust> {
        Ok(format::decode(snapshot.ok_or(Distrust::Missing)?)?)
    };
    let inconsistent = |what: String| Distrust::Decode(DecodeError::Inconsistent(what));
    let (h, words) = match judge(record, &identity, read, |(h, _)| h)? {
        Trusted::Snapshot(s) => s,
        // A store's records always name a snapshot.
        Trusted::Empty => return Err(Distrust::Missing),
    };
    if h.seed.get() != record.seed.get() {
        return Err(inconsistent(format!(
            "seed {} but the record says {}",
            h.seed.get(),
            record.seed.get()
        )));
    }
    Ok((h, words))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn stored() -> (Filter, StoredIds, Vec<u8>, Vec<u8>) {
        let f = Filter::new(1000, 0.01).unwrap();
        for i in 0..100u32 {
            f.insert(&i.to_le_bytes());
        }
        let ids = StoredIds {
            database: [1; 16],
            tree: [2; 16],
            snapshot: [3; 16],
            sequence: 2,
        };
        let (r, s) = (encode_record(&f, &ids), encode_snapshot(&f, &ids));
        (f, ids, r, s)
    }

    #[test]
    fn a_stored_counting_filter_comes_back_with_its_counts_and_only_as_counting() {
        let f = CountingFilter::new(1000, 0.01).unwrap();
        for i in 0..100u32 {
            f.insert(&i.to_le_bytes());
            f.insert(&(i % 10).to_le_bytes());
        }
        let ids = StoredIds {
            database: [1; 16],
            tree: [2; 16],
            snapshot: [3; 16],
            sequence: 2,
        };
        let (r, s) = (
            encode_counting_record(&f, &ids),
            encode_counting_snapshot(&f, &ids),
        );
        let g = judge_stored_counting(&r, ids.database, Some(&s)).unwrap();
        assert_eq!(g.counter_words(), f.counter_words());
        assert_eq!(g.bits().words(), f.bits().words());
        assert_eq!((g.items(), g.bits().seed()), (200, f.bits().seed()));
        for i in 0..10u32 {
            assert!(g.remove(&i.to_le_bytes()));
            assert!(g.contains(&i.to_le_bytes()), "counted twice: still in");
        }
        // Either mode refuses the other's filter.
        assert!(judge_stored(&r, ids.database, Some(&s)).is_err());
        let (pf, _, pr, ps) = stored();
        assert!(judge_stored_counting(&pr, ids.database, Some(&ps)).is_err());
        assert!(
            judge_stored_counting(&r, ids.database, Some(&encode_snapshot(&pf, &ids))).is_err()
        );
        for i in (0..s.len() * 8).step_by(13) {
            let mut c = s.clone();
            c[i / 8] ^= 1 << (i % 8);
            assert!(
                judge_stored_counting(&r, ids.database, Some(&c)).is_err(),
                "bit {i}"
            );
        }
    }

    #[test]
    fn a_stored_filter_comes_back_whole() {
        let (f, ids, r, s) = stored();
        let g = judge_stored(&r, ids.database, Some(&s)).unwrap();
        assert_eq!(g.words(), f.words());
        assert_eq!((g.seed(), g.items()), (f.seed(), f.items()));
        assert_eq!(decode_record(&r, ids.database).unwrap(), (ids, f.seed()));
    }

    #[test]
    fn every_flipped_bit_of_record_or_snapshot_is_refused() {
        let (_, ids, r, s) = stored();
        for i in 0..r.len() * 8 {
            let mut c = r.clone();
            c[i / 8] ^= 1 << (i % 8);
            assert!(
                judge_stored(&c, ids.database, Some(&s)).is_err(),
                "record {i}"
            );
        }
        for i in (0..s.len() * 8).step_by(7) {
            let mut c = s.clone();
            c[i / 8] ^= 1 << (i % 8);
            assert!(
                judge_stored(&r, ids.database, Some(&c)).is_err(),
                "snapshot {i}"
            );
        }
    }

    #[test]
    fn another_database_tree_snapshot_or_sequence_is_refused() {
        let (f, ids, r, _) = stored();
        let snap = |ids: &StoredIds| encode_snapshot(&f, ids);
        let judged = |s: Vec<u8>| judge_stored(&r, ids.database, Some(&s)).unwrap_err();
        assert_eq!(
            judged(snap(&StoredIds {
                database: [9; 16],
                ..ids
            })),
            Distrust::ForeignDatabase
        );
        assert_eq!(
            judged(snap(&StoredIds {
                tree: [9; 16],
                ..ids
            })),
            Distrust::OtherTree
        );
        for other in [
            StoredIds {
                snapshot: [9; 16],
                ..ids
            },
            StoredIds { sequence: 1, ..ids },
        ] {
            assert!(matches!(judged(snap(&other)), Distrust::NotCurrent { .. }));
        }
        // A standalone filter's bytes are not a snapshot of this tree.
        assert_eq!(judged(f.to_bytes()), Distrust::ForeignDatabase);
        // Sequence 0 is never clean (the core's `dirty < sequence`).
        let zero = StoredIds { sequence: 0, ..ids };
        let z = judge_stored(&encode_record(&f, &zero), ids.database, Some(&snap(&zero)));
        assert!(matches!(z, Err(Distrust::Stale { .. })));
        assert!(judge_named(&ids, f.seed() ^ 1, Some(&snap(&ids))).is_err());
    }
}

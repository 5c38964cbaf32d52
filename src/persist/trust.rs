//! The trust decision, in one pure function: may this snapshot stand for this tree's keys?

use super::journal::Decoded;
use super::journal_map::MAX_JOURNALS;
use crate::error::{DecodeError, Distrust, JournalFault};
use crate::filter::FilterMode;
use crate::format::{filter_kind, mode_of_kind, Header, TreeRecord, FLAG_EMPTY};

/// What the snapshot is judged against besides the tree's record: the database it must
/// belong to and the mode the tree is opened in.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Identity {
    pub(crate) db_id: [u8; 16],
    pub(crate) mode: FilterMode,
}

/// What a trusted snapshot stands for.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Trusted<T> {
    /// The empty filter of the record's sizing: the tree was never written since it was
    /// created (no file is read).
    Empty,
    /// The snapshot file, as `read` returned it.
    Snapshot(T),
}

/// Judges tree's snapshot against its `record` (kept in sled with the data) and the
/// `identity` it must have. `read` loads and decodes the snapshot file; it is called only
/// once the record alone leaves no reason to distrust, and `header` gets its header.
///
/// The rule, checked in this order:
/// 1. the record's mode is the mode the tree is opened in, else [`Distrust::ModeChanged`];
/// 2. the tree was not written after the recorded snapshot (`dirty < snapshot sequence`),
///    else [`Distrust::Stale`];
/// 3. a record flagged empty stands for the empty filter: trusted without a file;
/// 4. the file decodes (every CRC), else [`Distrust::Decode`] or [`Distrust::Missing`];
/// 5. the file's database id is this database's, else [`Distrust::ForeignDatabase`];
/// 6. its tree id is the record's, else [`Distrust::OtherTree`];
/// 7. its snapshot id and sequence are the ones the record names, else
///    [`Distrust::NotCurrent`];
/// 8. its filter kind is the record's (a hand-made file could differ), else a decode fault.
pub(crate) fn judge<T>(
    record: &TreeRecord,
    identity: &Identity,
    read: impl FnOnce() -> Result<T, Distrust>,
    header: impl Fn(&T) -> &Header,
) -> Result<Trusted<T>, Distrust> {
    let recorded_kind = record.filter_kind.get();
    if recorded_kind != filter_kind(identity.mode) {
        return Err(Distrust::ModeChanged {
            snapshot: mode_of_kind(recorded_kind).map_or("unknown", FilterMode::name),
            configured: identity.mode.name(),
        });
    }
    let sequence = record.snapshot_sequence.get();
    if record.dirty_sequence.get() >= sequence {
        return Err(Distrust::Stale {
            snapshot_sequence: sequence,
            dirty_sequence: record.dirty_sequence.get(),
        });
    }
    if record.flags.get() & FLAG_EMPTY != 0 {
        return Ok(Trusted::Empty);
    }
    let snapshot = read()?;
    let h = header(&snapshot);
    if h.db_id != identity.db_id {
        return Err(Distrust::ForeignDatabase);
    }
    if h.tree_id != record.tree_id {
        return Err(Distrust::OtherTree);
    }
    if h.snapshot_id != record.snapshot_id || h.sequence.get() != sequence {
        return Err(Distrust::NotCurrent {
            snapshot_sequence: h.sequence.get(),
            recorded_sequence: sequence,
        });
    }
    if h.filter_kind.get() != recorded_kind {
        return Err(Distrust::Decode(DecodeError::Inconsistent(format!(
            "filter kind {} but the record says {recorded_kind}",
            h.filter_kind.get()
        ))));
    }
    Ok(Trusted::Snapshot(snapshot))
}

/// What a crash journal is judged against besides the tree's record: the database and the
/// boot it must come from, and the seed of the filter its hashes are replayed into.
#[derive(Debug, Clone, Copy)]
pub(crate) struct JournalIdentity {
    pub(crate) db_id: [u8; 16],
    pub(crate) boot_id: [u8; 16],
    pub(crate) seed: u64,
}

/// The records of one sequence's journal: `(op, hash)`.
pub(crate) type Records = Vec<(u8, u64)>;

/// Judges whether the crash journals can stand for the writes a stale `record` says were
/// made after its snapshot, whose file [`judge`] trusts (judged with the dirty mark
/// cleared). `read(g)` reads and decodes sequence `g`'s journal. Returns the records of
/// every sequence from the snapshot's to the dirty mark, in order.
///
/// The rule, checked in this order:
/// 1. at most `MAX_JOURNALS` sequences to cover, else [`JournalFault::TooMany`];
///
/// then for each sequence `g` from the snapshot's to the dirty mark:
/// 2. its journal is there and its header and length decode, else
///    [`JournalFault::Missing`], [`JournalFault::Damaged`] or [`JournalFault::Truncated`];
/// 3. it was written in this boot, else [`JournalFault::OtherBoot`] (a power loss may
///    have dropped its pages while sled kept the keys);
/// 4. by this database, else [`JournalFault::ForeignDatabase`];
/// 5. for this tree, else [`JournalFault::OtherTree`];
/// 6. for sequence `g`, following the recorded snapshot: the snapshot's own journal
///    carries its snapshot id, a later one carries it as its base, else
///    [`JournalFault::NotCurrent`];
/// 7. its hashes use the filter's seed, else [`JournalFault::Seed`];
/// 8. its counter file (outside the database folder) is there, whole and for this
///    journal, else [`JournalFault::CountersMissing`] or [`JournalFault::Damaged`]; it
///    counts for this very file (same nonce), else [`JournalFault::OtherIncarnation`];
/// 9. its records decode whole against those counters: not overflowed, no damaged record,
///    none erased (so not an earlier copy of itself), else [`JournalFault::Overflowed`],
///    [`JournalFault::NoSpace`], [`JournalFault::Damaged`] or [`JournalFault::RecordsLost`].
pub(crate) fn judge_journals(
    record: &TreeRecord,
    identity: &JournalIdentity,
    read: impl FnMut(u64) -> Result<Decoded, JournalFault>,
) -> Result<Vec<Records>, JournalFault> {
    judge_chain(
        identity,
        &record.tree_id,
        record.snapshot_sequence.get()..=record.dirty_sequence.get(),
        &record.snapshot_id,
        read,
    )
}

/// [`judge_journals`]'s rule, for any store: the journals of `tree` for every sequence of
/// `sequences`, each linked to `base` (the first one by its snapshot id, a later one by
/// its base id). The sled store's `base` is the recorded snapshot's id; a store that names
/// its stored filter another way (`store_journal.rs`) writes its base in both fields.
pub(crate) fn judge_chain(
    identity: &JournalIdentity,
    tree: &[u8; 16],
    sequences: std::ops::RangeInclusive<u64>,
    base: &[u8; 16],
    mut read: impl FnMut(u64) -> Result<Decoded, JournalFault>,
) -> Result<Vec<Records>, JournalFault> {
    let (first, last) = (*sequences.start(), *sequences.end());
    let count = last.saturating_sub(first).saturating_add(1);
    if count > MAX_JOURNALS {
        return Err(JournalFault::TooMany { sequences: count });
    }
    let mut out = Vec::new();
    for g in sequences {
        let Decoded { header: h, records } = read(g)?;
        if h.boot_id != identity.boot_id {
            return Err(JournalFault::OtherBoot);
        }
        if h.db_id != identity.db_id {
            return Err(JournalFault::ForeignDatabase);
        }
        if h.tree_id != *tree {
            return Err(JournalFault::OtherTree);
        }
        let link = if g == first { h.snapshot_id } else { h.base_id };
        if h.sequence.get() != g || link != *base {
            return Err(JournalFault::NotCurrent { sequence: g });
        }
        if h.seed.get() != identity.seed {
            return Err(JournalFault::Seed {
                journal: h.seed.get(),
                filter: identity.seed,
            });
        }
        out.push(records?);
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use zerocopy::little_endian::{U32, U64};
    use zerocopy::FromZeros;

    const DB: [u8; 16] = [1; 16];
    const TREE: [u8; 16] = [2; 16];
    const SNAP: [u8; 16] = [3; 16];

    fn record() -> TreeRecord {
        let mut r = TreeRecord::new_zeroed();
        r.filter_kind = U32::new(filter_kind(FilterMode::Plain));
        r.tree_id = TREE;
        r.snapshot_id = SNAP;
        r.snapshot_sequence = U64::new(5);
        r.dirty_sequence = U64::new(4);
        r
    }

    fn header() -> Header {
        let mut h = Header::new_zeroed();
        h.filter_kind = U32::new(filter_kind(FilterMode::Plain));
        h.db_id = DB;
        h.tree_id = TREE;
        h.snapshot_id = SNAP;
        h.sequence = U64::new(5);
        h
    }

    fn id(mode: FilterMode) -> Identity {
        Identity { db_id: DB, mode }
    }

    fn run(r: &TreeRecord, i: &Identity, h: Header) -> Result<Trusted<Header>, Distrust> {
        judge(r, i, || Ok(h), |h| h)
    }

    #[test]
    fn the_current_snapshot_of_this_tree_and_database_is_trusted() {
        let h = header();
        assert_eq!(
            run(&record(), &id(FilterMode::Plain), h),
            Ok(Trusted::Snapshot(h))
        );
    }

    #[test]
    fn each_mismatch_has_its_reason() {
        let plain = id(FilterMode::Plain);
        let mut h = header();
        h.db_id = [9; 16];
        assert_eq!(run(&record(), &plain, h), Err(Distrust::ForeignDatabase));
        let mut h = header();
        h.tree_id = [9; 16];
        assert_eq!(run(&record(), &plain, h), Err(Distrust::OtherTree));
        // An older snapshot (rolled back), a newer one whose record never became durable,
        // and one of the same sequence from another history are all not current.
        for (g, sid) in [(4, SNAP), (6, SNAP), (5, [9; 16])] {
            let mut h = header();
            h.sequence = U64::new(g);
            h.snapshot_id = sid;
            assert_eq!(
                run(&record(), &plain, h),
                Err(Distrust::NotCurrent {
                    snapshot_sequence: g,
                    recorded_sequence: 5
                })
            );
        }
        let mut h = header();
        h.filter_kind = U32::new(filter_kind(FilterMode::Counting));
        assert!(matches!(
            run(&record(), &plain, h),
            Err(Distrust::Decode(DecodeError::Inconsistent(_)))
        ));
        assert_eq!(
            run(&record(), &id(FilterMode::Counting), header()),
            Err(Distrust::ModeChanged {
                snapshot: "plain",
                configured: "counting"
            })
        );
    }

    #[test]
    fn a_dirty_record_is_stale_without_reading_the_file() {
        for dirty in [5, 6, 100] {
            let mut r = record();
            r.dirty_sequence = U64::new(dirty);
            let got = judge(
                &r,
                &id(FilterMode::Plain),
                || -> Result<Header, Distrust> { panic!("file read for a stale record") },
                |h| h,
            );
            assert_eq!(
                got,
                Err(Distrust::Stale {
                    snapshot_sequence: 5,
                    dirty_sequence: dirty
                })
            );
        }
    }

    #[test]
    fn an_empty_record_needs_no_file_and_a_missing_file_is_reported() {
        let mut r = record();
        r.flags = U32::new(FLAG_EMPTY);
        let got = judge(
            &r,
            &id(FilterMode::Plain),
            || -> Result<Header, Distrust> { panic!("file read for an empty record") },
            |h| h,
        );
        assert_eq!(got, Ok(Trusted::Empty));
        let got = judge(
            &record(),
            &id(FilterMode::Plain),
            || Err(Distrust::Missing),
            |h: &Header| h,
        );
        assert_eq!(got, Err(Distrust::Missing));
    }

    mod journals {
        use super::*;
        use crate::persist::journal::{JournalHeader, OP_INSERT};

        const BOOT: [u8; 16] = [4; 16];
        const BASE: [u8; 16] = [8; 16];

        fn jid() -> JournalIdentity {
            JournalIdentity {
                db_id: DB,
                boot_id: BOOT,
                seed: 11,
            }
        }

        fn stale() -> TreeRecord {
            let mut r = record();
            r.dirty_sequence = U64::new(6);
            r
        }

        /// The journals of sequences 5 (the snapshot's own) and 6 (a later one).
        fn decoded(g: u64) -> Decoded {
            let mut h = JournalHeader::blank();
            h.db_id = DB;
            h.tree_id = TREE;
            h.boot_id = BOOT;
            h.sequence = U64::new(g);
            h.seed = U64::new(11);
            if g == 5 {
                h.snapshot_id = SNAP;
                h.base_id = BASE;
            } else {
                h.snapshot_id = [9; 16];
                h.base_id = SNAP;
            }
            Decoded {
                header: h.sealed(),
                records: Ok(vec![(OP_INSERT, g)]),
            }
        }

        fn with(change: impl Fn(u64, &mut Decoded)) -> Result<Vec<Records>, JournalFault> {
            judge_journals(&stale(), &jid(), |g| {
                let mut d = decoded(g);
                change(g, &mut d);
                Ok(d)
            })
        }

        #[test]
        fn the_journals_of_every_dirty_generation_are_replayed() {
            let got = with(|_, _| {}).unwrap();
            assert_eq!(got, vec![vec![(OP_INSERT, 5)], vec![(OP_INSERT, 6)]]);
        }

        #[test]
        fn each_journal_fault_has_its_reason() {
            let missing = judge_journals(&stale(), &jid(), |g| {
                if g == 6 {
                    Err(JournalFault::Missing { sequence: 6 })
                } else {
                    Ok(decoded(g))
                }
            });
            assert_eq!(missing, Err(JournalFault::Missing { sequence: 6 }));
            let fault = |f: fn(u64, &mut Decoded)| with(f).unwrap_err();
            assert_eq!(
                fault(|_, d| d.header.boot_id = [0; 16]),
                JournalFault::OtherBoot
            );
            assert_eq!(
                fault(|_, d| d.header.db_id = [0; 16]),
                JournalFault::ForeignDatabase
            );
            assert_eq!(
                fault(|_, d| d.header.tree_id = [0; 16]),
                JournalFault::OtherTree
            );
            // A later journal that does not follow the recorded snapshot, the snapshot's
            // own journal from another history, and a file renamed to another sequence.
            for (change, sequence) in [
                (
                    (|g, d: &mut Decoded| {
                        if g == 6 {
                            d.header.base_id = BASE
                        }
                    }) as fn(u64, &mut Decoded),
                    6,
                ),
                (|_, d| d.header.snapshot_id = [0; 16], 5),
                (|g, d| d.header.sequence = U64::new(g + 1), 5),
            ] {
                assert_eq!(fault(change), JournalFault::NotCurrent { sequence });
            }
            assert_eq!(
                fault(|_, d| d.header.seed = U64::new(12)),
                JournalFault::Seed {
                    journal: 12,
                    filter: 11
                }
            );
            assert_eq!(
                fault(|g, d| d.records = Err(JournalFault::Overflowed { sequence: g })),
                JournalFault::Overflowed { sequence: 5 }
            );
        }

        #[test]
        fn too_many_generations_are_not_read() {
            let mut r = stale();
            r.dirty_sequence = U64::new(5 + MAX_JOURNALS);
            let got = judge_journals(&r, &jid(), |_| -> Result<Decoded, JournalFault> {
                panic!("journal read past the bound")
            });
            assert_eq!(
                got,
                Err(JournalFault::TooMany {
                    sequences: MAX_JOURNALS + 1
                })
            );
        }
    }
}

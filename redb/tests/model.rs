//! A property test against a model (a `BTreeMap`): random write transactions (inserts,
//! removes, retain, extract_if read whole or in part, pop, an entry's removal, cursor
//! inserts, delete_table), aborts, `Durability::None` commits,
//! savepoints and restores, renames back and forth, reopens, with readers held across
//! commits. Every lookup path must answer what the model holds: a false negative fails.
//! Run twice: with plain filters, and in counting mode (`Builder::set_counting`), where
//! committed removals count their keys out of the filter that held readers also read.
//! And a third time, in either mode, with read handles that skip the filter after each
//! single hit (`Builder::set_bypass_after_hits(1)`), so that lookups alternate between
//! the filter and the bypass.

use std::collections::BTreeMap;

use bloomsled_redb::{
    Builder, DEFAULT_BYPASS_AFTER_HITS, Database, Durability, ReadOnlyTable, ReadableDatabase,
    ReadableTable, Savepoint, TableDefinition,
};
use proptest::prelude::*;

const T: TableDefinition<u64, u64> = TableDefinition::new("t");
const T2: TableDefinition<u64, u64> = TableDefinition::new("t2");
const KEYS: u64 = 96;

type Model = BTreeMap<u64, u64>;

#[derive(Debug, Clone)]
enum Write {
    Insert(u64, u64),
    Remove(u64),
    Retain(u64),
    ExtractIf(u64),
    PopFirst,
    PopLast,
    /// `entry(k)`: an occupied one removed, a vacant one given up.
    EntryRemove(u64),
    /// `extract_if` of the keys `k % n == 0`, only the first two it yields read.
    ExtractSome(u64),
    /// A cursor's `insert_before(k, v)` at `k`: refused if `k` is there.
    CursorInsert(u64, u64),
}

/// What a transaction does to the whole table after its writes.
#[derive(Debug, Clone)]
enum Finally {
    DeleteTable,
    RenameAwayAndBack,
}

#[derive(Debug, Clone)]
enum End {
    Commit,
    CommitNonDurable,
    Abort,
}

#[derive(Debug, Clone)]
enum Step {
    Txn {
        restore: Option<usize>,
        save: bool,
        writes: Vec<Write>,
        finally: Option<Finally>,
        end: End,
        hold_reader: bool,
    },
    Reopen,
}

fn write() -> impl Strategy<Value = Write> {
    prop_oneof![
        8 => (0..KEYS, any::<u64>()).prop_map(|(k, v)| Write::Insert(k, v)),
        4 => (0..KEYS).prop_map(Write::Remove),
        1 => (2..5u64).prop_map(Write::Retain),
        1 => (2..5u64).prop_map(Write::ExtractIf),
        1 => Just(Write::PopFirst),
        1 => Just(Write::PopLast),
        2 => (0..KEYS).prop_map(Write::EntryRemove),
        1 => (2..5u64).prop_map(Write::ExtractSome),
        2 => (0..KEYS, any::<u64>()).prop_map(|(k, v)| Write::CursorInsert(k, v)),
    ]
}

fn step() -> impl Strategy<Value = Step> {
    prop_oneof![
        10 => (
            proptest::option::weighted(0.2, 0..4usize),
            proptest::bool::weighted(0.3),
            proptest::collection::vec(write(), 0..24),
            proptest::option::weighted(
                0.1,
                prop_oneof![Just(Finally::DeleteTable), Just(Finally::RenameAwayAndBack)],
            ),
            prop_oneof![6 => Just(End::Commit), 2 => Just(End::CommitNonDurable), 2 => Just(End::Abort)],
            proptest::bool::weighted(0.3),
        )
            .prop_map(|(restore, save, writes, finally, end, hold_reader)| Step::Txn {
                restore,
                save,
                writes,
                finally,
                end,
                hold_reader,
            }),
        1 => Just(Step::Reopen),
    ]
}

/// Every key through a read transaction's table (twice: the second lookup of a false
/// positive is the false-positive memory's) and the per-request path.
fn check_committed(db: &Database, model: &Model) {
    let r = db.begin_read().unwrap();
    let table: Option<ReadOnlyTable<u64, u64>> = r.open_table(T).ok();
    for k in 0..KEYS + 8 {
        let want = model.get(&k).copied();
        for pass in 0..2 {
            let got = table
                .as_ref()
                .and_then(|t| t.get(k).unwrap().map(|v| v.value()));
            assert_eq!(got, want, "read transaction, key {k}, pass {pass}");
        }
        let latest = db.get_latest(T, k).unwrap().map(|v| v.value());
        assert_eq!(latest, want, "get_latest, key {k}");
    }
}

fn apply(t: &mut bloomsled_redb::Table<'_, u64, u64>, w: &Write, m: &mut Model) {
    match *w {
        Write::Insert(k, v) => {
            t.insert(k, v).unwrap();
            m.insert(k, v);
        }
        Write::Remove(k) => {
            t.remove(k).unwrap();
            m.remove(&k);
        }
        Write::Retain(n) => {
            t.retain(|k, _| k % n != 0).unwrap();
            m.retain(|k, _| k % n != 0);
        }
        Write::ExtractIf(n) => {
            let gone = t.extract_if(|k, _| k % n == 1).unwrap().count();
            let before = m.len();
            m.retain(|k, _| k % n != 1);
            assert_eq!(gone, before - m.len());
        }
        Write::PopFirst => {
            t.pop_first().unwrap();
            m.pop_first();
        }
        Write::PopLast => {
            t.pop_last().unwrap();
            m.pop_last();
        }
        Write::EntryRemove(k) => {
            if let bloomsled_redb::Entry::Occupied(e) = t.entry(k).unwrap() {
                e.remove().unwrap();
            }
            m.remove(&k);
        }
        Write::ExtractSome(n) => {
            let mut it = t.extract_if(|k, _| k % n == 0).unwrap();
            for _ in 0..2 {
                if let Some(p) = it.next() {
                    assert!(m.remove(&p.unwrap().0.value()).is_some());
                }
            }
        }
        Write::CursorInsert(k, v) => {
            let mut c = t.lower_bound_mut(std::ops::Bound::Included(k)).unwrap();
            let r = c.insert_before(k, v);
            c.close().unwrap();
            assert_eq!(r.is_ok(), !m.contains_key(&k), "cursor insert of {k}");
            m.entry(k).or_insert(v);
        }
    }
}

fn run(steps: Vec<Step>, counting: bool, bypass_after_hits: u32) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("m.redb");
    let builder = {
        let mut b = Builder::new();
        b.set_counting(counting)
            .set_bypass_after_hits(bypass_after_hits);
        b
    };
    let mut db = Some(builder.create(&path).unwrap());
    let mut committed = Model::new();
    let mut savepoints: Vec<(Savepoint, Model)> = Vec::new();
    for step in steps {
        let d = db.as_ref().unwrap();
        match step {
            Step::Reopen => {
                savepoints.clear();
                drop(db.take());
                db = Some(builder.open(&path).unwrap());
            }
            Step::Txn {
                restore,
                save,
                writes,
                finally,
                end,
                hold_reader,
            } => {
                let reader = hold_reader.then(|| d.begin_read().unwrap());
                let reader_table = reader.as_ref().and_then(|r| r.open_table(T).ok());
                let before = committed.clone();
                let mut w = d.begin_write().unwrap();
                let mut m = committed.clone();
                if let Some(i) = restore.filter(|i| *i < savepoints.len())
                    && w.restore_savepoint(&savepoints[i].0).is_ok()
                {
                    m = savepoints[i].1.clone();
                }
                let saved = if save {
                    w.ephemeral_savepoint().ok().map(|s| (s, m.clone()))
                } else {
                    None
                };
                {
                    let mut t = w.open_table(T).unwrap();
                    for x in &writes {
                        apply(&mut t, x, &mut m);
                    }
                    for k in 0..KEYS {
                        let got = t.get(k).unwrap().map(|v| v.value());
                        assert_eq!(got, m.get(&k).copied(), "in the write transaction, key {k}");
                    }
                }
                match finally {
                    Some(Finally::DeleteTable) => {
                        w.delete_table(T).unwrap();
                        m.clear();
                    }
                    Some(Finally::RenameAwayAndBack) => {
                        w.delete_table(T2).unwrap();
                        w.rename_table(T, T2).unwrap();
                        w.rename_table(T2, T).unwrap();
                    }
                    None => {}
                }
                match end {
                    End::Commit => {
                        w.commit().unwrap();
                        committed = m;
                    }
                    End::CommitNonDurable => {
                        w.set_durability(Durability::None).unwrap();
                        w.commit().unwrap();
                        committed = m;
                    }
                    End::Abort => w.abort().unwrap(),
                }
                if let Some((s, sm)) = saved {
                    if matches!(end, End::Abort) {
                        drop(s);
                    } else {
                        savepoints.push((s, sm));
                    }
                }
                if let Some(t) = reader_table {
                    for k in 0..KEYS {
                        assert_eq!(
                            t.get(k).unwrap().map(|v| v.value()),
                            before.get(&k).copied(),
                            "held reader, key {k}"
                        );
                    }
                }
                check_committed(d, &committed);
            }
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 48, ..ProptestConfig::default() })]
    #[test]
    fn answers_equal_the_model(steps in proptest::collection::vec(step(), 1..24)) {
        run(steps, false, DEFAULT_BYPASS_AFTER_HITS);
    }

    #[test]
    fn answers_equal_the_model_in_counting_mode(steps in proptest::collection::vec(step(), 1..24)) {
        run(steps, true, DEFAULT_BYPASS_AFTER_HITS);
    }

    #[test]
    fn answers_equal_the_model_when_hits_bypass_the_filter(
        steps in proptest::collection::vec(step(), 1..24),
        counting in any::<bool>(),
    ) {
        run(steps, counting, 1);
    }
}

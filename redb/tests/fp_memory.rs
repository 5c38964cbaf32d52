//! The false-positive memory counts commits per table (`filters/commits.rs`): commits to
//! another table do not stop a table's memory, and a write of a remembered key is found
//! as soon as its commit returns, for tables and multimap tables alike. Write transactions
//! use it too (rule 6 of `docs/redb.md`, "The false-positive memory"): a repeated false
//! positive costs one redb lookup, a key they write is found, and what they record after
//! their commit is true of the committed state.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering::SeqCst};

use bloomsled_redb::{
    Database, Durability, MultimapTableDefinition, ReadableDatabase, ReadableMultimapTable,
    ReadableTable, TableDefinition, TableFilterStats,
};

const A: TableDefinition<&str, u64> = TableDefinition::new("a");
const B: TableDefinition<&str, u64> = TableDefinition::new("b");
const MA: MultimapTableDefinition<&str, u64> = MultimapTableDefinition::new("ma");
const MB: MultimapTableDefinition<&str, u64> = MultimapTableDefinition::new("mb");

fn key(i: u64) -> String {
    format!("https://example.com/page/{i}")
}

/// A database whose table `A` (or multimap table `MA`) holds keys 0..1,000 (the 0.1% rate
/// of a first filter at capacity).
fn db(multimap: bool) -> (tempfile::TempDir, Database) {
    let dir = tempfile::tempdir().unwrap();
    let db = Database::create(dir.path().join("f.redb")).unwrap();
    let w = db.begin_write().unwrap();
    {
        let mut t = w.open_table(A).unwrap();
        let mut m = w.open_multimap_table(MA).unwrap();
        for i in 0..1_000 {
            match multimap {
                false => drop(t.insert(key(i).as_str(), &i).unwrap()),
                true => drop(m.insert(key(i).as_str(), &i).unwrap()),
            }
        }
    }
    w.commit().unwrap();
    (dir, db)
}

fn stats(db: &Database, multimap: bool) -> TableFilterStats {
    match multimap {
        false => db.table_filter_stats(A).unwrap(),
        true => db.multimap_table_filter_stats(MA).unwrap(),
    }
}

/// A real false positive of `A` (or `MA`): an absent key the filter passes, found by
/// probing absent keys in a write transaction, then dropped (an aborted write transaction
/// records nothing in the table's memory, so the memory starts without it).
fn false_positive(db: &Database, multimap: bool) -> u64 {
    false_positive_after(db, multimap, 999)
}

/// The first false positive of `A` (or `MA`) after `after` (see [`false_positive`]).
fn false_positive_after(db: &Database, multimap: bool, after: u64) -> u64 {
    let w = db.begin_write().unwrap();
    let t = w.open_table(A).unwrap();
    let m = w.open_multimap_table(MA).unwrap();
    for i in after + 1..200_000 {
        let before = stats(db, multimap).false_positives;
        let absent = match multimap {
            false => t.get(key(i).as_str()).unwrap().is_none(),
            true => m.get(key(i).as_str()).unwrap().is_empty(),
        };
        assert!(absent);
        if stats(db, multimap).false_positives > before {
            return i;
        }
    }
    panic!("no false positive in 99,000 absent keys");
}

/// One commit to the other table `B` (or `MB`), not flushed (fast).
fn commit_other(db: &Database, multimap: bool, i: u64) {
    let mut w = db.begin_write().unwrap();
    w.set_durability(Durability::None).unwrap();
    match multimap {
        false => drop(
            w.open_table(B)
                .unwrap()
                .insert(key(i).as_str(), &i)
                .unwrap(),
        ),
        true => drop(
            w.open_multimap_table(MB)
                .unwrap()
                .insert(key(i).as_str(), &i),
        ),
    }
    w.commit().unwrap();
}

/// `k` written to `A` (or `MA`) and committed.
fn commit_key(db: &Database, multimap: bool, k: u64) {
    let w = db.begin_write().unwrap();
    match multimap {
        false => drop(
            w.open_table(A)
                .unwrap()
                .insert(key(k).as_str(), &k)
                .unwrap(),
        ),
        true => drop(
            w.open_multimap_table(MA)
                .unwrap()
                .insert(key(k).as_str(), &k),
        ),
    }
    w.commit().unwrap();
}

/// True if a fresh read transaction finds `k` in `A` (or `MA`).
fn found(db: &Database, multimap: bool, k: u64) -> bool {
    let r = db.begin_read().unwrap();
    match multimap {
        false => r
            .open_table(A)
            .unwrap()
            .get(key(k).as_str())
            .unwrap()
            .is_some(),
        true => !r
            .open_multimap_table(MA)
            .unwrap()
            .get(key(k).as_str())
            .unwrap()
            .is_empty(),
    }
}

/// A read transaction held across commits to the other table records a false positive of
/// its table and answers it from the memory (one redb lookup for two); a commit of the key
/// then makes it present for every lookup begun after it, while the held snapshot (which
/// lacks it) still reads redb and remembers nothing.
fn remembered_across_other_commits(multimap: bool) {
    let (_dir, db) = db(multimap);
    let k = false_positive(&db, multimap);
    let s = stats(&db, multimap);
    let r = db.begin_read().unwrap();
    let t = r.open_table(A).unwrap();
    let m = r.open_multimap_table(MA).unwrap();
    let absent = || match multimap {
        false => t.get(key(k).as_str()).unwrap().is_none(),
        true => m.get(key(k).as_str()).unwrap().is_empty(),
    };
    commit_other(&db, multimap, 0);
    assert!(absent());
    commit_other(&db, multimap, 1);
    assert!(absent());
    let s2 = stats(&db, multimap);
    assert_eq!(
        (s2.false_positives, s2.false_positives_remembered),
        (s.false_positives + 1, s.false_positives_remembered + 1),
        "the second lookup is the memory's, though the other table was committed to"
    );
    commit_key(&db, multimap, k);
    assert!(found(&db, multimap, k), "false negative after a write");
    assert!(absent(), "the held snapshot lacks the key");
    assert_eq!(stats(&db, multimap).false_positives, s2.false_positives + 1);
    // ... and did not remember it: its snapshot is older than the key's commit.
    assert!(
        found(&db, multimap, k),
        "false negative: an old snapshot remembered the key"
    );
}

#[test]
fn a_table_remembers_across_commits_to_another_table() {
    remembered_across_other_commits(false);
}

#[test]
fn a_multimap_table_remembers_across_commits_to_another_table() {
    remembered_across_other_commits(true);
}

/// A remembered false positive is looked up (fresh read transactions, and `get_latest`
/// for a table) while one thread commits to the other table and another commits the key:
/// every lookup begun after that commit returned finds the key.
fn a_racing_write_is_found(multimap: bool) {
    let (_dir, db) = db(multimap);
    let db = Arc::new(db);
    let k = false_positive(&db, multimap);
    assert!(!found(&db, multimap, k));
    assert!(!found(&db, multimap, k));
    assert!(stats(&db, multimap).false_positives_remembered >= 1);
    let done = Arc::new(AtomicBool::new(false));
    let other = {
        let (db, done) = (db.clone(), done.clone());
        std::thread::spawn(move || {
            for i in 0..20 {
                commit_other(&db, multimap, i);
            }
            while !done.load(SeqCst) {
                std::thread::yield_now();
            }
        })
    };
    let writer = {
        let (db, done) = (db.clone(), done.clone());
        std::thread::spawn(move || {
            commit_key(&db, multimap, k);
            done.store(true, SeqCst);
        })
    };
    let mut after = 0;
    while after < 50 {
        let committed = done.load(SeqCst);
        let present = found(&db, multimap, k)
            && (multimap || db.get_latest(A, key(k).as_str()).unwrap().is_some());
        assert!(
            present || !committed,
            "false negative: a lookup after the commit"
        );
        after += u32::from(committed);
    }
    writer.join().unwrap();
    other.join().unwrap();
}

#[test]
fn a_table_finds_a_remembered_key_written_by_a_racing_thread() {
    a_racing_write_is_found(false);
}

#[test]
fn a_multimap_table_finds_a_remembered_key_written_by_a_racing_thread() {
    a_racing_write_is_found(true);
}

/// (store lookups, false positives, remembered) of `A` (or `MA`).
fn counts(db: &Database, multimap: bool) -> (u64, u64, u64) {
    let s = stats(db, multimap);
    (
        s.store_lookups,
        s.false_positives,
        s.false_positives_remembered,
    )
}

/// `k` looked up in an open write transaction's `A` (or `MA`): true if absent.
fn absent_in<'t>(
    t: &bloomsled_redb::Table<'t, &'static str, u64>,
    m: &bloomsled_redb::MultimapTable<'t, &'static str, u64>,
    multimap: bool,
    k: u64,
) -> bool {
    match multimap {
        false => t.get(key(k).as_str()).unwrap().is_none(),
        true => m.get(key(k).as_str()).unwrap().is_empty(),
    }
}

/// A write transaction's repeated false positive costs one redb lookup (the second is the
/// handle's memory), and a key it then inserts is found by its next lookup.
fn a_write_transaction_remembers_then_finds_its_write(multimap: bool) {
    let (_dir, db) = db(multimap);
    let k = false_positive(&db, multimap);
    let (store, fps, remembered) = counts(&db, multimap);
    let w = db.begin_write().unwrap();
    let mut t = w.open_table(A).unwrap();
    let mut m = w.open_multimap_table(MA).unwrap();
    for _ in 0..3 {
        assert!(absent_in(&t, &m, multimap, k));
    }
    assert_eq!(
        counts(&db, multimap),
        (store + 1, fps + 1, remembered + 2),
        "one redb lookup for three lookups of a false positive"
    );
    match multimap {
        false => drop(t.insert(key(k).as_str(), &k).unwrap()),
        true => drop(m.insert(key(k).as_str(), &k).unwrap()),
    }
    assert!(
        !absent_in(&t, &m, multimap, k),
        "false negative: the transaction's own write, after a remembered false positive"
    );
    drop((t, m));
    w.commit().unwrap();
    assert!(found(&db, multimap, k));
}

#[test]
fn a_write_transaction_remembers_a_false_positive_and_finds_its_own_write() {
    a_write_transaction_remembers_then_finds_its_write(false);
}

#[test]
fn a_multimap_write_transaction_remembers_a_false_positive_and_finds_its_own_write() {
    a_write_transaction_remembers_then_finds_its_write(true);
}

/// A false positive a read transaction remembered is answered to a write transaction
/// without redb; once the write transaction writes the key (through another handle), it
/// finds it.
#[test]
fn a_write_transaction_recalls_a_read_tables_entry_until_it_writes_the_key() {
    let (_dir, db) = db(false);
    let k = false_positive(&db, false);
    assert!(!found(&db, false, k));
    assert!(!found(&db, false, k));
    let (store, fps, remembered) = counts(&db, false);
    let w = db.begin_write().unwrap();
    assert!(
        w.open_table(A)
            .unwrap()
            .get(key(k).as_str())
            .unwrap()
            .is_none()
    );
    assert_eq!(counts(&db, false), (store, fps, remembered + 1));
    w.open_table(A)
        .unwrap()
        .insert(key(k).as_str(), &k)
        .unwrap();
    let t = w.open_table(A).unwrap();
    assert!(
        t.get(key(k).as_str()).unwrap().is_some(),
        "false negative: a remembered key the transaction wrote"
    );
    drop(t);
    w.commit().unwrap();
    assert!(found(&db, false, k));
}

/// What a write transaction found absent is recorded after its commit (a later read
/// transaction's lookup is the memory's), unless it wrote the key since, through any
/// handle; an aborted one records nothing.
#[test]
fn a_write_transaction_records_its_misses_after_its_commit() {
    let (_dir, db) = db(false);
    let k = false_positive(&db, false);
    // Aborted: nothing recorded, the read pays redb.
    let w = db.begin_write().unwrap();
    assert!(
        w.open_table(A)
            .unwrap()
            .get(key(k).as_str())
            .unwrap()
            .is_none()
    );
    drop(w);
    let store = counts(&db, false).0;
    assert!(!found(&db, false, k));
    assert_eq!(counts(&db, false).0, store + 1, "an abort recorded a miss");
    // Committed: recorded, the read is the memory's.
    let k = false_positive_after(&db, false, k);
    let w = db.begin_write().unwrap();
    assert!(
        w.open_table(A)
            .unwrap()
            .get(key(k).as_str())
            .unwrap()
            .is_none()
    );
    w.commit().unwrap();
    let (store, fps, remembered) = counts(&db, false);
    assert!(!found(&db, false, k));
    assert_eq!(counts(&db, false), (store, fps, remembered + 1));
    // A miss, then the key written through another handle: not recorded, and found.
    let k2 = false_positive_after(&db, false, k);
    let w = db.begin_write().unwrap();
    assert!(
        w.open_table(A)
            .unwrap()
            .get(key(k2).as_str())
            .unwrap()
            .is_none()
    );
    w.open_table(A)
        .unwrap()
        .insert(key(k2).as_str(), &k2)
        .unwrap();
    w.commit().unwrap();
    assert!(
        found(&db, false, k2),
        "false negative: a miss written since was recorded"
    );
}

/// A key a write transaction removed is a miss of its view but present in the committed
/// state: after an abort it is still found; after a commit it is absent, rightly.
#[test]
fn a_removed_key_is_recorded_only_when_its_removal_commits() {
    let (_dir, db) = db(false);
    let w = db.begin_write().unwrap();
    {
        let mut t = w.open_table(A).unwrap();
        t.remove(key(7).as_str()).unwrap();
        assert!(t.get(key(7).as_str()).unwrap().is_none());
        assert!(t.get(key(7).as_str()).unwrap().is_none());
    }
    w.abort().unwrap();
    assert!(
        found(&db, false, 7),
        "false negative: an aborted removal was remembered"
    );
    assert!(db.get_latest(A, key(7).as_str()).unwrap().is_some());
    let w = db.begin_write().unwrap();
    {
        let mut t = w.open_table(A).unwrap();
        t.remove(key(7).as_str()).unwrap();
        assert!(t.get(key(7).as_str()).unwrap().is_none());
    }
    w.commit().unwrap();
    let (store, _, remembered) = counts(&db, false);
    assert!(!found(&db, false, 7));
    assert_eq!(counts(&db, false).0, store);
    assert_eq!(counts(&db, false).2, remembered + 1);
    commit_key(&db, false, 7);
    assert!(
        found(&db, false, 7),
        "false negative: a key written back after its removal"
    );
}

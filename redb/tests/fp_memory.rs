//! The false-positive memory counts commits per table (`filters/commits.rs`): commits to
//! another table do not stop a table's memory, and a write of a remembered key is found
//! as soon as its commit returns, for tables and multimap tables alike.

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
/// probing absent keys in a write transaction (which neither records nor recalls, so the
/// memory starts without it), then aborted.
fn false_positive(db: &Database, multimap: bool) -> u64 {
    let w = db.begin_write().unwrap();
    let t = w.open_table(A).unwrap();
    let m = w.open_multimap_table(MA).unwrap();
    for i in 1_000..100_000 {
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

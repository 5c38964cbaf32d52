//! Each removal path leaves false positives at most; restores and renames bring keys back
//! and the filters hold them; builds racing writers lose nothing.

mod common;

use common::settle;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use bloomsled_redb::{
    Database, Durability, MultimapTableDefinition, ReadableDatabase, ReadableTable, TableDefinition,
};

const T: TableDefinition<&str, u64> = TableDefinition::new("t");
const U: TableDefinition<&str, u64> = TableDefinition::new("u");
const M: MultimapTableDefinition<&str, u64> = MultimapTableDefinition::new("m");

fn key(i: u64) -> String {
    format!("https://example.com/page/{i}")
}

fn db() -> (tempfile::TempDir, Database) {
    let dir = tempfile::tempdir().unwrap();
    let db = Database::create(dir.path().join("p.redb")).unwrap();
    (dir, db)
}

fn load(db: &Database, range: std::ops::Range<u64>) {
    let w = db.begin_write().unwrap();
    {
        let mut t = w.open_table(T).unwrap();
        for i in range {
            t.insert(key(i).as_str(), i).unwrap();
        }
    }
    w.commit().unwrap();
}

/// `present` are in the table, `absent` are not, by every lookup path.
fn expect(db: &Database, present: impl Iterator<Item = u64>, absent: impl Iterator<Item = u64>) {
    settle(db, &[T]);
    let r = db.begin_read().unwrap();
    let t = r.open_table(T).unwrap();
    assert!(t.filter_in_use(), "the filter is in use");
    for i in present {
        let k = key(i);
        assert_eq!(t.get(k.as_str()).unwrap().unwrap().value(), i, "{k}");
        assert_eq!(
            db.get_latest(T, k.as_str()).unwrap().unwrap().value(),
            i,
            "{k}"
        );
    }
    for i in absent {
        let k = key(i);
        assert!(t.get(k.as_str()).unwrap().is_none(), "{k}");
        assert!(db.get_latest(T, k.as_str()).unwrap().is_none(), "{k}");
    }
}

#[test]
fn removals_leave_false_positives_only() {
    let (_d, db) = db();
    load(&db, 0..1000);
    let w = db.begin_write().unwrap();
    let popped = {
        let mut t = w.open_table(T).unwrap();
        t.remove(key(0).as_str()).unwrap();
        t.retain(|_, v| v % 10 != 1).unwrap();
        assert_eq!(t.extract_if(|_, v| v % 10 == 2).unwrap().count(), 100);
        let first = t.pop_first().unwrap().unwrap().1.value();
        let last = t.pop_last().unwrap().unwrap().1.value();
        assert!(t.get(key(3).as_str()).unwrap().is_some());
        [first, last]
    };
    w.commit().unwrap();
    let gone = |i: u64| i == 0 || i % 10 == 1 || i % 10 == 2 || popped.contains(&i);
    expect(
        &db,
        (0..1000).filter(|i| !gone(*i)),
        (0..1000).filter(|i| gone(*i)),
    );
}

#[test]
fn aborted_and_non_durable_writes() {
    let (_d, db) = db();
    load(&db, 0..100);
    let w = db.begin_write().unwrap();
    w.open_table(T)
        .unwrap()
        .insert(key(500).as_str(), 500)
        .unwrap();
    w.abort().unwrap();
    let mut w = db.begin_write().unwrap();
    w.set_durability(Durability::None).unwrap();
    w.open_table(T)
        .unwrap()
        .insert(key(600).as_str(), 600)
        .unwrap();
    w.commit().unwrap();
    expect(
        &db,
        (0..100).chain([600]),
        [500].into_iter().chain(1000..1100),
    );
}

#[test]
fn delete_and_recreate_a_table() {
    let (_d, db) = db();
    load(&db, 0..100);
    let w = db.begin_write().unwrap();
    assert!(w.delete_table(T).unwrap());
    w.commit().unwrap();
    assert!(db.get_latest(T, key(1).as_str()).unwrap().is_none());
    load(&db, 100..200);
    expect(&db, 100..200, 0..100);
}

#[test]
fn rename_brings_the_keys_to_the_new_name() {
    let (_d, db) = db();
    // The new name's filter exists and is trusted before the rename.
    let w = db.begin_write().unwrap();
    w.open_table(U).unwrap().insert("other", 1).unwrap();
    w.delete_table(U).unwrap();
    w.commit().unwrap();
    assert!(db.get_latest(U, key(1).as_str()).unwrap().is_none());
    load(&db, 0..300);
    let w = db.begin_write().unwrap();
    w.rename_table(T, U).unwrap();
    assert_eq!(
        w.open_table(U)
            .unwrap()
            .get(key(7).as_str())
            .unwrap()
            .unwrap()
            .value(),
        7
    );
    w.commit().unwrap();
    for i in 0..300 {
        let k = key(i);
        assert_eq!(db.get_latest(U, k.as_str()).unwrap().unwrap().value(), i);
        let r = db.begin_read().unwrap();
        assert_eq!(
            r.open_table(U)
                .unwrap()
                .get(k.as_str())
                .unwrap()
                .unwrap()
                .value(),
            i
        );
    }
    settle(&db, &[U]);
    let r = db.begin_read().unwrap();
    assert!(
        r.open_table(U).unwrap().filter_in_use(),
        "rebuilt after the rename"
    );
}

const C: TableDefinition<&str, u64> = TableDefinition::new("c");

/// A false positive of `C` (keys 0..1,000), found by fresh read transactions: the one that
/// finds it remembers it.
fn remembered_false_positive_of_c(db: &Database) -> u64 {
    (1_000..200_000)
        .find(|&i| {
            let before = db.table_filter_stats(C).unwrap().false_positives;
            let r = db.begin_read().unwrap();
            assert!(
                r.open_table(C)
                    .unwrap()
                    .get(key(i).as_str())
                    .unwrap()
                    .is_none()
            );
            db.table_filter_stats(C).unwrap().false_positives > before
        })
        .expect("a false positive in 199,000 absent keys")
}

/// After a rename of `T` to `U`: `C` answers from its filter (no build since, its absent
/// keys ruled out without redb, its remembered false positive still the memory's), in the
/// renaming transaction and after it; `U` holds every key of `T`; `T` is gone. Then the
/// same after a clean close and reopen (`C` and `U` loaded, not scanned).
#[test]
fn a_rename_keeps_the_other_tables_filters() {
    let (dir, db) = db();
    load(&db, 0..300);
    let w = db.begin_write().unwrap();
    {
        let mut c = w.open_table(C).unwrap();
        for i in 0..1_000 {
            c.insert(key(i).as_str(), i).unwrap();
        }
    }
    w.commit().unwrap();
    settle(&db, &[T, C]);
    let fp = remembered_false_positive_of_c(&db);
    let before = db.table_filter_stats(C).unwrap();
    let w = db.begin_write().unwrap();
    w.rename_table(T, U).unwrap();
    // The renaming transaction itself still trusts C's filter.
    assert!(w.open_table(C).unwrap().get("absent").unwrap().is_none());
    w.commit().unwrap();
    let r = db.begin_read().unwrap();
    let c = r.open_table(C).unwrap();
    assert!(c.filter_in_use(), "C's filter distrusted by a rename of T");
    assert!(c.get(key(fp).as_str()).unwrap().is_none());
    assert_eq!(
        db.table_filter_stats(C).unwrap().false_positives_remembered,
        before.false_positives_remembered + 1,
        "C's memory lost by a rename of T"
    );
    for i in 1_000..3_000 {
        assert!(c.get(key(i).as_str()).unwrap().is_none());
        assert!(db.get_latest(C, key(i).as_str()).unwrap().is_none());
    }
    for i in 0..1_000 {
        assert_eq!(c.get(key(i).as_str()).unwrap().unwrap().value(), i);
    }
    drop((c, r));
    let after = db.table_filter_stats(C).unwrap();
    assert_eq!(after.builds, before.builds, "C rebuilt after a rename of T");
    // 2,000 absent lookups (and 2,000 per-request ones) cost redb at most their false
    // positives, and the 1,000 present lookups one each.
    let store = after.store_lookups - before.store_lookups;
    assert!(
        store <= 1_000 + 2 * (after.false_positives - before.false_positives),
        "C's absent lookups went to redb: {store}"
    );
    let check = |db: &Database| {
        for i in 0..300 {
            let k = key(i);
            assert_eq!(db.get_latest(U, k.as_str()).unwrap().unwrap().value(), i);
            let r = db.begin_read().unwrap();
            let u = r.open_table(U).unwrap();
            assert_eq!(u.get(k.as_str()).unwrap().unwrap().value(), i);
            assert!(db.get_latest(T, k.as_str()).unwrap().is_none());
            assert!(matches!(
                r.open_table(T),
                Err(bloomsled_redb::TableError::TableDoesNotExist(_))
            ));
        }
    };
    check(&db);
    settle(&db, &[U]);
    check(&db);
    drop(db);
    let db = Database::open(dir.path().join("p.redb")).unwrap();
    settle(&db, &[C, U]);
    check(&db);
    assert_eq!(
        db.table_filter_source(C),
        Some(bloomsled_redb::FilterSource::Loaded)
    );
    assert_eq!(
        db.table_filter_source(U),
        Some(bloomsled_redb::FilterSource::Loaded)
    );
}

#[test]
fn restore_ephemeral_savepoint_brings_removed_keys_back() {
    let (_d, db) = db();
    load(&db, 0..500);
    let w = db.begin_write().unwrap();
    let s = w.ephemeral_savepoint().unwrap();
    w.commit().unwrap();
    let w = db.begin_write().unwrap();
    w.open_table(T).unwrap().retain(|_, v| v >= 250).unwrap();
    w.commit().unwrap();
    expect(&db, 250..500, 0..250);
    // A reader that outlives the restore keeps its snapshot.
    let old = db.begin_read().unwrap();
    let mut w = db.begin_write().unwrap();
    w.restore_savepoint(&s).unwrap();
    {
        let t = w.open_table(T).unwrap();
        for i in 0..500 {
            assert_eq!(
                t.get(key(i).as_str()).unwrap().unwrap().value(),
                i,
                "in the restoring txn"
            );
        }
    }
    // Before the restore commits, the latest state still lacks them.
    assert!(db.get_latest(T, key(3).as_str()).unwrap().is_none());
    w.commit().unwrap();
    for i in 0..500 {
        assert_eq!(
            db.get_latest(T, key(i).as_str()).unwrap().unwrap().value(),
            i
        );
    }
    let t = old.open_table(T).unwrap();
    assert!(t.get(key(3).as_str()).unwrap().is_none());
    expect(&db, 0..500, 500..600);
}

#[test]
fn restore_persistent_savepoint_after_reopen() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("p.redb");
    let db = Database::create(&path).unwrap();
    load(&db, 0..200);
    let w = db.begin_write().unwrap();
    let id = w.persistent_savepoint().unwrap();
    w.commit().unwrap();
    let w = db.begin_write().unwrap();
    w.open_table(T)
        .unwrap()
        .extract_if(|_, _| true)
        .unwrap()
        .for_each(drop);
    w.commit().unwrap();
    drop(db);
    let db = Database::open(&path).unwrap();
    expect(&db, 0..0, 0..200);
    let mut w = db.begin_write().unwrap();
    let s = w.get_persistent_savepoint(id).unwrap();
    w.restore_savepoint(&s).unwrap();
    drop(s);
    w.commit().unwrap();
    expect(&db, 0..200, 200..300);
}

#[test]
fn aborted_restore_leaves_the_filters_exact() {
    let (_d, db) = db();
    load(&db, 0..100);
    let w = db.begin_write().unwrap();
    let s = w.ephemeral_savepoint().unwrap();
    w.commit().unwrap();
    let mut w = db.begin_write().unwrap();
    w.restore_savepoint(&s).unwrap();
    w.abort().unwrap();
    expect(&db, 0..100, 100..200);
}

#[test]
fn multimap_get_of_a_ruled_out_key_is_empty() {
    let (_d, db) = db();
    let w = db.begin_write().unwrap();
    {
        let mut m = w.open_multimap_table(M).unwrap();
        for i in 0..100 {
            m.insert(key(i).as_str(), i).unwrap();
            m.insert(key(i).as_str(), i + 1).unwrap();
        }
    }
    w.commit().unwrap();
    let r = db.begin_read().unwrap();
    let m = r.open_multimap_table(M).unwrap();
    for i in 0..100 {
        assert_eq!(m.get(key(i).as_str()).unwrap().len(), 2);
    }
    for i in 100..200 {
        assert!(m.get(key(i).as_str()).unwrap().is_empty());
    }
}

#[test]
fn a_build_racing_writers_loses_no_key() {
    // A fresh handle on a loaded file: the first reader builds the filter from a scan while
    // a writer keeps committing; every key a commit returned must be found afterwards.
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("p.redb");
    drop({
        let db = Database::create(&path).unwrap();
        load(&db, 0..20_000);
        db
    });
    for round in 0..4 {
        let db = Arc::new(Database::open(&path).unwrap());
        let stop = Arc::new(AtomicBool::new(false));
        let next = Arc::new(AtomicU64::new(100_000 * (round + 1)));
        let writer = {
            let (db, stop, next) = (db.clone(), stop.clone(), next.clone());
            std::thread::spawn(move || {
                while !stop.load(Ordering::SeqCst) {
                    let w = db.begin_write().unwrap();
                    {
                        let mut t = w.open_table(T).unwrap();
                        for _ in 0..50 {
                            let i = next.fetch_add(1, Ordering::SeqCst);
                            t.insert(key(i).as_str(), i).unwrap();
                        }
                    }
                    let mut w = w;
                    w.set_durability(Durability::None).unwrap();
                    w.commit().unwrap();
                }
            })
        };
        // The build (first use) runs here, while the writer commits.
        let r = db.begin_read().unwrap();
        drop(r.open_table(T).unwrap());
        std::thread::sleep(std::time::Duration::from_millis(50));
        stop.store(true, Ordering::SeqCst);
        writer.join().unwrap();
        let written = next.load(Ordering::SeqCst);
        let db = Arc::try_unwrap(db).ok().unwrap();
        let r = db.begin_read().unwrap();
        let t = r.open_table(T).unwrap();
        for i in (0..20_000).chain(100_000 * (round + 1)..written) {
            let k = key(i);
            assert!(db.get_latest(T, k.as_str()).unwrap().is_some(), "{k}");
            assert!(t.get(k.as_str()).unwrap().is_some(), "{k}");
        }
    }
}

#[test]
fn readers_during_commits_see_every_returned_commit() {
    // A writer commits batches and then publishes how far it got; readers check that every
    // key up to a published mark is found by get_latest and by a fresh read transaction,
    // while restores and compactions happen along the way.
    let (_d, db) = db();
    let db = Arc::new(db);
    let done = Arc::new(AtomicU64::new(0));
    let stop = Arc::new(AtomicBool::new(false));
    let readers: Vec<_> = (0..2)
        .map(|_| {
            let (db, done, stop) = (db.clone(), done.clone(), stop.clone());
            std::thread::spawn(move || {
                let mut checks = 0u64;
                while !stop.load(Ordering::SeqCst) {
                    let upto = done.load(Ordering::SeqCst);
                    let r = db.begin_read().unwrap();
                    let Ok(t) = r.open_table(T) else { continue };
                    for i in (0..upto).rev().step_by(7).take(200) {
                        let k = key(i);
                        assert!(t.get(k.as_str()).unwrap().is_some(), "read txn: {k}");
                        assert!(
                            db.get_latest(T, k.as_str()).unwrap().is_some(),
                            "latest: {k}"
                        );
                        checks += 1;
                    }
                }
                checks
            })
        })
        .collect();
    let mut next = 0;
    for batch in 0..60u64 {
        let w = db.begin_write().unwrap();
        let s = (batch % 20 == 5).then(|| w.ephemeral_savepoint().unwrap());
        {
            let mut t = w.open_table(T).unwrap();
            for _ in 0..500 {
                t.insert(key(next).as_str(), next).unwrap();
                next += 1;
            }
        }
        w.commit().unwrap();
        done.store(next, Ordering::SeqCst);
        if let Some(s) = s {
            // Restore to the state before this batch, then put the batch back: the keys
            // readers may check never leave the latest state.
            let mut w = db.begin_write().unwrap();
            w.restore_savepoint(&s).unwrap();
            {
                let mut t = w.open_table(T).unwrap();
                for i in next - 500..next {
                    t.insert(key(i).as_str(), i).unwrap();
                }
            }
            w.commit().unwrap();
        }
    }
    stop.store(true, Ordering::SeqCst);
    let checks: u64 = readers.into_iter().map(|r| r.join().unwrap()).sum();
    assert!(checks > 0);
    expect(&db, 0..next, next..next + 100);
}

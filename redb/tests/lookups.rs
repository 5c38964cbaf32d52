//! Per-table lookup counts (`TableFilterStats::lookups` and the rest), and the
//! false-positive memory's races staged one by one.

use bloomsled_redb::{
    Database, MultimapTableDefinition, ReadableDatabase, ReadableTable, TableDefinition,
    TableFilterStats,
};

const T: TableDefinition<&str, u64> = TableDefinition::new("t");
const M: MultimapTableDefinition<&str, u64> = MultimapTableDefinition::new("m");

fn key(i: u64) -> String {
    format!("https://example.com/page/{i}")
}

fn db() -> (tempfile::TempDir, Database) {
    let dir = tempfile::tempdir().unwrap();
    let db = Database::create(dir.path().join("l.redb")).unwrap();
    (dir, db)
}

fn stats(db: &Database) -> TableFilterStats {
    db.table_filter_stats(T).unwrap()
}

/// Keys `range` inserted in one commit.
fn load(db: &Database, range: std::ops::Range<u64>) {
    let w = db.begin_write().unwrap();
    {
        let mut t = w.open_table(T).unwrap();
        for i in range {
            t.insert(key(i).as_str(), &i).unwrap();
        }
    }
    w.commit().unwrap();
}

/// Every lookup path counts: present keys read redb, absent ones are ruled out or, the
/// filter's false positives, read redb and find nothing; the counts add up exactly.
#[test]
fn lookups_are_counted_by_what_answered_them() {
    let (_dir, db) = db();
    // 1,000 keys in the 1,024 a first filter is sized for: the 0.1% rate at capacity.
    load(&db, 0..1_000);
    let before = stats(&db);
    assert_eq!(
        (before.lookups, before.ruled_out, before.store_lookups),
        (0, 0, 0)
    );
    let r = db.begin_read().unwrap();
    let t = r.open_table(T).unwrap();
    for i in 0..1_000 {
        assert!(t.get(key(i).as_str()).unwrap().is_some());
    }
    for i in 1_000..21_000 {
        assert!(t.get(key(i).as_str()).unwrap().is_none());
    }
    let s = stats(&db);
    assert_eq!(s.lookups, 21_000);
    // From the 65th present key in a row the handle skipped the filter; the first absent
    // key read redb (the bypass's one absent key) and ended it.
    assert_eq!(s.bypassed, 1_000 - 64 + 1);
    assert_eq!(s.ruled_out + s.false_positives, 20_000 - 1);
    assert_eq!(s.store_lookups, 1_000 + 1 + s.false_positives);
    // About 20 expected (0.1% of 20,000); none at all has odds of e^-20.
    assert!(
        s.false_positives > 0 && s.false_positives < 200,
        "{} false positives",
        s.false_positives
    );

    // The per-request path counts each lookup once, whichever way it was answered.
    for i in 21_000..22_000 {
        assert!(db.get_latest(T, key(i).as_str()).unwrap().is_none());
    }
    assert!(db.get_latest(T, key(5).as_str()).unwrap().is_some());
    let s2 = stats(&db);
    assert_eq!(s2.lookups, s.lookups + 1_001);
    assert_eq!(
        s2.ruled_out + s2.store_lookups,
        s2.lookups,
        "every lookup was ruled out or read redb"
    );

    // A write transaction's lookups too.
    let w = db.begin_write().unwrap();
    {
        let mut t = w.open_table(T).unwrap();
        assert!(t.get(key(7).as_str()).unwrap().is_some());
        assert!(t.get_mut(key(8).as_str()).unwrap().is_some());
    }
    w.abort().unwrap();
    let s3 = stats(&db);
    assert_eq!(s3.lookups, s2.lookups + 2);
    assert_eq!(s3.store_lookups, s2.store_lookups + 2);
    assert_eq!(s3.false_positives, s2.false_positives);
}

/// With no trusted filter (a restore in flight distrusts them all), every lookup reads redb
/// and none is a false positive: the filter said nothing.
#[test]
fn lookups_without_a_trusted_filter_read_redb_and_are_no_false_positives() {
    let (_dir, db) = db();
    load(&db, 0..10);
    let mut w = db.begin_write().unwrap();
    let s = w.ephemeral_savepoint().unwrap();
    w.restore_savepoint(&s).unwrap();
    {
        let t = w.open_table(T).unwrap();
        assert!(t.get(key(100).as_str()).unwrap().is_none());
    }
    let st = stats(&db);
    assert_eq!(
        (st.lookups, st.store_lookups, st.false_positives),
        (1, 1, 0)
    );
    w.commit().unwrap();
}

/// Multimap tables count their lookups the same way.
#[test]
fn multimap_lookups_are_counted() {
    let (_dir, db) = db();
    let w = db.begin_write().unwrap();
    w.open_multimap_table(M).unwrap().insert("a", &1).unwrap();
    w.commit().unwrap();
    let r = db.begin_read().unwrap();
    let m = r.open_multimap_table(M).unwrap();
    assert_eq!(m.get("a").unwrap().len(), 1);
    for i in 0..100 {
        assert!(m.get(key(i).as_str()).unwrap().is_empty());
    }
    let s = db.multimap_table_filter_stats(M).unwrap();
    assert_eq!(s.lookups, 101);
    assert_eq!(s.store_lookups, 1 + s.false_positives);
    assert_eq!(s.ruled_out, 100 - s.false_positives);
    // `get_owned` goes through the filter too, and its values outlive the table handle.
    let owned = m.get_owned("a").unwrap();
    for i in 100..200 {
        assert!(m.get_owned(key(i).as_str()).unwrap().is_empty());
    }
    drop(m);
    drop(r);
    assert_eq!(owned.map(|v| v.unwrap().value()).collect::<Vec<_>>(), [1]);
    let t = db.multimap_table_filter_stats(M).unwrap();
    assert_eq!(t.lookups - s.lookups, 101);
    assert_eq!(
        t.store_lookups - s.store_lookups,
        1 + t.false_positives - s.false_positives
    );
    assert_eq!(
        t.ruled_out - s.ruled_out,
        100 - (t.false_positives - s.false_positives)
    );
    assert!(t.ruled_out - s.ruled_out >= 90, "{t:?}");
}

/// Removes `k` in one commit: its bits stay, so each lookup of it is a false positive.
fn remove(db: &Database, k: u64) {
    let w = db.begin_write().unwrap();
    assert!(
        w.open_table(T)
            .unwrap()
            .remove(key(k).as_str())
            .unwrap()
            .is_some()
    );
    w.commit().unwrap();
}

/// `k` holds `v` in the latest state, by `get_latest` and by a fresh read transaction.
fn assert_found(db: &Database, k: u64, v: u64) {
    assert_eq!(
        db.get_latest(T, key(k).as_str()).unwrap().unwrap().value(),
        v
    );
    let r = db.begin_read().unwrap();
    let t = r.open_table(T).unwrap();
    assert_eq!(t.get(key(k).as_str()).unwrap().unwrap().value(), v);
}

/// Looks `k` up twice in a fresh read transaction: the first lookup reads redb and finds
/// nothing, the second is answered by the memory.
fn remember(db: &Database, k: u64) {
    let before = stats(db);
    let r = db.begin_read().unwrap();
    let t = r.open_table(T).unwrap();
    assert!(t.get(key(k).as_str()).unwrap().is_none());
    assert!(t.get(key(k).as_str()).unwrap().is_none());
    let after = stats(db);
    assert_eq!(after.false_positives, before.false_positives + 1);
    assert_eq!(
        after.false_positives_remembered,
        before.false_positives_remembered + 1
    );
}

/// A false positive is paid once: the next lookups of the key, in any read transaction or
/// through `get_latest`, are answered without redb.
#[test]
fn a_false_positive_is_paid_once() {
    let (_dir, db) = db();
    load(&db, 0..10);
    remove(&db, 3);
    remember(&db, 3);
    let s = stats(&db);
    assert!(db.get_latest(T, key(3).as_str()).unwrap().is_none());
    let s2 = stats(&db);
    assert_eq!(s2.false_positives, s.false_positives);
    assert_eq!(
        s2.false_positives_remembered,
        s.false_positives_remembered + 1
    );
    assert_eq!(
        s2.lookups,
        s2.ruled_out + s2.store_lookups + s2.false_positives_remembered
    );
}

/// The race: a reader whose snapshot is older than a commit of the key (the commit
/// forgot the key and ended before the reader's lookup) finds it absent in its snapshot, and
/// must not remember it: later lookups of the latest state find the key.
#[test]
fn an_old_snapshot_does_not_remember_a_key_committed_since() {
    let (_dir, db) = db();
    load(&db, 0..10);
    remove(&db, 3);
    let old = db.begin_read().unwrap();
    let old_t = old.open_table(T).unwrap();
    load(&db, 3..4);
    // Absent in the old snapshot, twice: redb answers both (no record, no recall).
    assert!(old_t.get(key(3).as_str()).unwrap().is_none());
    assert!(old_t.get(key(3).as_str()).unwrap().is_none());
    assert_eq!(stats(&db).false_positives_remembered, 0);
    assert_found(&db, 3, 3);
}

/// The converse: a key present in an old snapshot, removed and remembered since, is still
/// found by the old snapshot (a recall needs the latest state).
#[test]
fn an_old_snapshot_does_not_answer_from_memory() {
    let (_dir, db) = db();
    load(&db, 0..10);
    let old = db.begin_read().unwrap();
    let old_t = old.open_table(T).unwrap();
    remove(&db, 3);
    remember(&db, 3);
    assert_eq!(old_t.get(key(3).as_str()).unwrap().unwrap().value(), 3);
}

/// A write transaction's own key: it finds it; a reader of the latest committed state
/// while it runs finds it absent (right) but records nothing, so after the commit every
/// lookup finds it.
#[test]
fn a_write_transactions_key_is_forgotten_until_it_ends() {
    let (_dir, db) = db();
    load(&db, 0..10);
    remove(&db, 3);
    remember(&db, 3);
    let w = db.begin_write().unwrap();
    {
        let mut t = w.open_table(T).unwrap();
        t.insert(key(3).as_str(), &33).unwrap();
        assert_eq!(t.get(key(3).as_str()).unwrap().unwrap().value(), 33);
    }
    let before = stats(&db);
    for _ in 0..2 {
        // Two fresh readers: the first would record if the forget had ended at the insert.
        let r = db.begin_read().unwrap();
        assert!(
            r.open_table(T)
                .unwrap()
                .get(key(3).as_str())
                .unwrap()
                .is_none()
        );
    }
    assert_eq!(
        stats(&db).false_positives_remembered,
        before.false_positives_remembered,
        "no record or recall while the writer runs"
    );
    w.commit().unwrap();
    assert_found(&db, 3, 33);
}

/// An aborted write of a remembered key: the key stays absent, and its forget ended with
/// the transaction (the key is remembered again after one more store lookup).
#[test]
fn an_aborted_write_forgets_harmlessly() {
    let (_dir, db) = db();
    load(&db, 0..10);
    remove(&db, 3);
    remember(&db, 3);
    let w = db.begin_write().unwrap();
    w.open_table(T)
        .unwrap()
        .insert(key(3).as_str(), &33)
        .unwrap();
    w.abort().unwrap();
    assert!(db.get_latest(T, key(3).as_str()).unwrap().is_none());
    // get_latest paid the forgotten false positive once and recorded it.
    let s = stats(&db);
    assert!(db.get_latest(T, key(3).as_str()).unwrap().is_none());
    assert_eq!(
        stats(&db).false_positives_remembered,
        s.false_positives_remembered + 1
    );
}

/// A restore brings back a key the memory holds as absent: the restore forgets every key,
/// so the key is found after it.
#[test]
fn a_restore_brings_back_a_remembered_key() {
    let (_dir, db) = db();
    load(&db, 0..10);
    let w = db.begin_write().unwrap();
    let savepoint = w.ephemeral_savepoint().unwrap();
    w.commit().unwrap();
    remove(&db, 3);
    remember(&db, 3);
    let mut w = db.begin_write().unwrap();
    w.restore_savepoint(&savepoint).unwrap();
    w.commit().unwrap();
    // The first open after the restore rebuilds the filter: trusted again.
    let r = db.begin_read().unwrap();
    let t = r.open_table(T).unwrap();
    assert!(stats(&db).in_use);
    assert_eq!(t.get(key(3).as_str()).unwrap().unwrap().value(), 3);
    assert_eq!(
        db.get_latest(T, key(3).as_str()).unwrap().unwrap().value(),
        3
    );
}

/// A rename gives a name keys it never had: its memory forgets them all.
#[test]
fn a_rename_over_a_remembered_key_is_found() {
    const A: TableDefinition<&str, u64> = TableDefinition::new("a");
    let (_dir, db) = db();
    load(&db, 0..10);
    remove(&db, 3);
    remember(&db, 3);
    let w = db.begin_write().unwrap();
    w.open_table(A)
        .unwrap()
        .insert(key(3).as_str(), &7)
        .unwrap();
    assert!(w.delete_table(T).unwrap());
    w.rename_table(A, T).unwrap();
    w.commit().unwrap();
    let r = db.begin_read().unwrap();
    let t = r.open_table(T).unwrap();
    assert!(stats(&db).in_use);
    assert_eq!(t.get(key(3).as_str()).unwrap().unwrap().value(), 7);
    assert_eq!(
        db.get_latest(T, key(3).as_str()).unwrap().unwrap().value(),
        7
    );
}

/// The forgets a write handle holds keep it `Send` and `Sync`, as redb's own handles are
/// (a `RefCell` in it did not: caught by this test).
#[test]
fn write_handles_stay_send_and_sync() {
    fn send_sync<T: Send + Sync>() {}
    send_sync::<bloomsled_redb::Table<'static, u64, u64>>();
    send_sync::<bloomsled_redb::MultimapTable<'static, u64, u64>>();
    send_sync::<bloomsled_redb::CursorMut<'static, u64, u64>>();
    send_sync::<bloomsled_redb::WriteTransaction>();
}

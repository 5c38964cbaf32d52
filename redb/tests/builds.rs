//! Builds in the background: a table that needs a scan at its first use (here: a crash
//! image, a copy of the file taken while the database was open, so no clean close vouches
//! for any filter) is scanned in a thread while redb answers its lookups; writers racing
//! the build, a close, `compact` and `check_integrity` during it leave no false negative,
//! and a close lets the build finish and writes its filter.

use std::path::{Path, PathBuf};

use bloomsled_redb::{Database, ReadableDatabase, TableDefinition};

const T: TableDefinition<&str, u64> = TableDefinition::new("t");
/// Well past the size scanned in the caller's thread (4,096 keys).
const KEYS: u64 = 60_000;

fn key(i: u64) -> String {
    format!("https://example.com/page/{i}")
}

fn write(db: &Database, range: std::ops::Range<u64>) {
    let w = db.begin_write().unwrap();
    {
        let mut t = w.open_table(T).unwrap();
        for i in range {
            t.insert(key(i).as_str(), i).unwrap();
        }
    }
    w.commit().unwrap();
}

/// A file of `KEYS` keys as a crash would leave it: copied while the database is open.
fn crash_image(dir: &Path) -> PathBuf {
    let path = dir.join("live.redb");
    let db = Database::create(&path).unwrap();
    write(&db, 0..KEYS);
    db.wait_for_filters();
    let image = dir.join("image.redb");
    std::fs::copy(&path, &image).unwrap();
    drop(db);
    image
}

/// Every key of `present` is found by `get` and `get_latest`, every key of `absent` is not;
/// returns whether the read transaction used the filter.
fn check(db: &Database, present: std::ops::Range<u64>, absent: std::ops::Range<u64>) -> bool {
    let r = db.begin_read().unwrap();
    let t = r.open_table(T).unwrap();
    for i in present {
        let k = key(i);
        assert_eq!(
            t.get(k.as_str()).unwrap().map(|v| v.value()),
            Some(i),
            "{k}"
        );
        assert!(db.get_latest(T, k.as_str()).unwrap().is_some(), "{k}");
    }
    for i in absent {
        let k = key(i);
        assert!(t.get(k.as_str()).unwrap().is_none(), "{k}");
        assert!(db.get_latest(T, k.as_str()).unwrap().is_none(), "{k}");
    }
    t.filter_in_use()
}

#[test]
fn a_large_table_is_built_in_the_background_while_redb_answers() {
    let dir = tempfile::tempdir().unwrap();
    let image = crash_image(dir.path());
    let db = Database::open(&image).unwrap();
    // The first use starts the build; lookups are exact meanwhile (from redb until the
    // filter is installed).
    check(&db, 0..KEYS, KEYS..KEYS + 1_000);
    db.wait_for_filters();
    assert_eq!(db.filter_stats().scanned, 1);
    assert_eq!(db.filter_stats().loaded, 0);
    assert!(
        check(&db, 0..KEYS, KEYS..KEYS + 1_000),
        "the built filter is in use"
    );
    let s = db.table_filter_stats(T).unwrap();
    assert!(s.in_use && !s.building && s.builds == 1, "{s:?}");
    assert_eq!(s.capacity, 2 * KEYS, "sized for twice the keys");
    // Items are inserts that set a new bit: a few keys collide.
    assert!(s.items <= KEYS && s.items > KEYS - 100, "{s:?}");
}

#[test]
fn writers_racing_a_background_build_leave_no_false_negative() {
    let dir = tempfile::tempdir().unwrap();
    let image = crash_image(dir.path());
    let db = Database::open(&image).unwrap();
    // Each write transaction's first open of the table may find the build in flight: its
    // keys reach the build's filter (rule 1) or its commit re-inserts them (rule 2).
    for round in 0..20 {
        let from = KEYS + round * 500;
        write(&db, from..from + 500);
    }
    let end = KEYS + 20 * 500;
    check(&db, 0..end, end..end + 1_000);
    db.wait_for_filters();
    assert!(
        check(&db, 0..end, end..end + 1_000),
        "the built filter is in use"
    );
}

#[test]
fn a_close_during_a_background_build_writes_its_filter() {
    let dir = tempfile::tempdir().unwrap();
    let image = crash_image(dir.path());
    let db = Database::open(&image).unwrap();
    // Starts the build and drops the database at once: the drop lets the build finish
    // and the clean close writes what it built.
    drop(db.begin_read().unwrap().open_table(T).unwrap());
    drop(db);
    let db = Database::open(&image).unwrap();
    check(&db, 0..KEYS, KEYS..KEYS + 100);
    db.wait_for_filters();
    assert_eq!(db.filter_stats().loaded, 1, "{:?}", db.filter_stats());
    assert_eq!(db.filter_stats().scanned, 0);
}

#[test]
fn compact_and_check_integrity_during_a_background_build_succeed() {
    let dir = tempfile::tempdir().unwrap();
    let image = crash_image(dir.path());
    let mut db = Database::open(&image).unwrap();
    // A build holds a read transaction, which redb's compact and check_integrity refuse:
    // they stop it first, and the table builds again at its next use.
    drop(db.begin_read().unwrap().open_table(T).unwrap());
    // Not a timing the test depends on: a moment for the build to begin its read
    // transaction, the case that made compact fail (TransactionInProgress) before the stop.
    std::thread::sleep(std::time::Duration::from_millis(3));
    db.compact().unwrap();
    drop(db.begin_read().unwrap().open_table(T).unwrap());
    assert!(db.check_integrity().unwrap());
    check(&db, 0..KEYS, KEYS..KEYS + 100);
    db.wait_for_filters();
    assert!(
        check(&db, 0..KEYS, KEYS..KEYS + 100),
        "built after the stops"
    );
}

#[test]
fn a_growth_rebuild_runs_off_the_committing_thread_and_keeps_every_key() {
    let dir = tempfile::tempdir().unwrap();
    let db = Database::create(dir.path().join("g.redb")).unwrap();
    // Each commit that overfills the filter starts a rebuild; later commits do not wait
    // for it and their keys reach it (rules 1 and 2).
    for round in 0..30 {
        write(&db, round * 5_000..(round + 1) * 5_000);
    }
    check(&db, 0..150_000, 150_000..151_000);
    db.wait_for_filters();
    assert!(check(&db, 0..150_000, 150_000..151_000));
    assert!(db.filter_stats().scanned >= 2, "{:?}", db.filter_stats());
    let s = db.table_filter_stats(T).unwrap();
    assert!(s.in_use && s.builds >= 2 && s.capacity >= s.items, "{s:?}");
    // Rebuilt once its keys pass its capacity: at most about its target rate.
    assert!(s.estimated_fpr <= 1.1 * s.target_fpr, "{s:?}");
}

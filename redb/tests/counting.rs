//! Counting mode (`Builder::set_counting`): a key whose removal is committed is counted out
//! of its table's filter, so the filter answers "absent" for it without asking redb, while
//! no reader whose snapshot still holds it is ever told "absent". Each test proves the
//! "without redb" part with the table's lookup counters (`TableFilterStats`): a lookup
//! the filter ruled out read no page of redb.
//!
//! The kill -9 test re-runs this binary as a child (`BLOOMSLED_REDB_COUNTING_CHILD`) that
//! inserts and removes keys until the parent kills it.

mod common;

use std::collections::BTreeSet;
use std::io::Write as _;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

use bloomsled_redb::{
    Builder, Database, FilterMode, FilterSource, MultimapTableDefinition, ReadableDatabase,
    ReadableTable, TableDefinition, TableFilterStats,
};
use common::rng::Rng;

const T: TableDefinition<u64, u64> = TableDefinition::new("t");
const M: MultimapTableDefinition<u64, u64> = MultimapTableDefinition::new("m");
const S: TableDefinition<&str, u64> = TableDefinition::new("s");

fn counting(path: &Path) -> Database {
    Builder::new().set_counting(true).create(path).unwrap()
}

fn stats(db: &Database) -> TableFilterStats {
    db.table_filter_stats(T).unwrap()
}

fn insert(db: &Database, keys: impl IntoIterator<Item = u64>) {
    let w = db.begin_write().unwrap();
    {
        let mut t = w.open_table(T).unwrap();
        for k in keys {
            t.insert(k, k).unwrap();
        }
    }
    w.commit().unwrap();
}

/// Each key with itself as its one value, in multimap table `M`, in one commit.
fn insert_multimap(db: &Database, keys: impl IntoIterator<Item = u64>) {
    let w = db.begin_write().unwrap();
    {
        let mut m = w.open_multimap_table(M).unwrap();
        for k in keys {
            m.insert(k, k).unwrap();
        }
    }
    w.commit().unwrap();
}

fn remove(db: &Database, keys: impl IntoIterator<Item = u64>) {
    let w = db.begin_write().unwrap();
    {
        let mut t = w.open_table(T).unwrap();
        for k in keys {
            assert!(t.remove(k).unwrap().is_some(), "key {k} was there");
        }
    }
    w.commit().unwrap();
}

/// Looks `keys` up in a new read transaction: they must be absent, and the filter must
/// have answered each (no redb lookup).
#[track_caller]
fn assert_ruled_out(db: &Database, keys: impl IntoIterator<Item = u64>) {
    let before = stats(db);
    let r = db.begin_read().unwrap();
    let t = r.open_table(T).unwrap();
    assert!(t.filter_in_use());
    let mut n = 0;
    for k in keys {
        assert!(t.get(k).unwrap().is_none(), "key {k} is gone");
        n += 1;
    }
    let after = stats(db);
    assert_eq!(after.lookups - before.lookups, n);
    assert_eq!(
        after.store_lookups - before.store_lookups,
        0,
        "a removed key was not counted out: redb was asked"
    );
}

/// Looks `keys` up in a new read transaction and through `get_latest`: all present.
#[track_caller]
fn assert_found(db: &Database, keys: impl IntoIterator<Item = u64>) {
    let r = db.begin_read().unwrap();
    let t = r.open_table(T).unwrap();
    for k in keys {
        assert_eq!(t.get(k).unwrap().map(|v| v.value()), Some(k), "key {k}");
        assert!(db.get_latest(T, k).unwrap().is_some(), "get_latest {k}");
    }
}

#[test]
fn a_removed_key_is_answered_absent_without_redb() {
    let dir = tempfile::tempdir().unwrap();
    let db = counting(&dir.path().join("a.redb"));
    insert(&db, 0..200);
    remove(&db, 0..100);
    assert_ruled_out(&db, 0..100);
    assert_found(&db, 100..200);
    let s = stats(&db);
    assert_eq!((s.mode, s.items), (FilterMode::Counting, 100));
    assert_eq!(db.filter_stats().mode, FilterMode::Counting);
    // A plain filter's size: the counters take four times the bits again.
    let plain = Database::create(dir.path().join("b.redb")).unwrap();
    insert(&plain, 0..1);
    let p = plain.table_filter_stats(T).unwrap();
    assert_eq!(p.mode, FilterMode::Plain);
    assert_eq!(s.memory_bytes, 5 * p.memory_bytes);
    // get_latest: the per-request path asks the same filter.
    for k in 0..100 {
        assert!(db.get_latest(T, k).unwrap().is_none());
    }
}

/// The false-negative trap: a read transaction that began before a removal was committed
/// and counted out still sees the key in its snapshot. It reads the same filter the
/// count-out cleared, so it must not trust that filter's "absent" for the table.
#[test]
fn an_older_reader_still_finds_a_key_counted_out_after_it_began() {
    let dir = tempfile::tempdir().unwrap();
    let db = counting(&dir.path().join("a.redb"));
    insert(&db, 0..50);
    let early = db.begin_read().unwrap();
    let opened_before = early.open_table(T).unwrap();
    remove(&db, 0..50);
    // The keys are counted out: a new reader is told "absent" by the filter alone...
    assert_ruled_out(&db, 0..50);
    // ...but the reader of before still holds them, whether its table was opened before
    // or after the commit.
    let opened_after = early.open_table(T).unwrap();
    for t in [&opened_before, &opened_after] {
        for k in 0..50 {
            assert_eq!(t.get(k).unwrap().map(|v| v.value()), Some(k), "key {k}");
        }
    }
    // Other tables' commits do not make it trust the filter either.
    let w = db.begin_write().unwrap();
    w.open_table(S).unwrap().insert("x", 1).unwrap();
    w.commit().unwrap();
    assert!(opened_before.get(7).unwrap().is_some());
}

#[test]
fn overwrites_count_a_key_in_once() {
    let dir = tempfile::tempdir().unwrap();
    let db = counting(&dir.path().join("a.redb"));
    insert(&db, 0..20);
    for _ in 0..3 {
        insert(&db, 0..20);
    }
    // Overwritten twice in one transaction.
    let w = db.begin_write().unwrap();
    {
        let mut t = w.open_table(T).unwrap();
        for k in 0..20 {
            t.insert(k, k).unwrap();
            t.insert(k, k).unwrap();
        }
    }
    w.commit().unwrap();
    // And through `entry`, occupied.
    let w = db.begin_write().unwrap();
    {
        let mut t = w.open_table(T).unwrap();
        for k in 0..20 {
            t.entry(k).unwrap().or_insert(k).unwrap();
        }
    }
    w.commit().unwrap();
    assert_eq!(stats(&db).items, 20);
    remove(&db, 0..20);
    assert_eq!(stats(&db).items, 0);
    assert_ruled_out(&db, 0..20);
    // In and out in one transaction.
    let w = db.begin_write().unwrap();
    {
        let mut t = w.open_table(T).unwrap();
        t.insert(99, 1).unwrap();
        t.remove(99).unwrap();
    }
    w.commit().unwrap();
    assert_ruled_out(&db, [99]);
}

#[test]
fn an_aborted_or_dropped_write_counts_nothing_out() {
    let dir = tempfile::tempdir().unwrap();
    let db = counting(&dir.path().join("a.redb"));
    insert(&db, 0..30);
    let w = db.begin_write().unwrap();
    {
        let mut t = w.open_table(T).unwrap();
        for k in 0..30 {
            t.remove(k).unwrap();
        }
        t.insert(100, 100).unwrap();
    }
    w.abort().unwrap();
    assert_found(&db, 0..30);
    // Dropped without a commit: the same.
    let w = db.begin_write().unwrap();
    {
        let mut t = w.open_table(T).unwrap();
        t.pop_first().unwrap();
        t.retain(|_, _| false).unwrap();
    }
    drop(w);
    assert_found(&db, 0..30);
    // The aborted key was counted in and never out: at most a false positive.
    let r = db.begin_read().unwrap();
    assert!(r.open_table(T).unwrap().get(100).unwrap().is_none());
    remove(&db, 0..30);
    assert_ruled_out(&db, 0..30);
}

#[test]
fn pops_retain_and_cursor_removals_count_out() {
    let dir = tempfile::tempdir().unwrap();
    let db = counting(&dir.path().join("a.redb"));
    insert(&db, 0..40);
    let w = db.begin_write().unwrap();
    {
        let mut t = w.open_table(T).unwrap();
        assert_eq!(t.pop_first().unwrap().unwrap().0.value(), 0);
        assert_eq!(t.pop_last().unwrap().unwrap().0.value(), 39);
        t.retain(|k, _| k % 2 == 1).unwrap();
        t.retain_in(30..39, |_, _| false).unwrap();
        let mut c = t.lower_bound_mut(std::ops::Bound::Included(1)).unwrap();
        assert_eq!(c.remove_next().unwrap().unwrap().0.value(), 1);
        c.close().unwrap();
    }
    w.commit().unwrap();
    let kept: Vec<u64> = (3..30).filter(|k| k % 2 == 1).collect();
    let gone = (0..40).filter(|k| !kept.contains(k));
    assert_found(&db, kept.iter().copied());
    assert_ruled_out(&db, gone);
    assert_eq!(stats(&db).items, kept.len() as u64);
}

#[test]
fn a_restored_savepoint_brings_keys_back_into_an_exact_filter() {
    let dir = tempfile::tempdir().unwrap();
    let db = counting(&dir.path().join("a.redb"));
    insert(&db, 0..40);
    let w = db.begin_write().unwrap();
    let id = w.persistent_savepoint().unwrap();
    w.commit().unwrap();
    remove(&db, 0..40);
    assert_ruled_out(&db, 0..40);
    let mut w = db.begin_write().unwrap();
    let sp = w.get_persistent_savepoint(id).unwrap();
    w.restore_savepoint(&sp).unwrap();
    w.commit().unwrap();
    // The keys are back; the filter is rebuilt from a scan before it is trusted.
    assert_found(&db, 0..40);
    common::settle(&db, &[T]);
    assert_found(&db, 0..40);
    assert_eq!(stats(&db).items, 40);
    // Exact: removing them again forgets them again.
    remove(&db, 0..40);
    assert_ruled_out(&db, 0..40);
}

#[test]
fn a_multimap_key_is_present_while_it_has_a_value() {
    let dir = tempfile::tempdir().unwrap();
    let db = counting(&dir.path().join("a.redb"));
    let write = |f: &dyn Fn(&mut bloomsled_redb::MultimapTable<'_, u64, u64>)| {
        let w = db.begin_write().unwrap();
        f(&mut w.open_multimap_table(M).unwrap());
        w.commit().unwrap();
    };
    write(&|m| {
        for k in 0..10 {
            m.insert(k, 1).unwrap();
            m.insert(k, 2).unwrap();
            m.insert(k, 2).unwrap();
        }
    });
    write(&|m| {
        for k in 0..10 {
            m.insert(k, 3).unwrap();
            assert!(m.remove(k, 1).unwrap());
        }
    });
    let look = |keys: std::ops::Range<u64>, present: bool| {
        let before = db.multimap_table_filter_stats(M).unwrap();
        let r = db.begin_read().unwrap();
        let m = r.open_multimap_table(M).unwrap();
        for k in keys.clone() {
            assert_eq!(m.get(k).unwrap().is_empty(), !present, "key {k}");
        }
        let after = db.multimap_table_filter_stats(M).unwrap();
        if !present {
            assert_eq!(
                after.store_lookups, before.store_lookups,
                "{keys:?} not counted out"
            );
        }
    };
    look(0..10, true);
    write(&|m| {
        for k in 0..5 {
            assert!(m.remove(k, 2).unwrap());
            assert!(m.remove(k, 3).unwrap());
        }
        for k in 5..10 {
            assert_eq!(m.remove_all(k).unwrap().len(), 2);
        }
        assert!(m.remove_all(77).unwrap().is_empty());
    });
    look(0..10, false);
    assert_eq!(db.multimap_table_filter_stats(M).unwrap().items, 0);
}

/// A read multimap table's `get_owned` keeps its snapshot as `get` does: keys counted out
/// by a commit after the reader began are still found (with their values), a key committed
/// after it is not, and a new reader's `get_owned` rules the removed keys out without redb.
#[test]
fn get_owned_of_an_older_multimap_reader_keeps_its_snapshot() {
    let dir = tempfile::tempdir().unwrap();
    let db = counting(&dir.path().join("a.redb"));
    insert_multimap(&db, 0..50);
    let old = db.begin_read().unwrap();
    let old_m = old.open_multimap_table(M).unwrap();
    let w = db.begin_write().unwrap();
    {
        let mut m = w.open_multimap_table(M).unwrap();
        for k in 0..50 {
            assert!(m.remove(k, k).unwrap());
        }
        m.insert(1_000, 1).unwrap();
    }
    w.commit().unwrap();
    for k in 0..50 {
        let v: Vec<u64> = old_m
            .get_owned(k)
            .unwrap()
            .map(|g| g.unwrap().value())
            .collect();
        assert_eq!(v, [k], "the older reader lost key {k}");
    }
    assert!(old_m.get_owned(1_000).unwrap().is_empty());
    let before = db.multimap_table_filter_stats(M).unwrap();
    let new_m = db.begin_read().unwrap().open_multimap_table(M).unwrap();
    for k in 0..50 {
        assert!(new_m.get_owned(k).unwrap().is_empty(), "key {k}");
    }
    assert_eq!(new_m.get_owned(1_000).unwrap().len(), 1);
    let after = db.multimap_table_filter_stats(M).unwrap();
    assert_eq!(after.store_lookups - before.store_lookups, 1, "{after:?}");
}

#[test]
fn a_clean_close_stores_the_counts() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("a.redb");
    let db = counting(&path);
    insert(&db, 0..900);
    remove(&db, 0..300);
    drop(db);
    let db = Builder::new().set_counting(true).open(&path).unwrap();
    common::settle(&db, &[T]);
    assert_eq!(db.table_filter_source(T), Some(FilterSource::Loaded));
    assert_eq!(stats(&db).items, 600);
    assert_ruled_out(&db, 0..300);
    // The loaded counts are exact: removals after the reopen are forgotten too.
    remove(&db, 300..400);
    assert_ruled_out(&db, 0..400);
    assert_found(&db, 400..900);
    drop(db);
    // Opened plain, the counting filter is not the mode asked for: scanned, still right.
    let db = Database::open(&path).unwrap();
    common::settle(&db, &[T]);
    assert!(matches!(
        db.table_filter_source(T),
        Some(FilterSource::Scanned { .. })
    ));
    assert_eq!(stats(&db).mode, FilterMode::Plain);
    assert_found(&db, 400..900);
    drop(db);
    // And back: the plain filter that close stored is refused in counting mode.
    let db = Builder::new().set_counting(true).open(&path).unwrap();
    common::settle(&db, &[T]);
    assert!(matches!(
        db.table_filter_source(T),
        Some(FilterSource::Scanned { .. })
    ));
    assert_ruled_out(&db, 0..400);
}

/// A growth rebuild scans in the background (12,000 keys: past the 4,096 scanned in the
/// caller's thread) while commits remove, insert and overwrite keys: the filter it installs
/// holds every key (counts too high for keys removed during the scan, never too low), and
/// removals after it are forgotten.
#[test]
fn writes_racing_a_background_build_keep_counts_on_the_safe_side() {
    let dir = tempfile::tempdir().unwrap();
    let db = counting(&dir.path().join("a.redb"));
    insert(&db, 0..12_000);
    let mut present: BTreeSet<u64> = (0..12_000).collect();
    let mut raced = 0;
    for round in 0..40u64 {
        raced += u64::from(stats(&db).building);
        let w = db.begin_write().unwrap();
        {
            let mut t = w.open_table(T).unwrap();
            for k in round * 100..round * 100 + 50 {
                if present.remove(&k) {
                    t.remove(k).unwrap();
                }
            }
            for k in 20_000 + round * 10..20_000 + round * 10 + 10 {
                t.insert(k, k).unwrap();
                t.insert(k, k).unwrap();
                present.insert(k);
            }
        }
        w.commit().unwrap();
    }
    db.wait_for_filters();
    assert!(stats(&db).builds >= 2, "the growth rebuild ran");
    let r = db.begin_read().unwrap();
    let t = r.open_table(T).unwrap();
    assert!(t.filter_in_use());
    for k in &present {
        assert!(t.get(*k).unwrap().is_some(), "false negative: {k}");
    }
    assert!(stats(&db).items >= present.len() as u64);
    drop((t, r));
    // Keys the scan alone counted: exact, forgotten once removed.
    let scanned: Vec<u64> = (4_000..12_000).filter(|k| k % 7 == 3).collect();
    remove(&db, scanned.iter().copied());
    assert_ruled_out(&db, scanned.iter().copied());
    // Keys written while the build ran may be counted twice in the filter it installed (by
    // the scan and by the write, or by the commit's re-insert of rule 2): once removed,
    // they are absent, some through redb (false positives until the next scan).
    let raced_keys: Vec<u64> = present.range(20_000..).copied().collect();
    remove(&db, raced_keys.iter().copied());
    let before = stats(&db);
    let r = db.begin_read().unwrap();
    let t = r.open_table(T).unwrap();
    for k in &raced_keys {
        assert!(t.get(*k).unwrap().is_none());
    }
    let asked = stats(&db).store_lookups - before.store_lookups;
    println!(
        "{raced} of 40 commits raced the build; {asked} of {} keys written meanwhile stay \
         counted after their removal",
        raced_keys.len()
    );
}

const CHILD_ENV: &str = "BLOOMSLED_REDB_COUNTING_CHILD";

/// The child of [`kill_9_then_reopen_no_false_negative_and_removals_forgotten`]: durable
/// commits that insert keys and remove some of them, and a clean close now and then,
/// until killed. Its log: `r <key>` before the commit that may remove the key (a kill may
/// leave it removed or not), `i <first> <count>` after the commit that inserted those keys
/// returned.
fn child(dir: &Path, seed: u64) -> ! {
    let mut rng = Rng(seed);
    let mut logf = std::fs::OpenOptions::new()
        .append(true)
        .create(true)
        .open(dir.join("log"))
        .unwrap();
    let mut next = std::fs::read_to_string(dir.join("log"))
        .unwrap_or_default()
        .lines()
        .filter(|l| l.starts_with("i "))
        .count() as u64
        * 1000;
    loop {
        let db = counting(&dir.join("c.redb"));
        for _ in 0..rng.below(30) + 1 {
            let w = db.begin_write().unwrap();
            let count = rng.below(30) + 1;
            {
                let mut t = w.open_table(T).unwrap();
                for k in next..next + count {
                    t.insert(k, k).unwrap();
                }
                let mut removing = String::new();
                for _ in 0..rng.below(10) {
                    let k = rng.below(next / 1000 + 1) * 1000 + rng.below(30);
                    removing += &format!("r {k}\n");
                }
                logf.write_all(removing.as_bytes()).unwrap();
                for k in removing.lines().map(|l| l[2..].parse::<u64>().unwrap()) {
                    t.remove(k).unwrap();
                }
            }
            w.commit().unwrap();
            logf.write_all(format!("i {next} {count}\n").as_bytes())
                .unwrap();
            next += 1000;
        }
        drop(db);
    }
}

#[test]
fn kill_9_then_reopen_no_false_negative_and_removals_forgotten() {
    if let Ok(v) = std::env::var(CHILD_ENV) {
        let (seed, dir) = v.split_once(':').unwrap();
        child(Path::new(dir), seed.parse().unwrap());
    }
    let dir = tempfile::tempdir().unwrap();
    drop(counting(&dir.path().join("c.redb")));
    let mut rng = Rng(0x5eed_c0a7);
    let (mut removed_checked, mut scanned) = (0, 0);
    for _ in 0..6 {
        let mut c = Command::new(std::env::current_exe().unwrap())
            .args([
                "--exact",
                "kill_9_then_reopen_no_false_negative_and_removals_forgotten",
                "--nocapture",
            ])
            .env(
                CHILD_ENV,
                format!("{}:{}", rng.next(), dir.path().display()),
            )
            .stdout(Stdio::null())
            .spawn()
            .unwrap();
        std::thread::sleep(Duration::from_millis(80 + rng.below(150)));
        c.kill().unwrap();
        c.wait().unwrap();
        let text = std::fs::read_to_string(dir.path().join("log")).unwrap_or_default();
        let (mut present, mut gone) = (BTreeSet::new(), BTreeSet::new());
        // Only whole lines: a kill may cut the last one (and a commit whose line was not
        // written yet is checked through the scan below).
        for line in text.split_inclusive('\n').filter(|l| l.ends_with('\n')) {
            let f: Vec<u64> = line[2..]
                .split_whitespace()
                .map(|x| x.parse().unwrap())
                .collect();
            if line.starts_with('i') {
                // A key logged removed before stays doubtful.
                present.extend((f[0]..f[0] + f[1]).filter(|k| !gone.contains(k)));
            } else {
                present.remove(&f[0]);
                gone.insert(f[0]);
            }
        }
        let db = Builder::new()
            .set_counting(true)
            .open(dir.path().join("c.redb"))
            .unwrap();
        common::settle(&db, &[T]);
        let r = db.begin_read().unwrap();
        let Ok(t) = r.open_table(T) else {
            assert!(present.is_empty());
            continue;
        };
        assert!(t.filter_in_use());
        if matches!(
            db.table_filter_source(T),
            Some(FilterSource::Scanned { .. })
        ) {
            scanned += 1;
        }
        let held: BTreeSet<u64> = t.iter().unwrap().map(|e| e.unwrap().0.value()).collect();
        for k in &present {
            assert!(held.contains(k), "durable key {k} lost");
            assert!(t.get(*k).unwrap().is_some(), "durable key {k} missed");
        }
        for k in &held {
            assert!(t.get(*k).unwrap().is_some(), "false negative: {k}");
        }
        // Removed keys (and not put back by a later commit the log may miss): the filter
        // rebuilt after the kill has forgotten them.
        let before = stats(&db);
        let probes: Vec<u64> = gone.difference(&held).copied().collect();
        for k in &probes {
            assert!(t.get(*k).unwrap().is_none());
        }
        let after = stats(&db);
        let asked = after.store_lookups - before.store_lookups;
        assert!(
            asked * 20 <= probes.len() as u64 + 20,
            "{asked} of {} removed keys went to redb",
            probes.len()
        );
        removed_checked += probes.len();
        drop((t, r, db));
    }
    assert!(
        scanned > 0,
        "no reopen after a kill scanned the counting table"
    );
    assert!(removed_checked > 0, "no removal was checked");
}

// The removal paths that outlive one call (an `ExtractIf`, an entry), `insert_reserve` and
// a cursor's refused inserts over existing keys, and deleted tables.

const R: TableDefinition<u64, &[u8]> = TableDefinition::new("r");

/// [`assert_ruled_out`] for any `u64`-keyed table.
#[track_caller]
fn assert_ruled_out_in<V: bloomsled_redb::Value + 'static>(
    db: &Database,
    def: TableDefinition<u64, V>,
    keys: impl IntoIterator<Item = u64>,
) {
    let before = db.table_filter_stats(def).unwrap();
    let r = db.begin_read().unwrap();
    let t = r.open_table(def).unwrap();
    assert!(t.filter_in_use());
    let mut n = 0;
    for k in keys {
        assert!(t.get(k).unwrap().is_none(), "key {k} is gone");
        n += 1;
    }
    let after = db.table_filter_stats(def).unwrap();
    assert_eq!(after.lookups - before.lookups, n);
    assert_eq!(
        after.store_lookups - before.store_lookups,
        0,
        "a removed key was not counted out: redb was asked"
    );
}

/// `keys` are all in `t` (a table opened by a reader of before).
#[track_caller]
fn assert_held(t: &bloomsled_redb::ReadOnlyTable<u64, u64>, keys: impl IntoIterator<Item = u64>) {
    for k in keys {
        assert_eq!(t.get(k).unwrap().map(|v| v.value()), Some(k), "key {k}");
    }
}

/// An `ExtractIf` removes a pair when it yields it: those keys are counted out, the pairs
/// it did not reach are not, and an abort counts out nothing.
#[test]
fn extract_if_counts_out_the_pairs_it_yielded() {
    let dir = tempfile::tempdir().unwrap();
    let db = counting(&dir.path().join("a.redb"));
    insert(&db, 0..40);
    // Aborted: nothing counted out.
    let w = db.begin_write().unwrap();
    {
        let mut t = w.open_table(T).unwrap();
        assert_eq!(t.extract_if(|_, _| true).unwrap().count(), 40);
    }
    w.abort().unwrap();
    assert_found(&db, 0..40);
    assert_eq!(stats(&db).items, 40);
    let early = db.begin_read().unwrap();
    let opened_before = early.open_table(T).unwrap();
    let w = db.begin_write().unwrap();
    {
        let mut t = w.open_table(T).unwrap();
        // Selects 0..20, yields 10 of them from the front and 2 from the back.
        let mut it = t.extract_if(|k, _| k < 20).unwrap();
        for k in 0..10 {
            assert_eq!(it.next().unwrap().unwrap().0.value(), k);
        }
        assert_eq!(it.next_back().unwrap().unwrap().0.value(), 19);
        assert_eq!(it.next_back().unwrap().unwrap().0.value(), 18);
        drop(it);
        let odd: Vec<u64> = (t.extract_from_if(30..40, |k, _| k % 2 == 1).unwrap())
            .map(|p| p.unwrap().0.value())
            .collect();
        assert_eq!(odd, [31, 33, 35, 37, 39]);
        t.extract_from_if(20..30, |_, _| true)
            .unwrap()
            .close()
            .unwrap();
    }
    w.commit().unwrap();
    let gone: Vec<u64> = (0..10).chain([18, 19, 31, 33, 35, 37, 39]).collect();
    let kept: Vec<u64> = (0..40).filter(|k| !gone.contains(k)).collect();
    assert_ruled_out(&db, gone.iter().copied());
    assert_found(&db, kept.iter().copied());
    assert_eq!(stats(&db).items, kept.len() as u64);
    // The reader of before still holds every extracted key.
    assert_held(&opened_before, 0..40);
    assert_held(&early.open_table(T).unwrap(), 0..40);
}

/// An occupied entry's `remove` / `remove_entry` counts its key out; a vacant entry given
/// up counts out the count-in `entry` made; one filled stays counted once.
#[test]
fn entry_removals_and_vacant_entries_given_up_count_out() {
    use bloomsled_redb::Entry;
    let dir = tempfile::tempdir().unwrap();
    let db = counting(&dir.path().join("a.redb"));
    insert(&db, 0..20);
    let early = db.begin_read().unwrap();
    let opened_before = early.open_table(T).unwrap();
    let w = db.begin_write().unwrap();
    {
        let mut t = w.open_table(T).unwrap();
        for k in 0..10 {
            let Entry::Occupied(e) = t.entry(k).unwrap() else {
                panic!("key {k} is there")
            };
            if k % 2 == 0 {
                assert_eq!(e.remove().unwrap().value(), k);
            } else {
                assert_eq!(e.remove_entry().unwrap().0, k);
            }
        }
        for k in 100..110 {
            let Entry::Vacant(e) = t.entry(k).unwrap() else {
                panic!("key {k} is not there")
            };
            if k % 2 == 0 {
                drop(e);
            } else {
                assert_eq!(e.into_key(), k);
            }
        }
        t.entry(200).unwrap().or_insert(200).unwrap();
        // Occupied, kept: counted once.
        t.entry(15).unwrap().and_modify(|_| Ok(())).unwrap();
    }
    w.commit().unwrap();
    assert_ruled_out(&db, (0..10).chain(100..110));
    assert_found(&db, (10..20).chain([200]));
    assert_eq!(stats(&db).items, 11);
    assert_held(&opened_before, 0..20);
    // Aborted: nothing counted out (the count-ins of `entry` stay, as any abort's).
    let w = db.begin_write().unwrap();
    {
        let mut t = w.open_table(T).unwrap();
        for k in 10..20 {
            let Entry::Occupied(e) = t.entry(k).unwrap() else {
                panic!("key {k} is there")
            };
            e.remove().unwrap();
        }
    }
    w.abort().unwrap();
    assert_found(&db, 10..20);
    assert_eq!(stats(&db).items, 21);
}

/// `insert_reserve` over an existing key and a cursor insert refused as unordered (redb's
/// cursor never overwrites: a key already there is unordered) leave each key counted once.
#[test]
fn insert_reserve_and_refused_cursor_inserts_count_a_key_in_once() {
    let dir = tempfile::tempdir().unwrap();
    let db = counting(&dir.path().join("a.redb"));
    for _ in 0..3 {
        let w = db.begin_write().unwrap();
        {
            let mut t = w.open_table(R).unwrap();
            for k in 0..20 {
                t.insert_reserve(k, 3)
                    .unwrap()
                    .as_mut()
                    .copy_from_slice(b"abc");
            }
        }
        w.commit().unwrap();
    }
    assert_eq!(db.table_filter_stats(R).unwrap().items, 20);
    let w = db.begin_write().unwrap();
    {
        let mut t = w.open_table(R).unwrap();
        for k in 0..20 {
            assert!(t.remove(k).unwrap().is_some());
        }
    }
    w.commit().unwrap();
    assert_eq!(db.table_filter_stats(R).unwrap().items, 0);
    assert_ruled_out_in(&db, R, 0..20);

    insert(&db, (0..20).filter(|k| k % 2 == 0));
    let w = db.begin_write().unwrap();
    {
        let mut t = w.open_table(T).unwrap();
        let mut c = t.lower_bound_mut(std::ops::Bound::Included(4)).unwrap();
        // The gap is between 2 and 4: both are there, 30 is out of order.
        for k in [2, 4, 30] {
            assert!(matches!(
                c.insert_before(k, k),
                Err(bloomsled_redb::CursorError::UnorderedKey)
            ));
            assert!(matches!(
                c.insert_after(k, k),
                Err(bloomsled_redb::CursorError::UnorderedKey)
            ));
        }
        c.insert_before(3, 3).unwrap();
        c.close().unwrap();
    }
    w.commit().unwrap();
    assert_eq!(stats(&db).items, 11);
    assert_ruled_out(&db, [30]);
    remove(&db, (0..20).filter(|k| k % 2 == 0).chain([3]));
    assert_eq!(stats(&db).items, 0);
    assert_ruled_out(&db, (0..20).chain([30]));
}

/// A deleted table's filter is rebuilt from a scan after the commit: its keys are not
/// false positives of the table made again under that name, a reader of before still
/// finds them, and an abort keeps them.
#[test]
fn a_deleted_table_forgets_its_keys_and_an_older_reader_keeps_them() {
    let dir = tempfile::tempdir().unwrap();
    let db = counting(&dir.path().join("a.redb"));
    insert(&db, 0..50);
    insert_multimap(&db, 0..50);
    let w = db.begin_write().unwrap();
    assert!(w.delete_table(T).unwrap());
    assert!(w.delete_multimap_table(M).unwrap());
    w.abort().unwrap();
    assert_found(&db, 0..50);
    let early = db.begin_read().unwrap();
    let opened_before = early.open_table(T).unwrap();
    let w = db.begin_write().unwrap();
    assert!(w.delete_table(T).unwrap());
    assert!(w.delete_multimap_table(M).unwrap());
    // Made again in the same transaction, with other keys.
    w.open_table(T).unwrap().insert(1000, 1000).unwrap();
    w.commit().unwrap();
    assert_held(&opened_before, 0..50);
    assert_held(&early.open_table(T).unwrap(), 0..50);
    assert!(
        early
            .open_multimap_table(M)
            .unwrap()
            .get(7)
            .unwrap()
            .next()
            .is_some()
    );
    common::settle(&db, &[T]);
    assert_ruled_out(&db, 0..50);
    assert_found(&db, [1000]);
    assert_eq!(stats(&db).items, 1);
    // The multimap table, made again empty.
    let w = db.begin_write().unwrap();
    w.open_multimap_table(M).unwrap().insert(1000, 1).unwrap();
    w.commit().unwrap();
    {
        let r = db.begin_read().unwrap();
        let _ = r.open_multimap_table(M).unwrap();
    }
    db.wait_for_filters();
    let s = db.multimap_table_filter_stats(M).unwrap();
    assert_eq!(s.items, 1);
    let before = s.store_lookups;
    let r = db.begin_read().unwrap();
    let m = r.open_multimap_table(M).unwrap();
    for k in 0..50 {
        assert!(m.get(k).unwrap().next().is_none());
    }
    assert_eq!(
        db.multimap_table_filter_stats(M).unwrap().store_lookups,
        before
    );
    assert_held(&opened_before, 0..50);
}

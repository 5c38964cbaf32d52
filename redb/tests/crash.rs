//! `kill -9` at random instants: this binary re-runs itself as a child that writes random
//! transactions to a few tables (durable and not, some renaming a table away and back,
//! closing cleanly now and then), and the
//! parent kills it with SIGKILL at a random instant (mid-commit, mid-build, mid-close, at
//! open), reopens the file and checks:
//!
//! * every key of every `Durability::Immediate` commit that returned (the child logs it
//!   after `commit` returns) is found by `get` and by `Database::get_latest`;
//! * every key the tables hold (read from redb: the non-durable commits the crash kept
//!   too) is found by `get`: no false negative;
//! * no table the child wrote after its last clean close had its filter loaded from that
//!   close (`Database::filter_stats`): a table written since comes back from its crash
//!   journals (replayed) or a scan, and the run counts which; it fails if none ever came
//!   back from a journal.
//!
//! The parent's own check closes cleanly, so the next child starts from trusted filters;
//! after one kill in three it does not check, so the next child opens a killed database
//! (replaying its journals, and journaling its own writes after them) and is killed in
//! turn. `BLOOMSLED_REDB_KILLS` (default 60) and `BLOOMSLED_REDB_CRASH_SEED` tune a run.

mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::io::Write as _;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use bloomsled_redb::{Database, Durability, ReadableDatabase, ReadableTable, TableDefinition};
use common::rng::Rng;

const CHILD_ENV: &str = "BLOOMSLED_REDB_CRASH_CHILD";
const SEED_ENV: &str = "BLOOMSLED_REDB_CRASH_SEED";
const TABLES: [TableDefinition<&str, u64>; 3] = [
    TableDefinition::new("a"),
    TableDefinition::new("b"),
    TableDefinition::new("c"),
];

/// The name a table is renamed to and back from, in one transaction.
const PARKED: TableDefinition<&str, u64> = TableDefinition::new("parked");

/// One line of the child's log, written after the fact it states.
fn log(file: &mut std::fs::File, line: &str) {
    file.write_all(format!("{line}\n").as_bytes()).unwrap();
}

/// The child: random transactions until killed. Log lines: `w <table> <first> <count>`
/// after a durable commit of keys `<cycle>/<first..first+count>` to `<table>` returned;
/// `s` when a clean close starts (a kill may leave it done or not). (An aborted transaction, or a non-durable commit the crash
/// lost, leaves its table clean on disk: only a returned durable commit surely marked it.)
fn child(dir: &Path, cycle: u64, seed: u64) -> ! {
    let path = dir.join("c.redb");
    let mut rng = Rng(seed);
    let mut logf = std::fs::OpenOptions::new()
        .append(true)
        .create(true)
        .open(dir.join("log"))
        .unwrap();
    let mut next = 0u64;
    loop {
        let db = Database::create(&path).unwrap();
        for _ in 0..rng.below(40) + 1 {
            let mut w = db.begin_write().unwrap();
            let durable = rng.below(5) != 0;
            if !durable {
                w.set_durability(Durability::None).unwrap();
            }
            let table = rng.below(3) as usize;
            let count = rng.below(20) + 1;
            if rng.below(8) == 0 {
                // A table renamed away and back (the same keys under its name): its filter
                // and the parked name's are distrusted until rebuilt, the others kept.
                let renamed = TABLES[rng.below(3) as usize];
                if w.rename_table(renamed, PARKED).is_ok() {
                    w.rename_table(PARKED, renamed).unwrap();
                }
            }
            {
                let mut t = w.open_table(TABLES[table]).unwrap();
                for i in next..next + count {
                    t.insert(format!("{cycle}/{i}").as_str(), i).unwrap();
                }
                if rng.below(4) == 0 {
                    // A key in and out in one transaction: never logged as committed.
                    t.insert("transient", 0).unwrap();
                    t.remove("transient").unwrap();
                }
            }
            if rng.below(10) == 0 {
                w.abort().unwrap();
                continue;
            }
            w.commit().unwrap();
            if durable {
                log(&mut logf, &format!("w {table} {next} {count}"));
            }
            next += count;
            let probe = format!("{cycle}/{}", rng.below(next + 10));
            let _ = db.get_latest(TABLES[table], probe.as_str()).unwrap();
        }
        // Logged before: a kill during the close may leave it done or not.
        log(&mut logf, "s");
        drop(db);
    }
}

/// What the log says: durable keys per table, and the tables a durable commit wrote since
/// the last clean close began (so certainly after the last one that may have completed).
fn read_log(dir: &Path) -> (BTreeMap<usize, BTreeSet<String>>, BTreeSet<usize>) {
    let text = std::fs::read_to_string(dir.join("log")).unwrap_or_default();
    let (mut durable, mut touched) = (BTreeMap::<usize, BTreeSet<String>>::new(), BTreeSet::new());
    let mut cycle = 0u64;
    // Only whole lines: a kill may cut the last one.
    for line in text.split_inclusive('\n').filter(|l| l.ends_with('\n')) {
        let f: Vec<&str> = line.split_whitespace().collect();
        match f.as_slice() {
            ["k", c] => cycle = c.parse().unwrap(),
            ["s"] => touched.clear(),
            ["w", t, first, count] => {
                let (first, count): (u64, u64) = (first.parse().unwrap(), count.parse().unwrap());
                let t: usize = t.parse().unwrap();
                touched.insert(t);
                let keys = durable.entry(t).or_default();
                keys.extend((first..first + count).map(|i| format!("{cycle}/{i}")));
            }
            other => panic!("a log line the child never writes: {other:?}"),
        }
    }
    (durable, touched)
}

/// Reopens after a kill and checks the invariant; returns the keys checked and how the
/// tables got their filters.
fn verify(dir: &Path) -> (usize, bloomsled_redb::FilterStats) {
    let (durable, touched) = read_log(dir);
    let db = Database::open(dir.join("c.redb"))
        .unwrap_or_else(|e| panic!("reopen after the kill: {e:?}"));
    // A table's first use loads its filter or starts its build in the background; the
    // checks below run once every filter is in use.
    {
        let r = db.begin_read().unwrap();
        for def in TABLES {
            let _ = r.open_table(def);
        }
    }
    db.wait_for_filters();
    let r = db.begin_read().unwrap();
    let mut checked = 0;
    for (i, def) in TABLES.iter().enumerate() {
        let Ok(t) = r.open_table(*def) else {
            assert!(
                durable.get(&i).is_none_or(|k| k.is_empty()),
                "table {i} lost"
            );
            continue;
        };
        assert!(t.filter_in_use());
        for k in durable.get(&i).into_iter().flatten() {
            assert!(
                t.get(k.as_str()).unwrap().is_some(),
                "durable key {k} lost or missed"
            );
            assert!(
                db.get_latest(*def, k.as_str()).unwrap().is_some(),
                "get_latest {k}"
            );
            checked += 1;
        }
        for e in t.iter().unwrap() {
            let k = e.unwrap().0.value().to_string();
            assert!(t.get(k.as_str()).unwrap().is_some(), "false negative: {k}");
            checked += 1;
        }
    }
    let stats = db.filter_stats();
    let untouched = (TABLES.len() - touched.len()) as u64;
    assert!(
        stats.loaded <= untouched,
        "{stats:?}: a table written since the last clean close ({touched:?}) was trusted"
    );
    drop((r, db));
    (checked, stats)
}

fn main() {
    if let Ok(dir) = std::env::var(CHILD_ENV) {
        let mut f = dir.splitn(2, ':');
        let (cycle, dir) = (f.next().unwrap().parse().unwrap(), f.next().unwrap());
        let seed = std::env::var(SEED_ENV).unwrap().parse().unwrap();
        child(Path::new(dir), cycle, seed);
    }
    let kills: u64 = std::env::var("BLOOMSLED_REDB_KILLS").map_or(60, |s| s.parse().unwrap());
    let seed: u64 = std::env::var(SEED_ENV).map_or_else(
        |_| {
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap()
                .as_nanos() as u64
        },
        |s| s.parse().unwrap(),
    );
    println!("crash: {kills} kills, {SEED_ENV}={seed}");
    let mut rng = Rng(seed);
    let dir = tempfile::tempdir().unwrap();
    // Made here: a kill inside redb's own creation of a file leaves one it cannot open.
    drop(Database::create(dir.path().join("c.redb")).unwrap());
    let start = Instant::now();
    let (mut keys, mut loaded, mut replayed, mut scanned, mut checks) = (0, 0, 0, 0, 0);
    for cycle in 0..kills {
        let mut logf = std::fs::OpenOptions::new()
            .append(true)
            .create(true)
            .open(dir.path().join("log"))
            .unwrap();
        log(&mut logf, &format!("k {cycle}"));
        let mut child = Command::new(std::env::current_exe().unwrap())
            .env(CHILD_ENV, format!("{cycle}:{}", dir.path().display()))
            .env(SEED_ENV, rng.next().to_string())
            .stdout(Stdio::null())
            .spawn()
            .unwrap();
        std::thread::sleep(Duration::from_millis(5 + rng.below(150)));
        child.kill().unwrap();
        child.wait().unwrap();
        // One kill in three: no check, the next child opens the killed database.
        if cycle + 1 < kills && rng.below(3) == 0 {
            continue;
        }
        let (k, stats) = verify(dir.path());
        // The check closed cleanly.
        log(&mut logf, "s");
        keys += k;
        loaded += stats.loaded;
        replayed += stats.replayed;
        scanned += stats.scanned;
        checks += 1;
    }
    assert!(
        loaded > 0,
        "no reopen ever loaded a filter: the clean close is untested"
    );
    assert!(
        replayed > 0,
        "no table ever came back from its crash journal: the journals are untested"
    );
    println!(
        "crash: {kills} kill -9 in {:.1?}, {checks} checks, {keys} key checks; filters \
         {loaded} loaded, {replayed} replayed from journals, {scanned} scanned; 0 false negatives",
        start.elapsed()
    );
}

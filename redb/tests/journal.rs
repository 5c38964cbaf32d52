//! Crash journals: a child process (this test binary, re-run) writes a database and is
//! killed with SIGKILL; the parent reopens it and checks where each table's filter came from
//! (`Database::table_filter_source`) and that every committed key is found. Tampered
//! journals (another table's or database's copied in, an earlier copy, a flipped byte, a
//! counter file gone as after a reboot) are refused with the core's reason, and the table
//! is scanned: still no false negative. So are damaged marks (a flipped bit, another table's
//! mark, a mark of an earlier build).

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use bloomsled::JournalFault;
use bloomsled_redb::{Database, FilterSource, ReadOnlyDatabase, ReadableDatabase, TableDefinition};

const CHILD_ENV: &str = "BLOOMSLED_REDB_JOURNAL_CHILD";
const A: TableDefinition<u64, u64> = TableDefinition::new("a");
const B: TableDefinition<u64, u64> = TableDefinition::new("b");
const C: TableDefinition<u64, u64> = TableDefinition::new("c");

fn table(name: &str) -> TableDefinition<'_, u64, u64> {
    TableDefinition::new(name)
}

fn write(db: &Database, t: TableDefinition<u64, u64>, keys: std::ops::Range<u64>) {
    let w = db.begin_write().unwrap();
    {
        let mut t = w.open_table(t).unwrap();
        for k in keys {
            t.insert(k, k).unwrap();
        }
    }
    w.commit().unwrap();
}

/// A database whose last clean close stored the filters of `a` and `b` (2,000 keys each,
/// sized for 4,000: a replay of fewer new keys leaves them within their capacity).
fn base(dir: &Path) -> PathBuf {
    let path = dir.join("j.redb");
    let db = Database::create(&path).unwrap();
    write(&db, A, 0..2_000);
    write(&db, B, 0..2_000);
    drop(db);
    path
}

/// The child: runs `steps` (`;`-separated) on the database at `path`, then waits to be
/// killed. `w <table> <from> <to>`: a durable commit of those keys (`x`: aborted instead);
/// `pause <n>`: tells the parent it reached pause `n` (a file) and waits for its go;
/// `rename <from> <to>`, `delete <table>`, `restore`: a savepoint made at the start is
/// restored; `compact`.
fn child(path: &Path, steps: &str) -> ! {
    let start = Instant::now();
    let mut db = Database::open(path).unwrap();
    let mut w = db.begin_write().unwrap();
    let mut savepoint = Some(w.ephemeral_savepoint().unwrap());
    w.commit().unwrap();
    for step in steps.split(';') {
        let f: Vec<&str> = step.split_whitespace().collect();
        match f.as_slice() {
            ["w", t, from, to] => write(&db, table(t), from.parse().unwrap()..to.parse().unwrap()),
            ["x", t, from, to] => {
                let x = db.begin_write().unwrap();
                let mut xt = x.open_table(table(t)).unwrap();
                (from.parse::<u64>().unwrap()..to.parse().unwrap())
                    .for_each(|k| _ = xt.insert(k, k));
                drop(xt);
                x.abort().unwrap();
            }
            ["pause", n] => {
                std::fs::write(path.with_extension(format!("pause{n}")), b"").unwrap();
                let go = path.with_extension(format!("go{n}"));
                while !go.exists() {
                    std::thread::sleep(Duration::from_millis(5));
                }
            }
            ["rename", from, to] => {
                w = db.begin_write().unwrap();
                w.rename_table(table(from), table(to)).unwrap();
                w.commit().unwrap();
            }
            ["delete", t] => {
                w = db.begin_write().unwrap();
                w.delete_table(table(t)).unwrap();
                w.commit().unwrap();
            }
            ["restore"] => {
                w = db.begin_write().unwrap();
                w.restore_savepoint(savepoint.as_ref().unwrap()).unwrap();
                w.commit().unwrap();
            }
            ["compact"] => {
                savepoint = None; // redb compacts no file a savepoint holds
                db.compact().unwrap();
            }
            other => panic!("unknown step {other:?}"),
        }
    }
    // The time the steps took, for the measurement below.
    // Written whole under another name, then renamed: the parent kills this process as
    // soon as the name appears, and an empty file would leave it waiting forever.
    let took = start.elapsed().as_secs_f64().to_string();
    let writing = path.with_extension("done.tmp");
    std::fs::write(&writing, took).unwrap();
    std::fs::rename(&writing, path.with_extension("done")).unwrap();
    loop {
        std::thread::sleep(Duration::from_secs(1));
    }
}

/// Re-runs this binary as the child of `steps` (only the test named `test` runs in it).
fn spawn(test: &str, path: &Path, steps: &str, env: &[(&str, &str)]) -> Child {
    let mut cmd = Command::new(std::env::current_exe().unwrap());
    cmd.args([
        test,
        "--exact",
        "--include-ignored",
        "--nocapture",
        "--test-threads=1",
    ])
    .env(CHILD_ENV, format!("{}|{steps}", path.display()))
    .stdout(Stdio::null());
    for (k, v) in env {
        cmd.env(k, v);
    }
    cmd.spawn().unwrap()
}

/// If this process is a child, runs its steps (and never returns).
fn maybe_child() {
    if let Ok(v) = std::env::var(CHILD_ENV) {
        let (path, steps) = v.split_once('|').unwrap();
        child(Path::new(path), steps);
    }
}

fn wait_for(file: &Path, child: &mut Child) {
    let start = Instant::now();
    while !file.exists() {
        assert!(child.try_wait().unwrap().is_none(), "the child died");
        assert!(start.elapsed() < Duration::from_secs(60), "the child hangs");
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// Runs the child of `steps` to its end, then kills it with SIGKILL; returns the seconds
/// its open and steps took.
fn crash(test: &str, path: &Path, steps: &str, env: &[(&str, &str)]) -> f64 {
    let mut c = spawn(test, path, steps, env);
    let done = path.with_extension("done");
    wait_for(&done, &mut c);
    c.kill().unwrap();
    c.wait().unwrap();
    // Renamed into place whole by the child.
    let took = std::fs::read_to_string(&done)
        .unwrap()
        .parse()
        .expect("the child's time");
    std::fs::remove_file(done).unwrap();
    took
}

/// Opens the database, gives each table its filter, and checks that every key in
/// `tables` (name, keys) is found, by `get` and by `get_latest`; returns the handle.
fn reopen_and_check(path: &Path, tables: &[(&str, std::ops::Range<u64>)]) -> Database {
    let db = Database::open(path).unwrap();
    {
        let r = db.begin_read().unwrap();
        for (t, _) in tables {
            let _ = r.open_table(table(t));
        }
    }
    db.wait_for_filters();
    let r = db.begin_read().unwrap();
    for (t, keys) in tables {
        let t = table(t);
        let rt = r.open_table(t).unwrap();
        assert!(rt.filter_in_use());
        for k in keys.clone() {
            assert!(rt.get(k).unwrap().is_some(), "false negative: {k}");
            assert!(db.get_latest(t, k).unwrap().is_some(), "get_latest {k}");
        }
    }
    db
}

/// The journal files of the database at `path`.
fn journals(path: &Path) -> Vec<PathBuf> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(journal_dir(path))
        .map(|d| d.flatten().map(|e| e.path()).collect())
        .unwrap_or_default();
    files.retain(|p| p.extension().is_some_and(|x| x == "jnl"));
    files
}

/// The journal of the database at `path` that holds `records` records (the tests give
/// each table's session its own count: a table's id in the header is a hash).
fn journal_with(path: &Path, records: usize) -> PathBuf {
    let count = |p: &Path| {
        let bytes = std::fs::read(p).unwrap();
        bytes[256..]
            .chunks_exact(16)
            .filter(|r| r[8..] != [0; 8])
            .count()
    };
    let found: Vec<PathBuf> = journals(path)
        .into_iter()
        .filter(|p| count(p) == records)
        .collect();
    assert_eq!(found.len(), 1, "one journal of {records} records");
    found[0].clone()
}

fn journal_dir(path: &Path) -> PathBuf {
    let mut s = path.as_os_str().to_owned();
    s.push(".bloomsled");
    PathBuf::from(s)
}

/// The counter file of the journal at `jnl`, named from its header (database id at 16,
/// table id at 32, sequence at 112) as the core names it.
fn counter_file(jnl: &Path) -> PathBuf {
    let bytes = std::fs::read(jnl).unwrap();
    let hex = |b: &[u8]| b.iter().map(|x| format!("{x:02x}")).collect::<String>();
    let g = u64::from_le_bytes(bytes[112..120].try_into().unwrap());
    let dir = std::env::var_os("BLOOMSLED_JOURNAL_COUNTER_DIR")
        .map_or_else(|| PathBuf::from("/dev/shm"), PathBuf::from);
    dir.join(format!(
        "bloomsled-{}-{}-{g}.jctr",
        hex(&bytes[16..32]),
        hex(&bytes[32..48])
    ))
}

fn source(db: &Database, t: TableDefinition<u64, u64>) -> FilterSource {
    db.table_filter_source(t).unwrap()
}

fn refused(db: &Database, t: TableDefinition<u64, u64>) -> JournalFault {
    match source(db, t) {
        FilterSource::Scanned { journal: Some(f) } => f,
        other => panic!("expected a refused journal, got {other:?}"),
    }
}

#[test]
fn a_killed_session_comes_back_from_its_journal_and_a_second_one_too() {
    maybe_child();
    let dir = tempfile::tempdir().unwrap();
    let path = base(dir.path());
    let test = "a_killed_session_comes_back_from_its_journal_and_a_second_one_too";
    crash(
        test,
        &path,
        "w a 2000 3000;w b 2000 2100;w a 3000 3010",
        &[],
    );
    assert_eq!(journals(&path).len(), 2);
    // A second session opens after the kill (a's filter replayed there), writes and is
    // killed too: its journal continues a's chain.
    crash(test, &path, "w a 5000 5500", &[]);
    assert_eq!(journals(&path).len(), 3);
    let db = reopen_and_check(
        &path,
        &[("a", 0..3_010), ("a", 5_000..5_500), ("b", 0..2_100)],
    );
    assert_eq!(
        source(&db, A),
        FilterSource::Replayed {
            sessions: 2,
            hashes: 1_510
        }
    );
    assert_eq!(
        source(&db, B),
        FilterSource::Replayed {
            sessions: 1,
            hashes: 100
        }
    );
    assert_eq!(db.filter_stats().replayed, 2);
    assert_eq!(db.filter_stats().scanned, 0);
    // The replayed filter is in use, within its capacity, and holds the replayed keys.
    let s = db.table_filter_stats(A).unwrap();
    assert!(
        s.in_use && s.items >= 3_400 && s.items <= s.capacity,
        "{s:?}"
    );
    let counters: Vec<PathBuf> = journals(&path).iter().map(|j| counter_file(j)).collect();
    assert!(counters.iter().all(|c| c.exists()));
    drop(db);
    // The clean close removed the journals and their counter files.
    assert!(!journal_dir(&path).exists());
    assert!(counters.iter().all(|c| !c.exists()));
    let db = reopen_and_check(&path, &[("a", 0..3_010), ("b", 0..2_100)]);
    assert_eq!(source(&db, A), FilterSource::Loaded);
}

/// A tampering of a crashed database (given a second one crashed alike), and the reason
/// its refusal must give.
type Case = (&'static str, fn(&Path, &Path), fn(&JournalFault) -> bool);

#[test]
fn a_compaction_in_the_killed_session_keeps_its_journal() {
    maybe_child();
    let test = "a_compaction_in_the_killed_session_keeps_its_journal";
    let dir = tempfile::tempdir().unwrap();
    let path = base(dir.path());
    crash(test, &path, "w a 2000 2100;compact;w a 2100 2200", &[]);
    let db = reopen_and_check(&path, &[("a", 0..2_200)]);
    assert_eq!(
        source(&db, A),
        FilterSource::Replayed {
            sessions: 1,
            hashes: 200
        }
    );
}

#[test]
fn tampered_journals_are_refused_with_their_reason_and_scanned() {
    maybe_child();
    let test = "tampered_journals_are_refused_with_their_reason_and_scanned";
    let keys = [("a", 0..2_200), ("b", 0..2_300)];
    let steps = "w a 2000 2200;w b 2000 2300";
    // Each case: a fresh database crashed the same way, then one tampering.
    let cases: [Case; 4] = [
        (
            "another table's journal copied over a's",
            |path, _| {
                std::fs::copy(journal_with(path, 300), journal_with(path, 200)).unwrap();
            },
            |f| matches!(f, JournalFault::OtherTree),
        ),
        (
            "another database's journal copied over a's",
            |path, other| {
                std::fs::copy(journal_with(other, 200), journal_with(path, 200)).unwrap();
            },
            |f| matches!(f, JournalFault::ForeignDatabase),
        ),
        (
            "a flipped byte in a record",
            |path, _| {
                let j = journal_with(path, 200);
                let mut bytes = std::fs::read(&j).unwrap();
                bytes[256 + 16 * 5] ^= 0x10;
                std::fs::write(&j, bytes).unwrap();
            },
            |f| matches!(f, JournalFault::Damaged { .. }),
        ),
        (
            "the counter file removed, as by a reboot",
            |path, _| std::fs::remove_file(counter_file(&journal_with(path, 200))).unwrap(),
            |f| matches!(f, JournalFault::CountersMissing { .. }),
        ),
    ];
    for (what, tamper, expected) in cases {
        let dir = tempfile::tempdir().unwrap();
        let path = base(dir.path());
        crash(test, &path, steps, &[]);
        let other_dir = tempfile::tempdir().unwrap();
        let other = base(other_dir.path());
        crash(test, &other, steps, &[]);
        tamper(&path, &other);
        let db = reopen_and_check(&path, &keys);
        let fault = refused(&db, A);
        assert!(expected(&fault), "{what}: {fault:?}");
        // b's journal is whole.
        assert!(
            matches!(source(&db, B), FilterSource::Replayed { .. }),
            "{what}"
        );
        drop(db);
        drop(Database::open(&other).unwrap());
    }
}

#[test]
fn an_earlier_copy_of_a_journal_is_refused() {
    maybe_child();
    let test = "an_earlier_copy_of_a_journal_is_refused";
    let dir = tempfile::tempdir().unwrap();
    let path = base(dir.path());
    let mut c = spawn(test, &path, "w a 2000 2100;pause 1;w a 2100 2200", &[]);
    wait_for(&path.with_extension("pause1"), &mut c);
    let j = journal_with(&path, 100);
    let earlier = std::fs::read(&j).unwrap();
    std::fs::write(path.with_extension("go1"), b"").unwrap();
    wait_for(&path.with_extension("done"), &mut c);
    c.kill().unwrap();
    c.wait().unwrap();
    std::fs::write(&j, earlier).unwrap();
    let db = reopen_and_check(&path, &[("a", 0..2_200)]);
    assert_eq!(
        refused(&db, A),
        JournalFault::RecordsLost {
            sequence: 1,
            finished: 200,
            found: 100
        }
    );
}

#[test]
fn delete_rename_and_restore_end_the_journal_and_a_scan_finds_every_key() {
    maybe_child();
    let test = "delete_rename_and_restore_end_the_journal_and_a_scan_finds_every_key";
    // A rename gives `c` a's keys; `a` is made again with new ones.
    let dir = tempfile::tempdir().unwrap();
    let path = base(dir.path());
    crash(
        test,
        &path,
        "w a 2000 2100;rename a c;w a 5000 5100;w b 2000 2100",
        &[],
    );
    let db = reopen_and_check(
        &path,
        &[("a", 5_000..5_100), ("c", 0..2_100), ("b", 0..2_100)],
    );
    assert_eq!(source(&db, A), FilterSource::Scanned { journal: None });
    assert_eq!(source(&db, C), FilterSource::Scanned { journal: None });
    // b's journal is untouched by the rename of another table.
    assert!(matches!(source(&db, B), FilterSource::Replayed { .. }));
    drop(db);
    // A delete, then the table made again.
    crash(test, &path, "w b 3000 3100;delete b;w b 7000 7100", &[]);
    let db = reopen_and_check(&path, &[("b", 7_000..7_100)]);
    assert_eq!(source(&db, B), FilterSource::Scanned { journal: None });
    drop(db);
    // A restore of a savepoint made at the session's start, then more writes (c's filter
    // was stored by the last clean close).
    crash(test, &path, "w c 8000 8100;restore;w c 9000 9100", &[]);
    let db = reopen_and_check(&path, &[("c", 0..2_100), ("c", 9_000..9_100)]);
    assert_eq!(source(&db, C), FilterSource::Scanned { journal: None });
    let r = db.begin_read().unwrap();
    assert!(r.open_table(C).unwrap().get(8_000).unwrap().is_none());
}

#[test]
fn no_journal_without_a_counter_folder_and_none_from_a_read_only_open() {
    maybe_child();
    let test = "no_journal_without_a_counter_folder_and_none_from_a_read_only_open";
    let dir = tempfile::tempdir().unwrap();
    let path = base(dir.path());
    // A read-only open makes no journal.
    {
        let db = ReadOnlyDatabase::open(&path).unwrap();
        let r = db.begin_read().unwrap();
        assert!(r.open_table(A).unwrap().get(5).unwrap().is_some());
    }
    assert!(!journal_dir(&path).exists());
    // A counter folder that cannot hold the counter file (as a full /dev/shm): the writes
    // go on unjournaled, and the reopen after the kill scans.
    let missing = dir.path().join("no such folder");
    crash(
        test,
        &path,
        "w a 2000 2500",
        &[("BLOOMSLED_JOURNAL_COUNTER_DIR", missing.to_str().unwrap())],
    );
    assert!(journals(&path).is_empty());
    let db = reopen_and_check(&path, &[("a", 0..2_500)]);
    assert_eq!(source(&db, A), FilterSource::Scanned { journal: None });
    drop(db);
    // (A read-only open after a kill is redb's to refuse: the file needs a repair.)
    assert!(!journal_dir(&path).exists());
}

/// Checks that `t` rules out most of 10,000 keys it never held (a filter of only the
/// journals' keys, sized for them, not one filled up).
fn rules_out_absent(db: &Database, t: TableDefinition<u64, u64>) {
    let r = db.begin_read().unwrap();
    let rt = r.open_table(t).unwrap();
    let before = db.table_filter_stats(t).unwrap().ruled_out;
    for k in 1_000_000..1_010_000 {
        assert!(rt.get(k).unwrap().is_none());
    }
    let ruled_out = db.table_filter_stats(t).unwrap().ruled_out - before;
    assert!(
        ruled_out > 9_900,
        "{ruled_out} of 10,000 absent keys ruled out"
    );
}

#[test]
fn a_table_made_since_the_close_comes_back_from_journals_of_the_empty_filter() {
    maybe_child();
    let test = "a_table_made_since_the_close_comes_back_from_journals_of_the_empty_filter";
    let dir = tempfile::tempdir().unwrap();
    let path = base(dir.path());
    // `n` is made by the first of several commits after the clean close (an aborted
    // transaction made it first: its journal began there).
    crash(
        test,
        &path,
        "x n 20000 20100;w n 0 4000;w n 4000 8000;w a 2000 2100;w n 8000 12000",
        &[],
    );
    let db = reopen_and_check(&path, &[("n", 0..12_000), ("a", 0..2_100)]);
    let n = table("n");
    let replayed = |sessions, hashes| FilterSource::Replayed { sessions, hashes };
    // The aborted keys' hashes too (false positives only).
    assert_eq!(source(&db, n), replayed(1, 12_100));
    assert!(db.get_latest(n, 20_000).unwrap().is_none());
    assert_eq!(db.filter_stats().scanned, 0);
    rules_out_absent(&db, n);
    drop(db);
    // The clean close stored n's filter: a later session extends that one.
    crash(test, &path, "w n 12000 13000", &[]);
    let db = reopen_and_check(&path, &[("n", 0..13_000)]);
    assert_eq!(source(&db, n), replayed(1, 1_000));
    drop(db);
    // Written in two sessions, both killed: the second's journal continues the chain.
    crash(test, &path, "w m 0 6000", &[]);
    crash(test, &path, "w m 6000 11000", &[]);
    let db = reopen_and_check(&path, &[("m", 0..11_000)]);
    assert_eq!(source(&db, table("m")), replayed(2, 11_000));
    rules_out_absent(&db, table("m"));
}

/// A table too small for the clean close to store its filter: the killed session's first
/// write wrote its filter as the chain's base, with the mark; a second killed session
/// continues the chain. No key read after either kill.
#[test]
fn a_small_table_at_the_close_replays_from_its_sessions_base() {
    maybe_child();
    let test = "a_small_table_at_the_close_replays_from_its_sessions_base";
    let replayed = |sessions, hashes| FilterSource::Replayed { sessions, hashes };
    let dir = tempfile::tempdir().unwrap();
    let path = base(dir.path());
    let db = Database::open(&path).unwrap();
    write(&db, table("s"), 0..100);
    drop(db);
    // (Within the filter's capacity, 1,024 keys: a fuller one is rebuilt larger at once.)
    crash(test, &path, "w s 100 700;x s 9000 9100", &[]);
    let db = reopen_and_check(&path, &[("s", 0..700)]);
    assert_eq!(source(&db, table("s")), replayed(1, 600 + 100));
    rules_out_absent(&db, table("s"));
    drop(db);
    // The reopen above closed cleanly: the table (700 keys) is stored now. Two killed
    // sessions of a new small table's chain over a close.
    let db = Database::open(&path).unwrap();
    write(&db, table("t"), 0..50);
    drop(db);
    crash(test, &path, "w t 50 500", &[]);
    crash(test, &path, "w t 500 900", &[]);
    let db = reopen_and_check(&path, &[("t", 0..900), ("s", 0..700)]);
    assert_eq!(source(&db, table("t")), replayed(2, 850));
    assert_eq!(source(&db, table("s")), FilterSource::Loaded);
    rules_out_absent(&db, table("t"));
}

#[test]
fn a_table_that_held_keys_or_was_deleted_or_renamed_is_scanned() {
    maybe_child();
    let test = "a_table_that_held_keys_or_was_deleted_or_renamed_is_scanned";
    let dir = tempfile::tempdir().unwrap();
    let path = base(dir.path());
    // `s` is too small for the close to store its filter: it gets no empty base (its
    // session's base, overfilled by 4,900 keys, is rebuilt larger by a scan).
    let db = Database::open(&path).unwrap();
    write(&db, table("s"), 0..100);
    drop(db);
    // New tables deleted and made again, or renamed, in the session that made them.
    let steps = "w s 100 5000;w n 0 5000;w p 0 3000;delete n;w n 7000 7100;rename p q";
    crash(test, &path, steps, &[]);
    let scanned = FilterSource::Scanned { journal: None };
    let keys = [("s", 0..5_000), ("n", 7_000..7_100), ("q", 0..3_000)];
    let db = reopen_and_check(&path, &keys);
    for (t, _) in keys {
        assert_eq!(source(&db, table(t)), scanned, "{t}");
    }
    assert!(db.get_latest(table("n"), 10).unwrap().is_none());
    drop(db);
    // Made in a killed session, deleted or renamed by the next one, killed too.
    crash(test, &path, "w u 0 3000;w v 0 3000", &[]);
    crash(
        test,
        &path,
        "w u 3000 3100;delete u;w u 8000 8100;rename v x",
        &[],
    );
    let db = reopen_and_check(&path, &[("u", 8_000..8_100), ("x", 0..3_000)]);
    assert_eq!(source(&db, table("u")), scanned);
    assert_eq!(source(&db, table("x")), scanned);
    assert!(db.get_latest(table("u"), 10).unwrap().is_none());
}

/// Not a check: how long a table's filter takes to come back after a kill, from its
/// journal against a scan (the killed session kept no journal: its counter folder
/// unset), and what journaling cost that session's writes. Run with
/// `cargo test --release -p bloomsled-redb --test journal -- --ignored --nocapture`;
/// `BLOOMSLED_REDB_JOURNAL_KEYS` (default 1,000,000) keys at the clean close, a tenth of
/// that written after it in one commit.
#[test]
#[ignore]
fn open_after_kill_journal_against_scan() {
    maybe_child();
    let test = "open_after_kill_journal_against_scan";
    let n: u64 =
        std::env::var("BLOOMSLED_REDB_JOURNAL_KEYS").map_or(1_000_000, |s| s.parse().unwrap());
    for journal in [true, false] {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("j.redb");
        let db = Database::create(&path).unwrap();
        for from in (0..n).step_by(100_000) {
            write(&db, A, from..(from + 100_000).min(n));
        }
        drop(db);
        let env: &[(&str, &str)] = if journal {
            &[]
        } else {
            &[("BLOOMSLED_JOURNAL_COUNTER_DIR", "")]
        };
        let wrote = crash(test, &path, &format!("w a {n} {}", n + n / 10), env);
        let t = Instant::now();
        let db = Database::open(&path).unwrap();
        let opened = t.elapsed();
        let t = Instant::now();
        drop(db.begin_read().unwrap().open_table(A).unwrap());
        db.wait_for_filters();
        let filter = t.elapsed();
        println!(
            "{n} keys + {} after the close (journal {journal}: the killed session's open and \
             commit {wrote:.3}s), killed: redb's open {opened:.1?}, then the filter in use \
             after {filter:.1?} ({:?})",
            n / 10,
            source(&db, A)
        );
    }
}

/// The marks of a crashed database, damaged through plain redb: a flipped bit, another
/// table's mark copied over the table's, a mark of an earlier build. Each is refused (the
/// table scans, every key found), and the untouched table still replays.
#[test]
fn tampered_marks_are_refused_and_the_table_scanned() {
    maybe_child();
    let test = "tampered_marks_are_refused_and_the_table_scanned";
    const MARKS: redb::TableDefinition<&str, &[u8]> =
        redb::TableDefinition::new("__bloomsled_journals");
    type Tampering = fn(&mut Vec<u8>, &[u8]);
    let cases: [(&str, Tampering); 4] = [
        ("a bit flipped in its chain's last journal", |a, _| {
            a[80] ^= 1
        }),
        ("a bit flipped in its flags", |a, _| a[12] ^= 1),
        ("b's mark copied over it", |a, b| *a = b.to_vec()),
        ("a mark of an earlier build", |a, _| {
            a.truncate(68);
            a[..4].copy_from_slice(b"BSJ2");
        }),
    ];
    for (what, damage) in cases {
        let dir = tempfile::tempdir().unwrap();
        let path = base(dir.path());
        crash(test, &path, "w a 2000 2200;w b 2000 2300", &[]);
        {
            let db = redb::Database::open(&path).unwrap();
            let w = db.begin_write().unwrap();
            {
                use redb::ReadableTable as _;
                let mut marks = w.open_table(MARKS).unwrap();
                let b = marks.get("t/b").unwrap().unwrap().value().to_vec();
                let mut a = marks.get("t/a").unwrap().unwrap().value().to_vec();
                assert_eq!(a.len(), 96, "{what}: the core's chain record");
                damage(&mut a, &b);
                marks.insert("t/a", a.as_slice()).unwrap();
            }
            w.commit().unwrap();
        }
        let db = reopen_and_check(&path, &[("a", 0..2_200), ("b", 0..2_300)]);
        assert!(
            matches!(source(&db, A), FilterSource::Scanned { .. }),
            "{what}: {:?}",
            source(&db, A)
        );
        assert_eq!(
            source(&db, B),
            FilterSource::Replayed {
                sessions: 1,
                hashes: 300
            },
            "{what}"
        );
    }
}

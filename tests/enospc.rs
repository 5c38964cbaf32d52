//! A full disk.
//! - Snapshot writes fail with ENOSPC (through the library's fault-injection seam, which
//!   fails writes as a full disk does, after a byte budget). The temporary file is removed
//!   every time, nothing stored is lost, and once space is back the database recovers.
//! - The crash journal on a real full file system (a small tmpfs this test mounts, as root;
//!   skipped loudly where mounting is not allowed): a child writes while the disk sits at
//!   the edge of full, so creating a journal (at a snapshot) and growing one (a write into
//!   a page not yet backed by the file system) fail. Every write succeeds or fails with an
//!   error, none kills the process; after a `kill -9` the database reopens with no false
//!   negative and every flushed key, and once space is back the journal works again (a
//!   second `kill -9` replays).
//!
//! The seam is process-wide, so the cases hold one lock and run in their own binary.

mod common;

use std::fs;
use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Mutex;
use std::time::Duration;

use bloomsled::persist::{fail_snapshot_writes_after, DIR_NAME};
use bloomsled::{Config, RecoveryOutcome};

/// Held by each case: the snapshot seam is process-wide.
static SEAM: Mutex<()> = Mutex::new(());

/// A case's hold on the seam: starts with no budget, and leaves none behind even when the
/// case panics (a budget left set by one failed case would fail the next case's snapshots).
struct SeamHeld(#[allow(dead_code)] std::sync::MutexGuard<'static, ()>);

impl SeamHeld {
    fn take() -> SeamHeld {
        let held = SeamHeld(SEAM.lock().unwrap_or_else(|p| p.into_inner()));
        fail_snapshot_writes_after(None);
        held
    }
}

impl Drop for SeamHeld {
    fn drop(&mut self) {
        fail_snapshot_writes_after(None);
    }
}

fn leftovers(dir: &Path) -> Vec<String> {
    fs::read_dir(dir.join(DIR_NAME))
        .map(|rd| {
            rd.flatten()
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .filter(|n| n.ends_with(".tmp"))
                .collect()
        })
        .unwrap_or_default()
}

/// ENOSPC, from the snapshot's temporary file (the error names the file and the step).
fn is_enospc(e: &bloomsled::Error) -> bool {
    matches!(e, bloomsled::Error::Io(io) if io.kind() == std::io::ErrorKind::StorageFull)
        && e.to_string().contains(".snap.tmp")
}

#[test]
fn a_full_disk_leaves_no_temporary_file_and_loses_nothing() {
    let _seam = SeamHeld::take();
    let dir = tempfile::tempdir().unwrap();
    let key = |i: u32| format!("https://example.org/{i}");
    let db = Config::new()
        .path(dir.path())
        .expected_items(10_000)
        .open()
        .unwrap();
    for i in 0..5_000 {
        db.insert(key(i), "v").unwrap();
    }
    // The disk fills up part-way through the snapshot file, then at its first byte.
    for budget in [3_000, 0] {
        fail_snapshot_writes_after(Some(budget));
        let err = db.snapshot().unwrap_err();
        assert!(is_enospc(&err), "{err}");
        assert!(
            leftovers(dir.path()).is_empty(),
            "{:?}",
            leftovers(dir.path())
        );
    }
    // Writes go on (the data is sled's), reads find everything.
    for i in 5_000..6_000 {
        db.insert(key(i), "v").unwrap();
    }
    for i in 0..6_000 {
        assert!(db.get(key(i)).unwrap().is_some());
    }
    // close reports the failure and leaves nothing behind either.
    fail_snapshot_writes_after(Some(100));
    let err = db.close().unwrap_err();
    assert!(is_enospc(&err), "{err}");
    assert!(leftovers(dir.path()).is_empty());

    // Still full at the next open: the stale filter is rebuilt in memory, its snapshot
    // fails (logged), the open succeeds with every key.
    fail_snapshot_writes_after(Some(0));
    {
        let db = Config::new().path(dir.path()).open().unwrap();
        assert!(db
            .wait_for_filter(std::time::Duration::from_secs(60))
            .unwrap());
        assert!(matches!(
            db.recovery_report().outcome,
            RecoveryOutcome::Rebuilt { .. }
        ));
        for i in 0..6_000 {
            assert!(db.may_contain(key(i)));
        }
    }
    // The rebuilt filter's snapshot runs on the rebuild's thread after `wait_for_filter`
    // returned (its temporary file exists while it is written); dropping the database
    // waits for that thread, so its failed snapshot is over here.
    assert!(
        leftovers(dir.path()).is_empty(),
        "{:?}",
        leftovers(dir.path())
    );
    // Space is back: the next open rebuilds (the failed snapshots were never named by the
    // record), the close after it writes a snapshot, and the open after that loads it.
    fail_snapshot_writes_after(None);
    {
        let db = Config::new().path(dir.path()).open().unwrap();
        assert!(db
            .wait_for_filter(std::time::Duration::from_secs(60))
            .unwrap());
        for i in 0..6_000 {
            assert!(db.get(key(i)).unwrap().is_some());
        }
        db.close().unwrap();
    }
    let db = Config::new().path(dir.path()).open().unwrap();
    assert!(db.recovery_report().loaded(), "{:?}", db.recovery_report());
    assert!(leftovers(dir.path()).is_empty());
}

const JOURNAL_CHILD: &str = "BLOOMSLED_ENOSPC_JOURNAL_CHILD";
/// The child's mode (`full` or `after`) and the folder it fills.
const JOURNAL_MODE: &str = "BLOOMSLED_ENOSPC_JOURNAL_MODE";
const JOURNAL_FILL: &str = "BLOOMSLED_ENOSPC_JOURNAL_FILL";
fn url(i: u64) -> String {
    format!("https://full.example.org/{i:05}")
}

/// A tmpfs of `size` mounted at `at` (as root), unmounted when dropped.
struct Tmpfs(PathBuf);

impl Tmpfs {
    fn mount(at: &Path, size: &str) -> Result<Tmpfs, String> {
        fs::create_dir_all(at).unwrap();
        let out = Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={size}"), "tmpfs"])
            .arg(at)
            .output()
            .map_err(|e| format!("mount: {e}"))?;
        if !out.status.success() {
            return Err(String::from_utf8_lossy(&out.stderr).trim().to_owned());
        }
        Ok(Tmpfs(at.to_owned()))
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg("-l").arg(&self.0).status();
    }
}

/// Fills the file system under `dir` with 4 KiB files until it refuses one; returns them.
fn fill(dir: &Path) -> Vec<PathBuf> {
    fs::create_dir_all(dir).unwrap();
    let page = [0xAB_u8; 4096];
    let mut files = Vec::new();
    for n in 0.. {
        let path = dir.join(format!("{n:06}"));
        let written = fs::File::create(&path).and_then(|mut f| f.write_all(&page));
        match written {
            Ok(()) => files.push(path),
            Err(e) => {
                assert_eq!(e.raw_os_error(), Some(28), "filling the disk: {e}");
                let _ = fs::remove_file(&path);
                return files;
            }
        }
    }
    unreachable!()
}

/// The child. `full`: writes at the edge of a full disk (it fills it, then frees a page
/// now and then), prints what each call returned, then `done`, and waits to be killed.
/// `after`: plain writes with space, `flushed N`, `done`.
fn journal_child(path: &Path, mode: &str, fill_at: &Path) {
    println!(); // past the test harness's own unterminated line
    let db = Config::new()
        .path(path)
        .expected_items(20_000)
        .open()
        .unwrap();
    if mode == "after" {
        db.snapshot().unwrap();
        for i in 10_000..10_600 {
            db.insert(url(i), "a").unwrap();
        }
        db.flush().unwrap();
        println!("flushed 10600");
        println!("done");
        std::thread::sleep(Duration::from_secs(600));
        return;
    }
    for i in 0..500 {
        db.insert(url(i), "v").unwrap();
    }
    db.snapshot().unwrap();
    // A sequence's journal is made by its first write: one before the disk fills.
    db.insert(url(0), "v").unwrap();
    db.flush().unwrap();
    println!("flushed 500");
    let mut filler = fill(fill_at);
    println!("full {}", filler.len());
    // 300 writes into the journal made before the disk filled: past its first page, which
    // is all it has room for. Then snapshots (each starts the next journal) with no room,
    // and with one page freed (its own page, maybe; then growing it fails again). Then
    // pages freed now and then, which the next allocation (sled's, a journal's) takes.
    for i in 500..3_000u64 {
        match db.insert(url(i), "v") {
            Ok(_) => println!("ok {i}"),
            Err(e) => println!("err {i} {e}"),
        }
        if i >= 1_100 && i % 150 == 0 || i == 1_100 {
            if let Some(f) = filler.pop() {
                fs::remove_file(f).unwrap();
            }
        }
        if i == 800 || i == 1_100 || i > 1_100 && i % 700 == 0 {
            match db.snapshot() {
                Ok(_) => println!("snapshot ok {i}"),
                Err(e) => println!("snapshot err {i} {e}"),
            }
        }
        if i % 20 == 0 {
            match db.flush() {
                Ok(_) => println!("flushed {}", i + 1),
                Err(e) => println!("flush err {i} {e}"),
            }
        }
    }
    println!("done");
    std::thread::sleep(Duration::from_secs(600));
}

/// Runs a journal child in `mode` until it prints `done` (then `kill -9`) or dies by itself
/// (`Err` with its exit status and last lines).
fn run_journal_child(
    test: &str,
    db: &Path,
    mode: &str,
    fill_at: &Path,
) -> Result<Vec<String>, String> {
    let mut cmd = common::child::command(JOURNAL_CHILD, db, Some(test));
    cmd.env(JOURNAL_MODE, mode).env(JOURNAL_FILL, fill_at);
    let mut child = cmd
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .unwrap();
    let mut lines = Vec::new();
    for line in BufReader::new(child.stdout.take().unwrap()).lines() {
        let line = line.unwrap();
        let done = line == "done";
        lines.push(line);
        if done {
            common::child::kill(&mut child);
            return Ok(lines);
        }
    }
    let status = child.wait().unwrap();
    Err(format!(
        "the child died by itself ({status}) after: {:?}",
        &lines[lines.len().saturating_sub(4)..]
    ))
}

/// The keys a returned `flush()` covered: each `ok i` (and the first 500) before the last
/// `flushed` line.
fn flushed_keys(lines: &[String]) -> Vec<u64> {
    let last = lines.iter().rposition(|l| l.starts_with("flushed "));
    let mut keys: Vec<u64> = (0..500).collect();
    for l in &lines[..last.map_or(0, |n| n + 1)] {
        if let Some(i) = l.strip_prefix("ok ") {
            keys.push(i.parse().unwrap());
        }
    }
    keys
}

/// Opens the database and checks it: no false negative for any key sled holds, every
/// flushed key there. Returns how the filter came back.
fn reopen_and_check(db: &Path, flushed: &[u64]) -> bloomsled::Result<RecoveryOutcome> {
    let db = Config::new().path(db).expected_items(20_000).open()?;
    assert!(db.wait_for_filter(Duration::from_secs(60))?);
    let mut held = 0;
    for k in db.iter().keys() {
        let k = k?;
        assert!(
            db.may_contain(&k),
            "FALSE NEGATIVE {:?} ({:?})",
            String::from_utf8_lossy(&k),
            db.recovery_report()
        );
        held += 1;
    }
    for &i in flushed {
        assert!(db.contains_key(url(i))?, "flushed key {i} lost");
    }
    assert!(held >= flushed.len(), "{held} keys held");
    Ok(db.recovery_report().outcome)
}

/// The case: `db` on a file system that `fill_at` fills (see the file's docs).
/// `journal_only`: only bloomsled's folder fills (sled's writes all succeed).
fn full_disk_case(test: &str, db: &Path, fill_at: &Path, journal_only: bool) {
    if let Some(path) = common::child::role(JOURNAL_CHILD) {
        let mode = std::env::var(JOURNAL_MODE).unwrap();
        let fill_at = PathBuf::from(std::env::var_os(JOURNAL_FILL).unwrap());
        journal_child(Path::new(&path), &mode, &fill_at);
        return;
    }
    // Writes at the edge of a full disk: each returns, with its result or an error.
    let lines = run_journal_child(test, db, "full", fill_at).unwrap_or_else(|e| panic!("{e}"));
    let count = |p: &str| lines.iter().filter(|l| l.starts_with(p)).count();
    println!(
        "{test}: at the edge of a full disk: {} writes ok, {} failed; snapshots {} ok, {} \
         failed; flushes {} ok, {} failed",
        count("ok "),
        count("err "),
        count("snapshot ok"),
        count("snapshot err"),
        count("flushed "),
        count("flush err")
    );
    for l in lines
        .iter()
        .filter(|l| l.contains(" err ") || l.starts_with("err "))
    {
        assert!(l.contains("space"), "an unclear error: {l}");
    }
    if journal_only {
        // sled has room: no write or flush fails because bloomsled's folder is full.
        assert_eq!(count("err ") + count("flush err"), 0, "{lines:?}");
    }
    let flushed = flushed_keys(&lines);

    // The journal the child wrote past its first page while the folder was full says so
    // (its no-space word, `NOSPACE!` at byte 96 of its counter file, see
    // src/persist/journal.rs).
    if journal_only {
        let marked = fs::read_dir(db.join(DIR_NAME))
            .unwrap()
            .flatten()
            .filter(|e| e.file_name().to_string_lossy().ends_with(".jnl"))
            .any(|e| {
                let bytes = fs::read(common::journal_counter_file(&e.path())).unwrap();
                bytes.get(96..104) == Some(&b"NOSPACE!"[..])
            });
        assert!(marked, "no journal was marked out of room");
    }
    // Reopened after the kill -9 while the disk is still full: sound, or a clear error.
    let still_full = fill(fill_at);
    match reopen_and_check(db, &flushed) {
        Ok(outcome) => {
            println!("{test}: reopened on a full disk: {outcome:?}");
            // A journal that ran out of room is never replayed.
            assert!(
                !matches!(outcome, RecoveryOutcome::Replayed { .. }),
                "{outcome:?}"
            );
        }
        Err(e) => {
            println!("{test}: reopen on a full disk failed: {e}");
            assert!(e.to_string().contains("space"), "an unclear error: {e}");
        }
    }
    drop(still_full);
    fs::remove_dir_all(fill_at).unwrap();

    // Space is back: every flushed key, no false negative, and normal behaviour.
    let outcome = reopen_and_check(db, &flushed).unwrap();
    println!("{test}: reopened with space: {outcome:?}");
    let open = || {
        Config::new()
            .path(db)
            .expected_items(20_000)
            .open()
            .unwrap()
    };
    let d = open();
    d.snapshot().unwrap();
    d.close().unwrap();
    let d = open();
    assert!(d.recovery_report().loaded(), "{:?}", d.recovery_report());
    d.close().unwrap();
    // The crash journal works again: a kill -9 is replayed.
    let lines = run_journal_child(test, db, "after", fill_at).unwrap_or_else(|e| panic!("{e}"));
    assert!(lines.iter().any(|l| l == "flushed 10600"), "{lines:?}");
    let mut all = flushed.clone();
    all.extend(10_000..10_600);
    let outcome = reopen_and_check(db, &all).unwrap();
    assert!(
        matches!(outcome, RecoveryOutcome::Replayed { .. }),
        "{outcome:?}"
    );
}

/// Mounts a tmpfs of `size` at `at`, or says loudly why this case is skipped (fails under
/// `CI=true`).
fn mount_or_skip(test: &str, at: &Path, size: &str) -> Option<Tmpfs> {
    if common::child::role(JOURNAL_CHILD).is_some() {
        return None;
    }
    match Tmpfs::mount(at, size) {
        Ok(fs) => Some(fs),
        Err(why) => {
            // CI runs as root, where a tmpfs always mounts: a skip there would hide the test.
            assert!(
                std::env::var("CI").as_deref() != Ok("true"),
                "{test}: cannot mount a tmpfs under CI=true: {why}"
            );
            eprintln!("\n*** {test}: SKIPPED, cannot mount a tmpfs here: {why} ***\n");
            None
        }
    }
}

/// The whole disk fills: sled's own writes fail too.
#[test]
fn a_full_disk_fails_writes_cleanly_and_the_journal_loses_nothing() {
    const TEST: &str = "a_full_disk_fails_writes_cleanly_and_the_journal_loses_nothing";
    let _seam = SeamHeld::take();
    let base = tempfile::tempdir().unwrap();
    let mnt = base.path().join("mnt");
    let fs = mount_or_skip(TEST, &mnt, "16m");
    if fs.is_none() && common::child::role(JOURNAL_CHILD).is_none() {
        return;
    }
    full_disk_case(TEST, &mnt.join("db"), &mnt.join("fill"), false);
}

/// Only bloomsled's folder (snapshots and crash journals) is full, on its own file system:
/// sled's writes go on, so the journal's creation and growth are what fail.
#[test]
fn a_full_journal_folder_fails_no_write_and_loses_nothing() {
    const TEST: &str = "a_full_journal_folder_fails_no_write_and_loses_nothing";
    let _seam = SeamHeld::take();
    let base = tempfile::tempdir().unwrap();
    let db = base.path().join("db");
    let folder = db.join(DIR_NAME);
    let fs = mount_or_skip(TEST, &folder, "256k");
    if fs.is_none() && common::child::role(JOURNAL_CHILD).is_none() {
        return;
    }
    full_disk_case(TEST, &db, &folder.join("fill"), true);
}

/// The rewrite after a failed sync (`src/persist/taint.rs`) on a full disk: the open fails
/// with the error naming the file and the step, leaves no partial copy (the space is given
/// back) and keeps the mark; once space is back the next open rewrites and every key is
/// there.
#[test]
fn a_rewrite_on_a_full_disk_fails_cleanly_and_completes_once_space_is_back() {
    const TEST: &str = "a_rewrite_on_a_full_disk_fails_cleanly_and_completes_once_space_is_back";
    let base = tempfile::tempdir().unwrap();
    let mnt = base.path().join("mnt");
    let Some(_fs) = mount_or_skip(TEST, &mnt, "64m") else {
        return;
    };
    let db_path = mnt.join("db");
    let db = Config::new().path(&db_path).open().unwrap();
    for i in 0..20_000 {
        db.insert(url(i), vec![7u8; 64]).unwrap();
    }
    db.close().unwrap();
    let bytes: u64 = common::walk(&db_path)
        .iter()
        .map(|p| p.metadata().unwrap().len())
        .sum();
    assert!(bytes < 24 << 20, "room for one copy: {bytes} bytes");
    bloomsled::persist::mark_failed_sync(&db_path);
    let mark = db_path.join("bloomsled-rewrite-needed");
    assert!(mark.exists());
    let filler = fill(&mnt.join("fill"));
    let e = match Config::new().path(&db_path).open() {
        Ok(_) => panic!("the rewrite had no room, yet the open succeeded"),
        Err(e) => e,
    };
    assert!(
        matches!(&e, bloomsled::Error::Io(io) if io.kind() == std::io::ErrorKind::StorageFull),
        "{e}"
    );
    let msg = e.to_string();
    assert!(
        msg.contains("rewriting") && msg.contains("after a failed sync"),
        "{msg}"
    );
    let partial: Vec<_> = common::walk(&db_path)
        .into_iter()
        .filter(|p| p.to_string_lossy().ends_with(".bloomsled-rewrite"))
        .collect();
    assert!(partial.is_empty(), "partial copies left: {partial:?}");
    assert!(mark.exists(), "the mark stays until a rewrite completes");
    for f in filler {
        fs::remove_file(f).unwrap();
    }
    let db = Config::new()
        .path(&db_path)
        .background_recovery(false)
        .open()
        .unwrap();
    assert!(!mark.exists());
    for i in 0..20_000 {
        assert!(db.contains_key(url(i)).unwrap(), "{}", url(i));
    }
    assert_eq!(db.verify().unwrap().false_negatives, 0);
}

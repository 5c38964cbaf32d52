//! A disk that errs while the program goes on (issue 57, DESIGN invariant 8): every file
//! bloomsled and sled write × every operation on it × a fault at its first, a middle and
//! its last such operation, for writers of every kind, on the power-cut file system
//! (`bloomsled-powercut`, whose fault rules fail the Nth matching operation with EIO,
//! ENOSPC or EROFS, once or from then on).
//!
//! Each case: a database is made and closed cleanly (no fault), then reopened with one
//! rule set, and a writer runs rounds of writes, each ended by a flush, then closes. A
//! counting run of each writer first lists the operations per file, so the rules hit the
//! first, a middle (picked by `BLOOMSLED_FAULT_SEED`, default 0) and the last of them. The
//! mount keeps its page cache across opens, as a local file system does, and the cache is
//! dropped before the writer's open, as by a reboot. After the run the disk is either kept whole (a
//! process crash) or cut (a power cut: only what was fsynced stays), and the database is
//! reopened from the backing folder, with no fault, in "another boot" after a cut. Then:
//! - **no acknowledged key lost**: every key a returned flush (or the clean close before
//!   the faulted run) covered is stored;
//! - **no false negative**: every stored key of every tree passes its filter;
//! - **no flush returns `Ok` after a failed sync** in that process (the poison);
//! - **every error names its file and step** (bloomsled's own errors do; an error sled
//!   returns about its own files is counted apart, as sled gives no file).
//!
//! `CI=true` with `BLOOMSLED_CI_FULL=1` (CI's last pass, `--all-features`) runs every case
//! (at least 500 faults, about 4 to 5 minutes on two cores); otherwise a sample of a third of two writers' cases, so that
//! `cargo test` stays quick. `BLOOMSLED_FAULT_MATRIX=all` runs every case anywhere, and
//! `BLOOMSLED_FAULT_MATRIX_WRITERS=Counting,Window` only those writers, printing each case.
//! Without FUSE the test is skipped loudly (failed under `CI=true`), as `tests/power_cut.rs`
//! is. Reads of the mapped journal files are left out (a failed read under a mapping is
//! `SIGBUS`: a crash). Keys sled drops after a failed read of its log at its open count as
//! lost (bloomsled's read checks around sled's open turn that read into an error; see
//! `docs/persistence.md`).
#![cfg(target_os = "linux")]

mod common;

use std::path::{Path, PathBuf};
use std::time::Duration;

use bloomsled::clock::ManualClock;
use bloomsled::window::WindowConfig;
use bloomsled::{Batch, Config, Db, Tree};
use bloomsled_powercut::{Failure, Op};

/// The files the writers touch, by the glob of their own names.
const FILES: &[(&str, &str)] = &[
    (
        "db",
        "sled's log (data, records, dirty marks, window rings)",
    ),
    ("conf", "sled's conf"),
    ("snap.*", "sled's snapshot"),
    ("*.snap", "bloomsled's snapshot"),
    ("*.snap.tmp", "bloomsled's snapshot, temporary"),
    ("*.jnl", "crash journal"),
    ("*.jctr", "journal counter file"),
    ("bloomsled", "bloomsled's folder"),
    ("store", "the database folder"),
];

/// The operations faulted.
const OPS: [Op; 8] = [
    Op::Create,
    Op::Open,
    Op::Read,
    Op::Write,
    Op::Fsync,
    Op::FsyncDir,
    Op::Rename,
    Op::Unlink,
];

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Writer {
    Plain,
    Counting,
    Batches,
    Transactions,
    Window,
    Rebuilds,
    Snapshots,
}

const WRITERS: [Writer; 7] = [
    Writer::Plain,
    Writer::Counting,
    Writer::Batches,
    Writer::Transactions,
    Writer::Window,
    Writer::Rebuilds,
    Writer::Snapshots,
];

const ROUNDS: u64 = 3;
const PER_ROUND: u64 = 40;
/// The window's clock at the start; each round moves it one generation on.
const T0: u64 = 1_000_000;
const GEN_MS: u64 = 60_000;
const GENERATIONS: u32 = 4;

fn key(round: u64, i: u64) -> Vec<u8> {
    format!("https://fault.example.org/{round}/{i:04}").into_bytes()
}

fn config(dir: &Path, w: Writer) -> Config {
    Config::new()
        .path(dir)
        .counting(w == Writer::Counting)
        .expected_items(1_000)
        .flush_every_ms(None)
        .snapshot_page_size(1024)
}

fn window_config(clock: &ManualClock) -> WindowConfig {
    WindowConfig::new(
        Duration::from_millis(GEN_MS * u64::from(GENERATIONS)),
        GENERATIONS,
    )
    .clock(clock.clone())
}

/// What one run of a writer saw.
#[derive(Default)]
struct Run {
    /// Keys a returned flush (or close) covered.
    acked: Vec<Vec<u8>>,
    /// Errors returned, with the call that returned them.
    errors: Vec<String>,
    /// Flushes (or closes) that returned `Ok` after a sync had failed.
    acked_after_failed_sync: Vec<String>,
}

/// The writes of one round by writer `w`; returns the keys whose write returned `Ok`.
fn write_round(
    w: Writer,
    db: &Db,
    other: &Tree,
    window: Option<&bloomsled::window::Window>,
    round: u64,
    errors: &mut Vec<String>,
) -> Vec<Vec<u8>> {
    let keys: Vec<Vec<u8>> = (0..PER_ROUND).map(|i| key(round, i)).collect();
    let mut ok = Vec::new();
    let mut note = |what: &str, e: &dyn std::fmt::Display| errors.push(format!("{what}: {e}"));
    match w {
        Writer::Plain | Writer::Rebuilds | Writer::Snapshots | Writer::Counting => {
            for k in &keys {
                match db.insert(k, &b"v"[..]) {
                    Ok(_) => ok.push(k.clone()),
                    Err(e) => note("insert", &e),
                }
            }
            if w == Writer::Counting {
                // Removed keys are no longer expected (a failed remove: either way).
                for k in keys.iter().step_by(4) {
                    if let Err(e) = db.remove(k) {
                        note("remove", &e);
                    }
                    ok.retain(|x| x != k);
                }
            }
            if w == Writer::Rebuilds {
                if let Err(e) = db.rebuild() {
                    note("rebuild", &e);
                }
            }
            if w == Writer::Snapshots {
                if let Err(e) = db.snapshot_all() {
                    note("snapshot_all", &e);
                }
            }
        }
        Writer::Batches => {
            let mut b = Batch::default();
            for k in &keys {
                b.insert(k.clone(), &b"v"[..]);
            }
            match other.apply_batch(b) {
                Ok(()) => ok.extend(keys.iter().cloned()),
                Err(e) => note("apply_batch", &e),
            }
        }
        Writer::Transactions => {
            let r: bloomsled::transaction::TransactionResult<()> = db.transaction(|tx| {
                for k in &keys {
                    tx.insert(k.clone(), &b"v"[..])?;
                }
                Ok(())
            });
            match r {
                Ok(()) => ok.extend(keys.iter().cloned()),
                Err(bloomsled::transaction::TransactionError::Storage(e)) => {
                    note("transaction", &bloomsled::Error::from(e))
                }
                Err(e) => note("transaction", &format!("{e:?}")),
            }
        }
        Writer::Window => {
            let w = window.expect("the window");
            for k in &keys {
                match w.insert(k, &b"v"[..]) {
                    Ok(_) => ok.push(k.clone()),
                    Err(e) => note("window insert", &e),
                }
            }
        }
    }
    ok
}

/// Opens the database at `dir` (on the mount) and runs writer `w`'s rounds, each ended by
/// a flush, then closes it. `sync_failed` says whether a sync has failed so far.
fn run_writer(w: Writer, dir: &Path, sync_failed: &dyn Fn() -> bool) -> Run {
    let mut run = Run::default();
    let db = match config(dir, w).open() {
        Ok(db) => db,
        Err(e) => {
            run.errors.push(format!("open: {e}"));
            return run;
        }
    };
    let other = match db.open_tree("other") {
        Ok(t) => t,
        Err(e) => {
            run.errors.push(format!("open_tree: {e}"));
            return run;
        }
    };
    let clock = ManualClock::new(T0);
    let window = match w {
        Writer::Window => match db.open_window("w", window_config(&clock)) {
            Ok(win) => Some(win),
            Err(e) => {
                run.errors.push(format!("open_window: {e}"));
                return run;
            }
        },
        _ => None,
    };
    let mut pending = Vec::new();
    for round in 0..ROUNDS {
        clock.set(T0 + round * GEN_MS);
        pending.extend(write_round(
            w,
            &db,
            &other,
            window.as_ref(),
            round,
            &mut run.errors,
        ));
        let failed_before = sync_failed();
        match db.flush() {
            Ok(_) => {
                if failed_before {
                    run.acked_after_failed_sync.push(format!("flush {round}"));
                }
                run.acked.append(&mut pending);
            }
            Err(e) => run.errors.push(format!("flush {round}: {e}")),
        }
    }
    drop(window);
    drop(other);
    let failed_before = sync_failed();
    match db.close() {
        Ok(()) => {
            if failed_before {
                run.acked_after_failed_sync.push("close".into());
            }
            run.acked.append(&mut pending);
        }
        Err(e) => run.errors.push(format!("close: {e}")),
    }
    run
}

/// Makes the database of writer `w` at `dir` with a first round (round 1000), cleanly
/// closed; returns its keys (acknowledged by the close).
fn prepare(w: Writer, dir: &Path) -> Vec<Vec<u8>> {
    let db = config(dir, w).open().expect("prepare: open");
    let mut keys = Vec::new();
    for i in 0..PER_ROUND {
        let k = key(1000, i);
        match w {
            Writer::Batches => db.open_tree("other").unwrap().insert(&k, "v").unwrap(),
            _ => db.insert(&k, "v").unwrap(),
        };
        keys.push(k);
    }
    if w == Writer::Window {
        let clock = ManualClock::new(T0);
        let win = db.open_window("w", window_config(&clock)).unwrap();
        win.insert(key(1001, 0), "v").unwrap();
        keys.push(key(1001, 0));
    }
    db.close().expect("prepare: close");
    keys
}

/// What the disk holds after a case, checked: `(false negatives, acknowledged keys lost,
/// problems)`.
fn check(dir: &Path, w: Writer, acked: &[Vec<u8>]) -> (u64, u64, Vec<String>) {
    let mut problems = Vec::new();
    let db = match config(dir, w).background_recovery(false).open() {
        Ok(db) => db,
        Err(e) => return (0, 0, vec![format!("REOPEN FAILED: {e}")]),
    };
    let mut trees = vec![(*db).clone(), db.open_tree("other").unwrap()];
    let clock = ManualClock::new(T0 + (ROUNDS - 1) * GEN_MS);
    let window = if w == Writer::Window {
        match db.open_window("w", window_config(&clock)) {
            Ok(win) => {
                trees.extend(win.generation_trees().unwrap().into_iter().map(|(_, t)| t));
                Some(win)
            }
            Err(e) => {
                problems.push(format!("window reopen failed: {e}"));
                None
            }
        }
    } else {
        None
    };
    let mut false_negatives = 0;
    for t in &trees {
        match t.verify() {
            Ok(r) => false_negatives += r.false_negatives,
            Err(e) => problems.push(format!("verify: {e}")),
        }
    }
    if let Some(win) = &window {
        for t in &trees[2..] {
            for k in t.iter().keys() {
                let k = k.unwrap();
                false_negatives += u64::from(!win.may_contain(&k));
            }
        }
    }
    let mut lost = 0;
    for k in acked {
        let found = match &window {
            Some(win) => win.contains_key(k).unwrap_or(false),
            None => trees[..2]
                .iter()
                .any(|t| t.get_unfiltered(k).ok().flatten().is_some()),
        };
        if !found {
            // The window may have let its oldest generation go: keys of the prepared
            // round are outside the horizon by then, which is not a loss.
            lost +=
                u64::from(!(window.is_some() && k.starts_with(b"https://fault.example.org/100")));
        }
    }
    drop(window);
    drop(trees);
    if let Err(e) = db.close() {
        problems.push(format!("close after the check: {e}"));
    }
    (false_negatives, lost, problems)
}

/// True if `e` (an error's text) names a file (a path) and a step.
fn names_file_and_step(e: &str) -> bool {
    const STEPS: [&str; 11] = [
        // The rewrite after a failed sync: `rewriting <path> after a failed sync (<step>)`.
        "after a failed sync (",
        "open of",
        "read of",
        "create of",
        "write of",
        "fsync of",
        "fsync of the folder",
        "rename of",
        "remove of",
        "sled's flush of",
        "crash journal",
    ];
    e.contains('/') && STEPS.iter().any(|s| e.contains(s))
}

/// One case: the rule, how the run ends, and what it found.
#[derive(Debug, Clone)]
struct Case {
    writer: Writer,
    file: &'static str,
    op: Op,
    nth: u64,
    errno: i32,
    sticky: bool,
    cut: bool,
}

#[derive(Default, Debug)]
struct Tally {
    faults: u64,
    not_reached: u64,
    false_negatives: u64,
    lost: u64,
    acked_after_failed_sync: u64,
    errors_named: u64,
    errors_from_sled: u64,
    poisoned_unnamed: u64,
    /// Distinct texts of the errors that named no file (at most a few).
    unnamed: Vec<String>,
    failures: Vec<String>,
}

fn base_of(name: &str) -> PathBuf {
    let b = std::env::temp_dir().join(format!("bloomsled-fm-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&b);
    b
}

/// The crash journals' counter files go to `<root>/ctr` (on the mount while the writer
/// runs, so their operations can fail too; in the backing folder for the check).
fn counters_in(root: &Path) {
    let dir = root.join("ctr");
    std::fs::create_dir_all(&dir).unwrap();
    std::env::set_var("BLOOMSLED_JOURNAL_COUNTER_DIR", dir);
}

/// Mounts the power-cut file system at `base` with a local file system's page cache: kept
/// across opens (FUSE's default drops it at each open, which no local file system does:
/// a reader right after another would meet the disk twice).
fn mount(base: &Path) -> bloomsled_powercut::Mounted {
    let fs = bloomsled_powercut::PowerCutFs::mount(base).expect("mount");
    fs.keep_page_cache(true);
    fs
}

/// Counts the operations of writer `w`'s run (after the clean first open) per file and
/// kind: `(file, op, count)` for each that happened.
fn count_ops(w: Writer) -> Vec<(&'static str, Op, u64)> {
    let base = base_of("count");
    let fs = mount(&base);
    let dir = fs.mountpoint().join("store");
    counters_in(fs.mountpoint());
    prepare(w, &dir);
    // A cold page cache, as after a reboot: the writer's open reads from the disk.
    fs.drop_page_cache(&dir).expect("drop the page cache");
    let skip = fs.ops().len();
    run_writer(w, &dir, &|| false);
    let ops = fs.ops();
    fs.unmount().unwrap();
    let _ = std::fs::remove_dir_all(&base);
    let mut out = Vec::new();
    for &(file, _) in FILES {
        for op in OPS {
            let probe = Failure::new(op, file);
            let n = ops[skip..]
                .iter()
                .filter(|r| r.op == op && probe.matches(&r.name))
                .count() as u64;
            // A read under a shared mapping that fails is SIGBUS, on any disk: the process
            // dies, which is a crash (`tests/crash.rs`, `tests/power_cut.rs`), not an error
            // this process can go on after. The journals and their counter files are
            // mapped, so their reads are left out here.
            let mapped = matches!(file, "*.jnl" | "*.jctr");
            if n > 0 && !(mapped && op == Op::Read) {
                out.push((file, op, n));
            }
        }
    }
    out
}

/// Runs one case and adds what it found to `tally`.
fn run_case(c: &Case, tally: &mut Tally) {
    let base = base_of("case");
    let fs = mount(&base);
    let dir = fs.mountpoint().join("store");
    counters_in(fs.mountpoint());
    let mut acked = prepare(c.writer, &dir);
    // A cold page cache, as after a reboot: the writer's open reads from the disk.
    fs.drop_page_cache(&dir).expect("drop the page cache");
    let mut rule = Failure::new(c.op, c.file).nth(c.nth).errno(c.errno);
    if c.sticky {
        rule = rule.sticky();
    }
    fs.fail(rule);
    let is_sync = matches!(c.op, Op::Fsync | Op::FsyncDir);
    let run = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        run_writer(c.writer, &dir, &|| is_sync && fs.fired() > 0)
    }));
    let run = run.unwrap_or_else(|_| Run {
        errors: vec!["PANIC in the writer".into()],
        acked_after_failed_sync: vec!["PANIC".into()],
        ..Run::default()
    });
    let fired = fs.fired() > 0;
    fs.heal();
    let backing = fs.backing().join("store");
    if c.cut {
        fs.cut(Some(c.nth)).expect("cut");
        // After a power cut the machine rebooted: no crash journal may be replayed.
        bloomsled::persist::set_boot_id(Some([0xb0; 16]));
    } else {
        fs.unmount().expect("unmount");
    }
    acked.extend(run.acked);
    counters_in(&base.join("data"));
    let (fns, lost, problems) = check(&backing, c.writer, &acked);
    bloomsled::persist::set_boot_id(None);
    let _ = std::fs::remove_dir_all(&base);
    if !fired {
        tally.not_reached += 1;
        return;
    }
    tally.faults += 1;
    tally.false_negatives += fns;
    // sled takes a read error in its log while it opens for the end of the log and drops
    // what follows, with no error; bloomsled's read checks around sled's open
    // (`store/repair/log_reads.rs`) turn it into a failed open: such keys count as lost.
    tally.lost += lost;
    tally.acked_after_failed_sync += run.acked_after_failed_sync.len() as u64;
    for e in &run.errors {
        if names_file_and_step(e) {
            tally.errors_named += 1;
        } else if e.contains("reopen the database") {
            tally.poisoned_unnamed += 1;
        } else {
            tally.errors_from_sled += 1;
            let text: String = e.chars().filter(|c| !c.is_ascii_digit()).collect();
            if tally.unnamed.len() < 8 && !tally.unnamed.iter().any(|u| u.starts_with(&text)) {
                tally
                    .unnamed
                    .push(format!("{text} ({} {:?} #{})", c.file, c.op, c.nth));
            }
        }
    }
    if fns > 0 || lost > 0 || !problems.is_empty() || !run.acked_after_failed_sync.is_empty() {
        eprintln!("fault_matrix: FAILED {c:?}: {fns} false negatives, {lost} lost, {problems:?}");
        tally.failures.push(format!(
            "{c:?}: {fns} false negatives, {lost} acknowledged keys lost, {problems:?}, \
             acknowledged after a failed sync: {:?}; errors: {:?}",
            run.acked_after_failed_sync, run.errors
        ));
    }
}

/// The three ways a rule fails and a run ends: `(errno, sticky, power cut)`.
const VARIANTS: [(i32, bool, bool); 3] = [
    (libc::EIO, false, true),
    (libc::ENOSPC, true, false),
    (libc::EROFS, false, false),
];

/// The seed that picks each middle fault: `BLOOMSLED_FAULT_SEED`, else 0.
fn fault_seed() -> u64 {
    std::env::var("BLOOMSLED_FAULT_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(0)
}

/// The cases of writer `w`: per file and kind of operation its run touches, the first, a
/// middle (picked by [`fault_seed`]) and the last such operation, each with one of the [`VARIANTS`] in turn (two
/// variants for the first `doubled` of them).
fn cases(w: Writer, doubled: usize) -> Vec<Case> {
    let mut out = Vec::new();
    let mut k = 0;
    let seed = fault_seed();
    for (i, (file, op, n)) in count_ops(w).into_iter().enumerate() {
        // A middle one picked by the seed (the same cases on every run with the same seed).
        let middle = Failure::new(op, file)
            .nth_in(
                seed ^ ((w as u64) << 32 | i as u64),
                2..=n.saturating_sub(1).max(2),
            )
            .nth
            .min(n);
        let mut at = vec![1, middle, n];
        at.dedup();
        for nth in at {
            let variants = if k < doubled { 2 } else { 1 };
            for v in 0..variants {
                let (errno, sticky, cut) = VARIANTS[(k + v) % VARIANTS.len()];
                out.push(Case {
                    writer: w,
                    file,
                    op,
                    nth,
                    errno,
                    sticky,
                    cut,
                });
            }
            k += 1;
        }
    }
    out
}

#[test]
fn every_file_every_operation_first_middle_last() {
    let Some((base, fs)) = common::fuse::mount_or_skip("fault-matrix") else {
        return;
    };
    fs.unmount().unwrap();
    let _ = std::fs::remove_dir_all(base);
    // The whole matrix once in CI: in its `--all-features` pass, which `.ci/run` marks with
    // `BLOOMSLED_CI_FULL=1` (a feature cannot tell it: the workspace's CLI turns `metrics`
    // on in every build), not in the quick-start `cargo test` pass, which runs the sample.
    let all = (std::env::var("CI").as_deref() == Ok("true")
        && std::env::var("BLOOMSLED_CI_FULL").as_deref() == Ok("1"))
        || std::env::var("BLOOMSLED_FAULT_MATRIX").as_deref() == Ok("all");
    let writers: &[Writer] = if all {
        &WRITERS
    } else {
        &[Writer::Plain, Writer::Snapshots]
    };
    // `BLOOMSLED_FAULT_MATRIX_WRITERS=Counting,Window` runs those writers only, printing
    // each case before it runs.
    let only = std::env::var("BLOOMSLED_FAULT_MATRIX_WRITERS").ok();
    let verbose = only.is_some();
    let writers: Vec<Writer> = writers
        .iter()
        .copied()
        .filter(|w| {
            only.as_ref()
                .is_none_or(|o| o.split(',').any(|n| n == format!("{w:?}")))
        })
        .collect();
    let mut tally = Tally::default();
    for &w in &writers {
        // Under CI, two variants for the first cases of each writer, so that the matrix
        // passes 500 faults with room (a few rules are not reached in a given run).
        let mut cs = cases(w, if all { 26 } else { 0 });
        if !all {
            cs = cs.into_iter().step_by(3).collect();
        }
        for c in &cs {
            if verbose {
                eprintln!("fault_matrix: {c:?}");
            }
            run_case(c, &mut tally);
        }
        eprintln!(
            "fault_matrix: {w:?}: {} cases; so far {} faults, {} false negatives, {} lost",
            cs.len(),
            tally.faults,
            tally.false_negatives,
            tally.lost
        );
    }
    std::env::remove_var("BLOOMSLED_JOURNAL_COUNTER_DIR");
    println!(
        "fault_matrix: seed {}: {} faults run ({} rules not reached), {} false negatives, {} \
         acknowledged keys lost, {} flushes acknowledged after a failed sync; errors: {} \
         naming their file and step, {} from sled's own I/O (no file), {} poisoned unnamed",
        fault_seed(),
        tally.faults,
        tally.not_reached,
        tally.false_negatives,
        tally.lost,
        tally.acked_after_failed_sync,
        tally.errors_named,
        tally.errors_from_sled,
        tally.poisoned_unnamed,
    );
    for e in &tally.unnamed {
        println!("fault_matrix: an error naming no file: {e}");
    }
    for f in &tally.failures {
        println!("FAILED: {f}");
    }
    assert!(
        tally.failures.is_empty(),
        "{} cases failed",
        tally.failures.len()
    );
    assert_eq!(tally.poisoned_unnamed, 0);
    if all && !verbose {
        assert!(tally.faults >= 500, "only {} faults ran", tally.faults);
    }
}

//! `FingerprintSet` as an adversary sees it: a model check across flushes, merges and
//! reopens; `kill -9` of a real child while it adds (at random instants, and blocked inside
//! a flush and a merge); files damaged for real; a second open; bad input.

#[path = "../../tests/common/mod.rs"]
mod common;

use std::collections::HashSet;
use std::fs;
use std::io::Write;
use std::path::Path;
use std::time::Duration;

use bloomsled_fpset::Error;
use bloomsled_fpset::{FingerprintSet, FingerprintSetConfig};
use common::child;
use proptest::prelude::*;

const W: usize = 20;

/// Fingerprint `i`: 20 bytes that look like a digest, so runs interleave.
fn fp(i: u64) -> [u8; W] {
    let mut out = [0u8; W];
    let h = xxh(i);
    out[..8].copy_from_slice(&h.to_be_bytes());
    out[8..16].copy_from_slice(&i.to_be_bytes());
    out[16..].copy_from_slice(&(h as u32).to_le_bytes());
    out
}

fn xxh(i: u64) -> u64 {
    common::rng::Rng(i).next()
}

/// A small set: memtables of 16, blocks of 4, merges of 3 runs.
fn small(dir: &Path) -> FingerprintSetConfig {
    FingerprintSetConfig::new(dir)
        .width(W)
        .expected_items(2_000)
        .false_positive_rate(0.05)
        .memtable_items(16)
        .block_items(4)
        .merge_factor(3)
}

/// Every member, checked for duplicates.
fn members(set: &FingerprintSet) -> HashSet<Vec<u8>> {
    let mut out = HashSet::new();
    for m in set.iter().unwrap() {
        assert!(out.insert(m.unwrap()), "a member listed twice");
    }
    out
}

/// The set's files: only what the manifest lists (no leftovers), plus foreign files.
fn files(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    names.sort();
    names
}

fn assert_no_leftovers(dir: &Path, set: &FingerprintSet) {
    let names = files(dir);
    let runs = names.iter().filter(|n| n.starts_with("run-")).count() as u64;
    let wals = names.iter().filter(|n| n.starts_with("wal-")).count();
    assert_eq!(runs, set.stats().runs, "{names:?}");
    assert_eq!(wals, 1, "{names:?}");
    assert!(!names.iter().any(|n| n.ends_with(".tmp")), "{names:?}");
}

#[derive(Debug, Clone)]
enum Op {
    Insert(u16),
    InsertMany(Vec<u16>),
    Contains(u16),
    ContainsMany(Vec<u16>),
    Sync,
    /// Clean close and reopen (the saved filter is loaded).
    Close,
    /// Drop without close and reopen (the filter is rebuilt from the files).
    Drop,
}

fn op() -> impl Strategy<Value = Op> {
    let k = 0u16..400;
    prop_oneof![
        8 => k.clone().prop_map(Op::Insert),
        2 => prop::collection::vec(k.clone(), 0..40).prop_map(Op::InsertMany),
        4 => k.clone().prop_map(Op::Contains),
        1 => prop::collection::vec(k, 0..40).prop_map(Op::ContainsMany),
        1 => Just(Op::Sync),
        1 => Just(Op::Close),
        1 => Just(Op::Drop),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 24, ..ProptestConfig::default() })]

    /// Exact against a `HashSet`: every answer, the length and the listing agree after
    /// every operation, across flushes, merges and both kinds of reopen.
    #[test]
    fn agrees_with_a_hash_set(ops in prop::collection::vec(op(), 1..250)) {
        let dir = tempfile::tempdir().unwrap();
        let mut model: HashSet<Vec<u8>> = HashSet::new();
        let mut set = Some(small(dir.path()).open().unwrap());
        for op in &ops {
            let s = set.as_ref().unwrap();
            match op {
                Op::Insert(k) => {
                    let f = fp(u64::from(*k));
                    prop_assert_eq!(s.insert(&f).unwrap(), model.insert(f.to_vec()), "{:?}", op);
                }
                Op::InsertMany(ks) => {
                    let fs: Vec<[u8; W]> = ks.iter().map(|&k| fp(u64::from(k))).collect();
                    let want: Vec<bool> = fs.iter().map(|f| model.insert(f.to_vec())).collect();
                    prop_assert_eq!(s.insert_many(&fs).unwrap(), want);
                }
                Op::Contains(k) => {
                    let f = fp(u64::from(*k));
                    prop_assert_eq!(s.contains(&f).unwrap(), model.contains(&f[..]));
                }
                Op::ContainsMany(ks) => {
                    let fs: Vec<[u8; W]> = ks.iter().map(|&k| fp(u64::from(k))).collect();
                    let want: Vec<bool> = fs.iter().map(|f| model.contains(&f[..])).collect();
                    prop_assert_eq!(s.contains_many(&fs).unwrap(), want);
                }
                Op::Sync => s.sync().unwrap(),
                Op::Close => {
                    set.take().unwrap().close().unwrap();
                    let s = small(dir.path()).open().unwrap();
                    prop_assert!(!s.stats().filter_rebuilt);
                    set = Some(s);
                }
                Op::Drop => {
                    drop(set.take());
                    let s = small(dir.path()).open().unwrap();
                    prop_assert!(s.stats().filter_rebuilt);
                    set = Some(s);
                }
            }
            let s = set.as_ref().unwrap();
            prop_assert_eq!(s.len(), model.len() as u64);
        }
        let s = set.as_ref().unwrap();
        prop_assert_eq!(members(s), model.clone());
        for k in 0..400u64 {
            let f = fp(k);
            prop_assert_eq!(s.contains(&f).unwrap(), model.contains(&f[..]));
        }
        assert_no_leftovers(dir.path(), s);
    }
}

#[test]
fn flushes_and_merges_keep_runs_logarithmic() {
    let dir = tempfile::tempdir().unwrap();
    let set = small(dir.path()).open().unwrap();
    for i in 0..5_000 {
        assert!(set.insert(&fp(i)).unwrap());
    }
    let s = set.stats();
    assert_eq!(s.members, 5_000);
    assert!(s.merges > 0 && s.flushes >= 5_000 / 16, "{s:?}");
    // 5,000 / 16 = 312 flushes: log3(312) < 6 tiers of at most 2 runs each.
    assert!(s.runs <= 12, "{s:?}");
    for i in 0..5_000 {
        assert!(set.contains(&fp(i)).unwrap(), "{i}");
        assert!(!set.contains(&fp(i + 1_000_000)).unwrap());
    }
    assert_no_leftovers(dir.path(), &set);
}

// -- kill -9 ------------------------------------------------------------------------------

const ROLE_ENV: &str = "BLOOMSLED_FPSET_TEST_ROLE";
const DIR_ENV: &str = "BLOOMSLED_FPSET_TEST_DIR";
/// Fingerprints the child adds: `fp(0..CHILD_ADDS)`, syncing every `CHILD_SYNC_EVERY`.
const CHILD_ADDS: u64 = 200_000;
const CHILD_SYNC_EVERY: u64 = 500;
/// Overrides `CHILD_ADDS` (the total the child adds up to).
const ADDS_ENV: &str = "BLOOMSLED_FPSET_TEST_ADDS";

/// Blocks forever at the step the role names: `step` (its first time) or `step#k` (the
/// `k`-th time it is reached).
fn block_at_step(step: &'static str) {
    use std::sync::atomic::{AtomicUsize, Ordering};
    static REACHED: AtomicUsize = AtomicUsize::new(0);
    println!("STEP {step}");
    let role = std::env::var(ROLE_ENV).unwrap_or_default();
    let (target, k) = match role.split_once('#') {
        Some((t, k)) => (t.to_string(), k.parse().unwrap_or(1)),
        None => (role, 1),
    };
    if target == step && REACHED.fetch_add(1, Ordering::Relaxed) + 1 == k {
        println!("BLOCKED");
        std::io::stdout().flush().unwrap();
        loop {
            std::thread::sleep(Duration::from_secs(60));
        }
    }
}

/// The set the children write and the checks reopen: small memtables and blocks, so that
/// flushes and merges come often.
fn child_set(dir: &Path) -> FingerprintSet {
    FingerprintSetConfig::new(dir)
        .width(W)
        .expected_items(CHILD_ADDS)
        .memtable_items(1_000)
        .block_items(16)
        .merge_factor(3)
        .open()
        .unwrap()
}

/// The child: adds fingerprints in order, printing `SYNCED n` after each sync (every
/// member below `n` is durable), blocking forever at the step its role names, if any.
#[test]
fn fpset_child() {
    let Some(_) = child::role(ROLE_ENV) else {
        return;
    };
    bloomsled_fpset::set_step_hook(block_at_step);
    let dir = std::path::PathBuf::from(std::env::var(DIR_ENV).unwrap());
    let set = child_set(&dir);
    let start = set.len();
    let adds = std::env::var(ADDS_ENV)
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(CHILD_ADDS);
    for i in start..adds {
        set.insert(&fp(i)).unwrap();
        if (i + 1) % CHILD_SYNC_EVERY == 0 {
            set.sync().unwrap();
            println!("SYNCED {}", i + 1);
            std::io::stdout().flush().unwrap();
        }
    }
    println!("DONE");
}

/// The number of members the killed child reported durable.
fn synced(lines: &[String]) -> u64 {
    lines
        .iter()
        .filter_map(|l| l.strip_prefix("SYNCED "))
        .filter_map(|n| n.parse().ok())
        .max()
        .unwrap_or(0)
}

/// Reopens after the kill: every synced member is there, nothing else but members the
/// child added, no duplicate, no leftover; then the set still works.
fn check_after_kill(dir: &Path, durable: u64) -> u64 {
    let set = child_set(dir);
    assert!(set.stats().filter_rebuilt);
    let all = members(&set);
    assert_eq!(all.len() as u64, set.len());
    assert!(
        set.len() >= durable,
        "{} members, {durable} synced",
        set.len()
    );
    let added: HashSet<Vec<u8>> = (0..set.len()).map(|i| fp(i).to_vec()).collect();
    // The child adds in order: what survived is a prefix of what it added.
    assert_eq!(all, added, "members are not the prefix the child added");
    for i in 0..set.len() {
        assert!(set.contains(&fp(i)).unwrap(), "member {i} lost");
    }
    assert_no_leftovers(dir, &set);
    let n = set.len();
    assert!(set.insert(&fp(n)).unwrap());
    n
}

#[test]
fn kill_9_at_random_instants_loses_no_synced_member() {
    let dir = tempfile::tempdir().unwrap();
    let mut before = 0;
    for (round, wait_ms) in [0u64, 3, 17, 40, 1].into_iter().enumerate() {
        let mut cmd = child::command(ROLE_ENV, "add", Some("fpset_child"));
        cmd.env(DIR_ENV, dir.path());
        let marker = format!("SYNCED {}", before + 2 * CHILD_SYNC_EVERY);
        let killed = child::kill_after(
            cmd,
            &marker,
            Duration::from_millis(wait_ms),
            Some(Duration::from_secs(60)),
        );
        assert!(killed.reached, "round {round}: {:?}", killed.lines.last());
        let durable = synced(&killed.lines);
        before = check_after_kill(dir.path(), durable);
    }
}

#[test]
fn kill_9_inside_a_flush_and_a_merge_loses_no_synced_member() {
    for step in [
        "flush:run-written",
        "flush:listed",
        "merge:run-written",
        "merge:listed",
    ] {
        let dir = tempfile::tempdir().unwrap();
        let mut cmd = child::command(ROLE_ENV, step, Some("fpset_child"));
        cmd.env(DIR_ENV, dir.path());
        let killed = child::kill_after(
            cmd,
            "BLOCKED",
            Duration::ZERO,
            Some(Duration::from_secs(60)),
        );
        assert!(killed.reached, "{step}: {:?}", killed.lines.last());
        let durable = synced(&killed.lines);
        assert!(durable > 0 || step.starts_with("flush"), "{step}");
        check_after_kill(dir.path(), durable);
    }
}

/// The most runs a set of `members` may hold after a flush and its merges: `factor - 1`
/// per tier, tiers 0 to the tier of a run holding every member (`tiers.rs`).
fn tiering_bound(members: u64, memtable_items: u64, factor: u64) -> u64 {
    let mut tiers = 1;
    let mut cap = memtable_items * factor;
    while members >= cap {
        tiers += 1;
        cap *= factor;
    }
    (factor - 1) * tiers
}

/// Issue 33: a chain of merges saves each step on its own, and a kill between two steps
/// used to leave runs that never merged again (25 runs where 12 were allowed after 24
/// kills). Killed 50 times inside merge chains (after a merge was listed, or after its run
/// was written and before it was listed; the 2nd to 4th merge of each child, so often in
/// the middle of a chain), the set keeps every synced member, and once the next flush and
/// its merges are done its run count is within the size tiering's bound again.
#[test]
fn fifty_kills_inside_merge_chains_keep_the_run_count_within_the_tiering_bound() {
    let (memtable, factor) = (1_000u64, 3u64); // child_set's
    let dir = tempfile::tempdir().unwrap();
    let mut most_runs_after_kill = 0;
    for round in 0..50u64 {
        let step = ["merge:listed", "merge:run-written"][(round % 2) as usize];
        let k = 2 + round % 3;
        let mut cmd = child::command(ROLE_ENV, format!("{step}#{k}"), Some("fpset_child"));
        cmd.env(DIR_ENV, dir.path()).env(ADDS_ENV, "100000000");
        let killed = child::kill_after(
            cmd,
            "BLOCKED",
            Duration::ZERO,
            Some(Duration::from_secs(60)),
        );
        assert!(killed.reached, "round {round}: {:?}", killed.lines.last());
        let durable = synced(&killed.lines);
        let set = child_set(dir.path());
        let n = set.len();
        assert!(n >= durable, "round {round}: {n} members, {durable} synced");
        for i in [0, durable.saturating_sub(1), n - 1] {
            assert!(
                set.contains(&fp(i)).unwrap(),
                "round {round}: member {i} lost"
            );
        }
        most_runs_after_kill = most_runs_after_kill.max(set.stats().runs);
        // One memtable more: a flush, and every merge due anywhere in the list.
        for i in n..n + memtable {
            assert!(set.insert(&fp(i)).unwrap());
        }
        let runs = set.stats().runs;
        let bound = tiering_bound(set.len(), memtable, factor);
        assert_eq!(run_files(dir.path()).len() as u64, runs, "round {round}");
        assert!(
            runs <= bound,
            "round {round}: {runs} runs for {} members, the tiering allows {bound}",
            set.len()
        );
        set.close().unwrap();
    }
    println!("50 kills: at most {most_runs_after_kill} runs right after a kill");
}

/// The run files of a set, oldest first by name.
fn run_files(dir: &Path) -> Vec<std::path::PathBuf> {
    let mut v: Vec<_> = fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.file_name().unwrap().to_str().unwrap().starts_with("run-"))
        .collect();
    v.sort();
    v
}

// Damaged files.
#[path = "fpset/damage.rs"]
mod damage;

// -- a second open, bad input -----------------------------------------------------------------

#[test]
fn a_second_open_of_the_same_folder_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let set = small(dir.path()).open().unwrap();
    set.insert(&fp(1)).unwrap();
    let err = small(dir.path()).open().unwrap_err();
    assert!(
        matches!(&err, Error::InUse { path } if path == dir.path()),
        "{err}"
    );
    assert!(err.to_string().contains("in use"), "{err}");
    set.close().unwrap();
    assert!(small(dir.path()).open().unwrap().contains(&fp(1)).unwrap());
}

#[test]
fn bad_input_is_a_typed_error_and_stores_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = || small(dir.path());
    for bad in [
        cfg().width(0),
        cfg().width(65),
        cfg().expected_items(0),
        cfg().false_positive_rate(0.0),
        cfg().false_positive_rate(1.0),
        cfg().false_positive_rate(f64::NAN),
        cfg().memtable_items(0),
        cfg().memtable_items(1 << 31),
        cfg().merge_factor(1),
        cfg().block_items(0),
    ] {
        assert!(matches!(bad.open(), Err(Error::InvalidConfig { .. })));
    }
    let set = cfg().open().unwrap();
    for width in [0, 19, 21, 1000] {
        let key = vec![1u8; width];
        assert!(
            matches!(set.insert(&key), Err(Error::KeyWidth { expected: 20, got }) if got == width)
        );
        assert!(matches!(set.contains(&key), Err(Error::KeyWidth { .. })));
    }
    let batch = vec![fp(1).to_vec(), vec![0u8; 3]];
    assert!(matches!(
        set.insert_many(&batch),
        Err(Error::KeyWidth { .. })
    ));
    assert!(set.is_empty(), "a rejected batch stored part of itself");
    set.close().unwrap();
    let err = cfg().width(16).open().unwrap_err();
    assert!(matches!(err, Error::InvalidConfig { .. }), "{err}");
}

#[test]
fn a_reopen_without_sizing_keeps_the_stored_one() {
    let dir = tempfile::tempdir().unwrap();
    let set = small(dir.path()).expected_items(777).open().unwrap();
    set.insert(&fp(1)).unwrap();
    set.close().unwrap();
    let set = FingerprintSetConfig::new(dir.path()).open().unwrap();
    let s = set.stats();
    assert_eq!((s.expected_items, s.false_positive_rate), (777, 0.05));
    assert!(
        !s.filter_rebuilt,
        "the stored sizing's saved filter was not used"
    );
    assert!(set.contains(&fp(1)).unwrap());
}

#[test]
fn a_second_process_cannot_open_a_folder_in_use() {
    use std::io::BufRead;
    let dir = tempfile::tempdir().unwrap();
    let mut cmd = child::command(ROLE_ENV, "flush:run-written", Some("fpset_child"));
    cmd.env(DIR_ENV, dir.path());
    let mut proc = cmd
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let out = std::io::BufReader::new(proc.stdout.take().unwrap());
    let blocked = out
        .lines()
        .map_while(|l| l.ok())
        .any(|l| l.contains("BLOCKED"));
    assert!(blocked, "the child ended before holding the set");
    let err = small(dir.path()).open().unwrap_err();
    assert!(matches!(err, Error::InUse { .. }), "{err}");
    child::kill(&mut proc);
    // The kill released the lock.
    small(dir.path()).memtable_items(1_000).open().unwrap();
}

// -- a full disk ---------------------------------------------------------------------------

/// Largest file the `disk-full` child may write (`ulimit -f`, in 512-byte blocks in the
/// POSIX shell): the log and the first runs fit, a later merge's run does not.
const FULL_AT_BLOCKS: u32 = 256;

/// The child of [`a_full_disk_fails_the_write_and_the_handle_and_loses_no_synced_member`]:
/// adds as [`fpset_child`] does until a write fails (`EFBIG` from its file-size limit, a
/// full disk as a process sees it), then checks that the handle refuses further work.
#[test]
fn fpset_disk_full_child() {
    let Some(_) = child::role(DISK_FULL_ENV) else {
        return;
    };
    let dir = std::path::PathBuf::from(std::env::var(DIR_ENV).unwrap());
    let set = child_set(&dir);
    let mut failed = None;
    for i in 0..CHILD_ADDS {
        let res = set.insert(&fp(i)).and_then(|_| {
            if (i + 1) % CHILD_SYNC_EVERY == 0 {
                set.sync()?;
                println!("SYNCED {}", i + 1);
            }
            Ok(())
        });
        if let Err(e) = res {
            println!("FAILED at {i}: {e}");
            failed = Some(i);
            break;
        }
    }
    let failed = failed.expect("the file-size limit was never reached");
    // Unusable until reopened: no add, no sync may claim success now.
    let insert = set.insert(&fp(failed + 1));
    let sync = set.sync();
    println!("AFTER insert={} sync={}", insert.is_ok(), sync.is_ok());
    std::io::stdout().flush().unwrap();
    // Exit without closing: the drop may try to write again and must not panic either.
    drop(set);
    println!("DROPPED");
}

const DISK_FULL_ENV: &str = "BLOOMSLED_FPSET_TEST_DISK_FULL";

#[test]
fn a_full_disk_fails_the_write_and_the_handle_and_loses_no_synced_member() {
    let dir = tempfile::tempdir().unwrap();
    let cmd = child::command(DISK_FULL_ENV, "1", Some("fpset_disk_full_child"));
    // The child runs under a file-size limit, with SIGXFSZ ignored so that a write past it
    // fails with EFBIG instead of killing the process (an ignored signal stays ignored
    // across exec).
    let mut sh = std::process::Command::new("sh");
    sh.arg("-c")
        .arg(format!(
            "trap '' XFSZ; ulimit -f {FULL_AT_BLOCKS} && exec \"$0\" \"$@\""
        ))
        .arg(cmd.get_program())
        .args(cmd.get_args())
        .env(DIR_ENV, dir.path());
    for (k, v) in cmd.get_envs() {
        match v {
            Some(v) => sh.env(k, v),
            None => sh.env_remove(k),
        };
    }
    let out = sh.output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let lines: Vec<String> = stdout.lines().map(String::from).collect();
    assert!(
        out.status.success(),
        "the child failed (a panic?): {}\n{}",
        stdout,
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        lines.iter().any(|l| l.starts_with("FAILED at ")),
        "{lines:?}"
    );
    assert!(
        lines.iter().any(|l| l == "AFTER insert=false sync=false"),
        "the handle kept working after a failed write: {lines:?}"
    );
    assert!(lines.iter().any(|l| l == "DROPPED"), "{lines:?}");
    let durable = synced(&lines);
    assert!(durable > 0, "{lines:?}");
    // With room again: every synced member is there, nothing else, no leftover (the
    // partly written run is one), and the set works.
    check_after_kill(dir.path(), durable);
}

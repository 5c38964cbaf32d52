//! Rollback: bloomsled's own files (snapshots and crash journals) put back from copies
//! taken earlier in the same boot (after clean closes, in the middle of a run, just before a
//! crash), replaced by another database's, swapped between trees, deleted, truncated or
//! damaged, in random combinations, with and without a `kill -9` of a real child before
//! the open. Held against what sled holds (read without the filter): every stored key must
//! pass the filter, so no false negative whatever the files say (`src/persist.rs`, "An
//! earlier copy of a journal").

mod common;

use std::collections::BTreeMap;
use std::fs;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use bloomsled::{Config, Db};
use common::child;
use common::rng::Rng;

const TREES: [&str; 3] = [common::DEFAULT_TREE, "users", "urls"];
const CHILD_ENV: &str = "BLOOMSLED_ROLLBACK_CHILD";

fn config(dir: &Path) -> Config {
    Config::new()
        .path(dir)
        .expected_items(4_000)
        .snapshot_page_size(256)
}

fn key(tag: &str, tree: &str, i: u64) -> Vec<u8> {
    format!("https://{tag}.example/{tree}/{i}").into_bytes()
}

fn insert(db: &Db, tag: &str, from: u64, to: u64) {
    for name in TREES {
        let t = common::tree_named(db, name);
        for i in from..to {
            t.insert(key(tag, name, i), &b"v"[..]).unwrap();
        }
    }
}

/// Inserts keys `from..to` into every tree, then closes cleanly.
fn grow(dir: &Path, tag: &str, from: u64, to: u64) {
    let db = config(dir).open().unwrap();
    insert(&db, tag, from, to);
    db.close().unwrap();
}

/// The child: inserts keys `from..mid` into every tree, flushes, says `mid`, waits a
/// little (the parent copies the files), inserts `mid..to`, flushes, says `flushed` and
/// waits to be killed.
#[test]
fn rollback_child() {
    let Some(spec) = child::role(CHILD_ENV) else {
        return;
    };
    let p: Vec<&str> = spec.split('|').collect();
    let (dir, tag) = (PathBuf::from(p[0]), p[1]);
    let [from, mid, to] = [p[2], p[3], p[4]].map(|n| n.parse::<u64>().unwrap());
    let db = config(&dir).open().unwrap();
    insert(&db, tag, from, mid);
    db.flush().unwrap();
    println!("mid");
    std::thread::sleep(Duration::from_millis(300));
    insert(&db, tag, mid, to);
    db.flush().unwrap();
    println!("flushed");
    std::thread::sleep(Duration::from_secs(60));
    std::process::exit(3);
}

/// A copy of the files in a database's `bloomsled/` folder: file name → bytes.
type Files = BTreeMap<String, Vec<u8>>;

fn files(dir: &Path) -> Files {
    let mut out = Files::new();
    if let Ok(rd) = fs::read_dir(dir.join(bloomsled::persist::DIR_NAME)) {
        for e in rd.flatten() {
            if e.file_type().unwrap().is_file() {
                if let Ok(bytes) = fs::read(e.path()) {
                    out.insert(e.file_name().to_string_lossy().into_owned(), bytes);
                }
            }
        }
    }
    out
}

/// Runs the child on `dir` (keys `from..to`, `mid` where it pauses), keeps a copy of the
/// files at its pause and just before the kill (pushed to `history`), and kills it with
/// SIGKILL after its last flush.
fn crash(dir: &Path, tag: &str, from: u64, mid: u64, to: u64, history: &mut Vec<Files>) {
    let spec = format!("{}|{tag}|{from}|{mid}|{to}", dir.display());
    let mut c = child::command(CHILD_ENV, spec, Some("rollback_child"))
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let out = BufReader::new(c.stdout.take().unwrap());
    let mut flushed = false;
    for line in out.lines() {
        let line = line.unwrap();
        if line.contains("mid") {
            history.push(files(dir));
        }
        if line.contains("flushed") {
            history.push(files(dir));
            flushed = true;
            break;
        }
    }
    child::kill(&mut c);
    assert!(flushed, "the child died before its flush");
}

/// Opens `dir` and counts the stored keys (read from sled without the filter) that
/// `may_contain` denies, once the filter is in use; also the keys checked and the trees
/// replayed from crash journals.
fn false_negatives(dir: &Path) -> (u64, u64, u64) {
    let db = config(dir).open().unwrap();
    let (mut denied, mut checked, mut replayed) = (0, 0, 0);
    for name in TREES {
        let t = common::tree_named(&db, name);
        assert!(t.wait_for_filter(Duration::from_secs(60)).unwrap());
        replayed += u64::from(t.recovery_report().replayed());
        for k in t.iter().keys() {
            let k = k.unwrap();
            assert!(t.get_unfiltered(&k).unwrap().is_some());
            checked += 1;
            if !t.may_contain(&k) {
                denied += 1;
            }
        }
    }
    db.close().unwrap();
    (denied, checked, replayed)
}

/// The smallest form: the journals copied after a clean close (there are none
/// any more: a clean close retires them) and as the next process opened (its fresh
/// journals, no records), put back after that child inserted 300 keys per tree, flushed
/// and was killed.
#[test]
fn a_journal_put_back_after_a_crash_denies_no_stored_key() {
    let dir = tempfile::tempdir().unwrap();
    let a = dir.path();
    grow(a, "a", 0, 1_000);
    let jnl = |f: Files| -> Files { f.into_iter().filter(|(n, _)| n.ends_with(".jnl")).collect() };
    let mut copy = jnl(files(a));
    let mut at_open = Vec::new();
    // `mid` after the first 50 writes of the run (a sequence's journal is made by its first
    // write): the copy at "mid" is of the journals early in the run.
    crash(a, "a", 1_000, 1_050, 1_300, &mut at_open);
    copy.extend(jnl(at_open.swap_remove(0)));
    assert!(!copy.is_empty(), "no journal to copy");
    for (name, bytes) in &copy {
        fs::write(a.join(bloomsled::persist::DIR_NAME).join(name), bytes).unwrap();
    }
    let (denied, checked, _) = false_negatives(a);
    assert_eq!(checked, 3 * 1_300);
    assert_eq!(denied, 0, "{denied} of {checked} stored keys denied");
}

/// The file `name` of `a` in database `b`: the same name with `b`'s id of the same tree
/// (`ids` maps `a`'s tree ids to `b`'s), or any of `b`'s files of the same kind.
fn foreign<'f>(name: &str, ids: &BTreeMap<String, String>, b: &'f Files) -> Option<&'f [u8]> {
    let (id, rest) = name.split_once('.')?;
    let same = ids.get(id).map(|bid| format!("{bid}.{rest}"));
    same.and_then(|n| b.get(&n))
        .or_else(|| {
            let ext = name.rsplit('.').next()?;
            b.iter().find(|(n, _)| n.ends_with(ext)).map(|(_, v)| v)
        })
        .map(Vec::as_slice)
}

/// The tree ids of `dir`, by tree name.
fn tree_ids(dir: &Path) -> BTreeMap<&'static str, String> {
    let db = config(dir).open().unwrap();
    let out = TREES
        .iter()
        .map(|&n| {
            let p = common::tree_named(&db, n)
                .filter_snapshot_path()
                .unwrap()
                .to_path_buf();
            let stem = p.file_stem().unwrap().to_string_lossy().into_owned();
            (n, stem)
        })
        .collect();
    db.close().unwrap();
    out
}

/// One to three tamperings of `a`'s files (see the module doc); returns what was done.
fn tamper(
    a: &Path,
    rng: &mut Rng,
    history: &[Files],
    b: &Files,
    ids: &BTreeMap<String, String>,
) -> Vec<String> {
    let d = a.join(bloomsled::persist::DIR_NAME);
    let mut done = Vec::new();
    for _ in 0..1 + rng.below(3) {
        let now = files(a);
        let names: Vec<&String> = now.keys().filter(|n| !n.starts_with("sled-")).collect();
        let journals: Vec<&&String> = names.iter().filter(|n| n.ends_with(".jnl")).collect();
        if names.is_empty() {
            break;
        }
        // Half the picks among the crash journals, the files this test is about.
        let name = if !journals.is_empty() && rng.below(2) == 0 {
            (*journals[rng.index(journals.len())]).clone()
        } else {
            names[rng.index(names.len())].clone()
        };
        let target = d.join(&name);
        let what = rng.below(6);
        match what {
            0 => {
                // An older copy of itself (or none: it did not exist then).
                let old = &history[rng.index(history.len())];
                match old.get(&name) {
                    Some(bytes) => fs::write(&target, bytes).unwrap(),
                    None => fs::remove_file(&target).unwrap(),
                }
            }
            1 => {
                if let Some(bytes) = foreign(&name, ids, b) {
                    fs::write(&target, bytes).unwrap();
                }
            }
            2 => {
                // Swapped with another file of the same kind.
                let ext = name.rsplit('.').next().unwrap();
                let same: Vec<&&String> = names
                    .iter()
                    .filter(|n| n.ends_with(ext) && **n != &name)
                    .collect();
                if !same.is_empty() {
                    let other = d.join(same[rng.index(same.len())]);
                    let (x, y) = (fs::read(&target).unwrap(), fs::read(&other).unwrap());
                    fs::write(&target, y).unwrap();
                    fs::write(&other, x).unwrap();
                }
            }
            3 => fs::remove_file(&target).unwrap(),
            4 => {
                let bytes = &now[&name];
                fs::write(&target, &bytes[..rng.index(bytes.len().max(1))]).unwrap();
            }
            _ => {
                let mut bytes = now[&name].clone();
                if !bytes.is_empty() {
                    let i = rng.index(bytes.len());
                    bytes[i] ^= 1 << rng.below(8);
                    fs::write(&target, bytes).unwrap();
                }
            }
        }
        done.push(format!("{what}:{name}"));
    }
    // Sometimes the whole folder put back as it was at one earlier moment.
    if rng.below(4) == 0 {
        let old = &history[rng.index(history.len())];
        for (name, bytes) in old {
            fs::write(d.join(name), bytes).unwrap();
        }
        done.push("folder rolled back".into());
    }
    done
}

#[test]
fn no_rollback_of_bloomsleds_files_denies_a_stored_key() {
    let root = tempfile::tempdir().unwrap();
    let (a, b) = (root.path().join("a"), root.path().join("b"));
    for round in 0..3 {
        grow(&b, "b", round * 100, (round + 1) * 100);
    }
    crash(&b, "b", 300, 350, 400, &mut Vec::new());
    let b_files = files(&b);
    let b_ids = tree_ids(&b);
    let seed: u64 = std::env::var("BLOOMSLED_ROLLBACK_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(0x00DD_BA11);
    let mut rng = Rng(seed);
    let mut history: Vec<Files> = Vec::new();
    let (mut next, mut cases, mut crashes, mut replays) = (0u64, 0u64, 0u64, 0u64);
    let mut failures = Vec::new();
    let mut keys_denied = 0;
    let mut ids = BTreeMap::new();
    for step in 0..32 {
        let n = 40 + rng.below(120);
        let crashed = rng.below(2) == 0;
        if crashed {
            crash(&a, "a", next, next + n / 2, next + n, &mut history);
            crashes += 1;
        } else {
            grow(&a, "a", next, next + n);
            history.push(files(&a));
        }
        next += n;
        if ids.is_empty() {
            // (after a crash this open replays or rebuilds; only the first step pays it)
            let a_ids = tree_ids(&a);
            ids = TREES
                .iter()
                .map(|t| (a_ids[t].clone(), b_ids[t].clone()))
                .collect();
            if crashed {
                crash(&a, "a", next, next + 10, next + 20, &mut history);
                next += 20;
            }
        }
        let done = if rng.below(5) == 0 {
            vec!["untouched".into()]
        } else {
            tamper(&a, &mut rng, &history, &b_files, &ids)
        };
        let (denied, checked, replayed) = false_negatives(&a);
        cases += 1;
        replays += replayed;
        keys_denied += denied;
        if denied > 0 {
            failures.push(format!(
                "step {step} (crash before: {crashed}) {done:?}: {denied} of {checked} denied"
            ));
        }
    }
    for f in &failures {
        println!("  {f}");
    }
    println!(
        "rollback (seed {seed}): {cases} cases, {crashes} kill -9 before, {replays} trees \
         replayed from crash journals, {} cases with false negatives ({keys_denied} keys)",
        failures.len()
    );
    assert!(
        failures.is_empty(),
        "{} cases with false negatives",
        failures.len()
    );
}

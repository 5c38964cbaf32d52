//! Tampering: bloomsled's snapshot files replaced by their older versions (a backup restore
//! of the filter files alone), by another database's files for the same-named trees, by
//! each other, truncated, bit-flipped or deleted, after histories of clean closes and
//! crashes (a child process killed after a sled flush). After every tampering, each key
//! sled holds (read back by iterating the tree with plain sled semantics) must still be found
//! by `get` and `may_contain`: no false negatives, whatever the files say.

mod common;

use std::collections::BTreeMap;
use std::fs;
use std::path::{Path, PathBuf};

use bloomsled::{Config, RecoveryPolicy};
use common::child;
use common::rng::Rng;

const TREES: [&str; 3] = [common::DEFAULT_TREE, "users", "urls"];
const CHILD_ENV: &str = "BLOOMSLED_TAMPER_CHILD";

fn config(dir: &Path) -> Config {
    Config::new()
        .path(dir)
        .expected_items(2_000)
        .snapshot_page_size(256)
}

fn key(db_tag: &str, tree: &str, i: u64) -> Vec<u8> {
    format!("https://{db_tag}.example/{tree}/{i}").into_bytes()
}

/// Inserts keys `from..to` into every tree, then closes cleanly.
fn grow(dir: &Path, tag: &str, from: u64, to: u64) {
    let db = config(dir).open().unwrap();
    for name in TREES {
        let t = common::tree_named(&db, name);
        for i in from..to {
            t.insert(key(tag, name, i), &b"v"[..]).unwrap();
        }
    }
    db.close().unwrap();
}

/// Runs the child: inserts keys `from..to` into every tree, flushes sled, says so, then
/// waits to be killed. The parent kills it (SIGKILL) after the flush: a crash with durable
/// data and no clean close.
#[test]
fn tamper_child() {
    let Some(spec) = child::role(CHILD_ENV) else {
        return;
    };
    let mut parts = spec.split('|');
    let dir = PathBuf::from(parts.next().unwrap());
    let tag = parts.next().unwrap().to_string();
    let from: u64 = parts.next().unwrap().parse().unwrap();
    let to: u64 = parts.next().unwrap().parse().unwrap();
    let db = config(&dir).open().unwrap();
    for name in TREES {
        let t = common::tree_named(&db, name);
        for i in from..to {
            t.insert(key(&tag, name, i), &b"c"[..]).unwrap();
        }
    }
    db.flush().unwrap();
    println!("flushed");
    std::thread::sleep(std::time::Duration::from_secs(60));
    std::process::exit(3);
}

fn crash_after_flush(dir: &Path, tag: &str, from: u64, to: u64) {
    let spec = format!("{}|{tag}|{from}|{to}", dir.display());
    let flushed = child::kill_after_line(
        child::command(CHILD_ENV, spec, Some("tamper_child")),
        "flushed",
    );
    assert!(flushed, "child died before its flush");
}

/// A copy of a database's snapshot files: file name → bytes.
type Files = BTreeMap<String, Vec<u8>>;

fn snapshot_files(dir: &Path) -> Files {
    let d = dir.join(bloomsled::persist::DIR_NAME);
    let mut out = Files::new();
    if let Ok(rd) = fs::read_dir(d) {
        for e in rd {
            let e = e.unwrap();
            out.insert(
                e.file_name().to_string_lossy().into_owned(),
                fs::read(e.path()).unwrap(),
            );
        }
    }
    out
}

/// The snapshot file of each tree, by tree name.
fn paths_by_tree(dir: &Path) -> BTreeMap<&'static str, PathBuf> {
    let db = config(dir).open().unwrap();
    let out = TREES
        .iter()
        .map(|&n| {
            (
                n,
                common::tree_named(&db, n)
                    .filter_snapshot_path()
                    .unwrap()
                    .to_path_buf(),
            )
        })
        .collect();
    db.close().unwrap();
    out
}

/// Opens the database and checks every key sled holds against `get` and `may_contain`;
/// returns the number of false negatives and how many trees were loaded from snapshots.
fn check_no_false_negatives(dir: &Path) -> (u64, usize) {
    let db = config(dir).open().unwrap();
    let mut false_negatives = 0;
    let mut loaded = 0;
    for name in TREES {
        let t = common::tree_named(&db, name);
        // While the filter is rebuilt every lookup goes to sled; once it is back, the
        // filter alone must hold every key.
        assert!(t
            .wait_for_filter(std::time::Duration::from_secs(60))
            .unwrap());
        if t.recovery_report().loaded() {
            loaded += 1;
        }
        for kv in t.iter() {
            let (k, _) = kv.unwrap();
            if !t.may_contain(&k) || t.get(&k).unwrap().is_none() {
                false_negatives += 1;
            }
        }
    }
    db.close().unwrap();
    (false_negatives, loaded)
}

#[test]
fn no_tampering_with_snapshot_files_causes_a_false_negative() {
    let root = tempfile::tempdir().unwrap();
    let a = root.path().join("a");
    let b = root.path().join("b");
    // Database B: the same tree names, more history (higher generations).
    for round in 0..4 {
        grow(&b, "b", round * 100, (round + 1) * 100);
    }
    let b_paths = paths_by_tree(&b);
    let b_files: BTreeMap<&str, Vec<u8>> = b_paths
        .iter()
        .map(|(&n, p)| (n, fs::read(p).unwrap()))
        .collect();
    // Database A: a history of clean closes and crashes, keeping every version of its
    // snapshot files.
    let mut history: Vec<Files> = Vec::new();
    let mut next = 0;
    let mut rng = Rng(0x9E37_79B9_7F4A_7C15);
    let mut cases = 0;
    let mut loaded_cases = 0;
    for step in 0..14 {
        let n = 40 + rng.below(80);
        if step % 3 == 2 {
            crash_after_flush(&a, "a", next, next + n);
        } else {
            grow(&a, "a", next, next + n);
        }
        next += n;
        history.push(snapshot_files(&a));
        let paths = paths_by_tree(&a);
        // Every history step is tampered with three times (the data and the records in sled
        // are never touched: only bloomsled's files).
        for _ in 0..3 {
            let victim = TREES[rng.index(TREES.len())];
            let target = &paths[victim];
            let what = rng.index(7);
            match what {
                // The whole snapshot directory rolled back to an older version.
                0 => {
                    let old = &history[rng.index(history.len())];
                    let d = a.join(bloomsled::persist::DIR_NAME);
                    fs::remove_dir_all(&d).unwrap();
                    fs::create_dir_all(&d).unwrap();
                    for (name, bytes) in old {
                        fs::write(d.join(name), bytes).unwrap();
                    }
                }
                // One tree's file replaced by an older version of itself.
                1 => {
                    let old = &history[rng.index(history.len())];
                    let name = target.file_name().unwrap().to_string_lossy().into_owned();
                    if let Some(bytes) = old.get(&name) {
                        fs::write(target, bytes).unwrap();
                    } else {
                        fs::remove_file(target).ok();
                    }
                }
                // Another database's same-named tree's file put in its place.
                2 => fs::write(target, &b_files[victim]).unwrap(),
                // Two trees' files swapped.
                3 => {
                    let other = TREES[(TREES.iter().position(|&t| t == victim).unwrap()
                        + 1
                        + rng.index(TREES.len() - 1))
                        % TREES.len()];
                    let (x, y) = (fs::read(target).ok(), fs::read(&paths[other]).ok());
                    if let Some(y) = y {
                        fs::write(target, y).unwrap();
                    }
                    if let Some(x) = x {
                        fs::write(&paths[other], x).unwrap();
                    }
                }
                // Deleted.
                4 => {
                    fs::remove_file(target).ok();
                }
                // Truncated.
                5 => {
                    if let Ok(bytes) = fs::read(target) {
                        let cut = rng.index(bytes.len().max(1));
                        fs::write(target, &bytes[..cut]).unwrap();
                    }
                }
                // A bit flipped.
                _ => {
                    if let Ok(mut bytes) = fs::read(target) {
                        if !bytes.is_empty() {
                            let i = rng.index(bytes.len());
                            bytes[i] ^= 1 << rng.index(8);
                            fs::write(target, bytes).unwrap();
                        }
                    }
                }
            }
            let (fns, loaded) = check_no_false_negatives(&a);
            assert_eq!(
                fns, 0,
                "step {step}, tampering {what} of tree {victim}: false negatives"
            );
            cases += 1;
            loaded_cases += loaded;
            // The next case tampers with the state this open left: the trees it rebuilt
            // have fresh snapshots, the others their untouched ones.
        }
    }
    assert!(cases >= 40, "only {cases} tamperings");
    // Untampered trees still load from their snapshots: the test is not passing by
    // rebuilding everything every time.
    assert!(
        loaded_cases > cases,
        "{loaded_cases} loads in {cases} cases"
    );
    println!("{cases} tamperings, 0 false negatives, {loaded_cases} tree loads from snapshots");
}

#[test]
fn strict_mode_refuses_every_tampered_snapshot() {
    let root = tempfile::tempdir().unwrap();
    let (a, b) = (root.path().join("a"), root.path().join("b"));
    grow(&a, "a", 0, 100);
    grow(&b, "b", 0, 100);
    grow(&b, "b", 100, 200);
    let old = snapshot_files(&a);
    grow(&a, "a", 100, 200);
    let pa = paths_by_tree(&a);
    let pb = paths_by_tree(&b);
    let open_strict = |dir: &Path| -> bloomsled::Result<()> {
        let db = config(dir).recovery(RecoveryPolicy::Strict).open()?;
        for name in TREES {
            if name != "__sled__default" {
                db.open_tree(name)?;
            }
        }
        Ok(())
    };
    assert!(open_strict(&a).is_ok());
    // Rolled back.
    let users = pa["users"]
        .file_name()
        .unwrap()
        .to_string_lossy()
        .into_owned();
    fs::write(&pa["users"], &old[&users]).unwrap();
    assert!(matches!(
        open_strict(&a),
        Err(bloomsled::Error::SnapshotRejected {
            fault: bloomsled::Distrust::NotCurrent { .. },
            ..
        })
    ));
    // Foreign.
    fs::write(&pa["users"], fs::read(&pb["users"]).unwrap()).unwrap();
    assert!(matches!(
        open_strict(&a),
        Err(bloomsled::Error::SnapshotRejected {
            fault: bloomsled::Distrust::ForeignDatabase,
            ..
        })
    ));
    // Another tree's.
    fs::write(&pa["users"], fs::read(&pa["urls"]).unwrap()).unwrap();
    assert!(matches!(
        open_strict(&a),
        Err(bloomsled::Error::SnapshotRejected {
            fault: bloomsled::Distrust::OtherTree,
            ..
        })
    ));
}

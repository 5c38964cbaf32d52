//! A copy of a live database folder, opened in the same boot while the original runs (a
//! backup checked on the machine it was taken on, `cp -r` then `bloomsled verify`). The
//! copy carries the original's database and tree ids, so the crash journals' counter files
//! (named by them) are the original's too: its open must not rewrite (truncate) or retire
//! the counters the original's process has mapped, or the original can take a SIGBUS, and
//! after a `kill -9` its journal is refused and its filter rebuilt by a scan instead of
//! replayed (what this test saw before mapped counter files were locked).
//!
//! A child loads keys, snapshots, writes past the snapshot (its journal live) and waits;
//! the parent copies its folder, opens the copy, writes to it and closes it; the child
//! writes more and is killed with SIGKILL. The original must come back replayed from its
//! journal, with every key sled kept passing its filter, and the copy must be whole too.

mod common;

use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use bloomsled::{Batch, Config};
use common::child;

const ROLE_ENV: &str = "BLOOMSLED_FOLDER_COPY_ROLE";
const LOADED: u64 = 10_000;
const AFTER: u64 = 2_000;

fn config(dir: &Path) -> Config {
    Config::new()
        .path(dir)
        .expected_items(40_000)
        .flush_every_ms(Some(20))
}

fn key(i: u64) -> Vec<u8> {
    format!("https://copy.example.com/{i:08}").into_bytes()
}

/// The child: loads, snapshots, writes one key past the snapshot, says `DIRTY`, waits for
/// a line on stdin, writes the rest, says `DONE` and waits for its kill.
#[test]
fn folder_copy_child() {
    let Some(dir) = child::role(ROLE_ENV) else {
        return;
    };
    let db = config(Path::new(&dir)).open().unwrap();
    let mut b = Batch::default();
    for i in 0..LOADED {
        b.insert(key(i), &b"v"[..]);
    }
    db.apply_batch(b).unwrap();
    db.snapshot().unwrap();
    db.insert(key(LOADED), &b"first"[..]).unwrap();
    db.flush().unwrap();
    println!("DIRTY");
    let mut line = String::new();
    std::io::stdin().read_line(&mut line).unwrap();
    for i in LOADED + 1..=LOADED + AFTER {
        db.insert(key(i), &b"after"[..]).unwrap();
    }
    db.flush().unwrap();
    println!("DONE");
    std::thread::sleep(Duration::from_secs(600));
}

#[test]
fn a_copy_opened_in_the_same_boot_leaves_the_originals_journal_alone() {
    let base = tempfile::tempdir().unwrap();
    let original = base.path().join("original");
    let copy = base.path().join("copy");
    let mut c = child::command(ROLE_ENV, &original, Some("folder_copy_child"))
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(c.stdout.take().unwrap()).lines();
    let mut wait_for = |marker: &str| {
        for line in lines.by_ref() {
            if line.unwrap().contains(marker) {
                return;
            }
        }
        panic!("the child ended before {marker}");
    };
    wait_for("DIRTY");
    common::copy_dir(&original, &copy);
    let journals = |dir: &Path| -> Vec<PathBuf> {
        std::fs::read_dir(dir.join(bloomsled::persist::DIR_NAME))
            .unwrap()
            .map(|e| e.unwrap().path())
            .filter(|p| p.extension().is_some_and(|e| e == "jnl"))
            .collect()
    };
    assert!(
        !journals(&original).is_empty(),
        "the child keeps no journal"
    );
    {
        // The copy: opened, written to, snapshotted and closed while the original runs.
        let db = config(&copy).open().unwrap();
        assert!(db.wait_for_filter(Duration::from_secs(60)).unwrap());
        for i in 0..=LOADED {
            assert!(db.may_contain(key(i)), "the copy denies key {i}");
        }
        db.insert(b"only in the copy", &b"c"[..]).unwrap();
        db.snapshot().unwrap();
        db.close().unwrap();
    }
    writeln!(c.stdin.as_mut().unwrap(), "go").unwrap();
    wait_for("DONE");
    child::kill(&mut c);

    let db = config(&original).open().unwrap();
    let r = db.recovery_report();
    assert!(
        r.replayed() && r.rebuilding.is_none(),
        "the original was not replayed from its journal: {r:?}"
    );
    for i in 0..=LOADED + AFTER {
        assert!(
            db.may_contain(key(i)),
            "FALSE NEGATIVE in the original: {i}"
        );
    }
    assert!(!db.contains_key(b"only in the copy").unwrap());
    db.close().unwrap();
    let db = config(&copy).open().unwrap();
    assert!(db.recovery_report().loaded(), "{:?}", db.recovery_report());
    assert!(db.contains_key(b"only in the copy").unwrap());
}

//! Snapshot life cycle: clean close and reload, explicit and automatic snapshots, strict mode
//! on healthy databases, dropped trees, temporary databases.

mod common;
use common::copy_dir;
use std::time::{Duration, Instant};

use bloomsled::transaction::TransactionResult;
use bloomsled::{Batch, Config, Distrust, RecoveryOutcome, RecoveryPolicy};

fn key(i: u32) -> String {
    format!("https://blocklist.example/{i}")
}

#[test]
fn clean_close_then_reopen_loads_without_a_scan() {
    let dir = tempfile::tempdir().unwrap();
    {
        let db = Config::new().path(dir.path()).open().unwrap();
        assert_eq!(db.recovery_report().outcome, RecoveryOutcome::Created);
        let t = db.open_tree("urls").unwrap();
        assert_eq!(t.recovery_report().outcome, RecoveryOutcome::Created);
        for i in 0..5_000 {
            t.insert(key(i), "").unwrap();
        }
        db.close().unwrap();
    }
    // Strict mode is satisfied by a cleanly closed database.
    let db = Config::new()
        .path(dir.path())
        .recovery(RecoveryPolicy::Strict)
        .open()
        .unwrap();
    let t = db.open_tree("urls").unwrap();
    let r = t.recovery_report();
    assert_eq!(r.outcome, RecoveryOutcome::Loaded, "{r:?}");
    assert_eq!(r.keys_scanned, 0);
    assert!(r.bytes_verified as usize >= t.stats().memory_bytes);
    for i in 0..5_000 {
        assert!(t.may_contain(key(i)));
        assert!(t.contains_key(key(i)).unwrap());
    }
    assert_eq!(t.stats().items, t.filter_image().items());
    assert!(t.stats().items > 4_900);
    assert_eq!(db.recovery_reports().len(), 2);
}

#[test]
fn snapshot_generations_advance_and_reads_do_not_dirty() {
    let dir = tempfile::tempdir().unwrap();
    let g1;
    {
        let db = Config::new().path(dir.path()).open().unwrap();
        db.insert("a", "1").unwrap();
        g1 = db.snapshot().unwrap().sequence;
        db.insert("b", "2").unwrap();
        let g2 = db.snapshot().unwrap();
        assert_eq!(g2.sequence, g1 + 1);
        assert!(g2.bytes > 0 && g2.pages >= 1);
        // Nothing written since: closing writes nothing new, snapshot_all finds nothing.
        assert!(db.snapshot_all().unwrap().is_empty());
    }
    {
        let db = Config::new().path(dir.path()).open().unwrap();
        assert!(db.recovery_report().loaded());
        assert_eq!(db.recovery_report().sequence, g1 + 1);
        // Reads only: the snapshot stays valid for the next open.
        assert_eq!(db.get("zzz").unwrap(), None);
        assert!(db.get("a").unwrap().is_some());
    }
    let db = Config::new().path(dir.path()).open().unwrap();
    assert!(db.recovery_report().loaded());
    assert_eq!(db.recovery_report().sequence, g1 + 1);
}

/// Sequence of the snapshot file on disk, if there is one.
fn sequence_on_disk(path: &std::path::Path) -> Option<u64> {
    let bytes = std::fs::read(path).ok()?;
    Some(
        bloomsled::format::parse_header(&bytes)
            .unwrap()
            .sequence
            .get(),
    )
}

#[test]
fn automatic_snapshots_by_write_count_and_by_interval() {
    let dir = tempfile::tempdir().unwrap();
    let db = Config::new()
        .path(dir.path())
        .snapshot_every_writes(100)
        .open()
        .unwrap();
    assert_eq!(db.recovery_report().sequence, 0);
    let snap = db.filter_snapshot_path().unwrap().to_path_buf();
    // A new tree has no snapshot file yet.
    assert!(!snap.exists());
    for i in 0..250 {
        db.insert(key(i), "").unwrap();
    }
    // Automatic snapshots at the 100th and 200th write.
    assert_eq!(sequence_on_disk(&snap), Some(2));
    drop(db);

    let dir = tempfile::tempdir().unwrap();
    let db = Config::new()
        .path(dir.path())
        .snapshot_interval(Duration::from_millis(50))
        .open()
        .unwrap();
    let snap = db.filter_snapshot_path().unwrap().to_path_buf();
    // The new tree's first periodic snapshot is of the empty filter: its record says so,
    // no file is written.
    std::thread::sleep(Duration::from_millis(200));
    assert_eq!(sequence_on_disk(&snap), None);
    db.insert("x", "y").unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    while sequence_on_disk(&snap).is_none() && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
    }
    let g = sequence_on_disk(&snap).expect("no periodic snapshot was taken");
    // Clean again: no further snapshots while nothing is written.
    std::thread::sleep(Duration::from_millis(200));
    assert_eq!(sequence_on_disk(&snap), Some(g));
    drop(db);
    // Both the empty snapshot and the written one load.
    let db = Config::new().path(dir.path()).open().unwrap();
    assert!(db.recovery_report().loaded());
    assert_eq!(db.recovery_report().sequence, g);
}

#[test]
fn dropped_trees_lose_their_snapshot_files() {
    let dir = tempfile::tempdir().unwrap();
    let db = Config::new().path(dir.path()).open().unwrap();
    let t = db.open_tree("gone").unwrap();
    t.insert("k", "v").unwrap();
    let snap = t.filter_snapshot_path().unwrap().to_path_buf();
    t.snapshot().unwrap();
    assert!(snap.exists());
    t.insert("k2", "v").unwrap(); // dirty: dropping the handle would snapshot it
    assert!(db.drop_tree("gone").unwrap());
    drop(t);
    assert!(!snap.exists());
    assert!(!snap.with_extension("state").exists());
    // Re-created, the tree starts empty and new.
    let t = db.open_tree("gone").unwrap();
    assert!(t.is_empty());
    assert_eq!(t.recovery_report().outcome, RecoveryOutcome::Created);
}

#[test]
fn temporary_databases_keep_no_snapshots() {
    let db = Config::new().temporary(true).open().unwrap();
    assert_eq!(db.recovery_report().outcome, RecoveryOutcome::InMemory);
    assert!(db.filter_snapshot_path().is_none());
    assert!(matches!(
        db.snapshot(),
        Err(bloomsled::Error::Unsupported(_))
    ));
    assert!(db.snapshot_all().unwrap().is_empty());
}

#[test]
fn writes_after_a_reload_make_the_snapshot_stale() {
    // Without the crash journal (with it, the same crash is replayed: tests/journal.rs).
    let dir = tempfile::tempdir().unwrap();
    {
        let db = Config::new()
            .path(dir.path())
            .crash_journal(false)
            .open()
            .unwrap();
        db.insert("old", "").unwrap();
    }
    // Simulate a crash after a write: the handle is leaked, so no close snapshot is taken.
    let db = Config::new()
        .path(dir.path())
        .crash_journal(false)
        .open()
        .unwrap();
    assert!(db.recovery_report().loaded());
    db.insert("new", "").unwrap();
    db.flush().unwrap();
    let gen = db.recovery_report().sequence;
    std::mem::forget(db);
    // sled still holds its lock in this process, so copy the files elsewhere to reopen.
    let copy = tempfile::tempdir().unwrap();
    copy_dir(dir.path(), copy.path());
    let db = Config::new()
        .path(copy.path())
        .crash_journal(false)
        .open()
        .unwrap();
    let r = db.recovery_report();
    assert_eq!(
        r.outcome,
        RecoveryOutcome::Rebuilt {
            reason: Distrust::Stale {
                snapshot_sequence: gen,
                dirty_sequence: gen
            }
        }
    );
    assert!(db.may_contain("new") && db.may_contain("old"));
}

#[test]
fn counting_snapshots_reload_with_exact_counts() {
    let dir = tempfile::tempdir().unwrap();
    let config = || {
        Config::new()
            .path(dir.path())
            .expected_items(10_000)
            .counting(true)
    };
    {
        let db = config().open().unwrap();
        for i in 0..3_000 {
            db.insert(key(i), "").unwrap();
        }
        for i in 0..1_000 {
            db.remove(key(i)).unwrap();
        }
        // Writes over existing keys must not inflate the count.
        for i in 2_000..3_000 {
            db.insert(key(i), "again").unwrap();
        }
    }
    let db = config().open().unwrap();
    let r = db.recovery_report();
    assert_eq!(r.outcome, RecoveryOutcome::Loaded, "{r:?}");
    let s = db.stats();
    assert_eq!(s.mode, bloomsled::FilterMode::Counting);
    assert_eq!(s.items, 2_000);
    // The snapshot holds counters: 4 bits per filter bit, plus framing.
    assert!(r.bytes_verified >= s.num_bits / 2, "{r:?} {s:?}");
    for i in 1_000..3_000 {
        assert!(db.may_contain(key(i)));
        db.remove(key(i)).unwrap();
    }
    let s = db.stats();
    assert_eq!(s.items, 0);
    assert_eq!(
        (s.fill_ratio * s.num_bits as f64).round() as u64,
        s.stuck_counters
    );
}

#[test]
fn changing_the_mode_rebuilds_the_filter_or_is_refused_in_strict_mode() {
    let dir = tempfile::tempdir().unwrap();
    {
        let db = Config::new()
            .path(dir.path())
            .counting(true)
            .open()
            .unwrap();
        for i in 0..500 {
            db.insert(key(i), "").unwrap();
        }
    }
    let strict = Config::new()
        .path(dir.path())
        .counting(false)
        .recovery(RecoveryPolicy::Strict)
        .open()
        .unwrap_err();
    assert!(
        matches!(
            strict,
            bloomsled::Error::SnapshotRejected {
                fault: Distrust::ModeChanged { .. },
                ..
            }
        ),
        "{strict}"
    );
    // An open that does not set the mode keeps the tree's: counting, loaded.
    {
        let db = Config::new().path(dir.path()).open().unwrap();
        assert!(db.recovery_report().loaded());
        assert_eq!(db.stats().mode, bloomsled::FilterMode::Counting);
    }
    {
        let db = Config::new()
            .path(dir.path())
            .counting(false)
            .open()
            .unwrap();
        assert!(db.wait_for_filter(Duration::from_secs(60)).unwrap());
        let r = db.recovery_report();
        assert!(
            matches!(
                r.outcome,
                RecoveryOutcome::Rebuilt {
                    reason: Distrust::ModeChanged {
                        snapshot: "counting",
                        configured: "plain"
                    }
                }
            ),
            "{r:?}"
        );
        assert_eq!(db.stats().mode, bloomsled::FilterMode::Plain);
        assert_eq!(r.keys_scanned, 500);
    }
    // And back: the plain snapshot is now the one on disk.
    let db = Config::new()
        .path(dir.path())
        .counting(true)
        .open()
        .unwrap();
    assert!(!db.recovery_report().loaded());
    assert!(db.wait_for_filter(Duration::from_secs(60)).unwrap());
    assert_eq!(db.stats().items, 500);
}

#[test]
fn a_tree_never_written_reloads_empty_without_a_file() {
    let dir = tempfile::tempdir().unwrap();
    let snap = {
        let db = Config::new().path(dir.path()).open().unwrap();
        let t = db.open_tree("idle").unwrap();
        assert_eq!(t.recovery_report().outcome, RecoveryOutcome::Created);
        let p = t.filter_snapshot_path().unwrap().to_path_buf();
        db.close().unwrap();
        p
    };
    assert!(!snap.exists());
    let db = Config::new()
        .path(dir.path())
        .recovery(RecoveryPolicy::Strict)
        .open()
        .unwrap();
    let t = db.open_tree("idle").unwrap();
    assert!(t.recovery_report().loaded(), "{:?}", t.recovery_report());
    assert!(t.is_empty());
    t.insert("k", "v").unwrap();
    drop(t);
    db.close().unwrap();
    let db = Config::new().path(dir.path()).open().unwrap();
    let t = db.open_tree("idle").unwrap();
    assert!(t.recovery_report().loaded());
    assert!(t.may_contain("k"));
}

/// Runs `f` on a thread and fails the test if it has not returned within a minute, so a
/// deadlock is a failure with a message, not a hung test run.
fn within_a_minute(what: &str, f: impl FnOnce() + Send + 'static) {
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        f();
        let _ = tx.send(());
    });
    match rx.recv_timeout(Duration::from_secs(60)) {
        Ok(()) => {}
        Err(std::sync::mpsc::RecvTimeoutError::Timeout) => panic!("{what}: hung for a minute"),
        Err(e) => panic!("{what}: the thread panicked ({e})"),
    }
}

/// A tree's first write after its snapshot must make the dirty mark durable, and sled runs a
/// transaction's closure under a lock every other sled write waits for: the mark must be
/// made before the transaction, not inside it (it used to hang there for good).
#[test]
fn transactions_after_a_reopen_and_racing_snapshots_neither_hang_nor_lose_keys() {
    for counting in [false, true] {
        let dir = tempfile::tempdir().unwrap();
        let open = {
            let path = dir.path().to_path_buf();
            move || Config::new().path(&path).counting(counting).open().unwrap()
        };
        let db = open();
        db.insert(key(0), "v").unwrap();
        db.close().unwrap();
        let db = open();
        assert!(db.recovery_report().loaded());
        let t = db.clone();
        within_a_minute("a transaction after a reopen", move || {
            let r: TransactionResult<()> = t.transaction(|tx| {
                tx.insert(key(1).as_bytes(), "v")?;
                Ok(())
            });
            r.unwrap();
        });
        // Writers in transactions and batches while another thread keeps snapshotting.
        let writers: Vec<_> = (0..3u32)
            .map(|w| {
                let t = db.clone();
                std::thread::spawn(move || {
                    for i in 0..150u32 {
                        let k = key(1_000 + w * 1_000 + i);
                        if i % 2 == 0 {
                            let r: TransactionResult<()> = t.transaction(|tx| {
                                tx.insert(k.as_bytes(), "v")?;
                                Ok(())
                            });
                            r.unwrap();
                        } else {
                            let mut b = Batch::default();
                            b.insert(k.as_bytes(), "v");
                            t.apply_batch(b).unwrap();
                        }
                    }
                })
            })
            .collect();
        let snapshots = {
            let t = db.clone();
            std::thread::spawn(move || {
                for _ in 0..20 {
                    t.snapshot().unwrap();
                }
            })
        };
        within_a_minute("transactions racing snapshots", move || {
            for w in writers {
                w.join().unwrap();
            }
            snapshots.join().unwrap();
        });
        drop(db);
        let db = open();
        db.wait_for_filter(Duration::from_secs(60)).unwrap();
        let mut keys = vec![key(0), key(1)];
        keys.extend((0..3u32).flat_map(|w| (0..150u32).map(move |i| key(1_000 + w * 1_000 + i))));
        for k in &keys {
            assert!(db.contains_key(k).unwrap(), "{k} lost");
            assert!(db.may_contain(k), "{k} denied by the filter");
        }
    }
}

//! The integrity promises an administrator or a hostile tenant could break: colliding tree
//! names, bulk loads closed mid-resize, hidden trees, upgrades from snapshot format 1,
//! plain-sled keys in counting mode, thousands of small trees.

mod common;
use common::copy_dir;
use std::fs;
use std::path::Path;

use bloomsled::{Config, Distrust, RecoveryOutcome, RecoveryPolicy, TreeConfig};
use xxhash_rust::xxh3::xxh3_64_with_seed;

/// The first 8 bytes of xxh3's default secret: a name that starts with them cancels the
/// first input word in xxh3's 16-byte mixing, so bytes 8..16 of the name do not reach the
/// hash (for every length from 17 to 240 bytes).
const XXH3_SECRET_WORD: [u8; 8] = [0xb8, 0xfe, 0x6c, 0x39, 0x23, 0xa4, 0x4b, 0xbe];

fn colliding_names() -> (Vec<u8>, Vec<u8>) {
    let mut a = XXH3_SECRET_WORD.to_vec();
    a.extend_from_slice(b"AAAAAAAA");
    a.extend_from_slice(&[b't'; 104]);
    let mut b = a.clone();
    b[8..16].copy_from_slice(b"BBBBBBBB");
    (a, b)
}

#[test]
fn colliding_tree_names_keep_separate_filters() {
    let (n1, n2) = colliding_names();
    assert_ne!(n1, n2);
    // The construction really collides (the old file naming and foreign check used this).
    assert_eq!(xxh3_64_with_seed(&n1, 0), xxh3_64_with_seed(&n2, 0));
    let dir = tempfile::tempdir().unwrap();
    {
        let db = Config::new().path(dir.path()).open().unwrap();
        let (t1, t2) = (db.open_tree(&n1).unwrap(), db.open_tree(&n2).unwrap());
        for i in 0..1_000u32 {
            t1.insert(format!("one-{i}"), "").unwrap();
            t2.insert(format!("two-{i}"), "").unwrap();
        }
        assert_ne!(t1.filter_snapshot_path(), t2.filter_snapshot_path());
        db.close().unwrap();
    }
    let db = Config::new().path(dir.path()).open().unwrap();
    let (t1, t2) = (db.open_tree(&n1).unwrap(), db.open_tree(&n2).unwrap());
    for (t, prefix) in [(&t1, "one"), (&t2, "two")] {
        assert!(t.recovery_report().loaded(), "{:?}", t.recovery_report());
        for i in 0..1_000u32 {
            let k = format!("{prefix}-{i}");
            assert!(t.may_contain(&k) && t.get(&k).unwrap().is_some(), "{k}");
        }
    }
}

#[test]
fn a_bulk_load_closed_during_its_resize_is_resized_after_reopen() {
    let dir = tempfile::tempdir().unwrap();
    let target = 0.01;
    {
        let db = Config::new()
            .path(dir.path())
            .expected_items(2_000)
            .false_positive_rate(target)
            .open()
            .unwrap();
        // 60,000 keys in batches of 100 into a filter sized for 2,000, then closed at once,
        // whatever the background resize is doing.
        for b in 0..600u32 {
            let mut batch = bloomsled::Batch::default();
            for i in 0..100u32 {
                batch.insert(format!("bulk-{b}-{i}").as_bytes(), &b""[..]);
            }
            db.apply_batch(batch).unwrap();
        }
        db.close().unwrap();
    }
    let db = Config::new().path(dir.path()).open().unwrap();
    db.wait_for_rebuild();
    let s = db.stats();
    assert!(s.capacity >= 60_000, "{s:?}");
    // Measured, not modelled: absent keys the filter lets through.
    let passed = (0..20_000u32)
        .filter(|i| db.may_contain(format!("absent-{i}")))
        .count();
    let fpr = passed as f64 / 20_000.0;
    assert!(
        fpr < 2.0 * target,
        "measured FPR {fpr} after reopen ({s:?})"
    );
    for b in (0..600u32).step_by(7) {
        assert!(db.may_contain(format!("bulk-{b}-99")));
    }
    // The resized filter is what the next open loads.
    db.close().unwrap();
    let db = Config::new().path(dir.path()).open().unwrap();
    assert!(db.recovery_report().loaded());
    assert!(db.stats().capacity >= 60_000);
}

#[test]
fn only_bloomsleds_own_meta_tree_is_hidden() {
    let dir = tempfile::tempdir().unwrap();
    {
        let db = common::sled_open(dir.path()).unwrap();
        for name in [
            "__bloomsled_snapshots",
            "__bloomsled",
            "__bloomsled_metadata",
        ] {
            db.open_tree(name).unwrap().insert("k", "v").unwrap();
        }
        db.flush().unwrap();
    }
    let db = Config::new().path(dir.path()).open().unwrap();
    let names = db.tree_names();
    for name in [
        "__bloomsled_snapshots",
        "__bloomsled",
        "__bloomsled_metadata",
    ] {
        assert!(names.iter().any(|n| n == name.as_bytes()), "{name} hidden");
        let t = db.open_tree(name).unwrap();
        assert!(t.get("k").unwrap().is_some());
    }
    assert!(!names.iter().any(|n| n == bloomsled::persist::META_TREE));
    let exported: Vec<Vec<u8>> = db.export().into_iter().map(|(_, n, _)| n).collect();
    assert_eq!(
        exported.len(),
        4,
        "the default tree and the three user trees"
    );
    // A plain-sled tree that squats on the meta tree's name has no database record: it is
    // repaired (a database record is added), and its other keys are never touched.
    drop(db);
    let other = tempfile::tempdir().unwrap();
    {
        let db = sled::open(other.path()).unwrap();
        let t = db.open_tree(bloomsled::persist::META_TREE).unwrap();
        t.insert("precious", "data").unwrap();
        db.flush().unwrap();
    }
    let err = Config::new()
        .path(other.path())
        .recovery(RecoveryPolicy::Strict)
        .open()
        .unwrap_err();
    assert!(
        matches!(
            err,
            bloomsled::Error::DatabaseRecordRejected {
                fault: bloomsled::DbRecordFault::Missing
            }
        ),
        "{err}"
    );
    drop(Config::new().path(other.path()).open().unwrap());
    let db = common::sled_open(other.path()).unwrap();
    let t = db.open_tree(bloomsled::persist::META_TREE).unwrap();
    assert_eq!(t.get("precious").unwrap().unwrap(), "data");
}

/// A database written by bloomsled 0.1 (snapshot format 1: side-file markers, no ids),
/// committed under tests/fixtures/v1_db: 500 keys in the default tree, 300 in "logs".
#[test]
fn a_format_1_database_is_rebuilt_and_keeps_every_key() {
    let fixture = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/v1_db");
    let v1_snap = fixture
        .join("bloomsled")
        .join("5f5f736c65645f5f64656661756c74.snap");
    // The format-1 file itself is refused with a typed error, not misread.
    let bytes = fs::read(&v1_snap).unwrap();
    assert_eq!(
        bloomsled::format::decode(&bytes).unwrap_err(),
        bloomsled::DecodeError::UnsupportedVersion {
            expected: 2,
            got: 1
        }
    );
    let dir = tempfile::tempdir().unwrap();
    copy_dir(&fixture, dir.path());
    // Strict mode refuses to guess.
    match Config::new()
        .path(dir.path())
        .recovery(RecoveryPolicy::Strict)
        .open()
    {
        Err(bloomsled::Error::SnapshotRejected {
            fault: Distrust::NoRecord,
            ..
        }) => {}
        other => panic!("{other:?}"),
    }
    {
        let db = Config::new().path(dir.path()).open().unwrap();
        assert!(db
            .wait_for_filter(std::time::Duration::from_secs(60))
            .unwrap());
        assert_eq!(
            db.recovery_report().outcome,
            RecoveryOutcome::Rebuilt {
                reason: Distrust::NoRecord
            }
        );
        let logs = db.open_tree("logs").unwrap();
        assert!(logs
            .wait_for_filter(std::time::Duration::from_secs(60))
            .unwrap());
        for i in 0..500u32 {
            assert!(db.get(format!("key-{i}")).unwrap().is_some());
        }
        for i in 0..300u32 {
            assert!(logs.may_contain(format!("log-{i}")));
        }
        db.close().unwrap();
    }
    // Upgraded: the next open loads.
    let db = Config::new().path(dir.path()).open().unwrap();
    assert!(db.recovery_report().loaded());
    assert!(db.open_tree("logs").unwrap().recovery_report().loaded());
}

#[test]
fn counting_mode_keeps_keys_that_plain_sled_wrote() {
    let dir = tempfile::tempdir().unwrap();
    {
        // A counting database, then keys written behind its back by plain sled...
        let db = Config::new()
            .path(dir.path())
            .counting(true)
            .open()
            .unwrap();
        db.insert("seen", "1").unwrap();
        db.close().unwrap();
        let s = common::sled_open(dir.path()).unwrap();
        for i in 0..200u32 {
            s.insert(format!("plain-{i}"), "x").unwrap();
        }
        s.flush().unwrap();
    }
    // ...are found once rebuilt, and re-inserting one over its existing value (sled says
    // it was there; the filter had not counted it) must not count it back out.
    let db = Config::new()
        .path(dir.path())
        .counting(true)
        .open()
        .unwrap();
    db.rebuild().unwrap();
    for i in 0..200u32 {
        db.insert(format!("plain-{i}"), "y").unwrap();
        assert!(db.may_contain(format!("plain-{i}")), "plain-{i}");
    }
    // And the same when the filter did not know them at all (snapshot trusted, as after
    // plain-sled writes the contract does not cover): the insert keeps the bits.
    let s = {
        drop(db);
        common::sled_open(dir.path()).unwrap()
    };
    for i in 0..50u32 {
        s.insert(format!("late-{i}"), "x").unwrap();
    }
    s.flush().unwrap();
    drop(s);
    let db = Config::new()
        .path(dir.path())
        .counting(true)
        .open()
        .unwrap();
    for i in 0..50u32 {
        let k = format!("late-{i}");
        assert!(db.insert(&k, "y").unwrap().is_some());
        assert!(db.may_contain(&k), "{k} counted out by its own insert");
        assert!(db.remove(&k).unwrap().is_some());
    }
    for i in 0..200u32 {
        assert!(db.may_contain(format!("plain-{i}")), "plain-{i}");
    }
}

/// Bytes the files under `dir` take on disk (as `du`): allocated blocks, so that the crash
/// journals, 16 MiB each but sparse until written, count what they hold.
fn du(dir: &Path) -> u64 {
    fs::read_dir(dir)
        .map(|rd| {
            rd.flatten()
                .map(|e| {
                    let m = e.metadata().unwrap();
                    if m.is_dir() {
                        du(&e.path())
                    } else {
                        allocated(&m)
                    }
                })
                .sum()
        })
        .unwrap_or(0)
}

#[cfg(unix)]
fn allocated(m: &fs::Metadata) -> u64 {
    std::os::unix::fs::MetadataExt::blocks(m) * 512
}

#[cfg(not(unix))]
fn allocated(m: &fs::Metadata) -> u64 {
    m.len()
}

#[test]
fn many_small_trees_cost_what_they_hold() {
    let dir = tempfile::tempdir().unwrap();
    let trees = 60u32;
    {
        // Default sizing (a million keys per tree): sparse snapshots stay small anyway.
        let db = Config::new().path(dir.path()).open().unwrap();
        for i in 0..trees {
            let t = db.open_tree(format!("tenant-{i}")).unwrap();
            t.insert("k", "v").unwrap();
        }
        db.close().unwrap();
    }
    let snapshots = du(&dir.path().join(bloomsled::persist::DIR_NAME));
    // A snapshot, and the crash journal's one written block (its header).
    assert!(
        snapshots < u64::from(trees) * (16 + 4) * 1024,
        "{snapshots} bytes of snapshots and journals for {trees} one-key trees"
    );
    // Per-tree sizing: small trees get small filters, and keep their size across reopen.
    let dir = tempfile::tempdir().unwrap();
    {
        let db = Config::new().path(dir.path()).open().unwrap();
        for i in 0..trees {
            let t = db
                .open_tree_with(format!("tenant-{i}"), TreeConfig::new().expected_items(100))
                .unwrap();
            t.insert("k", "v").unwrap();
            assert!(t.stats().memory_bytes <= 512, "{:?}", t.stats());
        }
        db.close().unwrap();
    }
    let db = Config::new().path(dir.path()).open().unwrap();
    for i in 0..trees {
        let t = db.open_tree(format!("tenant-{i}")).unwrap();
        assert!(t.recovery_report().loaded());
        let s = t.stats();
        assert_eq!(s.capacity, 100);
        t.rebuild().unwrap();
        assert_eq!(
            t.stats().capacity,
            100,
            "a rebuild keeps the tree's own size"
        );
    }
    // One block each (and a few for the folder): a small snapshot, the journal header.
    let on_disk = du(&dir.path().join(bloomsled::persist::DIR_NAME));
    assert!(
        on_disk <= (u64::from(trees) * 2 + 4) * 4096,
        "{on_disk} bytes for {trees} small trees"
    );
}

#[test]
fn open_tree_with_on_an_open_tree_refuses_a_mode_change() {
    let db = Config::new().temporary(true).open().unwrap();
    let _t = db.open_tree("t").unwrap();
    assert!(matches!(
        db.open_tree_with("t", TreeConfig::new().counting(true)),
        Err(bloomsled::Error::InvalidConfig { .. })
    ));
    assert!(matches!(
        db.open_tree_with("u", TreeConfig::new().expected_items(0)),
        Err(bloomsled::Error::InvalidConfig { .. })
    ));
    assert!(matches!(
        db.open_tree_with("u", TreeConfig::new().false_positive_rate(1.5)),
        Err(bloomsled::Error::InvalidConfig { .. })
    ));
}

/// sled 0.34.7 refuses to open a database whose newest `snap.*.generating` file was torn by
/// a crash (it lists it as a snapshot and fails its CRC): found by the crash torture. Open
/// moves that file aside (never deletes it) and sled recovers from its previous snapshot.
#[test]
fn a_snapshot_sled_left_torn_does_not_brick_the_database() {
    let dir = tempfile::tempdir().unwrap();
    {
        let db = Config::new().path(dir.path()).open().unwrap();
        for i in 0..500u32 {
            db.insert(format!("k{i}"), "v").unwrap();
        }
        db.close().unwrap();
    }
    let torn = dir.path().join("snap.7FFFFFFFFFFFFFFF.generating");
    fs::write(&torn, b"").unwrap();
    // Plain sled cannot open it.
    assert!(matches!(
        common::sled_open(dir.path()),
        Err(sled::Error::Corruption { .. })
    ));
    let db = Config::new().path(dir.path()).open().unwrap();
    for i in 0..500u32 {
        assert!(db.get(format!("k{i}")).unwrap().is_some());
    }
    assert!(!torn.exists());
    let aside = dir
        .path()
        .join(bloomsled::persist::DIR_NAME)
        .join("sled-torn-snapshots")
        .join("snap.7FFFFFFFFFFFFFFF.generating");
    assert!(aside.exists());
    // A database in use is never touched: another open fails on sled's lock, and the file
    // a running sled might be writing stays where it is.
    fs::write(&torn, b"").unwrap();
    assert!(Config::new().path(dir.path()).open().is_err());
    assert!(torn.exists());
}

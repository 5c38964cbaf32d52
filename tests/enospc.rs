//! A full disk: snapshot writes fail with ENOSPC (through the library's fault-injection
//! seam, which fails writes as a full disk does, after a byte budget). The temporary file is
//! removed every time, nothing stored is lost, and once space is back the database recovers.
//! The seam is process-wide, so these cases run in one test of their own binary.

use std::fs;
use std::path::Path;

use bloomsled::persist::{fail_snapshot_writes_after, DIR_NAME};
use bloomsled::{Config, RecoveryOutcome};

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

fn is_enospc(e: &bloomsled::Error) -> bool {
    matches!(e, bloomsled::Error::Io(io) if io.raw_os_error() == Some(28))
}

#[test]
fn a_full_disk_leaves_no_temporary_file_and_loses_nothing() {
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
        assert!(leftovers(dir.path()).is_empty());
    }
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

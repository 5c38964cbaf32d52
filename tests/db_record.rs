//! The database record in bloomsled's meta tree, damaged through plain sled: bit-flipped,
//! truncated, its first 64 bytes overwritten, deleted, or replaced by another database's.
//! Repair opens the database, rebuilds every tree and finds every key; Strict names the
//! cause; a stale snapshot is never trusted because of it.

mod common;

use std::path::Path;
use std::time::Duration;

use bloomsled::persist::META_TREE;
use bloomsled::{Config, DbRecordFault, Distrust, Error, RecoveryOutcome, RecoveryPolicy};

const TREES: [&str; 2] = ["a", "b"];
const KEYS: u32 = 2_000;

fn key(tree: &str, i: u32) -> String {
    format!("{tree}/key-{i}")
}

/// A database with keys in the default tree and in `TREES`, closed cleanly (every
/// snapshot trusted).
fn make(dir: &Path) {
    let db = Config::new().path(dir).open().unwrap();
    for i in 0..KEYS {
        db.insert(key("default", i), "v").unwrap();
    }
    for t in TREES {
        let t = db.open_tree(t).unwrap();
        for i in 0..KEYS {
            t.insert(key(&String::from_utf8_lossy(&t.name()), i), "v")
                .unwrap();
        }
    }
    db.close().unwrap();
}

fn db_record(dir: &Path) -> Option<Vec<u8>> {
    let db = common::sled_open(dir).unwrap();
    let meta = db.open_tree(META_TREE).unwrap();
    meta.get("db").unwrap().map(|v| v.to_vec())
}

/// Rewrites (or deletes, with `None`) the database record through plain sled.
fn set_db_record(dir: &Path, f: impl FnOnce(Vec<u8>) -> Option<Vec<u8>>) {
    let db = common::sled_open(dir).unwrap();
    let meta = db.open_tree(META_TREE).unwrap();
    let old = meta.get("db").unwrap().unwrap().to_vec();
    match f(old) {
        Some(new) => meta.insert("db", new).unwrap(),
        None => meta.remove("db").unwrap(),
    };
    db.flush().unwrap();
}

/// Opens in Repair mode: every tree rebuilt with `reason`, every key found, and a clean
/// close makes the next open load every tree.
fn repaired(dir: &Path, reason: impl Fn(&Distrust) -> bool) {
    {
        let db = Config::new().path(dir).open().unwrap();
        let mut trees = vec![(*db).clone()];
        for t in TREES {
            trees.push(db.open_tree(t).unwrap());
        }
        for t in &trees {
            let r = t.recovery_report();
            match &r.outcome {
                RecoveryOutcome::Rebuilt { reason: why } => assert!(reason(why), "{r:?}"),
                other => panic!("tree {:?} not rebuilt: {other:?}", r.tree),
            }
            assert!(t.wait_for_filter(Duration::from_secs(60)).unwrap());
            let name = String::from_utf8_lossy(&t.name()).into_owned();
            let name = if name == "__sled__default" {
                "default".into()
            } else {
                name
            };
            for i in 0..KEYS {
                assert!(t.may_contain(key(&name, i)), "false negative in {name}");
                assert!(t.get(key(&name, i)).unwrap().is_some());
            }
        }
        db.close().unwrap();
    }
    let db = Config::new().path(dir).open().unwrap();
    assert!(db.recovery_report().loaded());
    for t in TREES {
        assert!(db.open_tree(t).unwrap().recovery_report().loaded());
    }
}

fn strict_error(dir: &Path) -> Error {
    Config::new()
        .path(dir)
        .recovery(RecoveryPolicy::Strict)
        .open()
        .and_then(|db| db.open_tree("a").map(|_| ()))
        .unwrap_err()
}

#[test]
fn a_damaged_or_missing_database_record_rebuilds_every_tree_under_a_new_id() {
    type Damage = fn(Vec<u8>) -> Option<Vec<u8>>;
    let damages: [(&str, Damage); 4] = [
        ("bit flip", |mut r| {
            let last = r.len() - 5;
            r[last] ^= 0x10;
            Some(r)
        }),
        ("truncated", |r| Some(r[..r.len() / 2].to_vec())),
        ("first 64 bytes overwritten", |mut r| {
            let n = r.len().min(64);
            r[..n].fill(0xAB);
            Some(r)
        }),
        ("deleted", |_| None),
    ];
    for (what, damage) in damages {
        let dir = tempfile::tempdir().unwrap();
        make(dir.path());
        let old = db_record(dir.path()).unwrap();
        set_db_record(dir.path(), damage);
        // Strict: the typed error names the cause, and nothing changes.
        let before = db_record(dir.path());
        match strict_error(dir.path()) {
            Error::DatabaseRecordRejected { fault } => match (what, fault) {
                ("deleted", DbRecordFault::Missing) => {}
                (_, DbRecordFault::Damaged(_)) if what != "deleted" => {}
                (_, f) => panic!("{what}: {f:?}"),
            },
            e => panic!("{what}: {e}"),
        }
        assert_eq!(
            db_record(dir.path()),
            before,
            "{what}: strict changed the record"
        );
        repaired(dir.path(), |d| matches!(d, Distrust::DatabaseRecord(_)));
        let new = db_record(dir.path()).unwrap();
        assert_ne!(new, old, "{what}: the database kept its id");
    }
}

/// A record that decodes but belongs to another database: every snapshot's database id
/// differs from it, so every tree is rebuilt (never loaded), and a crash before every tree
/// is rebuilt leaves no snapshot trusted either.
#[test]
fn another_databases_record_copied_in_rebuilds_every_tree() {
    let other = tempfile::tempdir().unwrap();
    make(other.path());
    let foreign = db_record(other.path()).unwrap();
    let dir = tempfile::tempdir().unwrap();
    make(dir.path());
    set_db_record(dir.path(), |_| Some(foreign.clone()));
    assert!(matches!(
        strict_error(dir.path()),
        Error::SnapshotRejected {
            fault: Distrust::ForeignDatabase,
            ..
        }
    ));
    // Open once, rebuild only the default tree, close: the other trees keep their files
    // (with this database's old id), which the copied id still does not match.
    {
        let db = Config::new().path(dir.path()).open().unwrap();
        assert!(db.wait_for_filter(Duration::from_secs(60)).unwrap());
        db.close().unwrap();
    }
    repaired_others(dir.path());
}

fn repaired_others(dir: &Path) {
    let db = Config::new().path(dir).open().unwrap();
    assert!(
        db.recovery_report().loaded(),
        "the default tree was rebuilt and snapshotted"
    );
    for name in TREES {
        let t = db.open_tree(name).unwrap();
        let r = t.recovery_report();
        assert_eq!(
            r.outcome,
            RecoveryOutcome::Rebuilt {
                reason: Distrust::ForeignDatabase
            },
            "{r:?}"
        );
        assert!(t.wait_for_filter(Duration::from_secs(60)).unwrap());
        for i in 0..KEYS {
            assert!(t.may_contain(key(name, i)));
        }
    }
}

/// A damaged record repaired by an open that then crashes before opening every tree: the
/// trees it did not open are still rebuilt next time (their records were marked stale
/// before the new id was written).
#[test]
fn trees_not_opened_after_the_repair_are_still_rebuilt_later() {
    let dir = tempfile::tempdir().unwrap();
    make(dir.path());
    set_db_record(dir.path(), |_| None);
    {
        let db = Config::new().path(dir.path()).open().unwrap();
        assert!(db.wait_for_filter(Duration::from_secs(60)).unwrap());
        db.close().unwrap();
    }
    let db = Config::new().path(dir.path()).open().unwrap();
    for name in TREES {
        let t = db.open_tree(name).unwrap();
        let r = t.recovery_report();
        assert!(
            matches!(
                r.outcome,
                RecoveryOutcome::Rebuilt {
                    reason: Distrust::Stale { .. } | Distrust::ForeignDatabase
                }
            ),
            "{r:?}"
        );
        assert!(t.wait_for_filter(Duration::from_secs(60)).unwrap());
        for i in 0..KEYS {
            assert!(t.may_contain(key(name, i)));
        }
    }
}

/// sled's files damaged so that sled 0.34 opens an empty store: its log cut to nothing,
/// its log overwritten, or its files replaced by a fresh store's (a restore of the wrong
/// folder). sled cannot say what it lost; bloomsled's snapshot and journal files beside
/// it say the store held data. Strict refuses the open, naming that; Repair opens, and
/// every tree it opens reports the reason (never a silent new database).
#[test]
fn a_store_sled_reads_as_empty_beside_bloomsleds_files_is_not_a_new_database() {
    type Damage = fn(&Path);
    let damages: [(&str, Damage); 3] = [
        ("log cut to nothing", |dir| {
            std::fs::OpenOptions::new()
                .write(true)
                .open(dir.join("db"))
                .unwrap()
                .set_len(0)
                .unwrap();
        }),
        ("log overwritten", |dir| {
            let len = std::fs::metadata(dir.join("db")).unwrap().len();
            std::fs::write(dir.join("db"), vec![0xAB; len as usize]).unwrap();
        }),
        ("sled's files replaced by a fresh store's", |dir| {
            for entry in std::fs::read_dir(dir).unwrap() {
                let path = entry.unwrap().path();
                if path.file_name().unwrap() != bloomsled::persist::DIR_NAME {
                    if path.is_dir() {
                        std::fs::remove_dir_all(&path).unwrap();
                    } else {
                        std::fs::remove_file(&path).unwrap();
                    }
                }
            }
        }),
    ];
    for (what, damage) in damages {
        let dir = tempfile::tempdir().unwrap();
        make(dir.path());
        damage(dir.path());
        match strict_error(dir.path()) {
            Error::DatabaseRecordRejected {
                fault: DbRecordFault::StoreEmptied { files },
            } => assert!(files >= 3, "{what}: {files} files counted"),
            e => panic!("{what}: {e}"),
        }
        assert_eq!(db_record(dir.path()), None, "{what}: strict wrote a record");
        {
            let db = Config::new().path(dir.path()).open().unwrap();
            let mut trees = vec![(*db).clone()];
            for t in TREES {
                trees.push(db.open_tree(t).unwrap());
            }
            for t in &trees {
                let r = t.recovery_report();
                assert!(
                    matches!(
                        &r.outcome,
                        RecoveryOutcome::Rebuilt {
                            reason: Distrust::DatabaseRecord(DbRecordFault::StoreEmptied { .. })
                        }
                    ),
                    "{what}: {r:?}"
                );
                // The repair's rebuild runs in the background and snapshots when done; a
                // close before that leaves the tree to be rebuilt at the next open.
                assert!(
                    t.wait_for_filter(Duration::from_secs(60)).unwrap(),
                    "{what}"
                );
            }
            db.close().unwrap();
        }
        // Repaired: the next open is an ordinary one.
        let db = Config::new()
            .path(dir.path())
            .recovery(RecoveryPolicy::Strict)
            .open()
            .unwrap();
        assert!(db.recovery_report().loaded(), "{what}");
    }
}

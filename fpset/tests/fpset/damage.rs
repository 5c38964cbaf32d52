//! Files damaged for real: a log cut mid-record or flipped, a run block flipped or
//! truncated, a missing or foreign manifest, a damaged saved filter: a typed error or a
//! repair, never a panic, and no synced member lost.

use super::*;
use bloomsled::DecodeError;

fn wal_file(dir: &Path) -> std::path::PathBuf {
    fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .find(|p| p.file_name().unwrap().to_str().unwrap().starts_with("wal-"))
        .unwrap()
}

/// A set with `n` members in its log only (no run), synced and dropped.
fn logged(dir: &Path, n: u64) {
    let set = small(dir).memtable_items(1_000).open().unwrap();
    for i in 0..n {
        set.insert(&fp(i)).unwrap();
    }
    set.sync().unwrap();
}

#[test]
fn a_log_cut_mid_record_loses_only_that_record() {
    let dir = tempfile::tempdir().unwrap();
    logged(dir.path(), 10);
    let wal = wal_file(dir.path());
    let len = fs::metadata(&wal).unwrap().len();
    fs::OpenOptions::new()
        .write(true)
        .open(&wal)
        .unwrap()
        .set_len(len - 7)
        .unwrap();
    let set = small(dir.path()).memtable_items(1_000).open().unwrap();
    assert_eq!(set.len(), 9);
    assert_eq!(set.stats().torn_bytes_cut, 24 - 7);
    for i in 0..9 {
        assert!(set.contains(&fp(i)).unwrap());
    }
    assert!(!set.contains(&fp(9)).unwrap());
    // The tail was cut on disk: new records follow the good ones.
    assert!(set.insert(&fp(9)).unwrap());
    set.sync().unwrap();
    drop(set);
    assert_eq!(
        small(dir.path())
            .memtable_items(1_000)
            .open()
            .unwrap()
            .len(),
        10
    );
}

#[test]
fn a_damaged_log_record_before_good_ones_is_a_typed_error_and_nothing_is_removed() {
    let dir = tempfile::tempdir().unwrap();
    logged(dir.path(), 10);
    let wal = wal_file(dir.path());
    let mut bytes = fs::read(&wal).unwrap();
    bytes[36 + 24 * 3 + 5] ^= 0x08; // record 3 of 10
    fs::write(&wal, &bytes).unwrap();
    let before = files(dir.path());
    let err = small(dir.path()).memtable_items(1_000).open().unwrap_err();
    assert!(
        matches!(&err, Error::FileDamaged { file, fault: DecodeError::Inconsistent(_) } if *file == wal),
        "{err}"
    );
    assert_eq!(files(dir.path()), before);
    assert_eq!(fs::read(&wal).unwrap(), bytes, "the log was changed");
}

#[test]
fn a_flipped_byte_in_a_run_block_is_found_by_the_read_that_meets_it() {
    let dir = tempfile::tempdir().unwrap();
    let set = small(dir.path()).open().unwrap();
    for i in 0..16 {
        set.insert(&fp(i)).unwrap();
    }
    assert_eq!(set.stats().runs, 1);
    set.close().unwrap();
    let run = run_files(dir.path()).pop().unwrap();
    let mut bytes = fs::read(&run).unwrap();
    // Block 1 (blocks of 4 members of 20 bytes plus a CRC, after a 48-byte header).
    let at = 48 + 84 + 10;
    bytes[at] ^= 0x01;
    fs::write(&run, &bytes).unwrap();
    // Clean: the saved filter is loaded, the run's index is intact; lookups of members in
    // block 1 fail with the run's name, the others answer.
    let set = small(dir.path()).open().unwrap();
    let mut sorted: Vec<[u8; W]> = (0..16).map(fp).collect();
    sorted.sort();
    for (i, f) in sorted.iter().enumerate() {
        match set.contains(f) {
            Ok(found) => assert!(found && i / 4 != 1, "{i}"),
            Err(Error::FileDamaged {
                file,
                fault: DecodeError::PageChecksum { page: 1, .. },
            }) => {
                assert_eq!(file, run);
                assert_eq!(i / 4, 1);
            }
            Err(e) => panic!("{e}"),
        }
    }
    drop(set);
    // Unclean now: the rebuild streams every block and refuses the damaged one.
    let err = small(dir.path()).open().unwrap_err();
    assert!(matches!(err, Error::FileDamaged { .. }), "{err}");
    assert!(run.exists(), "a damaged run must not be deleted");
}

#[test]
fn a_truncated_run_and_a_missing_manifest_are_typed_errors() {
    let dir = tempfile::tempdir().unwrap();
    let set = small(dir.path()).open().unwrap();
    for i in 0..40 {
        set.insert(&fp(i)).unwrap();
    }
    drop(set);
    let run = run_files(dir.path()).remove(0);
    let full = fs::read(&run).unwrap();
    fs::write(&run, &full[..full.len() - 1]).unwrap();
    let err = small(dir.path()).open().unwrap_err();
    assert!(
        matches!(
            &err,
            Error::FileDamaged {
                fault: DecodeError::Truncated { .. },
                ..
            }
        ),
        "{err}"
    );
    fs::write(&run, &full).unwrap();
    fs::rename(dir.path().join("MANIFEST"), dir.path().join("manifest.bak")).unwrap();
    let err = small(dir.path()).open().unwrap_err();
    assert!(matches!(&err, Error::FileDamaged { .. }), "{err}");
    assert!(run.exists());
    fs::rename(dir.path().join("manifest.bak"), dir.path().join("MANIFEST")).unwrap();
    assert_eq!(small(dir.path()).open().unwrap().len(), 40);
}

#[test]
fn a_foreign_manifest_is_a_typed_error() {
    let dir = tempfile::tempdir().unwrap();
    logged(dir.path(), 3);
    fs::write(
        dir.path().join("MANIFEST"),
        b"{\"version\": 1, \"runs\": []}\n",
    )
    .unwrap();
    let err = small(dir.path()).open().unwrap_err();
    assert!(
        matches!(
            &err,
            Error::FileDamaged {
                fault: DecodeError::BadMagic { .. },
                ..
            }
        ),
        "{err}"
    );
    assert!(err.to_string().contains("MANIFEST"), "{err}");
    // A set's file in the manifest's place (a log) is refused too.
    let wal = fs::read(wal_file(dir.path())).unwrap();
    fs::write(dir.path().join("MANIFEST"), wal).unwrap();
    assert!(matches!(
        small(dir.path()).open(),
        Err(Error::FileDamaged { .. })
    ));
}

#[test]
fn a_damaged_saved_filter_is_rebuilt_and_leftovers_are_removed_but_not_foreign_files() {
    let dir = tempfile::tempdir().unwrap();
    let set = small(dir.path()).open().unwrap();
    for i in 0..100 {
        set.insert(&fp(i)).unwrap();
    }
    set.close().unwrap();
    let filter = dir.path().join("filter.bin");
    let mut bytes = fs::read(&filter).unwrap();
    let mid = bytes.len() / 2;
    bytes[mid] ^= 0xff;
    fs::write(&filter, &bytes).unwrap();
    for name in [
        "run-00000000000fffff.fps",
        "wal-0000000000000000.log",
        "MANIFEST.tmp",
        "filter.bin.tmp",
        "notes.txt",
    ] {
        fs::write(dir.path().join(name), b"x").unwrap();
    }
    let set = small(dir.path()).open().unwrap();
    let s = set.stats();
    assert!(s.filter_rebuilt);
    assert_eq!(s.leftovers_removed, 4, "{s:?}");
    for i in 0..100 {
        assert!(set.contains(&fp(i)).unwrap());
    }
    assert!(
        dir.path().join("notes.txt").exists(),
        "a foreign file was removed"
    );
    assert!(
        !dir.path().join("filter.bin").exists(),
        "a distrusted filter was kept"
    );
    assert_no_leftovers(dir.path(), &set);
}

#[test]
fn a_clean_close_is_trusted_once_and_a_new_sizing_rebuilds() {
    let dir = tempfile::tempdir().unwrap();
    let set = small(dir.path()).open().unwrap();
    set.insert_many(&(0..50).map(fp).collect::<Vec<_>>())
        .unwrap();
    set.close().unwrap();
    let set = small(dir.path()).open().unwrap();
    assert!(!set.stats().filter_rebuilt);
    drop(set); // no close: the mark was cleared at open
    let set = small(dir.path()).open().unwrap();
    assert!(set.stats().filter_rebuilt);
    set.close().unwrap();
    let set = small(dir.path()).expected_items(10).open().unwrap();
    assert!(
        set.stats().filter_rebuilt,
        "another sizing must not load the saved filter"
    );
    assert_eq!(set.stats().expected_items, 10);
    for i in 0..50 {
        assert!(set.contains(&fp(i)).unwrap());
    }
}

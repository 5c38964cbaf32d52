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

// -- a log cut after a clean close -------------------------------------------------------------

/// A set of `n` members closed cleanly: runs (memtables of 100) and a log holding the last
/// `n % 100`. Returns its log's path and bytes.
fn closed(dir: &Path, n: u64) -> (std::path::PathBuf, Vec<u8>) {
    let set = small(dir).memtable_items(100).open().unwrap();
    set.insert_many(&(0..n).map(fp).collect::<Vec<_>>())
        .unwrap();
    set.close().unwrap();
    let wal = wal_file(dir);
    let bytes = fs::read(&wal).unwrap();
    (wal, bytes)
}

fn cut(file: &Path, to: u64) {
    fs::OpenOptions::new()
        .write(true)
        .open(file)
        .unwrap()
        .set_len(to)
        .unwrap();
}

/// A log cut after a clean close (a bad copy, a restore that cut the file) is damage, not
/// a torn tail: the open fails naming the log and both lengths, and changes nothing, so the
/// whole log restored opens with every member.
#[test]
fn a_log_cut_after_a_clean_close_is_a_typed_error_and_nothing_is_dropped() {
    let dir = tempfile::tempdir().unwrap();
    let (wal, whole) = closed(dir.path(), 350);
    let len = whole.len() as u64;
    let record = W as u64 + 4;
    assert_eq!(len, 36 + 50 * record);
    for gone in [1, 7, record, record + 1, 25 * record, 50 * record] {
        cut(&wal, len - gone);
        let before = files(dir.path());
        let manifest = fs::read(dir.path().join("MANIFEST")).unwrap();
        let err = small(dir.path()).memtable_items(100).open().unwrap_err();
        assert!(
            matches!(
                &err,
                Error::FileDamaged { file, fault: DecodeError::Truncated { needed, got } }
                    if *file == wal && *needed == len && *got == len - gone
            ),
            "cut by {gone}: {err}"
        );
        let text = err.to_string();
        let name = wal.file_name().unwrap().to_str().unwrap();
        assert!(text.contains(name), "{text}");
        assert!(text.contains(&len.to_string()), "{text}");
        assert!(text.contains(&(len - gone).to_string()), "{text}");
        assert_eq!(files(dir.path()), before, "cut by {gone}");
        assert_eq!(fs::read(&wal).unwrap(), &whole[..(len - gone) as usize]);
        assert_eq!(fs::read(dir.path().join("MANIFEST")).unwrap(), manifest);
        fs::write(&wal, &whole).unwrap();
    }
    let set = small(dir.path()).memtable_items(100).open().unwrap();
    assert!(!set.stats().filter_rebuilt);
    assert_eq!(set.len(), 350);
    assert_eq!(members(&set).len(), 350);
}

/// After a clean close no append can have happened, so a log that grew (a valid record
/// more), or whose last record is bad (a flip, a zeroed range), is damage too: refused,
/// never cut as a torn tail.
#[test]
fn a_log_grown_or_flipped_at_its_end_after_a_clean_close_is_a_typed_error() {
    let dir = tempfile::tempdir().unwrap();
    let (wal, whole) = closed(dir.path(), 130);
    let record = W + 4;
    let last = whole.len() - record;
    let mut grown = whole.clone();
    grown.extend_from_slice(&whole[last..]);
    let mut flipped = whole.clone();
    flipped[last + 3] ^= 0x10;
    let mut zeroed = whole.clone();
    zeroed[last - record..].fill(0);
    for (what, bytes) in [("grown", grown), ("flipped", flipped), ("zeroed", zeroed)] {
        fs::write(&wal, &bytes).unwrap();
        let err = small(dir.path()).memtable_items(100).open().unwrap_err();
        assert!(
            matches!(
                &err,
                Error::FileDamaged { file, fault: DecodeError::Inconsistent(_) } if *file == wal
            ),
            "{what}: {err}"
        );
        assert_eq!(
            fs::read(&wal).unwrap(),
            bytes,
            "{what}: the log was changed"
        );
    }
    fs::write(&wal, &whole).unwrap();
    assert_eq!(
        small(dir.path()).memtable_items(100).open().unwrap().len(),
        130
    );
}

/// Without a clean close the same cuts are a crash's torn tail, as before: cut off, the
/// rest kept. This includes a set that was closed cleanly, then opened (which clears the
/// recorded length before its first append), added to and dropped.
#[test]
fn the_same_cuts_without_a_clean_close_are_a_torn_tail_cut_off() {
    let record = W as u64 + 4;
    for reopened_after_close in [false, true] {
        for gone in [1, 7, record, record + 1, 25 * record] {
            let dir = tempfile::tempdir().unwrap();
            if reopened_after_close {
                closed(dir.path(), 320);
            }
            let set = small(dir.path()).memtable_items(100).open().unwrap();
            set.insert_many(&(320..350).map(fp).collect::<Vec<_>>())
                .unwrap();
            set.sync().unwrap();
            drop(set);
            let wal = wal_file(dir.path());
            let len = fs::metadata(&wal).unwrap().len();
            let in_log = (len - 36) / record;
            cut(&wal, len - gone);
            let set = small(dir.path()).memtable_items(100).open().unwrap();
            let lost = gone.div_ceil(record);
            let kept_in_log = in_log - lost;
            assert_eq!(
                set.stats().torn_bytes_cut,
                lost * record - gone,
                "cut by {gone}"
            );
            assert_eq!(set.stats().memtable_items, kept_in_log, "cut by {gone}");
            assert_eq!(members(&set).len() as u64, set.len());
            assert_eq!(
                fs::metadata(&wal).unwrap().len(),
                36 + kept_in_log * record,
                "the torn tail is cut on disk"
            );
        }
    }
}

/// `kill -9` of a real child adding to a set that was closed cleanly: its open cleared the
/// recorded length before the first append, so the reopen treats the log's end as a
/// crash's (a torn tail, if the kill left one, is cut), loses no synced member and reports
/// no damage. The child stops short of a flush (whose manifest would clear the record
/// anyway): 100 members in the log from the parent, 800 more from the child, memtables of
/// 1,000.
#[test]
fn kill_9_after_a_clean_close_reopens_without_a_damage_error() {
    let dir = tempfile::tempdir().unwrap();
    let set = child_set(dir.path());
    set.insert_many(&(0..1_100).map(fp).collect::<Vec<_>>())
        .unwrap();
    set.close().unwrap();
    let mut cmd = child::command(ROLE_ENV, "add", Some("fpset_child"));
    cmd.env(DIR_ENV, dir.path()).env(ADDS_ENV, "1900");
    let killed = child::kill_after(
        cmd,
        "SYNCED 1500",
        Duration::from_millis(1),
        Some(Duration::from_secs(60)),
    );
    assert!(killed.reached, "{:?}", killed.lines.last());
    let durable = synced(&killed.lines);
    let n = check_after_kill(dir.path(), durable);
    assert!((1_500..=1_900).contains(&n), "{n} members");
}

/// The manifest of a clean close as builds before the log's length was recorded wrote it:
/// flags 1 (clean), no length field, its CRC32 recomputed (`src/format/manifest.rs`).
fn as_old_manifest(dir: &Path) {
    let path = dir.join("MANIFEST");
    let new = fs::read(&path).unwrap();
    assert_eq!(new[24], 3, "this build's clean close records the length");
    let mut old = new[..new.len() - 4 - 8].to_vec();
    old[24] = 1;
    let crc = crc32fast::hash(&old);
    old.extend_from_slice(&crc.to_le_bytes());
    fs::write(&path, old).unwrap();
}

/// An old clean manifest (without the log's length) still opens, its saved filter
/// trusted; a cut log is then read as a torn tail, as it always was: the length is unknown.
#[test]
fn an_old_manifest_without_the_log_length_still_opens() {
    let dir = tempfile::tempdir().unwrap();
    let (wal, whole) = closed(dir.path(), 350);
    as_old_manifest(dir.path());
    let set = small(dir.path()).memtable_items(100).open().unwrap();
    assert!(!set.stats().filter_rebuilt, "the old clean mark is trusted");
    assert_eq!(set.len(), 350);
    set.close().unwrap();
    as_old_manifest(dir.path());
    cut(&wal, whole.len() as u64 - 7);
    let set = small(dir.path()).memtable_items(100).open().unwrap();
    assert_eq!(set.stats().torn_bytes_cut, W as u64 + 4 - 7);
    assert_eq!(set.len(), 349);
}

//! Corruption of real snapshot files: flipped header bits, flipped page bytes, truncation,
//! missing pages, stale and foreign snapshots, future versions, garbage, damaged markers.
//! Default mode: open succeeds, the report says "rebuilt" with the right reason, and no key
//! is missing from the filter. Strict mode: the matching typed error.

mod common;
use common::copy_dir;
use std::fs;
use std::path::{Path, PathBuf};

use bloomsled::format::{HEADER_LEN, PAGE_HEADER_LEN};
use bloomsled::{Config, DecodeError, Distrust, Error, RecoveryOutcome, RecoveryPolicy};

const KEYS: u32 = 2_000;
const PAGE: u32 = 512;

fn config(dir: &Path) -> Config {
    Config::new()
        .path(dir)
        .expected_items(u64::from(KEYS))
        .snapshot_page_size(PAGE)
}

fn key(i: u32) -> Vec<u8> {
    format!("spam-sender-{i}@example.net").into_bytes()
}

/// A database with KEYS keys in tree "t", closed cleanly, and a pristine copy of its whole
/// directory (sled's files and bloomsled's) that `restore` puts back after each case: the
/// trust record lives in sled, so a snapshot file alone is never the whole state.
struct Fixture {
    dir: tempfile::TempDir,
    pristine: tempfile::TempDir,
    snap: PathBuf,
    snap_bytes: Vec<u8>,
    counting: bool,
}

impl Fixture {
    fn new() -> Self {
        Self::with_mode(false)
    }

    fn with_mode(counting: bool) -> Self {
        let dir = tempfile::tempdir().unwrap();
        let snap = {
            let db = config(dir.path()).counting(counting).open().unwrap();
            let t = db.open_tree("t").unwrap();
            for i in 0..KEYS {
                t.insert(key(i), &b"1"[..]).unwrap();
            }
            t.filter_snapshot_path().unwrap().to_path_buf()
        };
        let pristine = tempfile::tempdir().unwrap();
        copy_dir(dir.path(), pristine.path());
        let f = Fixture {
            snap_bytes: fs::read(&snap).unwrap(),
            dir,
            pristine,
            snap,
            counting,
        };
        assert_eq!(
            f.open_report(),
            RecoveryOutcome::Loaded,
            "pristine fixture must load"
        );
        f
    }

    fn restore(&self) {
        fs::remove_dir_all(self.dir.path()).unwrap();
        copy_dir(self.pristine.path(), self.dir.path());
    }

    fn cfg(&self) -> Config {
        config(self.dir.path()).counting(self.counting)
    }

    /// Opens in default mode; checks every key (and, in counting mode, the exact count);
    /// returns the outcome; restores the files.
    fn open_report(&self) -> RecoveryOutcome {
        let outcome = {
            let db = self.cfg().open().unwrap();
            let t = db.open_tree("t").unwrap();
            assert!(t
                .wait_for_filter(std::time::Duration::from_secs(60))
                .unwrap());
            for i in 0..KEYS {
                assert!(t.may_contain(key(i)), "false negative for key {i}");
            }
            if self.counting {
                assert_eq!(t.stats().items, u64::from(KEYS));
            }
            let r = t.recovery_report();
            if let RecoveryOutcome::Rebuilt { .. } = r.outcome {
                assert_eq!(r.keys_scanned, u64::from(KEYS));
            }
            r.outcome
        };
        self.restore();
        outcome
    }

    /// Opens in strict mode; returns the fault it reports; restores the files.
    fn strict_fault(&self) -> Distrust {
        let r = self.cfg().recovery(RecoveryPolicy::Strict).open();
        let fault = match r.and_then(|db| db.open_tree("t")) {
            Err(Error::SnapshotRejected { tree, fault }) => {
                assert_eq!(tree, "t");
                fault
            }
            Ok(_) => panic!("strict open accepted a damaged snapshot"),
            Err(e) => panic!("unexpected error {e}"),
        };
        self.restore();
        fault
    }

    fn with_snapshot(&self, bytes: &[u8]) -> &Self {
        fs::write(&self.snap, bytes).unwrap();
        self
    }
}

fn rebuilt_reason(o: RecoveryOutcome) -> Distrust {
    match o {
        RecoveryOutcome::Rebuilt { reason } => reason,
        other => panic!("expected a rebuild, got {other:?}"),
    }
}

#[test]
fn every_header_byte_flipped_is_detected_and_repaired() {
    let f = Fixture::new();
    for byte in 0..HEADER_LEN {
        let mut b = f.snap_bytes.clone();
        b[byte] ^= 1 << (byte % 8);
        let reason = rebuilt_reason(f.with_snapshot(&b).open_report());
        let expected_kind = match byte {
            0..=7 => matches!(reason, Distrust::Decode(DecodeError::BadMagic { .. })),
            8..=11 => matches!(
                reason,
                Distrust::Decode(DecodeError::UnsupportedVersion { .. })
            ),
            _ => matches!(reason, Distrust::Decode(DecodeError::HeaderChecksum { .. })),
        };
        assert!(expected_kind, "byte {byte}: {reason:?}");
        // Strict mode names the same fault (checked on a sample: each open costs ~10 ms).
        if byte % 13 == 0 {
            assert_eq!(f.with_snapshot(&b).strict_fault(), reason, "byte {byte}");
        }
    }
}

#[test]
fn page_damage_names_the_page() {
    let f = Fixture::new();
    let pages = (f.snap_bytes.len() - HEADER_LEN) / (PAGE_HEADER_LEN + PAGE as usize);
    assert!(pages >= 4, "fixture should span several pages, has {pages}");
    let mut rng = 0x1234_5678_9abc_def0u64;
    for _ in 0..24 {
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        let page = (rng % pages as u64) as usize;
        let within = PAGE_HEADER_LEN + (rng >> 20) as usize % PAGE as usize;
        let off = HEADER_LEN + page * (PAGE_HEADER_LEN + PAGE as usize) + within;
        let mut b = f.snap_bytes.clone();
        b[off] ^= 1 << ((rng >> 8) % 8);
        let reason = rebuilt_reason(f.with_snapshot(&b).open_report());
        assert!(
            matches!(reason, Distrust::Decode(DecodeError::PageChecksum { page: p, .. }) if p as usize == page),
            "flip in page {page}: {reason:?}"
        );
    }
    let mut b = f.snap_bytes.clone();
    b[HEADER_LEN + 2 * (PAGE_HEADER_LEN + PAGE as usize) + 40] ^= 0xff;
    assert!(matches!(
        f.with_snapshot(&b).strict_fault(),
        Distrust::Decode(DecodeError::PageChecksum { page: 2, .. })
    ));
}

#[test]
fn truncation_and_missing_pages_are_repaired() {
    let f = Fixture::new();
    let len = f.snap_bytes.len();
    let span = PAGE_HEADER_LEN + PAGE as usize;
    let mut lengths = vec![
        0,
        1,
        7,
        8,
        12,
        50,
        HEADER_LEN - 1,
        HEADER_LEN,
        HEADER_LEN + 1,
    ];
    lengths.extend([
        HEADER_LEN + PAGE_HEADER_LEN,
        HEADER_LEN + span,
        HEADER_LEN + span + 3,
    ]);
    lengths.extend([len / 2, len - span, len - 8, len - 1]);
    for cut in lengths {
        let reason = rebuilt_reason(f.with_snapshot(&f.snap_bytes[..cut]).open_report());
        let ok = if cut < 8 {
            matches!(reason, Distrust::Decode(DecodeError::BadMagic { .. }))
        } else {
            matches!(reason, Distrust::Decode(DecodeError::Truncated { .. }))
        };
        assert!(ok, "cut at {cut}: {reason:?}");
    }
    assert!(matches!(
        f.with_snapshot(&f.snap_bytes[..len / 2]).strict_fault(),
        Distrust::Decode(DecodeError::Truncated { .. })
    ));
    // A page cut out of the middle: the next page stands where it should be, with the
    // wrong index (or, at the end, the file is short).
    let mut b = f.snap_bytes[..HEADER_LEN + span].to_vec();
    b.extend_from_slice(&f.snap_bytes[HEADER_LEN + 2 * span..]);
    let reason = rebuilt_reason(f.with_snapshot(&b).open_report());
    assert!(
        matches!(
            reason,
            Distrust::Decode(DecodeError::Truncated { .. } | DecodeError::Inconsistent(_))
        ),
        "{reason:?}"
    );
    // Two pages swapped: same length, wrong order.
    let mut b = f.snap_bytes.clone();
    let (p1, p2) = (HEADER_LEN + span, HEADER_LEN + 2 * span);
    b[p1..p1 + span].copy_from_slice(&f.snap_bytes[p2..p2 + span]);
    b[p2..p2 + span].copy_from_slice(&f.snap_bytes[p1..p1 + span]);
    assert!(matches!(
        rebuilt_reason(f.with_snapshot(&b).open_report()),
        Distrust::Decode(DecodeError::Inconsistent(_))
            | Distrust::Decode(DecodeError::PageChecksum { .. })
    ));
}

#[test]
fn future_version_garbage_and_foreign_snapshots_are_refused() {
    let f = Fixture::new();
    // A well-formed header from a future version (checksum fixed up).
    let mut b = f.snap_bytes.clone();
    b[8..12].copy_from_slice(&3u32.to_le_bytes());
    let crc = crc32fast::hash(&b[..HEADER_LEN - 4]);
    b[HEADER_LEN - 4..HEADER_LEN].copy_from_slice(&crc.to_le_bytes());
    let want = Distrust::Decode(DecodeError::UnsupportedVersion {
        expected: 2,
        got: 3,
    });
    assert_eq!(rebuilt_reason(f.with_snapshot(&b).open_report()), want);
    assert_eq!(f.with_snapshot(&b).strict_fault(), want);

    let garbage: Vec<u8> = (0..5_000u32)
        .map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8)
        .collect();
    assert!(matches!(
        rebuilt_reason(f.with_snapshot(&garbage).open_report()),
        Distrust::Decode(DecodeError::BadMagic { .. })
    ));
    assert!(matches!(
        rebuilt_reason(f.with_snapshot(&[]).open_report()),
        Distrust::Decode(DecodeError::BadMagic { .. })
    ));

    // Another tree's snapshot copied over this one's.
    let other_snap = {
        let db = config(f.dir.path()).open().unwrap();
        let o = db.open_tree("other").unwrap();
        o.insert("x", "y").unwrap();
        o.filter_snapshot_path().unwrap().to_path_buf()
    };
    let foreign = fs::read(other_snap).unwrap();
    assert_eq!(
        rebuilt_reason(f.with_snapshot(&foreign).open_report()),
        Distrust::OtherTree
    );
}

#[test]
fn a_rolled_back_snapshot_is_not_trusted() {
    let f = Fixture::new();
    // Move on: new keys, clean close (a newer snapshot). Then put the old snapshot back, as
    // a restore of the filter files alone from a backup would.
    {
        let db = config(f.dir.path()).open().unwrap();
        let t = db.open_tree("t").unwrap();
        for i in KEYS..KEYS + 500 {
            t.insert(key(i), &b"2"[..]).unwrap();
        }
    }
    fs::write(&f.snap, &f.snap_bytes).unwrap();
    let moved_on = tempfile::tempdir().unwrap();
    copy_dir(f.dir.path(), moved_on.path());
    {
        let db = config(f.dir.path()).open().unwrap();
        let t = db.open_tree("t").unwrap();
        let r = t.recovery_report();
        assert!(
            matches!(
                r.outcome,
                RecoveryOutcome::Rebuilt {
                    reason: Distrust::NotCurrent { .. }
                }
            ),
            "{r:?}"
        );
        for i in 0..KEYS + 500 {
            assert!(t.may_contain(key(i)), "false negative for key {i}");
            assert!(t.get(key(i)).unwrap().is_some(), "get missed key {i}");
        }
    }
    // The same situation in strict mode.
    fs::remove_dir_all(f.dir.path()).unwrap();
    copy_dir(moved_on.path(), f.dir.path());
    match config(f.dir.path())
        .recovery(RecoveryPolicy::Strict)
        .open()
        .and_then(|db| db.open_tree("t"))
    {
        Err(Error::SnapshotRejected {
            fault:
                Distrust::NotCurrent {
                    snapshot_sequence,
                    recorded_sequence,
                },
            ..
        }) => assert!(recorded_sequence > snapshot_sequence),
        other => panic!("{other:?}"),
    }
}

/// Opens the database with plain sled and applies `edit` to its bloomsled meta tree.
fn edit_meta(dir: &Path, edit: impl FnOnce(&sled::Tree)) {
    let db = common::sled_open(dir).unwrap();
    let meta = db.open_tree(bloomsled::persist::META_TREE).unwrap();
    edit(&meta);
    db.flush().unwrap();
}

#[test]
fn a_missing_or_damaged_record_forces_a_rebuild() {
    let f = Fixture::new();
    edit_meta(f.dir.path(), |m| {
        m.remove(b"t/t").unwrap();
    });
    assert_eq!(rebuilt_reason(f.open_report()), Distrust::NoRecord);
    edit_meta(f.dir.path(), |m| {
        let mut r = m.get(b"t/t").unwrap().unwrap().to_vec();
        r[40] ^= 0x20;
        m.insert(b"t/t", r).unwrap();
    });
    assert!(matches!(
        rebuilt_reason(f.open_report()),
        Distrust::RecordUnreadable(DecodeError::HeaderChecksum { .. })
    ));
    // A record marked dirty (as a crash after a write leaves it) is stale, and a dirty mark
    // this far past the snapshot is more sequences than crash journals are kept for.
    edit_meta(f.dir.path(), |m| {
        let mut r = m.get(b"t/t").unwrap().unwrap().to_vec();
        r[56..64].copy_from_slice(&u64::MAX.to_le_bytes());
        let crc = crc32fast::hash(&r[..100]);
        r[100..].copy_from_slice(&crc.to_le_bytes());
        m.insert(b"t/t", r).unwrap();
    });
    assert!(matches!(
        rebuilt_reason(f.open_report()),
        Distrust::Journal {
            fault: bloomsled::JournalFault::TooMany { .. },
            ..
        }
    ));
    // And after a repair the next clean open loads again.
    edit_meta(f.dir.path(), |m| {
        m.remove(b"t/t").unwrap();
    });
    {
        let db = config(f.dir.path()).open().unwrap();
        let t = db.open_tree("t").unwrap();
        assert!(t
            .wait_for_filter(std::time::Duration::from_secs(60))
            .unwrap());
    }
    let db = config(f.dir.path()).open().unwrap();
    assert!(db.open_tree("t").unwrap().recovery_report().loaded());
}

#[test]
fn verify_reports_a_damaged_snapshot_and_checks_every_key() {
    let f = Fixture::new();
    let db = config(f.dir.path()).open().unwrap();
    let t = db.open_tree("t").unwrap();
    let healthy = t.verify().unwrap();
    assert!(healthy.is_ok(), "{healthy:?}");
    assert_eq!(healthy.keys_checked, u64::from(KEYS));
    assert_eq!(healthy.false_negatives, 0);
    // Damage the file under a running database: verify notices, the live filter is intact.
    let mut b = f.snap_bytes.clone();
    b[HEADER_LEN + PAGE_HEADER_LEN + 3] ^= 1;
    fs::write(&f.snap, &b).unwrap();
    let damaged = t.verify().unwrap();
    assert!(!damaged.is_ok());
    assert!(matches!(
        damaged.snapshot,
        Some(Err(Distrust::Decode(DecodeError::PageChecksum {
            page: 0,
            ..
        })))
    ));
    assert_eq!(damaged.false_negatives, 0);
    // A snapshot repairs it.
    t.snapshot().unwrap();
    assert!(t.verify().unwrap().is_ok());
}

#[test]
fn missing_snapshot_of_an_existing_tree() {
    let f = Fixture::new();
    fs::remove_file(&f.snap).unwrap();
    assert_eq!(rebuilt_reason(f.open_report()), Distrust::Missing);
    fs::remove_file(&f.snap).unwrap();
    assert_eq!(f.strict_fault(), Distrust::Missing);
}

#[test]
fn counting_snapshots_are_checked_like_plain_ones() {
    let f = Fixture::with_mode(true);
    let len = f.snap_bytes.len();
    // Counters take four times the bits' room: the payload is most of the file.
    assert!(len > HEADER_LEN + 4 * 64 * (KEYS as usize * 10 / 512));
    for byte in (0..len).step_by(len / 97) {
        let mut b = f.snap_bytes.clone();
        b[byte] ^= 0x10;
        let fault = rebuilt_reason(f.with_snapshot(&b).open_report());
        assert!(!matches!(fault, Distrust::Missing), "byte {byte}: {fault}");
    }
    for cut in [0, 8, HEADER_LEN - 1, HEADER_LEN + 17, len / 2, len - 1] {
        rebuilt_reason(f.with_snapshot(&f.snap_bytes[..cut]).open_report());
    }
    assert!(matches!(
        f.with_snapshot(&f.snap_bytes[..len / 2]).strict_fault(),
        Distrust::Decode(DecodeError::Truncated { .. })
    ));
    assert_eq!(f.open_report(), RecoveryOutcome::Loaded);
}

/// A file that passes every CRC and carries the tree's own ids, yet describes an impossible
/// filter (capacity 0: edited by hand, header CRC recomputed), is rebuilt like any other
/// untrusted snapshot, and refused in strict mode; the open does not fail.
#[test]
fn an_impossible_filter_behind_valid_checksums_is_rebuilt() {
    let f = Fixture::new();
    let mut b = f.snap_bytes.clone();
    b[96..104].copy_from_slice(&0u64.to_le_bytes());
    let crc = crc32fast::hash(&b[..HEADER_LEN - 4]);
    b[HEADER_LEN - 4..HEADER_LEN].copy_from_slice(&crc.to_le_bytes());
    assert!(matches!(
        rebuilt_reason(f.with_snapshot(&b).open_report()),
        Distrust::Decode(DecodeError::Inconsistent(_))
    ));
    assert!(matches!(
        f.with_snapshot(&b).strict_fault(),
        Distrust::Decode(DecodeError::Inconsistent(_))
    ));
}

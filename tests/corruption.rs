//! Corruption of real snapshot files: flipped header bits, flipped page bytes, truncation,
//! missing pages, stale and foreign snapshots, future versions, garbage, damaged markers.
//! Default mode: open succeeds, the report says "rebuilt" with the right reason, and no key
//! is missing from the filter. Strict mode: the matching typed error.

use std::fs;
use std::path::{Path, PathBuf};

use bloomsled::format::{HEADER_LEN, PAGE_HEADER_LEN};
use bloomsled::{Config, Error, Recovery, RecoveryOutcome, SnapshotFault};

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

/// A database with KEYS keys in tree "t", closed cleanly. Returns the snapshot path and the
/// pristine snapshot and marker bytes.
struct Fixture {
    dir: tempfile::TempDir,
    snap: PathBuf,
    state: PathBuf,
    snap_bytes: Vec<u8>,
    state_bytes: Vec<u8>,
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
            t.snapshot_path().unwrap().to_path_buf()
        };
        let state = snap.with_extension("state");
        let f = Fixture {
            snap_bytes: fs::read(&snap).unwrap(),
            state_bytes: fs::read(&state).unwrap(),
            dir,
            snap,
            state,
            counting,
        };
        assert_eq!(
            f.open_report(),
            RecoveryOutcome::Loaded,
            "pristine fixture must load"
        );
        f.restore();
        f
    }

    fn restore(&self) {
        fs::write(&self.snap, &self.snap_bytes).unwrap();
        fs::write(&self.state, &self.state_bytes).unwrap();
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
    fn strict_fault(&self) -> SnapshotFault {
        let r = self.cfg().recovery(Recovery::Strict).open();
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

fn rebuilt_reason(o: RecoveryOutcome) -> SnapshotFault {
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
            0..=7 => matches!(reason, SnapshotFault::BadMagic { .. }),
            8..=11 => matches!(reason, SnapshotFault::UnsupportedVersion { .. }),
            _ => matches!(reason, SnapshotFault::HeaderChecksum { .. }),
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
            matches!(reason, SnapshotFault::PageChecksum { page: p, .. } if p as usize == page),
            "flip in page {page}: {reason:?}"
        );
    }
    let mut b = f.snap_bytes.clone();
    b[HEADER_LEN + 2 * (PAGE_HEADER_LEN + PAGE as usize) + 40] ^= 0xff;
    assert!(matches!(
        f.with_snapshot(&b).strict_fault(),
        SnapshotFault::PageChecksum { page: 2, .. }
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
            matches!(reason, SnapshotFault::BadMagic { .. })
        } else {
            matches!(reason, SnapshotFault::Truncated { .. })
        };
        assert!(ok, "cut at {cut}: {reason:?}");
    }
    assert!(matches!(
        f.with_snapshot(&f.snap_bytes[..len / 2]).strict_fault(),
        SnapshotFault::Truncated { .. }
    ));
    // A page cut out of the middle: shorter than the header says.
    let mut b = f.snap_bytes[..HEADER_LEN + span].to_vec();
    b.extend_from_slice(&f.snap_bytes[HEADER_LEN + 2 * span..]);
    assert!(matches!(
        rebuilt_reason(f.with_snapshot(&b).open_report()),
        SnapshotFault::Truncated { .. }
    ));
    // Two pages swapped: same length, wrong order.
    let mut b = f.snap_bytes.clone();
    let (p1, p2) = (HEADER_LEN + span, HEADER_LEN + 2 * span);
    b[p1..p1 + span].copy_from_slice(&f.snap_bytes[p2..p2 + span]);
    b[p2..p2 + span].copy_from_slice(&f.snap_bytes[p1..p1 + span]);
    assert!(matches!(
        rebuilt_reason(f.with_snapshot(&b).open_report()),
        SnapshotFault::Inconsistent(_) | SnapshotFault::PageChecksum { .. }
    ));
}

#[test]
fn future_version_garbage_and_foreign_snapshots_are_refused() {
    let f = Fixture::new();
    // A well-formed header from a future version (checksum fixed up).
    let mut b = f.snap_bytes.clone();
    b[8..12].copy_from_slice(&2u32.to_le_bytes());
    let crc = crc32fast::hash(&b[..HEADER_LEN - 4]);
    b[HEADER_LEN - 4..HEADER_LEN].copy_from_slice(&crc.to_le_bytes());
    let want = SnapshotFault::UnsupportedVersion {
        expected: 1,
        got: 2,
    };
    assert_eq!(rebuilt_reason(f.with_snapshot(&b).open_report()), want);
    assert_eq!(f.with_snapshot(&b).strict_fault(), want);

    let garbage: Vec<u8> = (0..5_000u32)
        .map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8)
        .collect();
    assert!(matches!(
        rebuilt_reason(f.with_snapshot(&garbage).open_report()),
        SnapshotFault::BadMagic { .. }
    ));
    assert!(matches!(
        rebuilt_reason(f.with_snapshot(&[]).open_report()),
        SnapshotFault::BadMagic { .. }
    ));

    // Another tree's snapshot copied over this one's.
    let other_snap = {
        let db = config(f.dir.path()).open().unwrap();
        let o = db.open_tree("other").unwrap();
        o.insert("x", "y").unwrap();
        o.snapshot_path().unwrap().to_path_buf()
    };
    let foreign = fs::read(other_snap).unwrap();
    assert!(matches!(
        rebuilt_reason(f.with_snapshot(&foreign).open_report()),
        SnapshotFault::Inconsistent(_)
    ));
}

#[test]
fn stale_snapshot_and_damaged_marker_are_not_trusted() {
    let f = Fixture::new();
    // Move on: new keys, clean close (a newer snapshot). Then put the old snapshot back.
    {
        let db = config(f.dir.path()).open().unwrap();
        let t = db.open_tree("t").unwrap();
        for i in KEYS..KEYS + 500 {
            t.insert(key(i), &b"2"[..]).unwrap();
        }
    }
    let newer_state = fs::read(&f.state).unwrap();
    fs::write(&f.snap, &f.snap_bytes).unwrap();
    {
        let db = config(f.dir.path()).open().unwrap();
        let t = db.open_tree("t").unwrap();
        let r = t.recovery_report();
        assert!(
            matches!(
                r.outcome,
                RecoveryOutcome::Rebuilt {
                    reason: SnapshotFault::Stale { .. }
                }
            ),
            "{r:?}"
        );
        for i in 0..KEYS + 500 {
            assert!(t.may_contain(key(i)), "false negative for key {i}");
        }
    }
    // The same situation in strict mode.
    fs::write(&f.snap, &f.snap_bytes).unwrap();
    fs::write(&f.state, &newer_state).unwrap();
    match config(f.dir.path())
        .recovery(Recovery::Strict)
        .open()
        .and_then(|db| db.open_tree("t"))
    {
        Err(Error::SnapshotRejected {
            fault:
                SnapshotFault::Stale {
                    snapshot_generation,
                    dirty_generation,
                },
            ..
        }) => {
            assert!(dirty_generation >= snapshot_generation)
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn missing_or_corrupt_marker_forces_a_rebuild() {
    let f = Fixture::new();
    fs::remove_file(&f.state).unwrap();
    assert!(matches!(
        rebuilt_reason(f.open_report()),
        SnapshotFault::StateUnreadable(_)
    ));
    let mut s = f.state_bytes.clone();
    s[9] ^= 0x20;
    fs::write(&f.state, &s).unwrap();
    assert!(matches!(
        rebuilt_reason(f.open_report()),
        SnapshotFault::StateUnreadable(_)
    ));
    // And after the repair the next clean open loads again.
    {
        let db = config(f.dir.path()).open().unwrap();
        db.open_tree("t").unwrap();
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
        Some(Err(SnapshotFault::PageChecksum { page: 0, .. }))
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
    assert_eq!(rebuilt_reason(f.open_report()), SnapshotFault::Missing);
    fs::remove_file(&f.snap).unwrap();
    assert_eq!(f.strict_fault(), SnapshotFault::Missing);
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
        assert!(
            !matches!(fault, SnapshotFault::Missing),
            "byte {byte}: {fault}"
        );
    }
    for cut in [0, 8, HEADER_LEN - 1, HEADER_LEN + 17, len / 2, len - 1] {
        rebuilt_reason(f.with_snapshot(&f.snap_bytes[..cut]).open_report());
    }
    assert!(matches!(
        f.with_snapshot(&f.snap_bytes[..len / 2]).strict_fault(),
        SnapshotFault::Truncated { .. }
    ));
    assert_eq!(f.open_report(), RecoveryOutcome::Loaded);
}

//! The crash journal: after `kill -9` (same boot) a tree comes back from its snapshot and
//! its journals at once, with no scan and no false negative; a journal that is damaged,
//! truncated, zeroed, foreign, overflowed, missing or from another boot is refused with its
//! reason, and the tree is rebuilt from a scan (never a false negative, never a panic).
//!
//! A child (this binary, re-run) loads keys, snapshots, then writes 1,000 more — inserts,
//! batches, transactions over two trees and, in counting mode, removes — and is killed
//! with SIGKILL at a random instant (seeded, printed), often mid-batch. The boot id seam
//! (`persist::set_boot_id`) is process-wide, so the tests of this file run one at a time.

mod common;

use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::Duration;

use bloomsled::persist::{set_boot_id, DIR_NAME};
use bloomsled::{Batch, Config, Db, Distrust, JournalFault, RecoveryOutcome, Transactional};
use common::child;
use common::rng::Rng;

static SERIAL: Mutex<()> = Mutex::new(());

const ROLE_ENV: &str = "BLOOMSLED_JOURNAL_TEST_ROLE";
const DIR_ENV: &str = "BLOOMSLED_JOURNAL_TEST_DIR";
const SEED_ENV: &str = "BLOOMSLED_JOURNAL_TEST_SEED";

const LOADED: u64 = 20_000;
const AFTER: u64 = 1_000;

fn config(dir: &Path, counting: bool) -> Config {
    Config::new()
        .path(dir)
        .counting(counting)
        .expected_items(40_000)
        .flush_every_ms(Some(20))
}

fn key(i: u64) -> Vec<u8> {
    format!(
        "https://journal.example.com/{i:08}/{}",
        "j".repeat((i % 29) as usize)
    )
    .into_bytes()
}

/// The child: loads, snapshots, prints `DIRTY` after its first write past the snapshot,
/// writes the rest at random, prints `DONE` and waits for its kill.
#[test]
fn journal_child() {
    let Ok(role) = std::env::var(ROLE_ENV) else {
        return;
    };
    let dir = PathBuf::from(std::env::var(DIR_ENV).unwrap());
    let seed: u64 = std::env::var(SEED_ENV).unwrap().parse().unwrap();
    let counting = role == "counting";
    let db = config(&dir, counting).open().unwrap();
    let other = db.open_tree("other").unwrap();
    for start in (0..LOADED).step_by(5_000) {
        let mut b = Batch::default();
        for i in start..start + 5_000 {
            b.insert(key(i), &b"v"[..]);
        }
        db.apply_batch(b).unwrap();
    }
    db.snapshot().unwrap();
    other.snapshot().unwrap();
    db.insert(key(LOADED), &b"first"[..]).unwrap();
    println!("DIRTY");
    write_after(&db, &other, counting, seed);
    db.flush().unwrap();
    println!("DONE");
    std::thread::sleep(Duration::from_secs(600));
    std::process::exit(3);
}

/// Keys `LOADED + 1 ..= LOADED + AFTER` in ones, batches and transactions; counting mode
/// also removes loaded keys.
fn write_after(db: &Db, other: &bloomsled::Tree, counting: bool, seed: u64) {
    let mut rng = Rng(seed);
    let mut i = LOADED + 1;
    while i <= LOADED + AFTER {
        match rng.below(4) {
            0 => {
                let mut b = Batch::default();
                for _ in 0..1 + rng.below(40) {
                    b.insert(key(i), &b"b"[..]);
                    i += 1;
                }
                db.apply_batch(b).unwrap();
            }
            1 => {
                let (k1, k2) = (key(i), key(i + 1));
                i += 2;
                let r: bloomsled::transaction::TransactionResult<()> =
                    (&**db, other).transaction(|(a, b)| {
                        a.insert(k1.clone(), &b"t"[..])?;
                        b.insert(k2.clone(), &b"t"[..])?;
                        Ok(())
                    });
                r.unwrap();
            }
            _ => {
                db.insert(key(i), &b"i"[..]).unwrap();
                i += 1;
            }
        }
        if counting && rng.below(3) == 0 {
            db.remove(key(rng.below(LOADED))).unwrap();
        }
    }
}

/// Runs a child and kills it `then` after it printed `marker`.
fn crash(dir: &Path, counting: bool, seed: u64, marker: &str, then: Duration) {
    let mut cmd = child::command(
        ROLE_ENV,
        if counting { "counting" } else { "plain" },
        Some("journal_child"),
    );
    cmd.env(DIR_ENV, dir).env(SEED_ENV, seed.to_string());
    let killed = child::kill_after(cmd, marker, then, Some(Duration::from_secs(120)));
    assert!(
        killed.reached,
        "seed {seed}: the child never printed {marker}"
    );
}

/// Every key sled holds in `tree` passes the filter (and, in counting mode, still does
/// after a third of them are removed); returns the keys checked.
fn no_false_negative(tree: &bloomsled::Tree, counting: bool, what: &str) -> usize {
    let keys: Vec<_> = tree.iter().keys().collect::<Result<_, _>>().unwrap();
    for k in &keys {
        assert!(
            tree.may_contain(k),
            "{what}: FALSE NEGATIVE {:?} ({:?})",
            String::from_utf8_lossy(k),
            tree.recovery_report()
        );
    }
    if counting {
        for k in keys.iter().step_by(3) {
            tree.remove(k).unwrap();
        }
        for (n, k) in keys.iter().enumerate() {
            assert!(n % 3 == 0 || tree.may_contain(k), "{what}: SHORT COUNTER");
        }
    }
    keys.len()
}

#[test]
fn kill_9_at_random_points_is_replayed_at_once_with_no_false_negative() {
    let _one = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
    let first = 0x10E5_u64;
    let mut rng = Rng(first);
    for case in 0..10 {
        let counting = case % 2 == 1;
        let seed = rng.next();
        // The 1,000 writes take some tens of milliseconds: kill inside them.
        let then = Duration::from_micros(rng.below(30_000));
        let what = format!("case {case} seed {seed} counting {counting} kill {then:?} in");
        let dir = tempfile::tempdir().unwrap();
        crash(dir.path(), counting, seed, "DIRTY", then);
        let db = config(dir.path(), counting).open().unwrap();
        let other = db.open_tree("other").unwrap();
        let r = db.recovery_report();
        // The filter serves at once: replayed, no scan behind it.
        assert!(r.replayed() && r.rebuilding.is_none(), "{what}: {r:?}");
        assert!(db.stats().filter_in_use, "{what}");
        let o = other.recovery_report();
        assert!(o.replayed() || o.loaded(), "{what}: {o:?}");
        let n =
            no_false_negative(&db, counting, &what) + no_false_negative(&other, counting, &what);
        println!("{what}: {:?}, {n} keys checked", r.outcome);
        assert!(n as u64 > LOADED, "{what}");
        // Closed cleanly now: the next open loads a fresh snapshot.
        drop(other);
        db.close().unwrap();
        let db = config(dir.path(), counting).open().unwrap();
        assert!(db.recovery_report().loaded(), "{what}");
    }
}

/// A tree's journal files: (path, reserved count, read from its counter file).
fn journals(dir: &Path) -> Vec<(PathBuf, u64)> {
    let mut out: Vec<_> = std::fs::read_dir(dir.join(DIR_NAME))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "jnl"))
        .map(|p| {
            let bytes = std::fs::read(common::journal_counter_file(&p)).unwrap();
            let reserved = u64::from_le_bytes(bytes[80..88].try_into().unwrap());
            (p, reserved)
        })
        .collect();
    out.sort_by_key(|(_, n)| std::cmp::Reverse(*n));
    out
}

/// Opens a copy of `base` damaged by `damage` (given the main tree's journal and the other
/// tree's) and checks the reason and that no stored key is denied, before and after the
/// rebuild.
/// A crashed database to damage copies of, with its journals' counter files as the kill
/// left them.
struct Base {
    dir: PathBuf,
    counters: Vec<(PathBuf, Vec<u8>)>,
}

fn refused(
    base: &Base,
    what: &str,
    damage: impl Fn(&Path, &Path),
    expect: fn(&JournalFault) -> bool,
) {
    let copy = tempfile::tempdir().unwrap();
    common::copy_dir(&base.dir, copy.path());
    // The counter files (outside the folder) as the kill left them: an earlier case's
    // open of a copy (same database and tree ids) retired them.
    let js = journals_with_counters(copy.path(), &base.counters);
    damage(&js[0].0, &js[1].0);
    let db = config(copy.path(), false).open().unwrap();
    let r = db.recovery_report();
    match &r.outcome {
        RecoveryOutcome::Rebuilt {
            reason: Distrust::Journal { fault, .. },
        } => assert!(expect(fault), "{what}: {fault:?}"),
        o => panic!("{what}: {o:?}"),
    }
    no_false_negative(&db, false, what);
    assert!(
        db.wait_for_filter(Duration::from_secs(120)).unwrap(),
        "{what}"
    );
    no_false_negative(&db, false, what);
}

fn edit(path: &Path, f: impl FnOnce(&mut Vec<u8>)) {
    let mut bytes = std::fs::read(path).unwrap();
    f(&mut bytes);
    std::fs::write(path, bytes).unwrap();
}

fn reseal(bytes: &mut [u8]) {
    let crc = crc32fast::hash(&bytes[..136]);
    bytes[136..140].copy_from_slice(&crc.to_le_bytes());
}

/// The counter files of `dir`'s journals, with their bytes.
fn counter_files(dir: &Path) -> Vec<(PathBuf, Vec<u8>)> {
    journals(dir)
        .iter()
        .map(|(j, _)| {
            let c = common::journal_counter_file(j);
            let bytes = std::fs::read(&c).unwrap();
            (c, bytes)
        })
        .collect()
}

/// `dir`'s journals after putting `counters` back.
fn journals_with_counters(dir: &Path, counters: &[(PathBuf, Vec<u8>)]) -> Vec<(PathBuf, u64)> {
    for (c, bytes) in counters {
        std::fs::write(c, bytes).unwrap();
    }
    journals(dir)
}

#[test]
fn a_damaged_foreign_or_other_boot_journal_is_refused_with_its_reason() {
    let _one = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
    let dir = tempfile::tempdir().unwrap();
    crash(dir.path(), false, 7, "DONE", Duration::ZERO);
    let base = dir.path();
    let js = journals(base);
    assert_eq!(js.len(), 2, "{js:?}");
    assert!(js[0].1 >= AFTER / 2, "{js:?}");
    let base = &Base {
        dir: base.to_path_buf(),
        counters: counter_files(base),
    };
    {
        // Undamaged: replayed (in a copy, the original stays as the kill left it).
        let copy = tempfile::tempdir().unwrap();
        common::copy_dir(&base.dir, copy.path());
        journals_with_counters(copy.path(), &base.counters);
        let db = config(copy.path(), false).open().unwrap();
        assert!(
            db.recovery_report().replayed(),
            "{:?}",
            db.recovery_report()
        );
        no_false_negative(&db, false, "undamaged");
    }
    let damaged = |f: &JournalFault| matches!(f, JournalFault::Damaged { .. });
    for at in [256 + 16 * 5 + 3, 256 + 16 * 5 + 12, 20, 100] {
        let what = format!("byte {at} flipped");
        refused(base, &what, |j, _| edit(j, |b| b[at] ^= 0x04), damaged);
    }
    let len = std::fs::metadata(&js[0].0).unwrap().len();
    for cut in [
        0,
        7,
        100,
        127,
        128,
        143,
        144,
        255,
        256,
        1000,
        256 + 16 * 500,
        len - 16,
        len - 1,
    ] {
        let what = format!("truncated at {cut}");
        let expect: fn(&JournalFault) -> bool = if cut < 144 {
            damaged
        } else {
            |f| matches!(f, JournalFault::Truncated { .. })
        };
        refused(
            base,
            &what,
            |j, _| edit(j, |b| b.truncate(cut as usize)),
            expect,
        );
    }
    refused(base, "zeroed", |j, _| edit(j, |b| b.fill(0)), damaged);
    refused(
        base,
        "records zeroed",
        |j, _| edit(j, |b| b[256 + 16 * 10..256 + 16 * 200].fill(0)),
        |f| matches!(f, JournalFault::RecordsLost { .. }),
    );
    refused(
        base,
        "overflowed",
        |j, _| {
            edit(&common::journal_counter_file(j), |b| {
                b[80..88].copy_from_slice(&(1u64 << 40).to_le_bytes())
            })
        },
        |f| matches!(f, JournalFault::Overflowed { .. }),
    );
    refused(
        base,
        "counter file deleted",
        |j, _| std::fs::remove_file(common::journal_counter_file(j)).unwrap(),
        |f| matches!(f, JournalFault::CountersMissing { .. }),
    );
    refused(
        base,
        "an earlier copy of itself (a prefix of its records)",
        |j, _| edit(j, |b| b[256 + 16 * 10..].fill(0)),
        |f| matches!(f, JournalFault::RecordsLost { .. }),
    );
    refused(
        base,
        "another incarnation (another nonce)",
        |j, _| {
            edit(j, |b| {
                b[96] ^= 1;
                reseal(b);
            })
        },
        |f| matches!(f, JournalFault::OtherIncarnation { .. }),
    );
    refused(
        base,
        "missing",
        |j, _| std::fs::remove_file(j).unwrap(),
        |f| matches!(f, JournalFault::Missing { .. }),
    );
    refused(
        base,
        "another tree's",
        |j, o| std::fs::copy(o, j).map(drop).unwrap(),
        |f| matches!(f, JournalFault::OtherTree),
    );
    let foreign = foreign_journal();
    refused(
        base,
        "another database's",
        |j, _| std::fs::copy(&foreign.1, j).map(drop).unwrap(),
        |f| matches!(f, JournalFault::ForeignDatabase),
    );
    refused(
        base,
        "boot id edited",
        |j, _| {
            edit(j, |b| {
                b[80] ^= 1;
                reseal(b);
            })
        },
        |f| matches!(f, JournalFault::OtherBoot),
    );
    // A reboot: the process believes in another boot id.
    set_boot_id(Some([0xB0; 16]));
    refused(
        base,
        "after a reboot",
        |_, _| {},
        |f| matches!(f, JournalFault::OtherBoot),
    );
    set_boot_id(None);
}

/// A journal of another database (and the folder holding it).
fn foreign_journal() -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    {
        let db = config(dir.path(), false).open().unwrap();
        db.insert("x", "").unwrap();
        db.snapshot().unwrap();
        db.insert("y", "").unwrap();
        db.flush().unwrap();
        // Left open, as a crash leaves it: a clean close would retire the journal.
        std::mem::forget(db);
    }
    let path = journals(dir.path()).remove(0).0;
    (dir, path)
}

#[derive(Debug, Clone)]
enum Op {
    Insert(u16),
    Remove(u16),
    Batch(Vec<u16>),
    Snapshot,
    /// A snapshot whose file write fails (a full disk): the sequence moves on without a
    /// trusted snapshot, so the writes after it are in a second journal.
    FailedSnapshot,
    SnapshotAll,
}

fn op() -> impl proptest::strategy::Strategy<Value = Op> {
    use proptest::prelude::*;
    prop_oneof![
        6 => any::<u16>().prop_map(Op::Insert),
        2 => any::<u16>().prop_map(Op::Remove),
        2 => proptest::collection::vec(any::<u16>(), 0..20).prop_map(Op::Batch),
        1 => Just(Op::Snapshot),
        1 => Just(Op::FailedSnapshot),
        1 => Just(Op::SnapshotAll),
    ]
}

fn k(i: u16) -> Vec<u8> {
    key(u64::from(i))
}

/// Runs `ops`, then "crashes" (the handle is leaked after a flush, and the folder copied as
/// the kill would leave it) and reopens the copy: every stored key passes the filter.
fn crash_model(ops: &[Op], counting: bool) {
    let dir = tempfile::tempdir().unwrap();
    let db = config(dir.path(), counting).open().unwrap();
    let mut snapshotted = false;
    for op in ops {
        match op {
            Op::Insert(i) => drop(db.insert(k(*i), &b"v"[..]).unwrap()),
            Op::Remove(i) => drop(db.remove(k(*i)).unwrap()),
            Op::Batch(is) => {
                let mut b = Batch::default();
                for i in is {
                    b.insert(k(*i), &b"b"[..]);
                }
                db.apply_batch(b).unwrap();
            }
            Op::Snapshot => snapshotted |= db.snapshot().is_ok(),
            Op::FailedSnapshot => {
                bloomsled::persist::fail_snapshot_writes_after(Some(0));
                let r = db.snapshot();
                bloomsled::persist::fail_snapshot_writes_after(None);
                snapshotted |= r.is_ok(); // an empty filter needs no file: it succeeds
            }
            Op::SnapshotAll => snapshotted |= !db.snapshot_all().unwrap().is_empty(),
        }
    }
    db.flush().unwrap();
    std::mem::forget(db);
    let copy = tempfile::tempdir().unwrap();
    common::copy_dir(dir.path(), copy.path());
    let db = config(copy.path(), counting).open().unwrap();
    let r = db.recovery_report();
    if snapshotted {
        assert!(r.loaded() || r.replayed(), "{ops:?}: {r:?}");
    }
    println!("model: {:?}", r.outcome);
    no_false_negative(&db, counting, &format!("{ops:?}"));
}

proptest::proptest! {
    #![proptest_config(proptest::prelude::ProptestConfig::with_cases(24))]
    #[test]
    fn replay_after_any_interleaving_of_writes_and_snapshots_denies_no_key(
        ops in proptest::collection::vec(op(), 1..60),
        counting in proptest::prelude::any::<bool>(),
    ) {
        let _one = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
        crash_model(&ops, counting);
    }
}

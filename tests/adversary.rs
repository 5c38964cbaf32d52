//! Cache-penetration protection against someone who reads our source and picks the keys
//! (issue 44): no false positive computable offline (a secret seed per tree, window and
//! shared filter), and a false positive found online paid once (the false-positive
//! memory), with no false negative when a remembered key is written, even while it is
//! looked up on other threads.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Barrier};
use std::thread;

use bloomsled::{Config, Db, Tree, TreeConfig};

/// The ids a service stores: as guessable as most are.
fn stored(i: u64) -> Vec<u8> {
    format!("item:{i}").into_bytes()
}

/// Ids that are not stored.
fn other(i: u64) -> Vec<u8> {
    format!("item:x{i}").into_bytes()
}

const KEYS: u64 = 20_000;
const RATE: f64 = 0.01;

/// A database on disk loaded with the same keys, as `bloomsled load` does, with `seed` if
/// one is fixed. The rate is raised to 1% so that the attack finds about 2,000 false
/// positives: enough for the binomial bound below to have power.
fn loaded(dir: &std::path::Path, seed: Option<u64>) -> Db {
    let mut cfg = Config::new()
        .path(dir)
        .expected_items(KEYS)
        .false_positive_rate(RATE);
    if let Some(s) = seed {
        cfg = cfg.seed(s);
    }
    let db = cfg.open().unwrap();
    for i in 0..KEYS {
        db.insert(stored(i), "").unwrap();
    }
    db
}

/// The attacker's part: the absent ids its own copy's filter passes.
fn false_positives_of(tree: &Tree, probes: u64) -> Vec<Vec<u8>> {
    (0..probes)
        .map(other)
        .filter(|k| tree.may_contain(k))
        .collect()
}

/// The attack as a test. With secret seeds (the default), a replica loaded with
/// the same keys predicts the service's false positives no better than chance: of the
/// replica's ~2,000, the service passes at most 3× the share its filter passes of ids
/// drawn afresh (binomial: at 1% of 2,000, the expected 20 exceed 60 with probability
/// below 1e-12). With one fixed seed (the control), it predicts every one of them.
#[test]
fn offline_attack_a_replica_with_the_same_keys_predicts_no_more_than_chance() {
    let (a, b) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let (service, replica) = (loaded(a.path(), None), loaded(b.path(), None));
    assert_ne!(
        service.filter_image().seed(),
        replica.filter_image().seed(),
        "each new tree draws its own seed"
    );
    let found = false_positives_of(&replica, 200_000);
    assert!(
        found.len() > 1_000,
        "the replica's false positives: {}",
        found.len()
    );
    let shared = found.iter().filter(|k| service.may_contain(k)).count();
    // Chance: the service's own pass rate on fresh absent ids.
    let fresh = 200_000u64;
    let passed = (1_000_000..1_000_000 + fresh)
        .map(other)
        .filter(|k| service.may_contain(k))
        .count();
    let chance = passed as f64 / fresh as f64;
    let expected = chance * found.len() as f64;
    println!(
        "replica's false positives {}, passed by the service {shared}; chance {:.3}% \
         ({expected:.1} expected)",
        found.len(),
        100.0 * chance
    );
    assert!(
        (shared as f64) <= 3.0 * expected,
        "{shared} shared against {expected:.1} by chance"
    );

    // The control: the same keys under one fixed seed give the same filter.
    let (c, d) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let (service, replica) = (loaded(c.path(), Some(42)), loaded(d.path(), Some(42)));
    let found = false_positives_of(&replica, 200_000);
    assert!(found.len() > 1_000);
    assert!(
        found.iter().all(|k| service.may_contain(k)),
        "a fixed seed shares every false positive"
    );
}

/// A tree keeps the seed its record stores: reopened with the defaults (which would draw
/// a new secret seed for a new tree) or with a tree configuration that fixes none. A tree
/// made with the old public default seed (as every tree made before seeds were secret)
/// reopens with it and finds every key.
#[test]
fn an_existing_tree_keeps_its_stored_seed_the_old_default_included() {
    let dir = tempfile::tempdir().unwrap();
    let old = bloomsled::hash::DEFAULT_SEED;
    {
        let db = Config::new().path(dir.path()).seed(old).open().unwrap();
        let t = db.open_tree("old").unwrap();
        let s = db.open_tree("secret").unwrap();
        for i in 0..2_000 {
            t.insert(stored(i), "").unwrap();
            s.insert(stored(i), "").unwrap();
        }
        drop(s);
        // A tree made with no seed set has a secret one, stored in its record.
        let fresh = Config::new().temporary(true).open().unwrap();
        assert_ne!(fresh.filter_image().seed(), old);
        db.close().unwrap();
    }
    let secret = {
        let db = Config::new().path(dir.path()).seed(old).open().unwrap();
        let s = db.open_tree("secret").unwrap().filter_image().seed();
        db.close().unwrap();
        s
    };
    let db = Config::new().path(dir.path()).open().unwrap();
    let t = db
        .open_tree_with("old", TreeConfig::new().expected_items(5_000))
        .unwrap();
    assert_eq!(
        t.filter_image().seed(),
        old,
        "the stored seed, not a new one"
    );
    assert_eq!(db.filter_image().seed(), old);
    assert_eq!(
        db.open_tree("secret").unwrap().filter_image().seed(),
        secret
    );
    for i in 0..2_000 {
        assert!(t.get(stored(i)).unwrap().is_some(), "false negative on {i}");
    }
}

/// The false positives of `tree` among the first `probes` absent ids, found by lookups (as
/// an attacker probing the service finds them).
fn probe_for_false_positives(tree: &Tree, want: usize) -> Vec<Vec<u8>> {
    let mut found = Vec::new();
    let mut i = 0;
    while found.len() < want {
        let k = other(i);
        if tree.may_contain(&k) {
            assert_eq!(tree.get(&k).unwrap(), None);
            found.push(k);
        }
        i += 1;
    }
    found
}

fn replay_db(memory: usize) -> Db {
    let db = Config::new()
        .temporary(true)
        .expected_items(KEYS)
        .false_positive_rate(RATE)
        .false_positive_memory(memory)
        .open()
        .unwrap();
    for i in 0..KEYS {
        db.insert(stored(i), "").unwrap();
    }
    db
}

/// Store reads of `db`'s lookups so far: the lookups the filter passed that the memory did
/// not answer.
fn store_reads(db: &Db) -> u64 {
    let s = db.stats();
    s.lookups - s.store_lookups_skipped - s.false_positives_remembered
}

/// 10,000 lookups of 100 false positives (picked with the filter alone, as a prober with
/// a stopwatch would have found them) reach the store 100 times, the first lookup of each;
/// with the memory off, all 10,000 do.
#[test]
fn replayed_false_positives_reach_the_store_once_each() {
    for (memory, reads) in [(bloomsled::DEFAULT_FALSE_POSITIVE_MEMORY, 100), (0, 10_000)] {
        let db = replay_db(memory);
        let fps: Vec<Vec<u8>> = (0..)
            .map(other)
            .filter(|k| db.may_contain(k))
            .take(100)
            .collect();
        assert_eq!(store_reads(&db), 0);
        for round in 0..100 {
            for k in &fps {
                assert_eq!(db.get(k).unwrap(), None, "round {round}");
            }
        }
        let s = db.stats();
        assert_eq!(s.lookups, 10_000);
        assert_eq!(store_reads(&db), reads, "memory {memory}: {s:?}");
        assert_eq!(s.false_positives, reads);
        assert_eq!(s.false_positives_remembered, 10_000 - reads);
        assert!(s.false_positive_memory >= memory);
        if memory > 0 {
            // contains_key and the batch forms answer from the memory too.
            assert!(!db.contains_key(&fps[0]).unwrap());
            assert_eq!(db.contains_many(&fps[..3]).unwrap(), vec![false; 3]);
            assert_eq!(db.get_many(&fps[..3]).unwrap(), vec![None; 3]);
            assert_eq!(store_reads(&db), reads);
        }
    }
}

/// A remembered false positive written afterwards, by every kind of write, is found at
/// once: the write took it out of the memory before the store held it.
#[test]
fn a_remembered_false_positive_written_is_found_at_once_by_every_write() {
    let db = replay_db(bloomsled::DEFAULT_FALSE_POSITIVE_MEMORY);
    db.set_merge_operator(|_k: &[u8], _old: Option<&[u8]>, new: &[u8]| Some(new.to_vec()));
    let fps = probe_for_false_positives(&db, 8);
    for k in &fps {
        assert_eq!(db.get(k).unwrap(), None);
    }
    let remembered = db.stats().false_positives_remembered;
    assert_eq!(remembered, 8);
    db.insert(&fps[0], "insert").unwrap();
    let mut batch = bloomsled::Batch::default();
    batch.insert(fps[1].clone(), "batch");
    db.apply_batch(batch).unwrap();
    db.transaction(|tx| {
        tx.insert(fps[2].clone(), "transaction")?;
        Ok::<(), bloomsled::transaction::ConflictableTransactionError<()>>(())
    })
    .unwrap();
    db.merge(&fps[3], "merge").unwrap();
    db.compare_and_swap(&fps[4], None::<&[u8]>, Some("cas"))
        .unwrap()
        .unwrap();
    db.update_and_fetch(&fps[5], |_| Some(b"update".to_vec()))
        .unwrap();
    db.fetch_and_update(&fps[6], |_| Some(b"fetch".to_vec()))
        .unwrap();
    // Import inserts if absent (compare-and-swap underneath).
    let src = Config::new().temporary(true).open().unwrap();
    src.insert(&fps[7], "import").unwrap();
    db.import(
        src.export()
            .into_iter()
            .filter(|(_, name, _)| name == b"__sled__default")
            .collect(),
    );
    for (k, v) in fps.iter().zip([
        "insert",
        "batch",
        "transaction",
        "merge",
        "cas",
        "update",
        "fetch",
        "import",
    ]) {
        assert_eq!(db.get(k).unwrap().as_deref(), Some(v.as_bytes()), "{v}");
        assert!(db.contains_key(k).unwrap());
    }
}

/// Writers insert remembered false positives while readers look them up on other threads:
/// a reader that starts a lookup after an insert returned finds the key, every time.
#[test]
fn inserts_racing_lookups_of_remembered_false_positives_are_never_missed() {
    let db = replay_db(bloomsled::DEFAULT_FALSE_POSITIVE_MEMORY);
    let fps = Arc::new(probe_for_false_positives(&db, 400));
    // Writes published in order: `written[i]` set after the insert of `fps[i]` returned.
    let written: Arc<Vec<AtomicBool>> =
        Arc::new((0..fps.len()).map(|_| AtomicBool::new(false)).collect());
    let start = Arc::new(Barrier::new(4));
    let readers: Vec<_> = (0..3)
        .map(|r| {
            let (db, fps, written, start) =
                (db.clone(), fps.clone(), written.clone(), start.clone());
            thread::spawn(move || {
                start.wait();
                let mut checked = 0u64;
                for round in 0..30 {
                    for (i, k) in fps.iter().enumerate().skip(r) {
                        let was = written[i].load(Ordering::Acquire);
                        let found = db.get(k).unwrap().is_some();
                        assert!(
                            found || !was,
                            "reader {r} round {round}: false negative on fp {i}"
                        );
                        checked += u64::from(was);
                    }
                }
                checked
            })
        })
        .collect();
    start.wait();
    for (i, k) in fps.iter().enumerate() {
        db.insert(k, "now present").unwrap();
        written[i].store(true, Ordering::Release);
        if i % 16 == 0 {
            thread::yield_now();
        }
    }
    let checked: u64 = readers.into_iter().map(|r| r.join().unwrap()).sum();
    for k in fps.iter() {
        assert!(db.get(k).unwrap().is_some());
    }
    println!("lookups of written keys checked: {checked}");
}

/// A window remembers its generations' false positives, and a write to the window takes
/// the key out; every generation shares the window's one secret seed.
#[test]
fn a_window_pays_a_false_positive_once_and_finds_it_once_written() {
    use bloomsled::window::WindowConfig;
    use std::time::Duration;
    let db = Config::new().temporary(true).open().unwrap();
    let clock = bloomsled::clock::ManualClock::new(1_700_000_000_000);
    let cfg = WindowConfig::new(Duration::from_secs(60), 3)
        .clock(clock.clone())
        .tree_config(
            TreeConfig::new()
                .expected_items(2_000)
                .false_positive_rate(RATE),
        );
    let w = db.open_window("w", cfg).unwrap();
    for g in 0..3 {
        for i in 0..2_000 {
            w.insert(format!("g{g}:{i}"), "").unwrap();
        }
        clock.advance(Duration::from_secs(20));
    }
    let mut fp = None;
    for i in 0.. {
        let k = other(i);
        if w.may_contain(&k) {
            fp = Some(k);
            break;
        }
    }
    let fp = fp.unwrap();
    assert_eq!(w.get(&fp).unwrap(), None);
    let before = w.stats().false_positives;
    for _ in 0..100 {
        assert_eq!(w.get(&fp).unwrap(), None);
        assert!(!w.contains_key(&fp).unwrap());
    }
    assert_eq!(w.stats().false_positives, before, "paid once");
    w.insert(&fp, "now").unwrap();
    assert_eq!(w.get(&fp).unwrap().as_deref(), Some(&b"now"[..]));
}

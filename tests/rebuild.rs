//! Online rebuild and resize: writers and readers keep going while filters are rebuilt
//! and swapped, and no reader ever sees a stored key denied.

use std::collections::HashSet;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::thread;

use bloomsled::{Batch, Config, FilterMode, Tree};

fn key(writer: usize, i: usize) -> Vec<u8> {
    format!("https://w{writer}.example.org/page/{i:08}").into_bytes()
}

/// Writers insert (and remove half of what they insert) while one thread rebuilds on
/// demand in a loop and automatic resizes run (the filter starts at 1,000 items). Readers
/// check keys that writers have published as inserted-and-never-removed.
fn churn_during_rebuilds(counting: bool) {
    let db = Config::new()
        .temporary(true)
        .expected_items(1_000)
        .counting(counting)
        .open()
        .unwrap();
    let tree = db.open_tree("t").unwrap();
    const WRITERS: usize = 2;
    const PER_WRITER: usize = 6_000;
    let published: Arc<Mutex<Vec<Vec<u8>>>> = Arc::default();
    let done = Arc::new(AtomicBool::new(false));
    let checks = Arc::new(AtomicUsize::new(0));
    let rebuilds = Arc::new(AtomicUsize::new(0));
    thread::scope(|s| {
        let writers: Vec<_> = (0..WRITERS)
            .map(|w| {
                let tree = tree.clone();
                let published = published.clone();
                let rebuilds = rebuilds.clone();
                s.spawn(move || {
                    for i in 0..PER_WRITER {
                        // Rebuilds overlap the writes whatever the scheduler does: half-way
                        // the writers wait for one finished rebuild, before their last key
                        // for a second (a loaded machine once let the writes finish first).
                        let wait_for = match i {
                            _ if i == PER_WRITER / 2 => 1,
                            _ if i == PER_WRITER - 1 => 2,
                            _ => 0,
                        };
                        while rebuilds.load(Ordering::Relaxed) < wait_for {
                            thread::sleep(std::time::Duration::from_millis(1));
                        }
                        let k = key(w, i);
                        match i % 4 {
                            // Kept: published for readers once the insert returned.
                            0 => {
                                tree.insert(&k, &b"v"[..]).unwrap();
                                published.lock().unwrap().push(k);
                            }
                            1 => {
                                tree.compare_and_swap(&k, None::<&[u8]>, Some(&b"c"[..]))
                                    .unwrap()
                                    .unwrap();
                                published.lock().unwrap().push(k);
                            }
                            // Churned: inserted, overwritten, then removed.
                            2 => {
                                tree.insert(&k, &b"v"[..]).unwrap();
                                tree.insert(&k, &b"w"[..]).unwrap();
                                tree.remove(&k).unwrap();
                            }
                            _ => {
                                let mut b = Batch::default();
                                b.insert(k.clone(), &b"b"[..]);
                                b.insert(key(w, i + 1_000_000), &b"x"[..]);
                                b.remove(key(w, i + 1_000_000));
                                tree.apply_batch(b).unwrap();
                                published.lock().unwrap().push(k);
                            }
                        }
                    }
                })
            })
            .collect();
        for r in 0..2 {
            let tree = tree.clone();
            let published = published.clone();
            let done = done.clone();
            let checks = checks.clone();
            s.spawn(move || {
                let mut i = r;
                while !done.load(Ordering::Relaxed) {
                    let sample: Vec<Vec<u8>> = {
                        let p = published.lock().unwrap();
                        (0..64)
                            .filter_map(|j| p.get((i * 7919 + j * 104_729) % p.len().max(1)))
                            .cloned()
                            .collect()
                    };
                    i += 1;
                    for k in &sample {
                        assert!(tree.may_contain(k), "false negative during rebuild: {k:?}");
                        assert!(tree.contains_key(k).unwrap(), "lost key {k:?}");
                    }
                    let many = tree.contains_many(&sample).unwrap();
                    assert!(many.iter().all(|&m| m), "batched false negative");
                    checks.fetch_add(sample.len(), Ordering::Relaxed);
                }
            });
        }
        {
            let tree = tree.clone();
            let done = done.clone();
            let rebuilds = rebuilds.clone();
            s.spawn(move || {
                while !done.load(Ordering::Relaxed) {
                    tree.rebuild().unwrap();
                    rebuilds.fetch_add(1, Ordering::Relaxed);
                }
            });
        }
        for w in writers {
            w.join().unwrap();
        }
        done.store(true, Ordering::Relaxed);
    });
    tree.wait_for_rebuild();
    let report = tree.verify().unwrap();
    assert_eq!(report.false_negatives, 0);
    let expected = WRITERS * PER_WRITER * 3 / 4;
    assert_eq!(report.keys_checked as usize, expected);
    let stats = tree.stats();
    assert!(
        rebuilds.load(Ordering::Relaxed) >= 2,
        "rebuilds ran during the writes"
    );
    assert!(stats.resizes >= 1, "{stats:?}");
    assert!(stats.capacity as usize >= expected, "{stats:?}");
    assert!(checks.load(Ordering::Relaxed) > 0);
    if counting {
        // Exact: every stored key counted once, whatever raced with the rebuilds.
        assert_eq!(stats.items as usize, expected, "{stats:?}");
        for k in tree.iter().keys() {
            tree.remove(k.unwrap()).unwrap();
        }
        let s = tree.stats();
        assert_eq!(s.items, 0);
        let set_bits = (s.fill_ratio * s.num_bits as f64).round() as u64;
        assert_eq!(set_bits, s.stuck_counters, "{s:?}");
    }
}

#[test]
fn plain_mode_writers_and_readers_during_rebuilds() {
    churn_during_rebuilds(false);
}

#[test]
fn counting_mode_writers_and_readers_during_rebuilds() {
    churn_during_rebuilds(true);
}

fn measured_fpr(tree: &Tree, n: usize) -> f64 {
    let fp = (0..n)
        .filter(|i| tree.may_contain(format!("absent-{i}").as_bytes()))
        .count();
    fp as f64 / n as f64
}

#[test]
fn growth_from_10k_to_1m_keeps_the_rate_near_target() {
    let db = Config::new()
        .temporary(true)
        .expected_items(10_000)
        .false_positive_rate(0.01)
        .open()
        .unwrap();
    let tree = db.open_tree("grow").unwrap();
    let mut fprs = Vec::new();
    for chunk in 0..1_000usize {
        let mut b = Batch::default();
        for i in 0..1_000 {
            b.insert(key(0, chunk * 1_000 + i), &[][..]);
        }
        tree.apply_batch(b).unwrap();
        if chunk % 250 == 249 {
            tree.wait_for_rebuild();
            fprs.push((tree.stats().capacity, measured_fpr(&tree, 20_000)));
        }
    }
    tree.wait_for_rebuild();
    let s = tree.stats();
    let fpr = measured_fpr(&tree, 200_000);
    eprintln!("growth 10k -> 1M: {s:?}\nFPR at checkpoints {fprs:?}, final {fpr}");
    assert!(s.capacity >= 1_000_000, "{s:?}");
    assert!(s.resizes >= 1, "{s:?}");
    assert!(!s.rebuild_in_progress);
    // At or below the target once resized (the filter then has room to spare).
    assert!(fpr <= 0.01, "FPR {fpr} after resizes ({s:?})");
    for (cap, f) in fprs {
        assert!(f <= 0.012, "FPR {f} at capacity {cap}");
    }
    let r = tree.verify().unwrap();
    assert_eq!((r.keys_checked, r.false_negatives), (1_000_000, 0));
}

#[test]
fn plain_mode_removes_trigger_a_same_size_rebuild() {
    let db = Config::new()
        .temporary(true)
        .expected_items(10_000)
        .open()
        .unwrap();
    let tree = db.open_tree("t").unwrap();
    let mut live = HashSet::new();
    // Keep about 4k live keys while 30k pass through: the stale bits pile up.
    for round in 0..6 {
        for i in 0..5_000 {
            let k = key(round, i);
            tree.insert(&k, &[][..]).unwrap();
            live.insert(k);
        }
        for i in 0..5_000 {
            if i % 5 != 0 || round < 5 {
                let k = key(round, i);
                tree.remove(&k).unwrap();
                live.remove(&k);
            }
        }
    }
    tree.wait_for_rebuild();
    let s = tree.stats();
    assert!(s.rebuilds >= 1, "{s:?}");
    assert_eq!(s.resizes, 0, "the live keys fit: no resize ({s:?})");
    assert_eq!(s.capacity, 10_000);
    assert!(
        s.stale_entries < 25_000,
        "stale count restarts at the rebuild: {s:?}"
    );
    // Stale bits may push the rate up to the bound (twice the target) before a rebuild.
    assert!(s.estimated_fpr <= 2.0 * s.target_fpr, "{s:?}");
    for k in &live {
        assert!(tree.may_contain(k));
    }
}

#[test]
fn counting_mode_needs_no_rebuild_for_removes() {
    let db = Config::new()
        .temporary(true)
        .expected_items(10_000)
        .counting(true)
        .open()
        .unwrap();
    for round in 0..6 {
        for i in 0..5_000 {
            db.insert(key(round, i), &[][..]).unwrap();
        }
        for i in 0..5_000 {
            db.remove(key(round, i)).unwrap();
        }
    }
    db.wait_for_rebuild();
    let s = db.stats();
    assert_eq!(s.mode, FilterMode::Counting);
    assert_eq!((s.items, s.rebuilds), (0, 0), "{s:?}");
    assert_eq!(
        (s.fill_ratio * s.num_bits as f64).round() as u64,
        s.stuck_counters
    );
    assert!(measured_fpr(&db, 20_000) < 0.001);
}

#[test]
fn auto_rebuild_can_be_turned_off_and_bad_bounds_are_refused() {
    let db = Config::new()
        .temporary(true)
        .expected_items(100)
        .auto_rebuild(false)
        .open()
        .unwrap();
    for i in 0..1_000 {
        db.insert(key(0, i), &[][..]).unwrap();
    }
    let s = db.stats();
    assert_eq!((s.rebuilds, s.capacity), (0, 100));
    let r = db.rebuild().unwrap();
    assert_eq!(r.keys_scanned, 1_000);
    assert!(r.capacity >= 1_000 && !r.automatic);
    for p in [0.0, 1.0, -0.5, f64::NAN] {
        let e = Config::new()
            .temporary(true)
            .rebuild_false_positive_rate(p)
            .open()
            .unwrap_err();
        assert!(matches!(e, bloomsled::Error::InvalidConfig { .. }), "{e}");
    }
}

#[test]
fn a_rebuild_survives_reopen_and_is_loaded_from_its_snapshot() {
    let dir = tempfile::tempdir().unwrap();
    let config = || Config::new().path(dir.path()).expected_items(500);
    {
        let db = config().open().unwrap();
        for i in 0..5_000 {
            db.insert(key(1, i), &[][..]).unwrap();
        }
        db.wait_for_rebuild();
        let r = db.rebuild().unwrap();
        assert!(r.snapshot.is_some());
        assert!(r.capacity >= 5_000);
    }
    let db = config().open().unwrap();
    assert!(db.recovery_report().loaded(), "{:?}", db.recovery_report());
    assert!(db.stats().capacity >= 5_000);
    for i in 0..5_000 {
        assert!(db.may_contain(key(1, i)));
    }
}

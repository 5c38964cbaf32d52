//! The sled-shaped surface, configuration errors and edge-case keys.

use std::time::Duration;

use bloomsled::transaction::{abort, TransactionError, TransactionResult};
use bloomsled::{Batch, Config, Error, Event, Filter, Transactional};

fn tmp() -> bloomsled::Db {
    Config::new()
        .temporary(true)
        .expected_items(10_000)
        .open()
        .unwrap()
}

#[test]
fn handles_are_clone_send_sync() {
    fn assert_handle<T: Clone + Send + Sync + 'static>() {}
    assert_handle::<bloomsled::Db>();
    assert_handle::<bloomsled::Tree>();
    fn assert_shared<T: Send + Sync + 'static>() {}
    assert_shared::<Filter>();
    assert_shared::<Error>();
}

#[test]
fn bad_configuration_is_a_typed_error_not_a_panic() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("db");
    let bad = [
        Config::new().path(&path).expected_items(0),
        Config::new().path(&path).false_positive_rate(0.0),
        Config::new().path(&path).false_positive_rate(1.0),
        Config::new().path(&path).false_positive_rate(-0.5),
        Config::new().path(&path).false_positive_rate(f64::NAN),
        Config::new().path(&path).false_positive_rate(1e-300),
        Config::new().path(&path).bits_per_key(0.5),
        Config::new().path(&path).bits_per_key(f64::INFINITY),
        Config::new().path(&path).num_hashes(0),
        Config::new().path(&path).num_hashes(33),
        Config::new().path(&path).expected_items(u64::MAX),
        Config::new().path(&path).snapshot_page_size(100),
        Config::new().path(&path).snapshot_page_size(0),
        Config::new()
            .path(&path)
            .snapshot_interval(std::time::Duration::ZERO),
    ];
    for c in bad {
        match c.open() {
            Err(Error::InvalidConfig { what }) => assert!(!what.is_empty()),
            other => panic!("expected InvalidConfig, got {other:?}"),
        }
    }
    // Nothing was created on disk by a rejected configuration.
    assert!(!path.exists());
    assert!(matches!(
        Filter::new(0, 0.01),
        Err(Error::InvalidConfig { .. })
    ));
    assert!(matches!(
        Filter::with_bits_per_key(10, 0.0),
        Err(Error::InvalidConfig { .. })
    ));
}

#[test]
fn empty_and_one_mebibyte_keys_work() {
    let db = tmp();
    let big = vec![0xabu8; 1 << 20];
    db.insert(b"", b"empty".to_vec()).unwrap();
    db.insert(&big, b"big".to_vec()).unwrap();
    assert!(db.may_contain(b""));
    assert!(db.may_contain(&big));
    assert_eq!(db.get(b"").unwrap().unwrap(), b"empty");
    assert_eq!(db.get(&big).unwrap().unwrap(), b"big");
    let mut other = big.clone();
    other[12345] = 0;
    assert_eq!(db.get(&other).unwrap(), None);
    let f = Filter::new(10, 0.01).unwrap();
    f.insert(b"");
    f.insert(&big);
    assert!(f.contains(b"") && f.contains(&big));
}

#[test]
fn reopen_loads_snapshots_and_rebuilds_without_them() {
    let dir = tempfile::tempdir().unwrap();
    let keys: Vec<String> = (0..3_000).map(|i| format!("key-{i}")).collect();
    let snap;
    {
        let db = Config::new()
            .path(dir.path())
            .expected_items(1_000)
            .open()
            .unwrap();
        let t = db.open_tree("named").unwrap();
        for k in &keys {
            db.insert(k, b"d".to_vec()).unwrap();
            t.insert(k, b"n".to_vec()).unwrap();
        }
        snap = t.filter_snapshot_path().unwrap().to_path_buf();
    }
    {
        let db = Config::new()
            .path(dir.path())
            .expected_items(1_000)
            .open()
            .unwrap();
        assert!(db.was_recovered());
        let t = db.open_tree("named").unwrap();
        for tree in [&*db, &t] {
            let r = tree.recovery_report();
            assert!(r.loaded(), "{r:?}");
            assert_eq!(r.keys_scanned, 0);
            assert!(r.bytes_verified > 0);
        }
        for k in &keys {
            assert!(db.may_contain(k) && t.may_contain(k), "{k}");
        }
    }
    // Without its snapshot, the tree is rebuilt from its keys, sized for what it found.
    std::fs::remove_file(&snap).unwrap();
    let db = Config::new()
        .path(dir.path())
        .expected_items(1_000)
        .open()
        .unwrap();
    let t = db.open_tree("named").unwrap();
    assert!(t.wait_for_filter(Duration::from_secs(60)).unwrap());
    let r = t.recovery_report();
    assert_eq!(
        r.outcome,
        bloomsled::RecoveryOutcome::Rebuilt {
            reason: bloomsled::Distrust::Missing
        }
    );
    assert_eq!(r.keys_scanned, 3_000);
    for k in &keys {
        assert!(t.may_contain(k), "{k}");
    }
    assert!(t.stats().capacity >= 3_000);
    assert!(t.stats().estimated_fpr < 0.02, "{:?}", t.stats());
}

#[test]
fn trees_have_their_own_filters_and_share_them_between_handles() {
    let db = tmp();
    let a = db.open_tree("a").unwrap();
    let a2 = db.open_tree(b"a").unwrap();
    let b = db.open_tree("b").unwrap();
    a.insert("k", "v").unwrap();
    assert!(a2.may_contain("k"));
    assert_eq!(a2.get("k").unwrap().unwrap(), b"v");
    assert_eq!(b.get("k").unwrap(), None);
    assert_eq!(b.stats().store_lookups_skipped, 1);
    assert_eq!(db.tree_names().len(), 3);
    assert!(db.drop_tree("b").unwrap());
    assert!(!db.drop_tree("b").unwrap());
    assert_eq!(db.tree_names().len(), 2);
    // A re-created tree starts empty with a fresh filter.
    let b = db.open_tree("b").unwrap();
    assert!(b.is_empty());
    // Only bloomsled's own meta tree is reserved; other names with its prefix are users'.
    assert!(matches!(
        db.open_tree("__bloomsled_meta"),
        Err(Error::ReservedName { .. })
    ));
    assert!(matches!(
        db.drop_tree("__bloomsled_meta"),
        Err(Error::ReservedName { .. })
    ));
    assert!(!db.drop_tree("__bloomsled_x").unwrap());
    let x = db.open_tree("__bloomsled_x").unwrap();
    x.insert("k", "v").unwrap();
    assert!(db
        .tree_names()
        .iter()
        .any(|n| n == b"__bloomsled_x".as_slice()));
}

#[test]
fn sled_style_reads_and_iteration() {
    let db = tmp();
    for i in 0u8..10 {
        db.insert([i], vec![i * 10]).unwrap();
    }
    assert_eq!(db.len(), 10);
    assert!(!db.is_empty());
    assert_eq!(db.first().unwrap().unwrap().0, [0]);
    assert_eq!(db.last().unwrap().unwrap().0, [9]);
    assert_eq!(db.get_lt([5]).unwrap().unwrap().0, [4]);
    assert_eq!(db.get_gt([5]).unwrap().unwrap().0, [6]);
    let r: Vec<_> = db
        .range([2u8]..[5u8])
        .keys()
        .map(|k| k.unwrap()[0])
        .collect();
    assert_eq!(r, vec![2, 3, 4]);
    let rev: Vec<_> = db.iter().keys().rev().map(|k| k.unwrap()[0]).collect();
    assert_eq!(rev.first(), Some(&9));
    assert_eq!((&*db).into_iter().count(), 10);
    db.insert(b"pre/1", b"x".to_vec()).unwrap();
    db.insert(b"pre/2", b"y".to_vec()).unwrap();
    assert_eq!(db.scan_prefix(b"pre/").count(), 2);
    assert_eq!(db.pop_min().unwrap().unwrap().0, [0]);
    assert_eq!(db.pop_max().unwrap().unwrap().0, b"pre/2");
    assert_eq!(db.name(), b"__sled__default");
    let c1 = db.checksum().unwrap();
    db.insert(b"more", b"z".to_vec()).unwrap();
    assert_ne!(c1, db.checksum().unwrap());
    assert!(db.flush().unwrap() > 0 || db.size_on_disk().unwrap() > 0);
    db.clear().unwrap();
    assert!(db.is_empty());
    assert!(db.stats().stale_entries >= 10);
    assert!(db.generate_id().unwrap() < db.generate_id().unwrap());
}

#[test]
fn multi_tree_transactions_admit_every_key_and_abort_cleanly() {
    let db = tmp();
    let a = db.open_tree("a").unwrap();
    let b = db.open_tree("b").unwrap();
    let r: TransactionResult<()> = (&a, &b).transaction(|(ta, tb)| {
        ta.insert(b"from", b"x".to_vec())?;
        tb.insert(b"to", b"y".to_vec())?;
        let mut batch = Batch::default();
        batch.insert(b"batched".to_vec(), b"z".to_vec());
        tb.apply_batch(&batch)?;
        Ok(())
    });
    r.unwrap();
    assert!(a.may_contain(b"from") && b.may_contain(b"to") && b.may_contain(b"batched"));
    assert_eq!(b.get(b"batched").unwrap().unwrap(), b"z");

    let r: TransactionResult<(), &str> = (&a, &b).transaction(|(ta, _tb)| {
        ta.insert(b"aborted", b"x".to_vec())?;
        abort("no")
    });
    assert_eq!(r, Err(TransactionError::Abort("no")));
    assert_eq!(a.get(b"aborted").unwrap(), None);

    let trees = [a.clone(), b.clone()];
    let r: TransactionResult<()> = trees[..].transaction(|txs| {
        txs[0].insert(b"slice", b"1".to_vec())?;
        txs[1].insert(b"slice", b"2".to_vec())?;
        txs[1].remove(b"to".to_vec())?;
        Ok(())
    });
    r.unwrap();
    assert_eq!(b.get(b"slice").unwrap().unwrap(), b"2");
    assert_eq!(b.get(b"to").unwrap(), None);
}

#[test]
fn watch_prefix_sees_writes() {
    let db = tmp();
    let sub = db.watch_prefix(b"user/");
    db.insert(b"user/1", b"x".to_vec()).unwrap();
    db.remove(b"user/1").unwrap();
    match sub.next_timeout(Duration::from_secs(5)).unwrap() {
        Event::Insert { key, .. } => assert_eq!(key, b"user/1"),
        e => panic!("unexpected {e:?}"),
    }
    match sub.next_timeout(Duration::from_secs(5)).unwrap() {
        Event::Remove { key } => assert_eq!(key, b"user/1"),
        e => panic!("unexpected {e:?}"),
    }
}

#[test]
fn export_import_carries_every_key_through_the_filter() {
    let src = tmp();
    let t = src.open_tree("t").unwrap();
    for i in 0..500u32 {
        src.insert(i.to_be_bytes(), b"d".to_vec()).unwrap();
        t.insert(i.to_le_bytes(), b"t".to_vec()).unwrap();
    }
    let dst = tmp();
    dst.import(src.export());
    assert_eq!(src.checksum().unwrap(), dst.checksum().unwrap());
    let t2 = dst.open_tree("t").unwrap();
    for i in 0..500u32 {
        assert!(dst.may_contain(i.to_be_bytes()));
        assert!(t2.may_contain(i.to_le_bytes()));
    }
    // Importing again would overwrite: an error, and the data is untouched.
    let before = dst.checksum().unwrap();
    assert!(matches!(
        dst.try_import(src.export()),
        Err(Error::Import { .. })
    ));
    assert_eq!(before, dst.checksum().unwrap());
}

/// Written exactly as sled's own doc examples are (borrowed arrays included), to show they
/// compile unchanged against bloomsled.
#[test]
#[allow(clippy::needless_borrows_for_generic_args)]
fn sled_style_equality_assertions_compile() {
    let db = tmp();
    assert_eq!(db.insert(&[1, 2, 3], vec![0]), Ok(None));
    assert_eq!(db.get(&[9]), Ok(None));
    assert_eq!(db.contains_key(&[1, 2, 3]), Ok(true));
}

#[test]
fn stats_count_what_the_filter_saved() {
    let db = tmp();
    for i in 0..1_000u32 {
        db.insert(i.to_le_bytes(), vec![]).unwrap();
    }
    for i in 0..1_000u32 {
        assert!(db.get(i.to_le_bytes()).unwrap().is_some());
    }
    for i in 1_000..11_000u32 {
        assert!(db.get(i.to_le_bytes()).unwrap().is_none());
    }
    let s = db.stats();
    assert_eq!(s.lookups, 11_000);
    assert_eq!(s.store_lookups_skipped + s.false_positives, 10_000);
    assert!(s.false_positives < 100, "{s:?}");
    assert!(s.skip_ratio() > 0.89);
    assert!(s.items <= 1_000 && s.items > 990);
}

/// `get_unfiltered` is sled's answer alone: the same values as `get`, the false positives'
/// `None`s included, and it leaves the lookup counters alone.
#[test]
fn get_unfiltered_reads_the_store_alone_and_counts_nothing() {
    let db = tmp();
    for i in 0..2_000u32 {
        db.insert(i.to_le_bytes(), i.to_be_bytes().to_vec())
            .unwrap();
    }
    db.remove(7u32.to_le_bytes()).unwrap();
    let before = db.stats();
    for i in 0..20_000u32 {
        let k = i.to_le_bytes();
        let raw = db.get_unfiltered(k).unwrap();
        assert_eq!(raw.is_some(), i < 2_000 && i != 7, "key {i}");
        if let Some(v) = &raw {
            assert_eq!(&v[..], &i.to_be_bytes());
            assert!(db.may_contain(k), "a stored key the filter rejects: {i}");
        }
    }
    let after = db.stats();
    assert_eq!(after.lookups, before.lookups);
    assert_eq!(after.false_positives, before.false_positives);
    // Removed key 7 still passes the filter (plain mode keeps its bits): `get` asks sled too.
    assert!(db.may_contain(7u32.to_le_bytes()));
    assert_eq!(db.get(7u32.to_le_bytes()).unwrap(), None);
}

#[test]
fn filter_union_and_serialization() {
    // Filters built apart combine only under one fixed seed (each draws a secret one).
    let seeded = bloomsled::FilterConfig::new(1_000)
        .false_positive_rate(0.01)
        .seed(3);
    let (a, b) = (seeded.build().unwrap(), seeded.build().unwrap());
    let secret = Filter::new(1_000, 0.01).unwrap();
    assert!(matches!(a.union(&secret), Err(Error::ShapeMismatch { .. })));
    a.insert(b"left");
    b.insert(b"right");
    a.union(&b).unwrap();
    assert!(a.contains(b"left") && a.contains(b"right"));
    let other_seed = bloomsled::FilterConfig::new(1_000).seed(7).build().unwrap();
    assert!(matches!(
        a.union(&other_seed),
        Err(Error::ShapeMismatch { .. })
    ));
    let small = Filter::new(10, 0.01).unwrap();
    assert!(matches!(a.union(&small), Err(Error::ShapeMismatch { .. })));

    let bytes = a.to_bytes();
    let c = Filter::from_bytes(&bytes).unwrap();
    assert!(c.contains(b"left") && c.contains(b"right"));
    assert_eq!(c.shape(), a.shape());
    assert_eq!(c.items(), a.items());
    assert_eq!(c.to_bytes(), bytes);
    let cloned = a.clone();
    assert_eq!(cloned.to_bytes(), bytes);
}

#[test]
fn batched_probes_agree_at_every_length_around_the_batch_size() {
    // The batched probe works in batches of 32 and prefetches one batch ahead: an empty
    // input, a partial batch, exact multiples and one past them all take different paths.
    let f = Filter::with_bits_per_key(200, 4.0).unwrap();
    let keys: Vec<Vec<u8>> = (0..100u32)
        .map(|i| format!("key-{i}").into_bytes())
        .collect();
    f.insert_many(&keys[..50]);
    for len in 0..=keys.len() {
        for start in [0, keys.len() - len] {
            let slice = &keys[start..start + len];
            let hashes: Vec<u64> = slice
                .iter()
                .map(|k| bloomsled::hash::hash_key(k, f.seed()))
                .collect();
            let single: Vec<bool> = slice.iter().map(|k| f.contains(k)).collect();
            assert_eq!(f.contains_many(slice), single, "keys {start}..+{len}");
            // A longer output buffer: only the first `len` slots are written.
            let mut out = vec![true; len + 3];
            f.contains_hash_many(&hashes, &mut out);
            assert_eq!(&out[..len], &single[..], "hashes {start}..+{len}");
            assert!(
                out[len..].iter().all(|&b| b),
                "wrote past the input: {start}..+{len}"
            );
            let mut out = vec![true; len + 40];
            f.contains_many_into(slice, &mut out);
            assert_eq!(&out[..len], &single[..], "keys into {start}..+{len}");
            assert!(
                out[len..].iter().all(|&b| b),
                "wrote past the keys: {start}..+{len}"
            );
        }
    }
}

#[test]
fn batched_probes_agree_with_single_probes() {
    // Every k, below and above the batched probe's branch-free screen of 4 positions.
    for k in 1..=9 {
        let f = bloomsled::FilterConfig::new(3_000)
            .bits_per_key(5.0)
            .num_hashes(k)
            .build()
            .unwrap();
        let keys: Vec<Vec<u8>> = (0..10_000u32).map(|i| i.to_be_bytes().to_vec()).collect();
        f.insert_many(&keys[..3_000]);
        let many = f.contains_many(&keys);
        for (i, key) in keys.iter().enumerate() {
            assert_eq!(many[i], f.contains(key), "k = {k}, key {i}");
        }
        assert!(many[..3_000].iter().all(|&m| m), "k = {k}: false negative");
    }
    let f = Filter::with_bits_per_key(5_000, 6.0).unwrap();
    let keys: Vec<Vec<u8>> = (0..20_000u32).map(|i| i.to_le_bytes().to_vec()).collect();
    f.insert_many(&keys[..5_000]);
    let hashes: Vec<u64> = keys
        .iter()
        .map(|k| bloomsled::hash::hash_key(k, f.seed()))
        .collect();
    let mut by_hash = vec![false; keys.len()];
    f.contains_hash_many(&hashes, &mut by_hash);
    let by_key = f.contains_many(&keys);
    for (i, k) in keys.iter().enumerate() {
        let one = f.contains(k);
        assert_eq!(by_key[i], one, "key {i}");
        assert_eq!(by_hash[i], one, "key {i}");
        assert_eq!(f.contains_hash(hashes[i]), one, "key {i}");
        if i < 5_000 {
            assert!(one, "false negative for key {i}");
        }
    }
    // A crowded filter (6 bits/key): some absent keys pass, many do not.
    let passed = by_key[5_000..].iter().filter(|b| **b).count();
    assert!(passed > 0 && passed < 15_000 / 10, "{passed}");
}

/// A handle to a dropped tree: `get_unfiltered` answers sled's `CollectionNotFound`, like
/// `get`, never the dropped tree's old values.
#[test]
fn get_unfiltered_of_a_dropped_tree_is_collection_not_found() {
    let db = tmp();
    let t = db.open_tree("gone").unwrap();
    t.insert("k", "v").unwrap();
    assert_eq!(t.get_unfiltered("k").unwrap().as_deref(), Some(&b"v"[..]));
    assert_eq!(db.drop_tree("gone"), Ok(true));
    assert!(matches!(
        t.get_unfiltered("k"),
        Err(bloomsled::Error::CollectionNotFound(_))
    ));
    assert!(matches!(
        t.get_unfiltered("never inserted"),
        Err(bloomsled::Error::CollectionNotFound(_))
    ));
}

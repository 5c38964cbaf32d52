//! The sled 0.34 surface, used the way sled users (and sled's own tests) use it: sled's
//! `Config` knobs, a model-based test with restarts, transactions over several trees with
//! `?` on bloomsled results, and `match` on sled's error variants.

mod common;

use std::io;
use std::ops::Bound;

use bloomsled::transaction::{
    abort, ConflictableTransactionError, TransactionError, TransactionResult,
    UnabortableTransactionError, UnabortableTransactionResult,
};
use bloomsled::{Batch, Config, Db, Error, IVec, Transactional, Tree};
use common::model::{SledModel, Write};
use proptest::prelude::*;

#[derive(Debug, Clone)]
enum Op {
    Insert(u8, u8),
    Remove(u8),
    Get(u8),
    Cas(u8, Option<u8>, Option<u8>),
    Batch(Vec<(u8, Option<u8>)>),
    Iter { rev: bool },
    Range(u8, u8, bool),
    Prefix(u8),
    GetLt(u8),
    GetGt(u8),
    Restart,
}

/// Keys with shared prefixes (so `scan_prefix` and ranges have something to cut), the empty
/// key, and long ones.
fn key(k: u8) -> Vec<u8> {
    match k % 5 {
        0 if k == 0 => Vec::new(),
        0 => vec![k; 300],
        1 => vec![k / 16],
        _ => vec![k / 16, k],
    }
}

fn op() -> impl Strategy<Value = Op> {
    let k = 0u8..64;
    prop_oneof![
        6 => (k.clone(), any::<u8>()).prop_map(|(k, v)| Op::Insert(k, v)),
        2 => k.clone().prop_map(Op::Remove),
        3 => k.clone().prop_map(Op::Get),
        2 => (k.clone(), prop::option::of(any::<u8>()), prop::option::of(any::<u8>()))
            .prop_map(|(k, o, n)| Op::Cas(k, o, n)),
        1 => prop::collection::vec((k.clone(), prop::option::of(any::<u8>())), 0..6)
            .prop_map(Op::Batch),
        1 => any::<bool>().prop_map(|rev| Op::Iter { rev }),
        2 => (k.clone(), k.clone(), any::<bool>()).prop_map(|(a, b, rev)| Op::Range(a, b, rev)),
        1 => (0u8..4).prop_map(Op::Prefix),
        1 => k.clone().prop_map(Op::GetLt),
        1 => k.clone().prop_map(Op::GetGt),
        1 => Just(Op::Restart),
    ]
}

fn pairs(it: impl Iterator<Item = bloomsled::Result<(IVec, IVec)>>) -> Vec<(Vec<u8>, Vec<u8>)> {
    it.map(|kv: bloomsled::Result<(IVec, IVec)>| {
        let (k, v) = kv.unwrap();
        (k.to_vec(), v.to_vec())
    })
    .collect()
}

fn owned<'a>(it: impl Iterator<Item = (&'a Vec<u8>, &'a Vec<u8>)>) -> Vec<(Vec<u8>, Vec<u8>)> {
    it.map(|(k, v)| (k.clone(), v.clone())).collect()
}

fn apply(db: &Db, m: &mut SledModel, op: &Op) {
    match op {
        Op::Insert(k, v) => m.insert(db, key(*k), vec![*v]),
        Op::Remove(k) => m.remove(db, key(*k)),
        Op::Get(k) => m.get(db, &key(*k)),
        Op::Cas(k, old, new) => {
            m.cas(db, key(*k), old.map(|o| vec![o]), new.map(|n| vec![n]));
        }
        Op::Batch(writes) => {
            let writes: Vec<Write> = writes
                .iter()
                .map(|&(k, v)| (key(k), v.map(|v| vec![v])))
                .collect();
            m.batch(db, &writes);
        }
        Op::Iter { rev: false } => assert_eq!(pairs(db.iter()), owned(m.map.iter())),
        Op::Iter { rev: true } => {
            let got: Vec<IVec> = db.iter().keys().rev().map(Result::unwrap).collect();
            let want: Vec<IVec> = m.map.keys().rev().map(|k| IVec::from(&k[..])).collect();
            assert_eq!(got, want);
            let values: Vec<IVec> = db.iter().values().map(Result::unwrap).collect();
            assert_eq!(values.len(), m.map.len());
        }
        Op::Range(a, b, rev) => {
            let (lo, hi) = (key(*a), key(*b));
            if lo > hi {
                // sled yields nothing for an inverted range (a BTreeMap would panic).
                assert_eq!(db.range(lo..hi).next(), None);
                return;
            }
            let bounds = (Bound::Included(lo.clone()), Bound::Excluded(hi.clone()));
            let want = owned(m.map.range(bounds.clone()));
            if *rev {
                let mut got = pairs(db.range(lo..hi).rev());
                got.reverse();
                assert_eq!(got, want);
            } else {
                assert_eq!(pairs(db.range(lo..hi)), want);
            }
        }
        Op::Prefix(p) => {
            let want = owned(m.map.iter().filter(|(k, _)| k.first() == Some(p)));
            assert_eq!(pairs(db.scan_prefix([*p])), want);
        }
        Op::GetLt(k) => {
            let got = db.get_lt(key(*k)).unwrap().map(|(k, _)| k.to_vec());
            assert_eq!(
                got,
                m.map.range(..key(*k)).next_back().map(|(k, _)| k.clone())
            );
        }
        Op::GetGt(k) => {
            let got = db.get_gt(key(*k)).unwrap().map(|(k, _)| k.to_vec());
            let after = (Bound::Excluded(key(*k)), Bound::Unbounded);
            assert_eq!(got, m.map.range(after).next().map(|(k, _)| k.clone()));
        }
        Op::Restart => unreachable!("run() restarts"),
    }
}

fn run(ops: &[Op], segment_bits: u8, cache_bits: u8) -> Result<(), TestCaseError> {
    let dir = tempfile::tempdir().unwrap();
    // sled's testing knobs: small segments and a small page cache shake out more paths.
    let config = Config::new()
        .path(dir.path())
        .segment_size(256 << segment_bits)
        .cache_capacity(256 << cache_bits)
        .idgen_persist_interval(1)
        .flush_every_ms(None)
        .expected_items(32)
        .bits_per_key(4.0);
    let mut db = config.open().unwrap();
    let mut model = SledModel::new();
    for op in ops {
        if let Op::Restart = op {
            // A clean close (the filter is snapshotted), then the same config reopens it.
            drop(db);
            db = config.open().unwrap();
        } else {
            apply(&db, &mut model, op);
        }
        model.check_filter(&db, op)?;
        config.global_error().unwrap();
    }
    prop_assert_eq!(pairs(db.iter()), owned(model.map.iter()));
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 40, ..ProptestConfig::default() })]

    #[test]
    fn random_ops_with_restarts_match_a_btreemap_and_never_deny_a_stored_key(
        ops in prop::collection::vec(op(), 1..80),
        segment_bits in 0u8..8,
        cache_bits in 0u8..16,
    ) {
        run(&ops, segment_bits, cache_bits)?;
    }
}

/// Moves `k` from `from` to `to` atomically; fails (aborts) if `from` lacks it. Every `?`
/// here is on a bloomsled result or a transactional one, as sled code writes it.
fn transfer(db: &Db, from: &Tree, to: &Tree, k: &str) -> TransactionResult<u64, String> {
    // `?` on a bloomsled result in a function returning `TransactionResult`.
    let before = db.generate_id()?;
    (from, to).transaction(|(from, to)| {
        let Some(v) = from.remove(k)? else {
            return abort(format!("{k} missing"));
        };
        to.insert(k, v)?;
        // `?` on a bloomsled result inside the closure (a `ConflictableTransactionError`).
        // (Not `db.generate_id()`: sled deadlocks on that inside a transaction.)
        let id = to.generate_id()?;
        Ok(id.max(before))
    })
}

/// `?` on a bloomsled result in a function returning `UnabortableTransactionResult`.
fn read_both(a: &Tree, b: &Tree, k: &str) -> UnabortableTransactionResult<usize> {
    Ok(usize::from(a.get(k)?.is_some()) + usize::from(b.contains_key(k)?))
}

#[test]
fn transactions_across_two_trees_take_question_marks_on_bloomsled_results() {
    let db = Config::new().temporary(true).open().unwrap();
    let a = db.open_tree("a").unwrap();
    let b = db.open_tree("b").unwrap();
    a.insert("k", "v").unwrap();

    transfer(&db, &a, &b, "k").unwrap();
    assert_eq!(a.get("k"), Ok(None));
    assert_eq!(b.get("k"), Ok(Some(IVec::from("v"))));
    assert!(b.may_contain("k"));
    assert_eq!(read_both(&a, &b, "k").unwrap(), 1);

    match transfer(&db, &a, &b, "k") {
        Err(TransactionError::Abort(why)) => assert_eq!(why, "k missing"),
        other => panic!("expected an abort, got {other:?}"),
    }
    assert_eq!(b.get("k"), Ok(Some(IVec::from("v"))));

    // A batch applied inside a transaction over both trees.
    let mut batch = Batch::default();
    batch.insert("x", "1");
    batch.insert("y", "2");
    let r: TransactionResult<()> = (&a, &b).transaction(|(a, b)| {
        a.apply_batch(&batch)?;
        b.remove("k")?;
        Ok(())
    });
    r.unwrap();
    assert!(a.contains_key("x").unwrap() && a.contains_key("y").unwrap());
    assert_eq!(b.get("k"), Ok(None));
}

#[test]
fn a_bloomsled_error_survives_a_trip_through_sleds_transaction_errors() {
    let ours = || Error::Closed("tree dropped".into());
    // Through sled's error types and back, the error is the one that went in.
    let t: TransactionError<()> = ours().into();
    let TransactionError::Storage(sled_err) = t else {
        panic!("not a storage error")
    };
    assert_eq!(Error::from(sled_err), ours());
    let c: ConflictableTransactionError<()> = ours().into();
    assert!(matches!(c, ConflictableTransactionError::Storage(_)));
    let u: UnabortableTransactionError = ours().into();
    let UnabortableTransactionError::Storage(sled_err) = u else {
        panic!("not a storage error")
    };
    assert!(matches!(Error::from(sled_err), Error::Closed(_)));

    // The same through std::io::Error, with sled's kinds.
    let io_err = io::Error::from(ours());
    assert!(matches!(Error::from(io_err), Error::Closed(_)));
    let kind = |e: Error| io::Error::from(e).kind();
    assert_eq!(
        kind(Error::CollectionNotFound("t".into())),
        io::ErrorKind::NotFound
    );
    assert_eq!(
        kind(Error::Unsupported("x".into())),
        io::ErrorKind::InvalidInput
    );
    assert_eq!(
        kind(Error::Corruption { at: None, bt: () }),
        io::ErrorKind::InvalidData
    );
    let plain = io::Error::new(io::ErrorKind::PermissionDenied, "no");
    assert_eq!(kind(Error::from(plain)), io::ErrorKind::PermissionDenied);
}

#[test]
fn sled_errors_arrive_as_the_same_named_variants() {
    let cases = [
        (
            sled::Error::CollectionNotFound("t".into()),
            Error::CollectionNotFound("t".into()),
        ),
        (
            sled::Error::Unsupported("u".into()),
            Error::Unsupported("u".into()),
        ),
        (
            sled::Error::ReportableBug("b".into()),
            Error::ReportableBug("b".into()),
        ),
        (
            sled::Error::Corruption { at: None, bt: () },
            Error::Corruption { at: None, bt: () },
        ),
    ];
    for (theirs, ours) in cases {
        assert_eq!(Error::from(theirs.clone()), ours);
        // And back: sled's variant again.
        assert_eq!(sled::Error::from(ours), theirs);
    }
    let io = sled::Error::Io(io::Error::new(io::ErrorKind::TimedOut, "slow"));
    match Error::from(io) {
        Error::Io(e) => assert_eq!(e.kind(), io::ErrorKind::TimedOut),
        other => panic!("expected Io, got {other:?}"),
    }
}

#[test]
fn a_dropped_tree_answers_collection_not_found_as_in_sled() {
    let db = Config::new().temporary(true).open().unwrap();
    let t = db.open_tree("gone").unwrap();
    t.insert("present", "1").unwrap();
    assert_eq!(db.drop_tree("gone"), Ok(true));
    let not_found = Err(Error::CollectionNotFound(IVec::from("gone")));
    // Also for a key the filter rules out: a dropped tree must not answer "absent".
    assert!(!t.may_contain("never inserted"));
    assert_eq!(t.get("never inserted"), not_found);
    assert_eq!(t.get("present"), not_found);
    assert!(matches!(
        t.contains_key("x"),
        Err(Error::CollectionNotFound(_))
    ));
    let many = t.get_many(&["never inserted"]);
    assert!(matches!(many, Err(Error::CollectionNotFound(_))));
    assert!(matches!(
        t.insert("k", "v"),
        Err(Error::CollectionNotFound(_))
    ));
    // Dropping a missing tree is not an error; the default tree is sled's `Unsupported`.
    assert_eq!(db.drop_tree("never existed"), Ok(false));
    match db.drop_tree(b"__sled__default") {
        Err(Error::Unsupported(why)) => assert!(!why.is_empty()),
        other => panic!("expected Unsupported, got {other:?}"),
    }
}

#[test]
fn sleds_setting_checks_are_unsupported_and_never_panic() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("db");
    let unsupported = [
        Config::new().path(&p).segment_size(1000),
        Config::new().path(&p).segment_size(128),
        Config::new().path(&p).segment_size(1 << 25),
        Config::new().path(&p).compression_factor(0),
        Config::new().path(&p).compression_factor(23),
        Config::new().path(&p).idgen_persist_interval(0),
    ];
    for c in unsupported {
        match c.open() {
            Err(Error::Unsupported(why)) => assert!(!why.is_empty()),
            other => panic!("expected Unsupported, got {other:?}"),
        }
    }
    // sled would assert on these when it starts: bloomsled refuses them first.
    for bytes in [0, 1, 255] {
        match Config::new().path(&p).cache_capacity(bytes).open() {
            Err(Error::InvalidConfig { what }) => {
                assert!(what.contains("cache_capacity"), "{what}")
            }
            other => panic!("cache_capacity({bytes}): expected InvalidConfig, got {other:?}"),
        }
    }
    let smallest = Config::new()
        .temporary(true)
        .cache_capacity(256)
        .segment_size(256);
    let db = smallest.open().unwrap();
    for i in 0..200u32 {
        db.insert(i.to_be_bytes(), vec![7; 100]).unwrap();
    }
    assert_eq!(db.len(), 200);
    smallest.global_error().unwrap();
}

#[test]
fn compression_needs_the_feature_as_in_sled() {
    let opened = Config::new()
        .temporary(true)
        .use_compression(true)
        .compression_factor(3)
        .open();
    if cfg!(feature = "compression") {
        let db = opened.unwrap();
        db.insert("k", vec![0; 10_000]).unwrap();
        assert_eq!(db.get("k").unwrap().map(|v| v.len()), Some(10_000));
    } else {
        match opened {
            Err(Error::Unsupported(why)) => assert!(why.contains("compression"), "{why}"),
            other => panic!("expected Unsupported, got {other:?}"),
        }
    }
}

#[test]
fn a_locked_database_is_an_io_error() {
    let dir = tempfile::tempdir().unwrap();
    let _first = Config::new().path(dir.path()).open().unwrap();
    match Config::new().path(dir.path()).open() {
        Err(Error::Io(e)) => assert!(e.to_string().contains("lock"), "{e}"),
        other => panic!("expected Io, got {other:?}"),
    }
}

/// Every setter of sled 0.34's `Config` but its four deprecated no-ops (which bloomsled does
/// not carry: docs/sled-compat.md).
#[test]
fn every_sled_config_setter_passes_through() {
    let dir = tempfile::tempdir().unwrap();
    let base = Config::new()
        .cache_capacity(1 << 20)
        .mode(bloomsled::Mode::HighThroughput)
        .flush_every_ms(Some(50))
        .segment_size(1 << 12)
        .use_compression(false)
        .compression_factor(7)
        .print_profile_on_drop(false)
        .idgen_persist_interval(10)
        .create_new(true);
    // A config whose settings are shared with a clone can still be given a path (sled's
    // own `path` would panic here).
    let _keep = base.clone();
    let config = base.clone().path(dir.path().join("db"));
    let db = config.open().unwrap();
    db.insert("k", "v").unwrap();
    assert_eq!(db.get("k"), Ok(Some(IVec::from("v"))));
    drop(db);
    // create_new(true) survived the path change: the second open is refused.
    assert!(config.open().is_err());
}

#[test]
fn iterators_yield_bloomsled_results() {
    let db = Config::new().temporary(true).open().unwrap();
    for k in [b"a1", b"a2", b"b1"] {
        db.insert(k, &k[..]).unwrap();
    }
    let first: bloomsled::Result<(IVec, IVec)> = db.iter().next().unwrap();
    assert_eq!(first.unwrap().0, "a1");
    let prefixed: Vec<IVec> = db
        .scan_prefix("a")
        .keys()
        .collect::<bloomsled::Result<_>>()
        .unwrap();
    assert_eq!(prefixed, ["a1", "a2"]);
    let last = db.range::<&[u8], _>(..).next_back().unwrap().unwrap();
    assert_eq!(last.0, "b1");
    let values: Vec<IVec> = (&*db).into_iter().rev().map(|kv| kv.unwrap().1).collect();
    assert_eq!(values, ["b1", "a2", "a1"]);
    assert_eq!(
        db.iter().last().map(|kv| kv.unwrap().0),
        Some(IVec::from("b1"))
    );
    // Errors from iteration are bloomsled's sled-named variants.
    let t = db.open_tree("t").unwrap();
    t.insert("k", "v").unwrap();
    db.drop_tree("t").unwrap();
    assert!(matches!(
        t.iter().next(),
        Some(Err(Error::CollectionNotFound(_))) | None
    ));
}

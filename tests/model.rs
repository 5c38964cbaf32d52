//! Property test: random operation sequences against a model (`common::model`), in plain and in
//! counting mode.
//!
//! After every operation, every key the model holds must be `may_contain` (no false
//! negatives), and every read must agree with the model. In counting mode the filter's
//! count must equal the model's size after every operation, and once every key is removed
//! no counter may remain set except those stuck at their maximum.

mod common;

use bloomsled::{Batch, Config, Tree};
use common::model::{SledModel, Write};
use proptest::prelude::*;

#[derive(Debug, Clone)]
enum Op {
    Insert(u8, u8),
    Remove(u8),
    Get(u8),
    ContainsKey(u8),
    Batch(Vec<(u8, Option<u8>)>),
    Cas(u8, Option<u8>, Option<u8>),
    Update(u8),
    Merge(u8, u8),
    Transaction(Vec<(u8, Option<u8>)>),
    AbortedTransaction(Vec<(u8, Option<u8>)>),
    GetMany(Vec<u8>),
    PopMin,
    Clear,
    Rebuild,
}

fn key(k: u8) -> Vec<u8> {
    // Mix short and long keys (inline and heap IVecs) and an empty key.
    match k % 4 {
        0 if k == 0 => Vec::new(),
        0 => vec![k; 40],
        _ => vec![k],
    }
}

fn op() -> impl Strategy<Value = Op> {
    let k = 0u8..48;
    prop_oneof![
        4 => (k.clone(), any::<u8>()).prop_map(|(k, v)| Op::Insert(k, v)),
        2 => k.clone().prop_map(Op::Remove),
        2 => k.clone().prop_map(Op::Get),
        1 => k.clone().prop_map(Op::ContainsKey),
        1 => prop::collection::vec((k.clone(), prop::option::of(any::<u8>())), 0..8).prop_map(Op::Batch),
        2 => (k.clone(), prop::option::of(any::<u8>()), prop::option::of(any::<u8>()))
            .prop_map(|(k, o, n)| Op::Cas(k, o, n)),
        1 => k.clone().prop_map(Op::Update),
        1 => (k.clone(), any::<u8>()).prop_map(|(k, v)| Op::Merge(k, v)),
        1 => prop::collection::vec((k.clone(), prop::option::of(any::<u8>())), 0..6).prop_map(Op::Transaction),
        1 => prop::collection::vec((k.clone(), prop::option::of(any::<u8>())), 0..6).prop_map(Op::AbortedTransaction),
        1 => prop::collection::vec(k.clone(), 0..150).prop_map(Op::GetMany),
        1 => Just(Op::PopMin),
        1 => Just(Op::Rebuild),
        // Rare: it empties the tree.
        1 => (0u8..8).prop_filter_map("rare", |x| (x == 0).then_some(Op::Clear)),
    ]
}

/// Adds bytes; merging a 0 deletes the key (a merge operator may remove).
fn add_merge(_k: &[u8], old: Option<&[u8]>, new: &[u8]) -> Option<Vec<u8>> {
    if new[0] == 0 {
        return None;
    }
    let sum = old.map_or(0u8, |o| o[0]).wrapping_add(new[0]);
    Some(vec![sum])
}

/// One write of an operation, with its key and value spelled out.
fn write(&(k, v): &(u8, Option<u8>)) -> Write {
    (key(k), v.map(|v| vec![v]))
}

fn apply(tree: &Tree, model: &mut SledModel, op: &Op) {
    match op {
        Op::Insert(k, v) => model.insert(tree, key(*k), vec![*v]),
        Op::Remove(k) => model.remove(tree, key(*k)),
        Op::Get(k) => model.get(tree, &key(*k)),
        Op::ContainsKey(k) => {
            assert_eq!(
                tree.contains_key(key(*k)).unwrap(),
                model.map.contains_key(&key(*k))
            );
        }
        Op::Batch(writes) => {
            let writes: Vec<Write> = writes.iter().map(write).collect();
            model.batch(tree, &writes);
        }
        Op::Cas(k, old, new) => {
            model.cas(tree, key(*k), old.map(|o| vec![o]), new.map(|n| vec![n]));
        }
        Op::Update(k) => {
            let new = tree
                .update_and_fetch(key(*k), |old| match old {
                    Some(o) if o[0] % 3 == 0 => None,
                    Some(o) => Some(vec![o[0].wrapping_add(1)]),
                    None => Some(vec![1]),
                })
                .unwrap();
            let cur = model.map.get(&key(*k)).cloned();
            let want = match cur {
                Some(o) if o[0] % 3 == 0 => None,
                Some(o) => Some(vec![o[0].wrapping_add(1)]),
                None => Some(vec![1]),
            };
            assert_eq!(new.map(|n| n.to_vec()), want);
            model.set(key(*k), want);
        }
        Op::Merge(k, v) => {
            let merged = tree.merge(key(*k), [*v]).unwrap();
            let want = add_merge(&[], model.map.get(&key(*k)).map(|o| &o[..]), &[*v]);
            assert_eq!(merged.map(|m| m.to_vec()), want);
            model.set(key(*k), want);
        }
        Op::Transaction(writes) => {
            tree.transaction(|tx| {
                for (k, v) in writes {
                    match v {
                        Some(v) => tx.insert(key(*k), vec![*v])?,
                        None => tx.remove(key(*k))?,
                    };
                }
                Ok::<_, bloomsled::transaction::ConflictableTransactionError<()>>(())
            })
            .unwrap();
            model.apply(&writes.iter().map(write).collect::<Vec<_>>());
        }
        Op::AbortedTransaction(writes) => {
            let r = tree.transaction(|tx| {
                for (k, v) in writes {
                    match v {
                        Some(v) => tx.insert(key(*k), vec![*v])?,
                        None => tx.remove(key(*k))?,
                    };
                }
                bloomsled::transaction::abort::<(), ()>(())
            });
            assert!(matches!(
                r,
                Err(bloomsled::transaction::TransactionError::Abort(()))
            ));
        }
        Op::Clear => {
            tree.clear().unwrap();
            model.map.clear();
        }
        Op::Rebuild => {
            let r = tree.rebuild().unwrap();
            assert_eq!(r.keys_scanned, model.map.len() as u64);
        }
        Op::GetMany(ks) => {
            let keys: Vec<Vec<u8>> = ks.iter().map(|k| key(*k)).collect();
            let got = tree.get_many(&keys).unwrap();
            let present = tree.contains_many(&keys).unwrap();
            for ((k, g), p) in keys.iter().zip(got).zip(present) {
                assert_eq!(g.map(|g| g.to_vec()).as_ref(), model.map.get(k));
                assert_eq!(p, model.map.contains_key(k));
            }
        }
        Op::PopMin => {
            let popped = tree.pop_min().unwrap();
            let min = model.map.keys().min().cloned();
            assert_eq!(popped.as_ref().map(|(k, _)| k.to_vec()), min);
            if let Some(k) = min {
                model.map.remove(&k);
            }
        }
    }
}

fn run(counting: bool, ops: &[Op]) -> Result<(), TestCaseError> {
    run_with_memory(counting, bloomsled::DEFAULT_FALSE_POSITIVE_MEMORY, ops)
}

/// [`run`] with a false-positive memory of `memory` keys; after every operation, every key
/// is looked up (so false positives are remembered, and a remembered key written since
/// would show as a false negative against the model).
fn run_with_memory(counting: bool, memory: usize, ops: &[Op]) -> Result<(), TestCaseError> {
    // A tiny filter (32 items, 4 bits/key) so that bits collide and false positives
    // happen, and automatic rebuilds run in the background: the invariant must hold in the
    // crowded regime and across swaps too.
    let db = Config::new()
        .temporary(true)
        .expected_items(32)
        .bits_per_key(4.0)
        .counting(counting)
        .false_positive_memory(memory)
        .open()
        .unwrap();
    let tree = db.open_tree("t").unwrap();
    tree.set_merge_operator(add_merge);
    let mut model = SledModel::new();
    for op in ops {
        apply(&tree, &mut model, op);
        model.check_filter(&tree, op)?;
        if memory > 0 {
            for k in 0u8..48 {
                let got = tree.get(key(k)).unwrap().map(|v| v.to_vec());
                prop_assert_eq!(
                    got,
                    model.map.get(&key(k)).cloned(),
                    "key {} after {:?}",
                    k,
                    op
                );
            }
        }
        if counting {
            prop_assert_eq!(
                tree.stats().items,
                model.map.len() as u64,
                "count after {:?}",
                op
            );
        }
    }
    model.check_contents(&tree)?;
    let stored = model.map;
    if counting {
        // Remove everything through different paths; every counter must be back at zero
        // unless it got stuck at 15.
        for (i, k) in stored.keys().enumerate() {
            match i % 4 {
                0 => assert!(tree.remove(k).unwrap().is_some()),
                1 => tree
                    .compare_and_swap(k, Some(&stored[k]), None::<Vec<u8>>)
                    .unwrap()
                    .unwrap(),
                2 => {
                    tree.update_and_fetch(k, |_| None::<Vec<u8>>).unwrap();
                }
                _ => {
                    let mut b = Batch::default();
                    b.remove(k.clone());
                    tree.apply_batch(b).unwrap();
                }
            }
        }
        tree.wait_for_rebuild();
        let s = tree.stats();
        prop_assert_eq!(s.items, 0);
        let set_bits = (s.fill_ratio * s.num_bits as f64).round() as u64;
        prop_assert_eq!(set_bits, s.stuck_counters, "{:?}", s);
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 48, ..ProptestConfig::default() })]

    #[test]
    fn plain_mode_matches_hashmap_and_never_denies_a_stored_key(
        ops in prop::collection::vec(op(), 1..120)
    ) {
        run(false, &ops)?;
    }

    #[test]
    fn counting_mode_stays_exact(ops in prop::collection::vec(op(), 1..120)) {
        run(true, &ops)?;
    }

    /// A memory of one set (7 entries): every key shares it, so records, evictions and
    /// forgets by writes of other keys interleave in every order.
    #[test]
    fn a_one_set_false_positive_memory_never_denies_a_stored_key(
        ops in prop::collection::vec(op(), 1..120),
        counting in any::<bool>(),
    ) {
        run_with_memory(counting, 7, &ops)?;
    }

    #[test]
    fn plain_mode_without_a_false_positive_memory_matches_hashmap(
        ops in prop::collection::vec(op(), 1..120)
    ) {
        run_with_memory(false, 0, &ops)?;
    }
}

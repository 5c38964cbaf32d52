//! Property test: random operation sequences against a `HashMap` model, in plain and in
//! counting mode.
//!
//! After every operation, every key the model holds must be `may_contain` (no false
//! negatives), and every read must agree with the model. In counting mode the filter's
//! count must equal the model's size after every operation, and once every key is removed
//! no counter may remain set except those stuck at their maximum.

use std::collections::HashMap;

use bloomsled::{Batch, Config, Tree};
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
        1 => prop::collection::vec(k.clone(), 0..10).prop_map(Op::GetMany),
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

fn apply(tree: &Tree, model: &mut HashMap<Vec<u8>, Vec<u8>>, op: &Op) {
    match op {
        Op::Insert(k, v) => {
            let old = tree.insert(key(*k), vec![*v]).unwrap();
            assert_eq!(old.map(|o| o.to_vec()), model.insert(key(*k), vec![*v]));
        }
        Op::Remove(k) => {
            let old = tree.remove(key(*k)).unwrap();
            assert_eq!(old.map(|o| o.to_vec()), model.remove(&key(*k)));
        }
        Op::Get(k) => {
            let got = tree.get(key(*k)).unwrap();
            assert_eq!(got.map(|o| o.to_vec()).as_ref(), model.get(&key(*k)));
        }
        Op::ContainsKey(k) => {
            assert_eq!(
                tree.contains_key(key(*k)).unwrap(),
                model.contains_key(&key(*k))
            );
        }
        Op::Batch(writes) => {
            let mut b = Batch::default();
            for (k, v) in writes {
                match v {
                    Some(v) => {
                        b.insert(key(*k), vec![*v]);
                        model.insert(key(*k), vec![*v]);
                    }
                    None => {
                        b.remove(key(*k));
                        model.remove(&key(*k));
                    }
                }
            }
            tree.apply_batch(b).unwrap();
        }
        Op::Cas(k, old, new) => {
            let res = tree
                .compare_and_swap(key(*k), old.map(|o| vec![o]), new.map(|n| vec![n]))
                .unwrap();
            let current = model.get(&key(*k)).cloned();
            if current == old.map(|o| vec![o]) {
                assert!(res.is_ok());
                match new {
                    Some(n) => model.insert(key(*k), vec![*n]),
                    None => model.remove(&key(*k)),
                };
            } else {
                let err = res.unwrap_err();
                assert_eq!(err.current.map(|c| c.to_vec()), current);
            }
        }
        Op::Update(k) => {
            let new = tree
                .update_and_fetch(key(*k), |old| match old {
                    Some(o) if o[0] % 3 == 0 => None,
                    Some(o) => Some(vec![o[0].wrapping_add(1)]),
                    None => Some(vec![1]),
                })
                .unwrap();
            let cur = model.get(&key(*k)).cloned();
            let want = match cur {
                Some(o) if o[0] % 3 == 0 => None,
                Some(o) => Some(vec![o[0].wrapping_add(1)]),
                None => Some(vec![1]),
            };
            assert_eq!(new.map(|n| n.to_vec()), want);
            match want {
                Some(w) => model.insert(key(*k), w),
                None => model.remove(&key(*k)),
            };
        }
        Op::Merge(k, v) => {
            let merged = tree.merge(key(*k), [*v]).unwrap();
            let want = add_merge(&[], model.get(&key(*k)).map(|o| &o[..]), &[*v]);
            assert_eq!(merged.map(|m| m.to_vec()), want);
            match want {
                Some(w) => model.insert(key(*k), w),
                None => model.remove(&key(*k)),
            };
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
            for (k, v) in writes {
                match v {
                    Some(v) => model.insert(key(*k), vec![*v]),
                    None => model.remove(&key(*k)),
                };
            }
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
            model.clear();
        }
        Op::Rebuild => {
            let r = tree.rebuild().unwrap();
            assert_eq!(r.keys_scanned, model.len() as u64);
        }
        Op::GetMany(ks) => {
            let keys: Vec<Vec<u8>> = ks.iter().map(|k| key(*k)).collect();
            let got = tree.get_many(&keys).unwrap();
            let present = tree.contains_many(&keys).unwrap();
            for ((k, g), p) in keys.iter().zip(got).zip(present) {
                assert_eq!(g.map(|g| g.to_vec()).as_ref(), model.get(k));
                assert_eq!(p, model.contains_key(k));
            }
        }
        Op::PopMin => {
            let popped = tree.pop_min().unwrap();
            let min = model.keys().min().cloned();
            assert_eq!(popped.as_ref().map(|(k, _)| k.to_vec()), min);
            if let Some(k) = min {
                model.remove(&k);
            }
        }
    }
}

fn run(counting: bool, ops: &[Op]) -> Result<(), TestCaseError> {
    // A tiny filter (32 items, 4 bits/key) so that bits collide and false positives
    // happen, and automatic rebuilds run in the background: the invariant must hold in the
    // crowded regime and across swaps too.
    let db = Config::new()
        .temporary(true)
        .expected_items(32)
        .bits_per_key(4.0)
        .counting(counting)
        .open()
        .unwrap();
    let tree = db.open_tree("t").unwrap();
    tree.set_merge_operator(add_merge);
    let mut model = HashMap::new();
    for op in ops {
        apply(&tree, &mut model, op);
        for k in model.keys() {
            prop_assert!(
                tree.may_contain(k),
                "false negative for {:?} after {:?}",
                k,
                op
            );
        }
        if counting {
            prop_assert_eq!(
                tree.stats().items,
                model.len() as u64,
                "count after {:?}",
                op
            );
        }
    }
    let stored: HashMap<Vec<u8>, Vec<u8>> = tree
        .iter()
        .map(|kv| kv.map(|(k, v)| (k.to_vec(), v.to_vec())))
        .collect::<Result<_, _>>()
        .unwrap();
    prop_assert_eq!(&stored, &model);
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
}

//! A model of one sled tree (a `BTreeMap`) that the model-based tests drive beside the real
//! tree: each operation runs on both and the results must agree, and after every operation
//! no key the model holds may be denied by the filter.

use std::collections::BTreeMap;
use std::fmt::Debug;

use bloomsled::{Batch, IVec, Tree};
use proptest::prelude::*;

/// One write: a value to insert, or `None` to remove the key.
pub type Write = (Vec<u8>, Option<Vec<u8>>);

/// What the tree must hold.
#[derive(Debug, Default)]
pub struct SledModel {
    pub map: BTreeMap<Vec<u8>, Vec<u8>>,
}

impl SledModel {
    pub fn new() -> SledModel {
        SledModel::default()
    }

    /// `insert` on both; the old values must agree.
    pub fn insert(&mut self, tree: &Tree, k: Vec<u8>, v: Vec<u8>) {
        let old = tree.insert(k.clone(), v.clone()).unwrap();
        assert_eq!(old.map(|o| o.to_vec()), self.map.insert(k, v));
    }

    /// `remove` on both; the removed values must agree.
    pub fn remove(&mut self, tree: &Tree, k: Vec<u8>) {
        let old = tree.remove(k.clone()).unwrap();
        assert_eq!(old.map(|o| o.to_vec()), self.map.remove(&k));
    }

    /// `get` must return the model's value.
    pub fn get(&self, tree: &Tree, k: &[u8]) {
        assert_eq!(tree.get(k), Ok(self.map.get(k).map(|v| IVec::from(&v[..]))));
    }

    /// `compare_and_swap` on the tree; it must succeed exactly when the model holds `old`,
    /// and otherwise report the model's current value.
    pub fn cas(&mut self, tree: &Tree, k: Vec<u8>, old: Option<Vec<u8>>, new: Option<Vec<u8>>) {
        let res = tree
            .compare_and_swap(k.clone(), old.clone(), new.clone())
            .unwrap();
        let current = self.map.get(&k).cloned();
        if current == old {
            assert_eq!(res, Ok(()));
            self.set(k, new);
        } else {
            assert_eq!(res.unwrap_err().current.map(|c| c.to_vec()), current);
        }
    }

    /// `writes` as one `Batch` on the tree, and in order on the model.
    pub fn batch(&mut self, tree: &Tree, writes: &[Write]) {
        let mut b = Batch::default();
        for (k, v) in writes {
            match v {
                Some(v) => b.insert(k.clone(), v.clone()),
                None => b.remove(k.clone()),
            }
        }
        tree.apply_batch(b).unwrap();
        self.apply(writes);
    }

    /// `writes`, in order, on the model only (the tree got them another way).
    pub fn apply(&mut self, writes: &[Write]) {
        for (k, v) in writes {
            self.set(k.clone(), v.clone());
        }
    }

    /// The model's key `k` set to `v`, or removed if `v` is `None`.
    pub fn set(&mut self, k: Vec<u8>, v: Option<Vec<u8>>) {
        match v {
            Some(v) => self.map.insert(k, v),
            None => self.map.remove(&k),
        };
    }

    /// No false negatives: the filter says "maybe" for every key the model holds.
    pub fn check_filter(&self, tree: &Tree, after: &dyn Debug) -> Result<(), TestCaseError> {
        for k in self.map.keys() {
            prop_assert!(
                tree.may_contain(k),
                "false negative for {:?} after {:?}",
                k,
                after
            );
        }
        Ok(())
    }

    /// The tree holds exactly the model's pairs, in order.
    pub fn check_contents(&self, tree: &Tree) -> Result<(), TestCaseError> {
        let stored: Vec<(Vec<u8>, Vec<u8>)> = tree
            .iter()
            .map(|kv| kv.map(|(k, v)| (k.to_vec(), v.to_vec())))
            .collect::<Result<_, _>>()
            .unwrap();
        let want: Vec<(Vec<u8>, Vec<u8>)> = self
            .map
            .iter()
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect();
        prop_assert_eq!(stored, want);
        Ok(())
    }
}

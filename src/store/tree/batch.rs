//! `Batch`: sled's atomic multi-write, remembering its operations.

use sled::IVec;

/// A set of inserts and removes applied atomically by [`crate::Tree::apply_batch`].
///
/// Same methods as `sled::Batch`. It keeps its operations readable, because a `sled::Batch`
/// cannot be read back and the filter must learn every inserted key before sled stores it
/// (and, in counting mode, every removed one after).
///
/// ```
/// # let db = bloomsled::Config::new().temporary(true).open()?;
/// db.insert("key_0", "val_0")?;
/// let mut batch = bloomsled::Batch::default();
/// batch.insert("key_a", "val_a");
/// batch.insert("key_b", "val_b");
/// batch.remove("key_0");
/// db.apply_batch(batch)?;
/// assert!(db.contains_key("key_a")?);
/// assert!(!db.contains_key("key_0")?);
/// # Ok::<(), bloomsled::Error>(())
/// ```
#[derive(Debug, Default, Clone)]
pub struct Batch {
    /// `(key, Some(value))` to insert, `(key, None)` to remove, in order.
    pub(crate) ops: Vec<(IVec, Option<IVec>)>,
}

impl Batch {
    /// Sets a key to a new value.
    pub fn insert<K, V>(&mut self, key: K, value: V)
    where
        K: Into<IVec>,
        V: Into<IVec>,
    {
        self.ops.push((key.into(), Some(value.into())));
    }

    /// Removes a key.
    pub fn remove<K>(&mut self, key: K)
    where
        K: Into<IVec>,
    {
        self.ops.push((key.into(), None));
    }

    /// The same operations as a `sled::Batch`.
    pub(crate) fn into_sled(self) -> sled::Batch {
        let mut b = sled::Batch::default();
        for (k, v) in self.ops {
            match v {
                Some(v) => b.insert(k, v),
                None => b.remove(k),
            }
        }
        b
    }
}

impl From<Batch> for sled::Batch {
    /// The plain sled batch (for use with a raw `sled::Tree`).
    fn from(b: Batch) -> sled::Batch {
        b.into_sled()
    }
}

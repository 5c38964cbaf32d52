//! `Batch`: sled's atomic multi-write, remembering which keys it inserts.

use sled::IVec;

/// A set of inserts and removes applied atomically by [`crate::Tree::apply_batch`].
///
/// Same methods as `sled::Batch`. It also keeps the inserted keys, because a `sled::Batch`
/// cannot be read back and the filter must learn every key before sled stores it.
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
    pub(crate) inner: sled::Batch,
    pub(crate) inserted: Vec<IVec>,
}

impl Batch {
    /// Sets a key to a new value.
    pub fn insert<K, V>(&mut self, key: K, value: V)
    where
        K: Into<IVec>,
        V: Into<IVec>,
    {
        let key = key.into();
        self.inserted.push(key.clone());
        self.inner.insert(key, value);
    }

    /// Removes a key.
    pub fn remove<K>(&mut self, key: K)
    where
        K: Into<IVec>,
    {
        self.inner.remove(key);
    }
}

impl From<Batch> for sled::Batch {
    /// The plain sled batch (for use with a raw `sled::Tree`).
    fn from(b: Batch) -> sled::Batch {
        b.inner
    }
}

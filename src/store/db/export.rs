//! Moving a database's contents: sled's `export` / `import`, and `try_import`, which never
//! overwrites a key and puts every imported key through its tree's filter.

use crate::error::{Error, Result};
use crate::persist::META_TREE;

use crate::store::db::{Db, DEFAULT_TREE, RESERVED_TREE_PREFIX};

impl Db {
    /// Every tree's entries in sled's version-agnostic export format: `(collection type,
    /// name, iterator of [key, value])`. bloomsled's meta tree is left out (its records
    /// belong to this database only).
    ///
    /// # Examples
    ///
    /// ```
    /// let old = bloomsled::Config::new().temporary(true).open()?;
    /// old.insert("k", "v")?;
    /// let new = bloomsled::Config::new().temporary(true).open()?;
    /// new.import(old.export());
    /// assert_eq!(old.checksum()?, new.checksum()?);
    /// assert!(new.may_contain("k"));
    /// # Ok::<(), bloomsled::Error>(())
    /// ```
    #[allow(clippy::type_complexity)]
    pub fn export(&self) -> Vec<(Vec<u8>, Vec<u8>, impl Iterator<Item = Vec<Vec<u8>>>)> {
        self.inner
            .export()
            .into_iter()
            .filter(|(_, name, _)| name != META_TREE)
            .collect()
    }

    /// Imports an [`Db::export`] (from this or another sled/bloomsled version), every key
    /// through the filter.
    ///
    /// # Panics
    /// Like sled's `import`: on a storage error, an unknown collection type, a malformed
    /// entry, or a key that already exists. [`Db::try_import`] returns those as errors.
    ///
    /// # Examples
    ///
    /// ```
    /// let old = bloomsled::Config::new().temporary(true).open()?;
    /// old.open_tree("users")?.insert("alice", "1")?;
    /// let new = bloomsled::Config::new().temporary(true).open()?;
    /// new.import(old.export());
    /// let users = new.open_tree("users")?;
    /// assert!(users.may_contain("alice") && users.contains_key("alice")?);
    /// # Ok::<(), bloomsled::Error>(())
    /// ```
    pub fn import(&self, export: Vec<(Vec<u8>, Vec<u8>, impl Iterator<Item = Vec<Vec<u8>>>)>) {
        if let Err(e) = self.try_import(export) {
            panic!("import failed: {e}");
        }
    }

    /// [`Db::import`] that reports failures instead of panicking. Entries imported before a
    /// failure stay imported.
    ///
    /// # Examples
    ///
    /// ```
    /// let old = bloomsled::Config::new().temporary(true).open()?;
    /// old.insert("k", "v")?;
    /// let new = bloomsled::Config::new().temporary(true).open()?;
    /// new.insert("k", "mine")?;
    /// // "k" exists in both: an error, and the existing value is kept.
    /// assert!(new.try_import(old.export()).is_err());
    /// assert_eq!(new.get("k")?.as_deref(), Some(&b"mine"[..]));
    /// # Ok::<(), bloomsled::Error>(())
    /// ```
    pub fn try_import(
        &self,
        export: Vec<(Vec<u8>, Vec<u8>, impl Iterator<Item = Vec<Vec<u8>>>)>,
    ) -> Result<()> {
        for (kind, name, entries) in export {
            if kind != b"tree" {
                return Err(Error::Import {
                    what: format!(
                        "cannot import collection type {:?}",
                        String::from_utf8_lossy(&kind)
                    ),
                });
            }
            let tree = if name == DEFAULT_TREE {
                self.default.clone()
            } else if name.starts_with(RESERVED_TREE_PREFIX) {
                // A layer's tree (a window's generation): the layer adopts it when it is
                // next opened.
                self.open_tree_inner(&name, None, None)?
            } else {
                self.open_tree(&name)?
            };
            for mut kv in entries {
                let (Some(v), Some(k), true) = (kv.pop(), kv.pop(), kv.is_empty()) else {
                    return Err(Error::Import {
                        what: "an entry is not a [key, value] pair".into(),
                    });
                };
                // Insert-if-absent: an existing key is reported, never overwritten.
                if tree.compare_and_swap(&k, None::<&[u8]>, Some(v))?.is_err() {
                    return Err(Error::Import {
                        what: format!(
                            "it would overwrite key {:?} of tree {:?}",
                            String::from_utf8_lossy(&k),
                            String::from_utf8_lossy(&name)
                        ),
                    });
                }
            }
        }
        Ok(())
    }
}

//! The meta tree: bloomsled's records inside sled, beside the data they vouch for.
//!
//! One sled tree, [`META_TREE`], holds the database id (key `db`) and one
//! [`TreeRecord`] per filtered tree (key `t/` + the tree's full name, so names never
//! collide), and one [`WindowRecord`] per window (key `w/` + the window's name). A record is written with sled's `insert` and made durable with sled's `flush`
//! before any write it must precede.

use std::sync::Arc;

use zerocopy::IntoBytes;

use crate::error::{DecodeError, Error, Result};
use crate::format::{DbRecord, TreeRecord, WindowRecord};

/// The name of bloomsled's own sled tree. It is the only tree bloomsled hides from
/// `tree_names` and `export`, and the only name users cannot open or drop.
pub const META_TREE: &[u8] = b"__bloomsled_meta";

const DB_KEY: &[u8] = b"db";

/// A random 128-bit id from the operating system.
pub(crate) fn random_id() -> Result<[u8; 16]> {
    let mut id = [0u8; 16];
    getrandom::fill(&mut id).map_err(|e| Error::Io(std::io::Error::other(e.to_string())))?;
    Ok(id)
}

/// The meta tree of one open database.
pub(crate) struct Meta {
    tree: sled::Tree,
    db_id: [u8; 16],
}

fn tree_key(name: &[u8]) -> Vec<u8> {
    let mut k = Vec::with_capacity(2 + name.len());
    k.extend_from_slice(b"t/");
    k.extend_from_slice(name);
    k
}

impl Meta {
    /// Opens the meta tree, creating the database id on first use. A tree of that name
    /// whose contents are not bloomsled's is refused (never overwritten).
    pub(crate) fn open(db: &sled::Db) -> Result<Arc<Meta>> {
        let tree = db.open_tree(META_TREE)?;
        let foreign = |why: String| Error::ReservedName {
            name: String::from_utf8_lossy(META_TREE).into_owned(),
            why,
        };
        let db_id = match tree.get(DB_KEY)? {
            Some(bytes) => {
                DbRecord::decode(&bytes)
                    .map_err(|e| foreign(format!("its database record does not decode ({e})")))?
                    .db_id
            }
            None => {
                if let Some(first) = tree.first()? {
                    return Err(foreign(format!(
                        "it holds key {:?} but no database record",
                        String::from_utf8_lossy(&first.0)
                    )));
                }
                let id = random_id()?;
                tree.insert(DB_KEY, DbRecord::new(id).as_bytes())?;
                tree.flush()?;
                id
            }
        };
        Ok(Arc::new(Meta { tree, db_id }))
    }

    /// The database id.
    pub(crate) fn db_id(&self) -> [u8; 16] {
        self.db_id
    }

    /// The record of tree `name`: `None` if it has none, `Some(Err)` if it does not decode.
    pub(crate) fn read(
        &self,
        name: &[u8],
    ) -> Result<Option<std::result::Result<TreeRecord, DecodeError>>> {
        Ok(self
            .tree
            .get(tree_key(name))?
            .map(|b| TreeRecord::decode(&b)))
    }

    /// Stores the record of tree `name`; durable on return if `durable`.
    pub(crate) fn write(&self, name: &[u8], record: &mut TreeRecord, durable: bool) -> Result<()> {
        self.tree.insert(tree_key(name), &record.encode()[..])?;
        if durable {
            self.tree.flush()?;
        }
        Ok(())
    }

    /// Deletes the record of tree `name`, durably.
    pub(crate) fn remove(&self, name: &[u8]) -> Result<()> {
        self.tree.remove(tree_key(name))?;
        self.tree.flush()?;
        Ok(())
    }

    /// The record of window `name`: `None` if it has none, `Some(Err)` if it does not decode.
    pub(crate) fn read_window(
        &self,
        name: &[u8],
    ) -> Result<Option<std::result::Result<WindowRecord, DecodeError>>> {
        Ok(self
            .tree
            .get(window_key(name))?
            .map(|b| WindowRecord::decode(&b)))
    }

    /// Stores the record of window `name`; durable on return if `durable`.
    pub(crate) fn write_window(
        &self,
        name: &[u8],
        record: &WindowRecord,
        durable: bool,
    ) -> Result<()> {
        self.tree.insert(window_key(name), record.encode())?;
        if durable {
            self.tree.flush()?;
        }
        Ok(())
    }

    /// The names of every window with a record.
    pub(crate) fn window_names(&self) -> Result<Vec<Vec<u8>>> {
        self.tree
            .scan_prefix(WINDOW_PREFIX)
            .keys()
            .map(|k| Ok(k?[WINDOW_PREFIX.len()..].to_vec()))
            .collect()
    }
}

const WINDOW_PREFIX: &[u8] = b"w/";

fn window_key(name: &[u8]) -> Vec<u8> {
    [WINDOW_PREFIX, name].concat()
}

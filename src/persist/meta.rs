//! The meta tree: bloomsled's records inside sled, beside the data they vouch for.
//!
//! One sled tree, [`META_TREE`], holds the database id (key `db`) and one
//! [`TreeRecord`] per filtered tree (key `t/` + the tree's full name, so names never
//! collide), and one [`WindowRecord`] per window (key `w/` + the window's name). A record is written with sled's `insert` and made durable with sled's `flush`
//! before any write it must precede.

use std::sync::Arc;

use zerocopy::little_endian::{U32, U64};
use zerocopy::IntoBytes;

use super::RecoveryPolicy;
use crate::error::{DbRecordFault, DecodeError, Error, Result};
use crate::format::{DbRecord, TreeRecord, FLAG_EMPTY};

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
    /// sled's log file, fsynced after each durable write: sled's own `flush()` ends in
    /// `sync_file_range(2)`, which survives a process crash but not a power cut
    /// (spacejam/sled#1452). `None` for a database without one on disk.
    log: Option<std::fs::File>,
    db_id: [u8; 16],
    /// Set if the database record was missing or damaged at open and replaced.
    reset: Option<DbRecordFault>,
    /// The crash-journal files on disk, listed at the first tree's open.
    found: std::sync::OnceLock<super::journal_names::FoundFiles>,
}

/// sled's `flush()`, then an fsync of its log: durable against a power cut too.
fn flush_durably(tree: &sled::Tree, log: Option<&std::fs::File>) -> Result<()> {
    tree.flush()?;
    if let Some(log) = log {
        log.sync_all()?;
    }
    Ok(())
}

/// sled's log file `<db>/db`, with its name made durable (sled never fsyncs its folder),
/// and the database folder's own name too (sled creates it and never fsyncs its parent: on
/// a file system that commits a name only with its folder, a power cut would otherwise
/// take a new database away whole, every flush it returned included).
///
/// sled's `conf` (its segment size and compression, written once when sled creates the
/// database, never fsynced) is fsynced here too, before anything bloomsled makes durable:
/// otherwise a power cut could keep flushed data and lose `conf`, and the next open would
/// write a new one from its own settings and read the log with them, where sled refuses
/// settings that differ from the creator's (`tests/power_cut.rs`).
fn open_log(db_dir: &std::path::Path) -> Result<Option<std::fs::File>> {
    let Ok(log) = std::fs::File::open(db_dir.join("db")) else {
        return Ok(None);
    };
    match std::fs::File::open(db_dir.join("conf")) {
        Ok(conf) => conf.sync_all()?,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return Err(e.into()),
    }
    std::fs::File::open(db_dir)?.sync_all()?;
    let parent = match db_dir.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => std::path::Path::new("."),
    };
    // A parent this process may not read cannot be fsynced by it either.
    if let Ok(parent) = std::fs::File::open(parent) {
        parent.sync_all()?;
    }
    Ok(Some(log))
}

/// How many of bloomsled's snapshot (`<tree id>.snap`) and journal
/// (`<tree id>.<sequence>.jnl`) files lie in `<db>/bloomsled`. Every one is written only
/// after the database record was made durable, so one beside a meta tree without any
/// record means sled lost that record. (What a repair sets aside there before sled opens,
/// and temporary files, do not count.)
fn earlier_files(db_dir: &std::path::Path) -> Result<usize> {
    let entries = match std::fs::read_dir(db_dir.join(super::DIR_NAME)) {
        Ok(entries) => entries,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(0),
        Err(e) => return Err(e.into()),
    };
    let mut files = 0;
    for entry in entries {
        let name = entry?.file_name();
        let Some(name) = name.to_str() else { continue };
        let Some((id, rest)) = name.split_once('.') else {
            continue;
        };
        let ours = id.len() == 32
            && id.bytes().all(|b| b.is_ascii_hexdigit())
            && (rest == "snap"
                || rest
                    .strip_suffix(".jnl")
                    .is_some_and(|n| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit())));
        files += usize::from(ours);
    }
    Ok(files)
}

/// Writes a new random database id, durably; returns it.
fn write_db_record(tree: &sled::Tree, log: Option<&std::fs::File>) -> Result<[u8; 16]> {
    let id = random_id()?;
    tree.insert(DB_KEY, DbRecord::new(id).as_bytes())?;
    flush_durably(tree, log)?;
    Ok(id)
}

/// Marks every readable tree record stale (dirty at its snapshot's sequence, not empty),
/// durably, so that no snapshot is trusted again even if this open does not get to rebuild
/// every tree before a crash. Unreadable records stay as they are (never trusted either).
fn mark_every_tree_stale(tree: &sled::Tree, log: Option<&std::fs::File>) -> Result<()> {
    for entry in tree.scan_prefix(TREE_PREFIX) {
        let (key, bytes) = entry?;
        let Ok(mut record) = TreeRecord::decode(&bytes) else {
            continue;
        };
        let g = record.snapshot_sequence.get();
        record.dirty_sequence = U64::new(record.dirty_sequence.get().max(g));
        record.flags = U32::new(record.flags.get() & !FLAG_EMPTY);
        tree.insert(key, &record.encode()[..])?;
    }
    flush_durably(tree, log)?;
    Ok(())
}

const TREE_PREFIX: &[u8] = b"t/";

fn tree_key(name: &[u8]) -> Vec<u8> {
    let mut k = Vec::with_capacity(2 + name.len());
    k.extend_from_slice(TREE_PREFIX);
    k.extend_from_slice(name);
    k
}

impl Meta {
    /// Opens the meta tree, creating the database id on first use.
    ///
    /// A database record that is missing (the tree holds other keys) or does not decode
    /// means nothing bloomsled stored can be vouched for: under [`RecoveryPolicy::Repair`] every
    /// tree record is durably marked stale first, then a new random database id is
    /// written, and [`Meta::reset`] says why (each tree opened by this process is rebuilt
    /// with that reason); under [`RecoveryPolicy::Strict`] it is
    /// [`Error::DatabaseRecordRejected`] and nothing is changed. Keys of the tree that are
    /// not bloomsled's records are never touched. An empty meta tree is a new database only
    /// when `<db>/bloomsled` holds no snapshot or journal file: beside such files it means
    /// sled lost its records ([`DbRecordFault::StoreEmptied`]), and is treated the same way.
    pub(crate) fn open(
        db: &sled::Db,
        db_dir: &std::path::Path,
        recovery: RecoveryPolicy,
    ) -> Result<Arc<Meta>> {
        let tree = db.open_tree(META_TREE)?;
        let log = open_log(db_dir)?;
        let fault = match tree.get(DB_KEY)? {
            Some(bytes) => match DbRecord::decode(&bytes) {
                Ok(record) => {
                    return Ok(Arc::new(Meta {
                        tree,
                        log,
                        db_id: record.db_id,
                        reset: None,
                        found: Default::default(),
                    }))
                }
                Err(e) => DbRecordFault::Damaged(e),
            },
            None if tree.first()?.is_none() => match earlier_files(db_dir)? {
                0 => {
                    // A new database.
                    let db_id = write_db_record(&tree, log.as_ref())?;
                    return Ok(Arc::new(Meta {
                        tree,
                        log,
                        db_id,
                        reset: None,
                        found: Default::default(),
                    }));
                }
                files => DbRecordFault::StoreEmptied { files },
            },
            None => DbRecordFault::Missing,
        };
        if recovery == RecoveryPolicy::Strict {
            return Err(Error::DatabaseRecordRejected { fault });
        }
        log::warn!(
            "bloomsled: the database record is {fault}: every tree's filter will be rebuilt \
             under a new database id"
        );
        mark_every_tree_stale(&tree, log.as_ref())?;
        let db_id = write_db_record(&tree, log.as_ref())?;
        Ok(Arc::new(Meta {
            tree,
            log,
            db_id,
            reset: Some(fault),
            found: Default::default(),
        }))
    }

    /// Why the database record was replaced at open (`None`: it was sound).
    pub(crate) fn reset(&self) -> Option<&DbRecordFault> {
        self.reset.as_ref()
    }

    /// What every flush a user can call does (`Tree::flush`, a window's, a transaction's,
    /// `Db::close`): sled's `flush()` of the whole database (through any of its trees),
    /// then one fsync of sled's log, so a returned flush survives a power cut (sled's own
    /// ends in `sync_file_range(2)`, spacejam/sled#1452). Returns sled's byte count.
    pub(crate) fn flush_user(&self, tree: &sled::Tree) -> Result<usize> {
        let bytes = tree.flush()?;
        self.sync_log()?;
        Ok(bytes)
    }

    /// The fsync of sled's log that makes what sled's `flush()` wrote durable (for a flush
    /// sled ran itself, as a transaction's at its commit).
    pub(crate) fn sync_log(&self) -> Result<()> {
        if let Some(log) = &self.log {
            log.sync_all()?;
        }
        Ok(())
    }

    /// The database id.
    pub(crate) fn db_id(&self) -> [u8; 16] {
        self.db_id
    }

    /// The crash-journal files found on disk, listed by `list` at the first call.
    pub(crate) fn found_files(
        &self,
        list: impl FnOnce() -> super::journal_names::FoundFiles,
    ) -> &super::journal_names::FoundFiles {
        self.found.get_or_init(list)
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
            flush_durably(&self.tree, self.log.as_ref())?;
        }
        Ok(())
    }

    /// Deletes the record of tree `name`, durably.
    pub(crate) fn remove(&self, name: &[u8]) -> Result<()> {
        self.tree.remove(tree_key(name))?;
        flush_durably(&self.tree, self.log.as_ref())?;
        Ok(())
    }

    /// The record a layer above the store keeps under `prefix` for `name` (a window's
    /// ring: `crate::window` owns its prefix and its bytes), if any.
    pub(crate) fn read_layer_record(
        &self,
        prefix: &[u8],
        name: &[u8],
    ) -> Result<Option<sled::IVec>> {
        Ok(self.tree.get(layer_key(prefix, name))?)
    }

    /// Stores a layer's record under `prefix` for `name`; durable on return if `durable`.
    pub(crate) fn write_layer_record(
        &self,
        prefix: &[u8],
        name: &[u8],
        bytes: Vec<u8>,
        durable: bool,
    ) -> Result<()> {
        self.tree.insert(layer_key(prefix, name), bytes)?;
        if durable {
            flush_durably(&self.tree, self.log.as_ref())?;
        }
        Ok(())
    }

    /// The names with a layer's record under `prefix`.
    pub(crate) fn layer_record_names(&self, prefix: &[u8]) -> Result<Vec<Vec<u8>>> {
        self.tree
            .scan_prefix(prefix)
            .keys()
            .map(|k| Ok(k?[prefix.len()..].to_vec()))
            .collect()
    }
}

fn layer_key(prefix: &[u8], name: &[u8]) -> Vec<u8> {
    [prefix, name].concat()
}

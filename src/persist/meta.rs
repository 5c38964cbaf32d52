//! The meta tree: bloomsled's records inside the store, beside the data they vouch for.
//!
//! One record store ([`RecordStore`]: with sled, the tree [`META_TREE`]) holds the
//! database id (key `db`) and one [`TreeRecord`] per filtered tree (key `t/` + the tree's
//! full name, so names never collide), and one [`WindowRecord`] per window (key `w/` + the
//! window's name). A record is written with the store's `insert` and made durable with
//! its durable flush before any write it must precede.

use std::sync::Arc;

use zerocopy::little_endian::{U32, U64};
use zerocopy::IntoBytes;

use super::files::sync_snapshot_dir;
use super::poison::{FileFault, Poison};
use super::records::RecordStore;
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
    /// The records, in the store (with sled: the tree [`META_TREE`], whose durable flush
    /// is sled's `flush()` then an fsync of sled's log, `src/store/records.rs`).
    store: Box<dyn RecordStore>,
    /// The database's folder.
    dir: std::path::PathBuf,
    /// Its `bloomsled` folder, which every tree's files name (shared: see
    /// [`Meta::files_dir`]).
    files_dir: Arc<std::path::Path>,
    /// Set by the first failed sync: then no write, flush or snapshot is acknowledged.
    poison: Poison,
    db_id: [u8; 16],
    /// Set if the database record was missing or damaged at open and replaced.
    reset: Option<DbRecordFault>,
    /// The crash-journal files on disk, listed at the first tree's open.
    found: std::sync::OnceLock<super::journal_names::FoundFiles>,
}

/// The store's flush, then its sync: durable against a power cut too. Refused once
/// `poison` is set (before each step); a failure of either sets it. Returns the store's
/// count.
fn flush_durably(store: &dyn RecordStore, poison: &Poison) -> Result<usize> {
    poison.check()?;
    let bytes = store.flush().map_err(|f| poison.absorb(f))?;
    sync_store(store, poison)?;
    Ok(bytes)
}

/// The store's sync, refused once `poison` is set, setting it if it fails.
fn sync_store(store: &dyn RecordStore, poison: &Poison) -> Result<()> {
    poison.check()?;
    store.sync().map_err(|f| poison.absorb(f))
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

/// What opening the meta tree works with before its [`Meta`] exists.
struct Opening<'a> {
    store: &'a dyn RecordStore,
    poison: &'a Poison,
}

impl Opening<'_> {
    fn flush_durably(&self) -> Result<usize> {
        flush_durably(self.store, self.poison)
    }
}

/// Writes a new random database id, durably; returns it.
fn write_db_record(at: &Opening<'_>) -> Result<[u8; 16]> {
    let id = random_id()?;
    at.store.insert(DB_KEY, DbRecord::new(id).as_bytes())?;
    at.flush_durably()?;
    Ok(id)
}

/// Marks every readable tree record stale (dirty at its snapshot's sequence, not empty),
/// durably, so that no snapshot is trusted again even if this open does not get to rebuild
/// every tree before a crash. Unreadable records stay as they are (never trusted either).
fn mark_every_tree_stale(at: &Opening<'_>) -> Result<()> {
    let store = at.store;
    store.for_each_with_prefix(TREE_PREFIX, &mut |key, bytes| {
        let Ok(mut record) = TreeRecord::decode(bytes) else {
            return Ok(());
        };
        let g = record.snapshot_sequence.get();
        record.dirty_sequence = U64::new(record.dirty_sequence.get().max(g));
        record.flags = U32::new(record.flags.get() & !FLAG_EMPTY);
        store.insert(key, &record.encode()[..])
    })?;
    at.flush_durably()?;
    Ok(())
}

/// A database record that is `fault`: under [`RecoveryPolicy::Repair`] every tree record
/// is durably marked stale, then a new database id written (returned, with the fault);
/// under [`RecoveryPolicy::Strict`] it is [`Error::DatabaseRecordRejected`].
fn replace_db_record(
    at: &Opening<'_>,
    fault: DbRecordFault,
    recovery: RecoveryPolicy,
) -> Result<([u8; 16], Option<DbRecordFault>)> {
    if recovery == RecoveryPolicy::Strict {
        return Err(Error::DatabaseRecordRejected { fault });
    }
    log::warn!(
        "bloomsled: the database record is {fault}: every tree's filter will be rebuilt \
         under a new database id"
    );
    mark_every_tree_stale(at)?;
    Ok((write_db_record(at)?, Some(fault)))
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
    /// the store lost its records ([`DbRecordFault::StoreEmptied`]), and is treated the same
    /// way.
    ///
    /// `store` holds the records of the database in `db_dir` (the tree [`META_TREE`] of a
    /// sled database); what its creation left undurable is made durable first
    /// ([`RecordStore::open_durably`]), a failed sync poisoning the database.
    pub(crate) fn open(
        mut store: Box<dyn RecordStore>,
        db_dir: &std::path::Path,
        recovery: RecoveryPolicy,
    ) -> Result<Arc<Meta>> {
        let poison = Poison::for_folder(db_dir);
        store.open_durably().map_err(|f| poison.absorb(f))?;
        let at = Opening {
            store: &*store,
            poison: &poison,
        };
        let read = store.get(DB_KEY).map_err(|e| store.read_failed(e))?;
        let (db_id, reset) = match read {
            Some(bytes) => match DbRecord::decode(&bytes) {
                Ok(record) => (record.db_id, None),
                Err(e) => replace_db_record(&at, DbRecordFault::Damaged(e), recovery)?,
            },
            None if store.is_empty().map_err(|e| store.read_failed(e))? => {
                match earlier_files(db_dir)? {
                    // A new database.
                    0 => (write_db_record(&at)?, None),
                    files => {
                        let fault = DbRecordFault::StoreEmptied { files };
                        replace_db_record(&at, fault, recovery)?
                    }
                }
            }
            None => replace_db_record(&at, DbRecordFault::Missing, recovery)?,
        };
        Ok(Arc::new(Meta {
            store,
            dir: db_dir.to_path_buf(),
            files_dir: Arc::from(db_dir.join(super::DIR_NAME)),
            poison,
            db_id,
            reset,
            found: Default::default(),
        }))
    }

    /// Why the database record was replaced at open (`None`: it was sound).
    pub(crate) fn reset(&self) -> Option<&DbRecordFault> {
        self.reset.as_ref()
    }

    /// What every flush a user can call does (`Tree::flush`, a window's, a transaction's,
    /// `Db::close`): the store's durable flush of the whole database (with sled: sled's
    /// `flush()`, then one fsync of sled's log, so a returned flush survives a power cut:
    /// sled's own ends in `sync_file_range(2)`, spacejam/sled#1452). Returns the store's
    /// byte count.
    ///
    /// Refused with [`Error::Poisoned`] once a sync of this database failed; a failure of
    /// either step poisons it (see `persist::poison`).
    pub(crate) fn flush_user(&self) -> Result<usize> {
        self.flush_durably()
    }

    /// The store's sync that makes what its flush wrote durable (for a flush the store ran
    /// itself, as a sled transaction's at its commit). Poisons as `flush_user`.
    pub(crate) fn sync_log(&self) -> Result<()> {
        sync_store(&*self.store, &self.poison)
    }

    /// The error for a failed flush of the store run by the caller (`error`: the store's
    /// error): it poisons the database.
    pub(crate) fn flush_failed(&self, error: impl std::fmt::Display) -> Error {
        self.poison
            .absorb(self.store.flush_fault(error.to_string()))
    }

    /// `Err(Error::Poisoned)` once a sync of this database failed: the check every write
    /// makes before it starts.
    #[inline]
    pub(crate) fn check_poison(&self) -> Result<()> {
        self.poison.check()
    }

    /// The error for a failed step on one of the database's files: a failed sync
    /// poisons the database (see `persist::poison`).
    pub(crate) fn absorb(&self, fault: FileFault) -> Error {
        self.poison.absorb(fault)
    }

    /// The folder fsync that makes the renames of snapshots written without one durable
    /// (see `SnapshotFile::write`). Refused, and poisoning, as `flush_user`.
    pub(crate) fn sync_snapshot_dir(&self) -> Result<()> {
        self.poison.check()?;
        sync_snapshot_dir(&self.dir).map_err(|f| self.absorb(f))
    }

    /// The database's `bloomsled` folder, one allocation shared by every tree's files.
    pub(crate) fn files_dir(&self) -> &Arc<std::path::Path> {
        &self.files_dir
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
            .store
            .get(&tree_key(name))?
            .map(|b| TreeRecord::decode(&b)))
    }

    /// Stores the record of tree `name`; durable on return if `durable`.
    /// Refused once the database is poisoned: a record written then could reach the disk
    /// with sled's next flush, vouching for what the failed sync lost.
    pub(crate) fn write(&self, name: &[u8], record: &mut TreeRecord, durable: bool) -> Result<()> {
        self.poison.check()?;
        self.store.insert(&tree_key(name), &record.encode()[..])?;
        if durable {
            self.flush_durably()?;
        }
        Ok(())
    }

    /// Deletes the record of tree `name`, durably.
    pub(crate) fn remove(&self, name: &[u8]) -> Result<()> {
        self.poison.check()?;
        self.store.remove(&tree_key(name))?;
        self.flush_durably()?;
        Ok(())
    }

    fn flush_durably(&self) -> Result<usize> {
        flush_durably(&*self.store, &self.poison)
    }

    /// The record a layer above the store keeps under `prefix` for `name` (a window's
    /// ring: `crate::window` owns its prefix and its bytes), if any.
    pub(crate) fn read_layer_record(&self, prefix: &[u8], name: &[u8]) -> Result<Option<Vec<u8>>> {
        self.store.get(&layer_key(prefix, name))
    }

    /// Stores a layer's record under `prefix` for `name`; durable on return if `durable`.
    pub(crate) fn write_layer_record(
        &self,
        prefix: &[u8],
        name: &[u8],
        bytes: Vec<u8>,
        durable: bool,
    ) -> Result<()> {
        self.poison.check()?;
        self.store.insert(&layer_key(prefix, name), &bytes)?;
        if durable {
            self.flush_durably()?;
        }
        Ok(())
    }

    /// The names with a layer's record under `prefix`.
    pub(crate) fn layer_record_names(&self, prefix: &[u8]) -> Result<Vec<Vec<u8>>> {
        let mut names = Vec::new();
        self.store.for_each_with_prefix(prefix, &mut |key, _| {
            names.push(key[prefix.len()..].to_vec());
            Ok(())
        })?;
        Ok(names)
    }
}

fn layer_key(prefix: &[u8], name: &[u8]) -> Vec<u8> {
    [prefix, name].concat()
}

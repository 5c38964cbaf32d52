//! `Db`: a sled database whose trees each have a filter.

use std::collections::HashMap;
use std::fmt;
use std::ops::{Bound, Deref};
use std::path::Path;
use std::sync::{Arc, Mutex, Weak};
use std::thread;
use std::time::{Duration, Instant};

use sled::IVec;

use super::rebuild::RebuildPolicy;
use super::tree::TreeShared;
use super::{Config, Tree};
use crate::error::{Error, Result};
use crate::filter::any::AnyFilter;
use crate::format::SnapshotFault;
use crate::hash::hash_key;
use crate::persist::{
    self, Persistence, Recovery, RecoveryOutcome, RecoveryReport, SnapshotInfo, TreeFiles,
};

/// Name sled gives the default tree.
const DEFAULT_TREE: &[u8] = b"__sled__default";

/// Tree names starting with this are bloomsled's own (filter snapshots); users cannot open
/// or drop them and `tree_names`/`export` do not list them.
pub const RESERVED_PREFIX: &[u8] = b"__bloomsled";

/// Opens (or creates) a database at `path` with the default settings.
///
/// ```no_run
/// let db = bloomsled::open("my_db")?;
/// # Ok::<(), bloomsled::Error>(())
/// ```
pub fn open<P: AsRef<Path>>(path: P) -> Result<Db> {
    Db::open(path)
}

/// A sled database with a Bloom filter in front of every tree.
///
/// `Db` derefs to its default [`Tree`], like `sled::Db`. Clones are cheap and share
/// everything; `Db` is `Send + Sync`.
///
/// ```
/// let db = bloomsled::Config::new().temporary(true).open()?;
/// db.insert(b"k", b"v")?;               // the default tree
/// let logs = db.open_tree("logs")?;     // a named tree with its own filter
/// logs.insert(b"k", b"other")?;
/// assert_eq!(db.tree_names().len(), 2);
/// # Ok::<(), bloomsled::Error>(())
/// ```
#[derive(Clone)]
pub struct Db {
    inner: sled::Db,
    default: Tree,
    shared: Arc<DbShared>,
}

struct DbShared {
    config: Config,
    /// One filter per open tree, shared by every handle to it.
    trees: Mutex<HashMap<IVec, Arc<TreeShared>>>,
}

impl fmt::Debug for Db {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Db")
            .field("default", &self.default)
            .field("filter_config", &self.shared.config.filter)
            .finish()
    }
}

impl Deref for Db {
    type Target = Tree;

    fn deref(&self) -> &Tree {
        &self.default
    }
}

impl Db {
    /// Opens (or creates) a database at `path`: 1M expected items per tree, 1% false
    /// positives, sled's defaults otherwise.
    pub fn open<P: AsRef<Path>>(path: P) -> Result<Db> {
        Config::new().path(path).open()
    }

    pub(crate) fn open_with(config: Config) -> Result<Db> {
        // Validate before sled creates anything on disk.
        config.validate()?;
        let inner = config.open_sled()?;
        let existed = inner.was_recovered();
        let default_shared = open_filter(&inner, &config, DEFAULT_TREE, existed)?;
        let default = Tree::new(inner.deref().clone(), default_shared.clone());
        let mut trees = HashMap::new();
        trees.insert(IVec::from(DEFAULT_TREE), default_shared);
        let shared = Arc::new(DbShared {
            config,
            trees: Mutex::new(trees),
        });
        if let Some(every) = shared.config.snapshot_interval {
            if !shared.config.temporary {
                spawn_snapshotter(Arc::downgrade(&shared), every);
            }
        }
        Ok(Db {
            inner,
            default,
            shared,
        })
    }

    /// Snapshots every open tree written since its last snapshot, so that the next open
    /// loads all filters without a scan. Returns what was written.
    pub fn snapshot_all(&self) -> Result<Vec<SnapshotInfo>> {
        let trees: Vec<Arc<TreeShared>> = self.lock_trees().values().cloned().collect();
        let mut out = Vec::new();
        for t in trees {
            if let Some(info) = t.snapshot_if_dirty()? {
                out.push(info);
            }
        }
        Ok(out)
    }

    /// Snapshots every tree written since its last snapshot and flushes sled: what dropping
    /// the last handle does, with errors reported instead of logged.
    pub fn close(self) -> Result<()> {
        self.snapshot_all()?;
        self.inner.flush()?;
        Ok(())
    }

    /// The recovery report of every open tree.
    pub fn recovery_reports(&self) -> Vec<RecoveryReport> {
        self.lock_trees()
            .values()
            .map(|t| t.report.clone())
            .collect()
    }

    /// Opens (creating if needed) the tree `name`, with its own filter. Every handle to one
    /// tree shares one filter. Opening an existing tree builds its filter from its keys.
    pub fn open_tree<V: AsRef<[u8]>>(&self, name: V) -> Result<Tree> {
        let name = name.as_ref();
        check_user_name(name)?;
        let mut trees = self.lock_trees();
        if let Some(shared) = trees.get(name) {
            return Ok(Tree::new(self.inner.open_tree(name)?, shared.clone()));
        }
        let existed = self.inner.tree_names().iter().any(|n| n == name);
        let inner = self.inner.open_tree(name)?;
        let shared = open_filter(&inner, &self.shared.config, name, existed)?;
        trees.insert(IVec::from(name), shared.clone());
        Ok(Tree::new(inner, shared))
    }

    /// Drops the tree `name` and its filter; `Ok(false)` if it did not exist. The default
    /// tree cannot be dropped (sled's rule).
    pub fn drop_tree<V: AsRef<[u8]>>(&self, name: V) -> Result<bool> {
        let name = name.as_ref();
        check_user_name(name)?;
        let mut trees = self.lock_trees();
        let dropped = self.inner.drop_tree(name)?;
        if let Some(t) = trees.remove(name) {
            t.forget_snapshot()?;
        } else if !self.shared.config.temporary {
            TreeFiles::new(&self.shared.config.path, name).remove()?;
        }
        Ok(dropped)
    }

    /// Names of all trees, the default one included (bloomsled's internal trees excluded).
    pub fn tree_names(&self) -> Vec<IVec> {
        self.inner
            .tree_names()
            .into_iter()
            .filter(|n| !n.starts_with(RESERVED_PREFIX))
            .collect()
    }

    /// True if the database was opened from existing files (sled's `was_recovered`).
    pub fn was_recovered(&self) -> bool {
        self.inner.was_recovered()
    }

    /// A monotonic id, unique across restarts (sled's `generate_id`).
    pub fn generate_id(&self) -> Result<u64> {
        Ok(self.inner.generate_id()?)
    }

    /// CRC32 of all keys and values of all trees, in sled's definition (O(n)).
    pub fn checksum(&self) -> Result<u32> {
        Ok(self.inner.checksum()?)
    }

    /// Bytes the database occupies on disk.
    pub fn size_on_disk(&self) -> Result<u64> {
        Ok(self.inner.size_on_disk()?)
    }

    /// Space amplification reported by sled.
    pub fn space_amplification(&self) -> Result<f64> {
        Ok(self.inner.space_amplification()?)
    }

    /// Every tree's entries in sled's version-agnostic export format: `(collection type,
    /// name, iterator of [key, value])`. bloomsled's internal trees are left out.
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
            .filter(|(_, name, _)| !name.starts_with(RESERVED_PREFIX))
            .collect()
    }

    /// Imports an [`Db::export`] (from this or another sled/bloomsled version), every key
    /// through the filter.
    ///
    /// # Panics
    /// Like sled's `import`: on a storage error, an unknown collection type, a malformed
    /// entry, or a key that already exists. [`Db::try_import`] returns those as errors.
    pub fn import(&self, export: Vec<(Vec<u8>, Vec<u8>, impl Iterator<Item = Vec<Vec<u8>>>)>) {
        if let Err(e) = self.try_import(export) {
            panic!("import failed: {e}");
        }
    }

    /// [`Db::import`] that reports failures instead of panicking. Entries imported before a
    /// failure stay imported.
    pub fn try_import(
        &self,
        export: Vec<(Vec<u8>, Vec<u8>, impl Iterator<Item = Vec<Vec<u8>>>)>,
    ) -> Result<()> {
        for (kind, name, entries) in export {
            if kind != b"tree" {
                return Err(Error::config(format!(
                    "cannot import collection type {:?}",
                    String::from_utf8_lossy(&kind)
                )));
            }
            let tree = if name == DEFAULT_TREE {
                self.default.clone()
            } else {
                self.open_tree(&name)?
            };
            for mut kv in entries {
                let (Some(v), Some(k), true) = (kv.pop(), kv.pop(), kv.is_empty()) else {
                    return Err(Error::config("import entry is not a [key, value] pair"));
                };
                // Insert-if-absent: an existing key is reported, never overwritten.
                if tree.compare_and_swap(&k, None::<&[u8]>, Some(v))?.is_err() {
                    return Err(Error::config(format!(
                        "import would overwrite key {:?} of tree {:?}",
                        String::from_utf8_lossy(&k),
                        String::from_utf8_lossy(&name)
                    )));
                }
            }
        }
        Ok(())
    }

    fn lock_trees(&self) -> std::sync::MutexGuard<'_, HashMap<IVec, Arc<TreeShared>>> {
        // The map is only ever replaced whole-entry, so a panic elsewhere cannot leave it
        // half-updated: recover from poisoning instead of propagating it.
        self.shared
            .trees
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

fn check_user_name(name: &[u8]) -> Result<()> {
    if name.starts_with(RESERVED_PREFIX) {
        return Err(Error::config(format!(
            "tree names starting with {:?} are reserved for bloomsled",
            String::from_utf8_lossy(RESERVED_PREFIX)
        )));
    }
    Ok(())
}

impl Drop for DbShared {
    /// The database is closing: background rebuilds stop (the filters in use stay valid),
    /// and this waits for them, so that nothing writes bloomsled's files once the last
    /// `Db` handle is gone.
    fn drop(&mut self) {
        let trees = self.trees.get_mut().unwrap_or_else(|p| p.into_inner());
        for t in trees.values() {
            t.closing.store(true, std::sync::atomic::Ordering::Relaxed);
        }
        for t in trees.values() {
            t.wait_for_rebuild();
        }
    }
}

/// The rebuild policy of a configuration.
fn policy(config: &Config) -> RebuildPolicy {
    RebuildPolicy {
        auto: config.auto_rebuild,
        bound: config.rebuild_fpr,
        base: config.filter.clone(),
    }
}

/// Builds a tree's filter from a scan of its keys, sized for the configured capacity, or
/// doubled until the keys found fill at most three quarters of it. This is the recovery
/// path when no trusted snapshot exists, so it must see every key: it reads the tree after
/// sled's recovery, before any handle to it is given out. Returns the filter and the number
/// of keys scanned.
fn build_filter(tree: &sled::Tree, config: &Config) -> Result<(AnyFilter, u64)> {
    let seed = config.filter.hash_seed();
    let threads = thread::available_parallelism()
        .map_or(1, |n| n.get())
        .min(8);
    let ranges = scan_ranges(tree, threads)?;
    // sled decodes pages as it iterates: scanning key ranges on all cores scales the
    // rebuild with them. The ranges cover the whole key space wherever they are cut.
    let parts: Vec<Result<Vec<u64>>> = thread::scope(|s| {
        let handles: Vec<_> = ranges
            .into_iter()
            .map(|(lo, hi)| {
                s.spawn(move || -> Result<Vec<u64>> {
                    let mut hashes = Vec::new();
                    for key in tree.range::<IVec, _>((lo, hi)).keys() {
                        hashes.push(hash_key(&key?, seed));
                    }
                    Ok(hashes)
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().unwrap_or_else(|p| std::panic::resume_unwind(p)))
            .collect()
    });
    let mut hashes = Vec::new();
    for part in parts {
        hashes.append(&mut part?);
    }
    let capacity = policy(config).capacity_for(hashes.len() as u64);
    let shape = config.filter.clone().expected_items(capacity).shape()?;
    let filter = AnyFilter::new(config.mode, shape, capacity)?;
    for &h in &hashes {
        filter.admit_hash(h);
    }
    Ok((filter, hashes.len() as u64))
}

type KeyRange = (Bound<IVec>, Bound<IVec>);

/// Up to `parts` adjacent ranges covering every key: cut points spread evenly over the two
/// bytes that follow the longest prefix shared by the first and the last key. A skewed key
/// distribution only unbalances the work; coverage does not depend on where the cuts fall.
fn scan_ranges(tree: &sled::Tree, parts: usize) -> Result<Vec<KeyRange>> {
    let whole = vec![(Bound::Unbounded, Bound::Unbounded)];
    let (Some((first, _)), Some((last, _))) = (tree.first()?, tree.last()?) else {
        return Ok(whole);
    };
    let p = first
        .iter()
        .zip(last.iter())
        .take_while(|(a, b)| a == b)
        .count();
    let two = |k: &[u8], pad: u8| -> u32 {
        let b = |i: usize| u32::from(k.get(p + i).copied().unwrap_or(pad));
        b(0) << 8 | b(1)
    };
    let (lo, hi) = (two(&first, 0), two(&last, 0xff));
    if parts < 2 || hi <= lo + parts as u32 {
        return Ok(whole);
    }
    let cuts: Vec<IVec> = (1..parts as u32)
        .map(|i| {
            let v = lo + (hi - lo) * i / parts as u32;
            let mut k = first[..p].to_vec();
            k.extend_from_slice(&(v as u16).to_be_bytes());
            IVec::from(k)
        })
        .collect();
    let mut ranges = Vec::with_capacity(parts);
    let mut start = Bound::Unbounded;
    for cut in cuts {
        ranges.push((start, Bound::Excluded(cut.clone())));
        start = Bound::Included(cut);
    }
    ranges.push((start, Bound::Unbounded));
    Ok(ranges)
}

/// Gives a tree its filter at open: its snapshot if it can be trusted, else a rebuild from
/// the keys (then a fresh snapshot), or an error in strict mode.
fn open_filter(
    tree: &sled::Tree,
    config: &Config,
    name: &[u8],
    existed: bool,
) -> Result<Arc<TreeShared>> {
    let start = Instant::now();
    let tree_name = String::from_utf8_lossy(name).into_owned();
    let report = |outcome, keys_scanned, bytes_verified, generation| RecoveryReport {
        tree: tree_name.clone(),
        outcome,
        keys_scanned,
        bytes_verified,
        generation,
        duration: start.elapsed(),
    };
    let every = config.snapshot_every_writes;
    let new_shared = |filter, persist, report| {
        TreeShared::new(filter, tree.clone(), persist, report, every, policy(config))
    };
    if config.temporary {
        let (filter, scanned) = build_filter(tree, config)?;
        let r = report(RecoveryOutcome::InMemory, scanned, 0, 0);
        return Ok(new_shared(filter, None, r));
    }
    let files = TreeFiles::new(&config.path, name);
    let dirty = persist::read_state(&files);
    // The marker's value, if it exists and is readable.
    let marked = dirty.clone().ok().flatten();
    let fault = match persist::load(&files, hash_key(name, 0), config.mode, dirty) {
        Ok(loaded) => {
            let p = Persistence::open(files, name, config.page_size, loaded.generation, marked)?;
            let r = report(RecoveryOutcome::Loaded, 0, loaded.bytes, loaded.generation);
            log::info!(
                "bloomsled: tree {:?}: filter loaded from snapshot generation {} ({} bytes \
                 verified) in {:?}",
                r.tree,
                r.generation,
                r.bytes_verified,
                r.duration
            );
            return Ok(new_shared(loaded.filter, Some(p), r));
        }
        Err(fault) => fault,
    };
    let new_tree = !existed && fault == SnapshotFault::Missing;
    if config.recovery == Recovery::Strict && !new_tree {
        return Err(Error::SnapshotRejected {
            tree: tree_name,
            fault,
        });
    }
    let (filter, scanned) = build_filter(tree, config)?;
    // Any snapshot still on disk is older than the one about to be written, and the marker
    // keeps it untrusted should that write not complete.
    let base = persist::peek_generation(&files)
        .unwrap_or(0)
        .max(marked.unwrap_or(0));
    let p = Persistence::open(files, name, config.page_size, base, marked)?;
    // No handle exists yet, so nothing writes: the copy is exact, and the keys it holds
    // are sled's recovered (durable) state.
    let info = p.snapshot(|| Ok((TreeShared::snapshot_meta(&filter), filter.snapshot_words())))?;
    let outcome = if new_tree {
        RecoveryOutcome::Created
    } else {
        RecoveryOutcome::Rebuilt { reason: fault }
    };
    let r = report(outcome, scanned, 0, info.generation);
    match &r.outcome {
        RecoveryOutcome::Rebuilt { reason } => log::info!(
            "bloomsled: tree {:?}: filter rebuilt from {} keys in {:?} ({reason})",
            r.tree,
            r.keys_scanned,
            r.duration
        ),
        _ => log::debug!("bloomsled: tree {:?}: new filter", r.tree),
    }
    Ok(new_shared(filter, Some(p), r))
}

/// Background snapshots every `every`, until the database is dropped.
fn spawn_snapshotter(db: Weak<DbShared>, every: Duration) {
    let spawned = thread::Builder::new()
        .name("bloomsled-snapshot".into())
        .spawn(move || {
            let tick = every.min(Duration::from_millis(100));
            let mut waited = Duration::ZERO;
            loop {
                thread::sleep(tick);
                waited += tick;
                if db.strong_count() == 0 {
                    return;
                }
                if waited < every {
                    continue;
                }
                waited = Duration::ZERO;
                let Some(db) = db.upgrade() else { return };
                let trees: Vec<Arc<TreeShared>> = db
                    .trees
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .values()
                    .cloned()
                    .collect();
                drop(db);
                for t in trees {
                    if let Err(e) = t.snapshot_if_dirty() {
                        log::warn!(
                            "bloomsled: periodic snapshot of {:?} failed: {e}",
                            t.report.tree
                        );
                    }
                }
            }
        });
    if let Err(e) = spawned {
        log::warn!("bloomsled: cannot start the snapshot thread: {e}");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Whatever the keys, the ranges partition them: every key in exactly one range.
    #[test]
    fn scan_ranges_partition_every_key_set() {
        let sets: Vec<Vec<Vec<u8>>> = vec![
            vec![],
            vec![b"only".to_vec()],
            vec![b"".to_vec(), b"\xff\xff\xff".to_vec(), b"a".to_vec()],
            (0..2_000u32)
                .map(|i| format!("https://h{}.example/{i}", i % 97).into_bytes())
                .collect(),
            (0..2_000u32).map(|i| i.to_be_bytes().to_vec()).collect(),
            (0..300u32)
                .map(|i| vec![7, 7, (i % 256) as u8, (i / 256) as u8])
                .collect(),
            (0..500u32)
                .map(|i| vec![0xff; 1 + (i % 40) as usize])
                .collect(),
        ];
        for (n, keys) in sets.iter().enumerate() {
            let db = sled::Config::new().temporary(true).open().unwrap();
            for k in keys {
                db.insert(k, &[][..]).unwrap();
            }
            for parts in [1, 2, 3, 8] {
                let mut seen = Vec::new();
                for (lo, hi) in scan_ranges(&db, parts).unwrap() {
                    for k in db.range::<IVec, _>((lo, hi)).keys() {
                        seen.push(k.unwrap().to_vec());
                    }
                }
                let mut want: Vec<Vec<u8>> = keys.clone();
                want.sort();
                want.dedup();
                assert_eq!(seen, want, "set {n}, {parts} parts");
            }
        }
    }
}

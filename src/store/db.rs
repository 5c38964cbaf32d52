//! `Db`: a sled database whose trees each have a filter.

use std::collections::HashMap;
use std::fmt;
use std::ops::Deref;
use std::path::Path;
use std::sync::{Arc, Mutex, Weak};
use std::thread;
use std::time::{Duration, Instant};

use sled::IVec;

use super::config::TreeConfig;
#[cfg(feature = "metrics")]
use super::holds::Hold;
use super::policy::RebuildPolicy;
use super::ready::RecoveryState;
use super::rebuild::Rebuild;
use super::recovery;
use super::scan::build_filter;
use super::state::TreeState;
use super::{Config, Tree};
use crate::error::{Error, Result};
use crate::filter::any::AnyFilter;
use crate::persist::{
    self, Meta, Opening, RecoveryOutcome, RecoveryReport, SnapshotInfo, Start, META_TREE,
};

/// Name sled gives the default tree.
const DEFAULT_TREE: &[u8] = b"__sled__default";

/// First bytes of the name of every generation tree of a window (see `crate::window`):
/// such trees are reserved, hidden from [`Db::tree_names`], and only a window opens or
/// drops them.
pub(crate) const GENERATION_PREFIX: &[u8] = b"__bloomsled_window:";

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
    state: Arc<DbState>,
}

struct DbState {
    config: Config,
    /// bloomsled's records in sled; `None` for a temporary database.
    meta: Option<Arc<Meta>>,
    /// One filter per open tree, shared by every handle to it.
    trees: Mutex<HashMap<IVec, Arc<TreeState>>>,
}

impl fmt::Debug for Db {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Db")
            .field("default", &self.default)
            .field("filter_config", &self.state.config.filter)
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
    /// Opens (or creates) a database at `path`: 1M expected items per tree, 0.1% false
    /// positives, sled's defaults otherwise.
    ///
    /// # Examples
    ///
    /// ```
    /// # let dir = tempfile::tempdir()?;
    /// let db = bloomsled::Db::open(dir.path().join("db"))?;
    /// db.insert("k", "v")?;
    /// assert!(db.contains_key("k")?);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn open<P: AsRef<Path>>(path: P) -> Result<Db> {
        Config::new().path(path).open()
    }

    pub(crate) fn open_with(config: Config) -> Result<Db> {
        // Validate before sled creates anything on disk.
        config.validate()?;
        if !config.temporary {
            super::torn::set_aside_torn_snapshot(&config.path)?;
        }
        let inner = config.open_sled()?;
        let meta = if config.temporary {
            None
        } else {
            Some(Meta::open(&inner, config.recovery)?)
        };
        let default_state = open_filter(&inner, &config, meta.as_ref(), DEFAULT_TREE, None)?;
        let default = Tree::new(inner.deref().clone(), default_state.clone());
        let mut trees = HashMap::new();
        trees.insert(IVec::from(DEFAULT_TREE), default_state);
        let state = Arc::new(DbState {
            config,
            meta,
            trees: Mutex::new(trees),
        });
        if let Some(every) = state.config.snapshot_interval {
            if !state.config.temporary {
                spawn_snapshotter(Arc::downgrade(&state), every);
            }
        }
        #[cfg(feature = "metrics")]
        if let Some(every) = state.config.metrics_interval {
            spawn_recorder(DbWatch(Arc::downgrade(&state)), every);
        }
        Ok(Db {
            inner,
            default,
            state,
        })
    }

    /// Snapshots every open tree written since its last snapshot, so that the next open
    /// loads all filters without a scan. Returns what was written.
    ///
    /// # Examples
    ///
    /// ```
    /// # let dir = tempfile::tempdir()?;
    /// let db = bloomsled::Config::new().path(dir.path()).open()?;
    /// db.open_tree("users")?.insert("alice", "1")?;
    /// let written = db.snapshot_all()?;
    /// assert!(!written.is_empty());
    /// // Nothing written since: nothing to snapshot.
    /// assert!(db.snapshot_all()?.is_empty());
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn snapshot_all(&self) -> Result<Vec<SnapshotInfo>> {
        let trees: Vec<Arc<TreeState>> = self.lock_trees().values().cloned().collect();
        let mut out = Vec::new();
        // Each snapshot's file is fsynced when it is written; their renames are made durable
        // by one directory fsync, and the records naming them by one sled flush, at the end
        // (until then the previous snapshots stay the trusted ones): many trees cost one
        // fsync each, not three.
        let mut result = Ok(());
        for t in trees {
            match t.snapshot_if_dirty_with(false) {
                Ok(Some(info)) => out.push(info),
                Ok(None) => {}
                Err(e) => {
                    result = Err(e);
                    break;
                }
            }
        }
        if self.state.meta.is_some() {
            persist::sync_snapshot_dir(&self.state.config.path)?;
        }
        self.inner.flush()?;
        result.map(|()| out)
    }

    /// Snapshots every tree written since its last snapshot and flushes sled: what dropping
    /// the last handle does, with errors reported instead of logged.
    ///
    /// # Examples
    ///
    /// ```
    /// # let dir = tempfile::tempdir()?;
    /// let db = bloomsled::Config::new().path(dir.path()).open()?;
    /// db.insert("k", "v")?;
    /// db.close()?;
    /// let db = bloomsled::Config::new().path(dir.path()).open()?;
    /// assert!(db.recovery_report().loaded() && db.contains_key("k")?);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn close(self) -> Result<()> {
        self.snapshot_all()?;
        self.inner.flush()?;
        Ok(())
    }

    /// The recovery report of every open tree.
    ///
    /// # Examples
    ///
    /// ```
    /// # let dir = tempfile::tempdir()?;
    /// let db = bloomsled::Config::new().path(dir.path()).open()?;
    /// db.open_tree("users")?.insert("alice", "1")?;
    /// db.close()?;
    /// let db = bloomsled::Config::new().path(dir.path()).open()?;
    /// db.open_tree("users")?;
    /// assert!(db.recovery_reports().iter().all(|r| r.loaded()));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn recovery_reports(&self) -> Vec<RecoveryReport> {
        self.lock_trees()
            .values()
            .map(|t| recovery::report(t))
            .collect()
    }

    /// Opens (creating if needed) the tree `name`, with its own filter. Every handle to one
    /// tree shares one filter. An existing tree keeps the sizing and mode it was created
    /// with (see [`Db::open_tree_with`]); a new one gets the database's.
    ///
    /// # Examples
    ///
    /// ```
    /// # let db = bloomsled::Config::new().temporary(true).open()?;
    /// let users = db.open_tree("users")?;
    /// users.insert("alice", "1")?;
    /// assert!(users.contains_key("alice")?);
    /// assert!(!db.contains_key("alice")?); // the default tree is another tree
    /// assert!(db.open_tree("users")?.contains_key("alice")?);
    /// # Ok::<(), bloomsled::Error>(())
    /// ```
    pub fn open_tree<V: AsRef<[u8]>>(&self, name: V) -> Result<Tree> {
        check_user_name(name.as_ref())?;
        self.open_tree_inner(name.as_ref(), None)
    }

    /// [`Db::open_tree`] with the tree's own filter settings: its expected items, rate or
    /// bits per key, and mode. They replace whatever the tree was created with, for the
    /// filters built from now on (a loaded filter keeps its shape until it is rebuilt or
    /// resized; a mode change rebuilds at once). A tree already open in this process keeps
    /// its filter and gets the settings for its next rebuild.
    ///
    /// # Examples
    ///
    /// ```
    /// use bloomsled::TreeConfig;
    /// let db = bloomsled::Config::new().temporary(true).open()?;
    /// // A thousand small trees need no megabyte filter each.
    /// let small = db.open_tree_with("tenant-17", TreeConfig::new().expected_items(1_000))?;
    /// small.insert(b"k", b"v".to_vec())?;
    /// assert!(small.stats().memory_bytes < 4_096);
    /// # Ok::<(), bloomsled::Error>(())
    /// ```
    pub fn open_tree_with<V: AsRef<[u8]>>(&self, name: V, config: TreeConfig) -> Result<Tree> {
        check_user_name(name.as_ref())?;
        self.open_tree_inner(name.as_ref(), Some(config))
    }

    /// Opens a tree without the check of user names: for the reserved trees of windows.
    pub(crate) fn open_tree_inner(&self, name: &[u8], config: Option<TreeConfig>) -> Result<Tree> {
        if let Some(c) = &config {
            c.validate()?;
        }
        let mut trees = self.lock_trees();
        if let Some(state) = trees.get(name) {
            if let Some(c) = &config {
                state.set_settings(c.mode, &c.filter)?;
            }
            return Ok(Tree::new(self.inner.open_tree(name)?, state.clone()));
        }
        let inner = self.inner.open_tree(name)?;
        let state = open_filter(
            &inner,
            &self.state.config,
            self.state.meta.as_ref(),
            name,
            config.as_ref(),
        )?;
        trees.insert(IVec::from(name), state.clone());
        Ok(Tree::new(inner, state))
    }

    /// Drops the tree `name` and its filter; `Ok(false)` if it did not exist. The default
    /// tree cannot be dropped (sled's rule).
    ///
    /// # Examples
    ///
    /// ```
    /// # let db = bloomsled::Config::new().temporary(true).open()?;
    /// db.open_tree("scratch")?.insert("k", "v")?;
    /// assert!(db.drop_tree("scratch")?);
    /// assert!(!db.drop_tree("scratch")?);
    /// assert!(db.open_tree("scratch")?.is_empty());
    /// # Ok::<(), bloomsled::Error>(())
    /// ```
    pub fn drop_tree<V: AsRef<[u8]>>(&self, name: V) -> Result<bool> {
        check_user_name(name.as_ref())?;
        self.drop_tree_inner(name.as_ref())
    }

    /// Drops a tree without the check of user names (a window's generations); also forgets
    /// the record and snapshot of a tree sled no longer has.
    pub(crate) fn drop_tree_inner(&self, name: &[u8]) -> Result<bool> {
        let mut trees = self.lock_trees();
        let dropped = self.inner.drop_tree(name)?;
        if let Some(t) = trees.remove(name) {
            t.forget_snapshot()?;
        } else if let Some(meta) = &self.state.meta {
            persist::forget_closed(meta, &self.state.config.path, name)?;
        }
        Ok(dropped)
    }

    /// Names of all trees, the default one included; bloomsled's own meta tree and the
    /// generation trees of windows are left out (see [`Db::window_names`]).
    ///
    /// # Examples
    ///
    /// ```
    /// # let db = bloomsled::Config::new().temporary(true).open()?;
    /// db.open_tree("users")?;
    /// assert!(db.tree_names().contains(&bloomsled::IVec::from("users")));
    /// # Ok::<(), bloomsled::Error>(())
    /// ```
    pub fn tree_names(&self) -> Vec<IVec> {
        self.inner
            .tree_names()
            .into_iter()
            .filter(|n| n != META_TREE && !n.starts_with(GENERATION_PREFIX))
            .collect()
    }

    /// Every tree sled holds, reserved ones included (the window layer's reconciliation).
    pub(crate) fn sled_tree_names(&self) -> Vec<IVec> {
        self.inner.tree_names()
    }

    /// Tells apart the databases open in this process: equal for every handle of one
    /// database, different for two databases open at once.
    pub(crate) fn identity(&self) -> usize {
        Arc::as_ptr(&self.state) as usize
    }

    /// bloomsled's records; `None` for a temporary database.
    pub(crate) fn meta(&self) -> Option<&Arc<Meta>> {
        self.state.meta.as_ref()
    }

    /// True if the database was opened from existing files (sled's `was_recovered`).
    ///
    /// # Examples
    ///
    /// ```
    /// # let dir = tempfile::tempdir()?;
    /// let db = bloomsled::Config::new().path(dir.path()).open()?;
    /// assert!(!db.was_recovered());
    /// db.close()?;
    /// let db = bloomsled::Config::new().path(dir.path()).open()?;
    /// assert!(db.was_recovered());
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn was_recovered(&self) -> bool {
        self.inner.was_recovered()
    }

    /// A monotonic id, unique across restarts (sled's `generate_id`).
    ///
    /// # Examples
    ///
    /// ```
    /// # let db = bloomsled::Config::new().temporary(true).open()?;
    /// let a = db.generate_id()?;
    /// let b = db.generate_id()?;
    /// assert!(b > a);
    /// # Ok::<(), bloomsled::Error>(())
    /// ```
    pub fn generate_id(&self) -> Result<u64> {
        Ok(self.inner.generate_id()?)
    }

    /// CRC32 of all keys and values of all trees, in sled's definition (O(n)).
    ///
    /// # Examples
    ///
    /// ```
    /// # let db = bloomsled::Config::new().temporary(true).open()?;
    /// let other = bloomsled::Config::new().temporary(true).open()?;
    /// for d in [&db, &other] {
    ///     d.open_tree("users")?.insert("alice", "1")?;
    /// }
    /// assert_eq!(db.checksum()?, other.checksum()?);
    /// other.insert("k", "v")?;
    /// assert_ne!(db.checksum()?, other.checksum()?);
    /// # Ok::<(), bloomsled::Error>(())
    /// ```
    pub fn checksum(&self) -> Result<u32> {
        Ok(self.inner.checksum()?)
    }

    /// Bytes the database occupies on disk.
    ///
    /// # Examples
    ///
    /// ```
    /// # let dir = tempfile::tempdir()?;
    /// let db = bloomsled::Config::new().path(dir.path()).open()?;
    /// db.insert("k", vec![0u8; 4096])?;
    /// db.flush()?;
    /// assert!(db.size_on_disk()? > 4096);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn size_on_disk(&self) -> Result<u64> {
        Ok(self.inner.size_on_disk()?)
    }

    /// Space amplification reported by sled.
    ///
    /// # Examples
    ///
    /// ```
    /// # let dir = tempfile::tempdir()?;
    /// let db = bloomsled::Config::new().path(dir.path()).open()?;
    /// db.insert("k", vec![0u8; 4096])?;
    /// db.flush()?;
    /// assert!(db.space_amplification()? > 0.0);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn space_amplification(&self) -> Result<f64> {
        Ok(self.inner.space_amplification()?)
    }

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
            } else if name.starts_with(GENERATION_PREFIX) {
                // A window's generation: the window adopts it when it is next opened.
                self.open_tree_inner(&name, None)?
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

    fn lock_trees(&self) -> std::sync::MutexGuard<'_, HashMap<IVec, Arc<TreeState>>> {
        // The map is only ever replaced whole-entry, so a panic elsewhere cannot leave it
        // half-updated: recover from poisoning instead of propagating it.
        self.state
            .trees
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

fn check_user_name(name: &[u8]) -> Result<()> {
    if name == META_TREE {
        return Err(Error::ReservedName {
            name: String::from_utf8_lossy(META_TREE).into_owned(),
            why: "it is bloomsled's meta tree; users cannot open or drop it".into(),
        });
    }
    if name.starts_with(GENERATION_PREFIX) {
        return Err(Error::ReservedName {
            name: String::from_utf8_lossy(name).into_owned(),
            why: "it names a generation of a window; open the window with Db::open_window".into(),
        });
    }
    Ok(())
}

/// A database as a background thread watches it: this alone keeps nothing open.
#[cfg(feature = "metrics")]
struct DbWatch(Weak<DbState>);

#[cfg(feature = "metrics")]
impl DbWatch {
    /// The database's identity (as [`Db::identity`]) and its open trees, each with a hold
    /// claimed by the calling thread (see [`super::holds`]; a tuple drops its tree before
    /// its hold). `None` once the database is dropped.
    fn trees(&self) -> Option<(usize, Vec<(Tree, Hold)>)> {
        let db = self.0.upgrade()?;
        let trees = db
            .trees
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .values()
            .map(|t| {
                let hold = t.holds.take().claim();
                (Tree::new(t.sled.clone(), Arc::clone(t)), hold)
            })
            .collect();
        Some((Arc::as_ptr(&db) as usize, trees))
    }
}

#[cfg(feature = "metrics")]
impl Db {
    /// Records the metrics of every open tree (label `tree`) and every open window
    /// (label `window`) of this database through the `metrics` facade (see
    /// [`crate::telemetry`] for the series). Reads counters the lookups keep anyway and
    /// every filter word once: call it at scrape rate, or let
    /// [`crate::Config::metrics_interval`] call it.
    ///
    /// ```
    /// let db = bloomsled::Config::new().temporary(true).open()?;
    /// db.open_tree("users")?.insert("alice", "1")?;
    /// db.record_metrics(); // with no recorder installed, the facade drops them
    /// # Ok::<(), bloomsled::Error>(())
    /// ```
    pub fn record_metrics(&self) {
        let trees: Vec<Tree> = self
            .lock_trees()
            .values()
            .map(|s| Tree::new(s.sled.clone(), s.clone()))
            .collect();
        for tree in &trees {
            tree.record_metrics();
        }
        super::telemetry::record_also(self.identity());
    }
}

/// Records the metrics of the database `db` watches every `every`, until it is dropped.
#[cfg(feature = "metrics")]
fn spawn_recorder(db: DbWatch, every: Duration) {
    let spawned = thread::Builder::new()
        .name("bloomsled-metrics".into())
        .spawn(move || {
            // Short sleeps, so that the thread ends soon after the database is dropped.
            let tick = every.min(Duration::from_millis(100));
            let mut waited = Duration::ZERO;
            while db.0.strong_count() > 0 {
                thread::sleep(tick);
                waited += tick;
                if waited < every {
                    continue;
                }
                waited = Duration::ZERO;
                let Some((id, trees)) = db.trees() else {
                    return;
                };
                for (tree, _hold) in &trees {
                    tree.record_metrics();
                }
                // The windows (each holds its database open while recorded).
                super::telemetry::record_also(id);
                drop(trees);
            }
        });
    if let Err(e) = spawned {
        log::warn!("bloomsled: the metrics recorder thread could not start: {e}");
    }
}

impl Drop for DbState {
    /// The database is closing: background rebuilds stop (the filters in use stay valid),
    /// and this waits for them and for every background thread to let go of the trees
    /// (`store::holds`), so that nothing writes bloomsled's files, and sled's file lock is
    /// free, once the last `Db` handle is gone.
    fn drop(&mut self) {
        let trees = self.trees.get_mut().unwrap_or_else(|p| p.into_inner());
        for t in trees.values() {
            t.closing.store(true, std::sync::atomic::Ordering::Relaxed);
        }
        for t in trees.values() {
            Rebuild(t).wait();
        }
        // And until no background thread holds a tree (`store::holds`): sled's lock and
        // the trees' closing snapshots go with this drop, not a moment after it.
        for t in trees.values() {
            t.holds.wait_released();
        }
    }
}

/// The rebuild policy of a configuration, for a tree of sizing `base`.
fn policy(config: &Config, base: crate::filter::FilterConfig) -> RebuildPolicy {
    RebuildPolicy {
        auto: config.auto_rebuild,
        bound: config.rebuild_fpr,
        base,
    }
}

/// Gives a tree its filter at open: its snapshot if it can be trusted, else a rebuild from
/// the keys (then a fresh snapshot), or an error in strict mode (see [`crate::persist`]).
fn open_filter(
    tree: &sled::Tree,
    config: &Config,
    meta: Option<&Arc<Meta>>,
    name: &[u8],
    tree_config: Option<&TreeConfig>,
) -> Result<Arc<TreeState>> {
    let every = config.snapshot_every_writes;
    let mode = tree_config.and_then(|c| c.mode).or(config.mode);
    let sizing = tree_config.map_or(&config.filter, |c| &c.filter);
    let Some(meta) = meta else {
        // A temporary database: built from a scan, never persisted.
        let start = Instant::now();
        let policy = policy(config, sizing.clone());
        let (filter, scanned) = build_filter(tree, mode.unwrap_or_default(), &policy)?;
        let report = RecoveryReport {
            tree: String::from_utf8_lossy(name).into_owned(),
            outcome: RecoveryOutcome::InMemory,
            keys_scanned: scanned,
            bytes_verified: 0,
            generation: 0,
            duration: start.elapsed(),
            rebuilding: None,
        };
        return Ok(TreeState::new(
            filter,
            tree.clone(),
            None,
            report,
            every,
            policy,
            RecoveryState::ready(),
        ));
    };
    let at = Opening {
        name,
        tree,
        mode,
        sizing,
        override_sizing: tree_config.is_some(),
        recovery: config.recovery,
        db_dir: &config.path,
        page_size: config.page_size,
    };
    let recovered = persist::recover(meta, &at)?;
    let policy = policy(config, recovered.sizing);
    let (filter, recovery) = match recovered.start {
        Start::Ready(filter) => (*filter, RecoveryState::ready()),
        Start::Rebuild { expected_keys } => {
            // Until the rebuild is done, every lookup goes to sled.
            let shape = policy.base.shape()?;
            let stand_in = AnyFilter::pass_all(recovered.mode, shape.num_hashes, shape.seed)?;
            (stand_in, RecoveryState::pending(expected_keys))
        }
    };
    let rebuild = !recovery.is_ready();
    let state = TreeState::new(
        filter,
        tree.clone(),
        Some(recovered.persistence),
        recovered.report,
        every,
        policy,
        recovery,
    );
    if rebuild {
        if let RecoveryOutcome::Rebuilt { reason } = &state.report.outcome {
            log::info!(
                "bloomsled: tree {:?}: snapshot not trusted ({reason}); {}, every lookup \
                 goes to sled until then (about {} keys to scan)",
                state.report.tree,
                if config.background_recovery {
                    "serving now and rebuilding the filter in the background"
                } else {
                    "rebuilding the filter before open returns"
                },
                state
                    .recovery
                    .expected_keys
                    .map_or("an unknown number of".into(), |n| n.to_string()),
            );
        }
        recovery::start(&state, config.background_recovery);
    } else {
        // A filter loaded past its capacity (a bulk load closed before its resize finished)
        // starts the resize now rather than serving a high false-positive rate for good.
        Rebuild(&state).check();
    }
    Ok(state)
}

/// Background snapshots every `every`, until the database is dropped.
fn spawn_snapshotter(db: Weak<DbState>, every: Duration) {
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
                let trees: Vec<Arc<TreeState>> = db
                    .trees
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .values()
                    .cloned()
                    .collect();
                // Held until the trees are let go, so that a drop of the database waits
                // for this pass (claimed: a drop that runs here, below, does not).
                let holds: Vec<_> = trees.iter().map(|t| t.holds.take().claim()).collect();
                drop(db);
                for t in &trees {
                    if let Err(e) = t.snapshot_if_dirty() {
                        log::warn!(
                            "bloomsled: periodic snapshot of {:?} failed: {e}",
                            t.report.tree
                        );
                    }
                }
                drop(trees);
                drop(holds);
            }
        });
    if let Err(e) = spawned {
        log::warn!("bloomsled: cannot start the snapshot thread: {e}");
    }
}

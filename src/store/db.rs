//! `Db`: a sled database whose trees each have a filter; in `db/`, moving its contents
//! (export, import), sled's database-wide facts, and the periodic snapshot thread.

mod export;
mod info;
mod snapshotter;

use std::collections::HashMap;
use std::fmt;
use std::ops::Deref;
use std::path::Path;
#[cfg(feature = "metrics")]
use std::sync::Weak;
use std::sync::{Arc, Mutex};
#[cfg(feature = "metrics")]
use std::thread;
#[cfg(feature = "metrics")]
use std::time::Duration;

use sled::IVec;

use super::config::sizing::TreeConfig;
#[cfg(feature = "metrics")]
use super::holds::Hold;
use super::rebuild::Rebuild;
use super::records::SledRecords;
use super::recovery;
use super::recovery::open::open_filter;
use super::state::TreeState;
use super::{Config, Tree};
use crate::error::{Error, Result};
use crate::persist::{self, Meta, RecoveryReport, SnapshotInfo, META_TREE};
use snapshotter::spawn_snapshotter;

/// Name sled gives the default tree.
pub(super) const DEFAULT_TREE: &[u8] = b"__sled__default";

/// First bytes of the names of the trees the layers above the store make for themselves
/// (today a window's generations, `__bloomsled_window:…`). Such trees are hidden from
/// [`Db::tree_names`]; users cannot open or drop them, only the layer that made them
/// (through `open_tree_inner` / `drop_tree_inner`). Other names starting `__bloomsled_`
/// stay users' (the meta tree aside).
pub(crate) const RESERVED_TREE_PREFIX: &[u8] = b"__bloomsled_window:";

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
    pub(super) inner: sled::Db,
    pub(super) default: Tree,
    pub(super) state: Arc<DbState>,
}

pub(super) struct DbState {
    pub(super) config: Config,
    /// bloomsled's records in sled; `None` for a temporary database.
    pub(super) meta: Option<Arc<Meta>>,
    /// One filter per open tree, shared by every handle to it.
    pub(super) trees: Mutex<HashMap<IVec, Arc<TreeState>>>,
}

impl fmt::Debug for Db {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Db")
            .field("default", &self.default)
            .field("filter", &self.state.config.filter)
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
    /// Opens (or creates) a database at `path`: filters that grow with each tree, 0.1% false
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
            // A folder whose sync failed earlier in this process: its files rewritten first,
            // so what this open recovers from is on the disk (`persist/taint.rs`).
            crate::persist::taint::heal(&config.path)?;
            super::repair::torn_snapshot::set_aside_torn_snapshot(&config.path)?;
            super::repair::torn_conf::complete_torn_conf(
                &config.path,
                config.sled.segment_size,
                config.sled.use_compression,
            )?;
        }
        let inner = config.open_sled()?;
        let meta = if config.temporary {
            None
        } else {
            let records = SledRecords::open(&inner, &config.sled, &config.path)?;
            Some(Meta::open(
                Box::new(records),
                &config.path,
                config.recovery,
            )?)
        };
        let default_state = open_filter(&inner, &config, meta.as_ref(), DEFAULT_TREE, None, None)?;
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
                spawn_snapshotter(Arc::downgrade(&state), every, |s: &DbState| {
                    let trees = s.trees.lock().unwrap_or_else(|p| p.into_inner());
                    trees.values().cloned().collect()
                });
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
        for t in &trees {
            match t.snapshot_if_dirty_with(false) {
                Ok(Some(info)) => out.push(info),
                Ok(None) => {}
                Err(e) => {
                    result = Err(e);
                    break;
                }
            }
        }
        if let Some(meta) = &self.state.meta {
            meta.sync_snapshot_dir()?;
        }
        self.flush_durably()?;
        // The records naming the new snapshots are with the OS: older journals can go.
        for t in &trees {
            if let Some(p) = &t.persist {
                p.retire_journals();
            }
        }
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
        // `snapshot_all` ends in a durable flush (sled's, then an fsync of its log).
        self.snapshot_all()?;
        Ok(())
    }

    /// sled's flush of the whole database, then (for one on disk) an fsync of its log.
    fn flush_durably(&self) -> Result<()> {
        match &self.state.meta {
            Some(meta) => meta.flush_user().map(drop),
            None => self.inner.flush().map(drop).map_err(Into::into),
        }
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
        self.open_tree_inner(name.as_ref(), None, None)
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
        self.open_tree_inner(name.as_ref(), Some(config), None)
    }

    /// Opens a tree without the check of user names: for the reserved trees of windows.
    /// A new tree's filter gets `new_seed` unless `config` fixes a seed (`None`: a secret
    /// seed of its own).
    pub(crate) fn open_tree_inner(
        &self,
        name: &[u8],
        config: Option<TreeConfig>,
        new_seed: Option<u64>,
    ) -> Result<Tree> {
        if let Some(c) = &config {
            c.validate()?;
        }
        let mut trees = self.lock_trees();
        if let Some(state) = trees.get(name) {
            if let Some(c) = &config {
                state.set_settings(c.filter_mode, &c.filter)?;
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
            new_seed,
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
            .filter(|n| n != META_TREE && !n.starts_with(RESERVED_TREE_PREFIX))
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

    pub(super) fn lock_trees(&self) -> std::sync::MutexGuard<'_, HashMap<IVec, Arc<TreeState>>> {
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
    if name.starts_with(RESERVED_TREE_PREFIX) {
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

#[cfg_attr(docsrs, doc(cfg(feature = "metrics")))]
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
        // The last handles to sled usually go here, and sled 0.34's drop of its log ends in
        // `sync_all().unwrap()`: on a disk whose fsync fails (a poisoned database, see
        // `persist::poison`) that panics. The panic is caught and logged: the flush that
        // mattered was the one `close` (or the caller) asked for, and it reported.
        let trees = std::mem::take(trees);
        // Whether these are bloomsled's last handles to sled: no `Tree` of the database
        // outlives it (a user's `Tree` keeps sled open, as sled's own handles do).
        let last_trees = trees.values().all(|t| Arc::strong_count(t) == 1);
        let meta = self.meta.take();
        let dropped = std::panic::catch_unwind(std::panic::AssertUnwindSafe(move || {
            drop(trees);
            let last = last_trees && meta.as_ref().is_none_or(|m| Arc::strong_count(m) == 1);
            drop(meta);
            last
        }));
        match dropped {
            Ok(true) if !self.config.temporary => {
                super::lock::wait_until_free(&self.config.path.join("db"));
            }
            Ok(_) => {}
            Err(_) => log::error!(
                "bloomsled: sled's final fsync at drop failed (it panics): caught; reopen the \
                 database to recover from what is durable"
            ),
        }
    }
}

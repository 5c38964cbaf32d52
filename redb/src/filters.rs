//! The filters of one database's tables, and the protocol that keeps them complete.
//!
//! Each table has a [`TableFilter`]: its `current` [`Built`] filter (what lookups ask) and,
//! while a build runs, its `pending` one (what the build fills). A table has one filter, the
//! core's [`bloomsled::Filter`], never a list: a lookup hashes the key once and probes one block (one
//! cache line). A filter past its capacity keeps every key it was given (its false-positive
//! rate rises, nothing is lost) until the commit that overfilled it starts a rebuild from a
//! scan, sized for twice the table's keys, while lookups keep using the full one. Builds of
//! all but small tables run in a background thread (`build.rs`). A filter is never
//! cleared: a handle that holds one keeps every key it was ever given, except in counting
//! mode, where a committed removal counts its key out of `current` (`commits.rs`,
//! "Count-outs": rule 5 below).
//!
//! The rules (the argument is in `docs/redb.md`, "No false negative"):
//! 1. Every write that can create a key sets its bits in `current` and `pending` before redb
//!    stores it, and logs its hash in its write transaction.
//! 2. A build installs `pending` (bumping `build_gen`) before it begins the read transaction it
//!    scans; a commit holds a read guard of each table it wrote from before checking `build_gen`
//!    until redb's commit returns, and re-inserts its logged hashes if `build_gen` moved since the
//!    transaction first opened the table. So a key is in the scan or in `pending`.
//! 3. A built filter is trusted by a transaction only if its epoch is its table's epoch
//!    ([`Shared::epoch_of`]: the database's, which restores bump, plus the table's own,
//!    which a rename to or from its name bumps) and the transaction's state is at least as
//!    new as the scan's (`valid_from`, in commits): an older snapshot may hold keys removed
//!    since.
//! 4. `version` moves after every change of a table's `current` (under that table's write
//!    lock, so no key reaches the new filter before it moves) and after every move of the
//!    epoch. A per-thread copy of a `current` (the per-request path's cache, [`Shared::rules_out_latest`])
//!    is used only while `version` has not moved since it was read.
//! 5. Counting mode: a commit counts out only of the `current` it guarded across redb's
//!    commit, after that commit returned `Ok`, with the table's `outs` word in flight; a
//!    read table trusts the filter's "absent" only if `outs` is settled for its snapshot.
//!
//! Loom checks these rules on this code (`filters/loom_model.rs`: its locks and atomics come
//! from `crate::sync`).

use std::cell::RefCell;
use std::sync::atomic::Ordering::SeqCst;
use std::sync::{Arc, Weak};

use bloomsled::JournalFault;
use bloomsled::persist::JournalWriter;
use bloomsled::reuse::{Hashed, Pending};

use crate::persist::{self, OnDisk};
use crate::sync::{AtomicBool, AtomicU64, AtomicUsize, Mutex, MutexGuard, RwLock, RwLockReadGuard};

mod build;
mod built;
mod commits;
pub(crate) mod journals;
mod lookups;
mod names;
mod renames;

use built::MIN_CAPACITY;
pub(crate) use built::{Bits, Built};
use commits::Commits;
pub(crate) use commits::{Out, Touched, Written};

use journals::Journals;
pub(crate) use lookups::{Forgets, Lookups, ReadSide, Streak};
use names::Names;
pub(crate) use renames::{Unsettle, UnsettleTable};

pub(crate) use build::{Builder, Builds, Keys};

/// A build sizes the filter for this many times the table's keys.
const GROWTH: u64 = 2;
/// Where a table's current filter came from (see `Database::table_filter_source`).
///
/// ```
/// let s = bloomsled_redb::FilterSource::Scanned { journal: None };
/// assert!(matches!(s, bloomsled_redb::FilterSource::Scanned { .. }));
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum FilterSource {
    /// Loaded from the last clean close (no key read).
    Loaded,
    /// The filter the last clean close stored (or the empty filter, for a table made since
    /// that close), plus the hashes of the crash journals of the `sessions` written since
    /// (no key read): the table was written after that close and the process was killed
    /// (same boot).
    Replayed {
        /// Sessions (journals) replayed.
        sessions: u64,
        /// Hashes added from them.
        hashes: u64,
    },
    /// Built from a scan of the table's keys. `journal`: why its crash journals were not
    /// replayed, if the table had journals to replay (they did not pass the core's rule:
    /// another boot, a counter file gone, a damaged, foreign or earlier copy of a journal).
    Scanned {
        /// The core's reason for refusing the journals.
        journal: Option<bloomsled::JournalFault>,
    },
}

/// What the lookups and writes of one table share.
pub(crate) struct Slots {
    pub(crate) current: Arc<Built>,
    pending: Option<Arc<Built>>,
    /// Bumped each time a build installs `pending`.
    pub(crate) build_gen: u64,
    /// This session's crash journal of the table (`journals.rs`): each inserted key's hash
    /// is appended to it, in the same step that sets its bits (rule 1).
    journal: Option<Arc<JournalWriter>>,
}

impl Slots {
    /// Sets `h` in every filter (rule 1).
    fn insert_hash(&self, h: u64) {
        self.current.insert_hash(h);
        if let Some(p) = &self.pending {
            p.insert_hash(h);
        }
    }
}

/// One table's filter (see the module doc).
pub(crate) struct TableFilter {
    pub(crate) slots: RwLock<Slots>,
    seed: u64,
    /// True while a build of this table runs (at most one at a time).
    pub(crate) building: AtomicBool,
    /// Filters a build installed for this table (loaded or scanned).
    pub(crate) builds: AtomicU64,
    /// What this table's lookups did (`lookups.rs`).
    pub(crate) lookups: Lookups,
    /// The table's false positives found once (`lookups.rs`), with its seed, and the
    /// commits that may change the table (`commits.rs`).
    memory: bloomsled::reuse::FpMemory,
    commits: Commits,
    /// Bumped when a rename to or from this table's name begins and when its transaction
    /// ends (rule 3, [`Shared::epoch_of`]); `unsettled`: such transactions alive.
    epoch: AtomicU64,
    unsettled: AtomicUsize,
    /// Counting mode: the table's filters count keys, and a committed removal counts its
    /// key out of `current`.
    pub(crate) counting: bool,
    /// The commits that counted keys out of the table (`commits.rs`, "Count-outs"): a
    /// snapshot older than the latest of them trusts no "absent" of the filter.
    outs: Commits,
    /// What `record_metrics` last recorded of this table's counters.
    #[cfg(feature = "metrics")]
    pub(crate) recorded: bloomsled::telemetry::Recorded,
    /// The table's key in bloomsled's own tables (`persist::key`).
    pub(crate) key: Box<str>,
    /// How the current filter came to be (`None`: no build installed one yet), and why the
    /// last replay of the table's crash journals was refused, until a scan reports it.
    pub(crate) source: Mutex<(Option<FilterSource>, Option<JournalFault>)>,
}

impl TableFilter {
    fn new(seed: u64, key: String, counting: bool) -> Option<TableFilter> {
        Some(TableFilter {
            key: key.into(),
            slots: RwLock::new(Slots {
                current: Arc::new(Built::new(seed, MIN_CAPACITY, counting)?),
                pending: None,
                build_gen: 0,
                journal: None,
            }),
            seed,
            source: Mutex::default(),
            building: AtomicBool::new(false),
            builds: AtomicU64::new(0),
            lookups: Lookups::default(),
            memory: lookups::memory(seed),
            commits: Commits::default(),
            epoch: AtomicU64::new(0),
            unsettled: AtomicUsize::new(0),
            counting,
            outs: Commits::default(),
            #[cfg(feature = "metrics")]
            recorded: Default::default(),
        })
    }

    /// True once the current filter holds more keys than it was sized for: the commit
    /// that filled it rebuilds it larger.
    pub(crate) fn wants_growth(&self) -> bool {
        self.read().current.full()
    }

    pub(crate) fn read(&self) -> RwLockReadGuard<'_, Slots> {
        self.slots.read().unwrap_or_else(|e| e.into_inner())
    }

    /// Sets the key's bits in every filter (rule 1), forgets it in the false-positive
    /// memory until `pending` ends with the transaction, appends its hash to the session's
    /// crash journal if there is one (all before redb stores the key), and returns the hash
    /// for the write log.
    pub(crate) fn insert(&self, key: &[u8], pending: &mut Pending) -> u64 {
        let h = bloomsled::hash::hash_key(key, self.seed);
        self.forget(h, pending);
        let slots = self.read();
        slots.insert_hash(h);
        if let Some(j) = &slots.journal {
            j.append(h);
        }
        h
    }

    /// The seed of the table's hashes.
    pub(crate) fn seed(&self) -> u64 {
        self.seed
    }

    /// Makes `journal` the one this table's writes append to.
    pub(crate) fn set_journal(&self, journal: Arc<JournalWriter>) {
        self.slots
            .write()
            .unwrap_or_else(|e| e.into_inner())
            .journal = Some(journal);
    }

    pub(crate) fn source(&self) -> MutexGuard<'_, (Option<FilterSource>, Option<JournalFault>)> {
        self.source.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Re-inserts logged hashes under the caller's guard (rule 2).
    fn reinsert(slots: &Slots, hashes: &[u64]) {
        for &h in hashes {
            slots.insert_hash(h);
        }
    }

    /// `Some(None)` if the filter proves `key` absent from the view of a write transaction
    /// whose state is `seq` and that first opened the table at build generation `gen_seen`
    /// (`settled`: it restored or renamed nothing), `Some(Some(hash))` if it may hold it
    /// (the key's hash, for the memory, which then does not hash it again), `None` if the
    /// transaction may not trust the filter. Its own keys are in `current` (rule 1), but
    /// those it wrote before a build installed `pending` are in no scan: after a build
    /// began, it trusts no filter (rules 2, 3).
    pub(crate) fn probe_written(
        &self,
        gen_seen: u64,
        settled: impl FnOnce() -> bool,
        shared: &Shared,
        seq: u64,
        key: &[u8],
    ) -> Option<Option<Hashed>> {
        let slots = self.read();
        (slots.build_gen == gen_seen
            && settled()
            && slots.current.trusted_for(shared.epoch_of(self), seq))
        .then(|| slots.current.probe(key))
    }

    /// The build generation, read when a write transaction first opens the table (rule 2).
    pub(crate) fn build_gen(&self) -> u64 {
        self.read().build_gen
    }
}

/// The redb database itself, held here so a build can begin its own read transaction;
/// `None` once the user's handle was dropped or closed.
pub(crate) enum Source {
    ReadWrite(RwLock<Option<redb::Database>>),
    ReadOnly(RwLock<Option<redb::ReadOnlyDatabase>>),
}

impl Source {
    fn begin_read(&self) -> Option<redb::ReadTransaction> {
        use redb::ReadableDatabase;
        match self {
            Source::ReadWrite(db) => db.read().ok()?.as_ref()?.begin_read().ok(),
            Source::ReadOnly(db) => db.read().ok()?.as_ref()?.begin_read().ok(),
        }
    }
}

/// The builder's settings that reach the filters: `Builder::set_counting` and
/// `Builder::set_bypass_after_hits`.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Tuning {
    pub(crate) counting: bool,
    pub(crate) bypass_after_hits: u32,
}

/// What one database's handles share: the tables' filters and the counters of the protocol.
pub(crate) struct Shared {
    /// False when another process may write the file: nothing it writes reaches our
    /// filters, so every lookup goes to redb.
    pub(crate) enabled: bool,
    /// Counting mode (`Builder::set_counting`): every table's filter counts its keys.
    pub(crate) counting: bool,
    pub(crate) bypass_after_hits: u32, // `Builder::set_bypass_after_hits` (0: off)
    tables: RwLock<Names>,
    multimap_tables: RwLock<Names>,
    /// Bumped when a restore begins and when its transaction ends (a rename bumps its two
    /// tables' own: [`Shared::epoch_of`]).
    pub(crate) epoch: AtomicU64,
    /// Write transactions that restored a savepoint and have not ended.
    unsettled: AtomicUsize,
    /// Commits begun (bumped before redb's commit) and ended (after it returns).
    pub(crate) started: AtomicU64,
    pub(crate) finished: AtomicU64,
    /// The commits of unknown tables, which every table's memory asks (`commits.rs`).
    pub(crate) wide: Commits,
    pub(crate) source: Source,
    /// Rule 4, on a cache line of its own: every per-request lookup reads it, and the
    /// commit counters beside it are written by every commit.
    version: Version,
    /// This database's number in the process, never reused (the per-thread cache's key).
    id: u64,
    /// Write transactions alive (a clean close writes nothing while one is).
    pub(crate) writers: AtomicUsize,
    /// Which tables have a record of a clean close in the latest committed state.
    pub(crate) on_disk: Mutex<OnDisk>,
    /// Filters loaded from a clean close, replayed from crash journals over one, and built
    /// from a scan.
    pub(crate) loaded: AtomicU64,
    pub(crate) replayed: AtomicU64,
    pub(crate) scanned: AtomicU64,
    /// The crash journals of this handle's sessions (`journals.rs`).
    pub(crate) journals: Journals,
    /// The builds running in the background.
    pub(crate) builds: Builds,
    /// The file's path, if it was opened by one: a failed write marks it (`db/taint.rs`).
    pub(crate) path: Option<std::path::PathBuf>,
}

/// See [`Shared::version`].
#[repr(align(128))]
#[derive(Default)]
struct Version(AtomicU64);

/// Numbers the databases opened in this process (std's atomic under loom too: a static
/// outlives each model, and no rule rests on it).
static NEXT_ID: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

/// At most this many tables' filters are kept per thread by the per-request path.
const LATEST_ENTRIES: usize = 8;

/// A filter the per-request path of this thread used, valid while the database's `version`
/// is `version` (rule 4).
struct Latest {
    db: u64,
    kind: Kind,
    name: Box<str>,
    version: u64,
    built: Arc<Built>,
    /// The table's counters.
    tf: Arc<TableFilter>,
    /// To forget entries of dropped databases.
    shared: Weak<Shared>,
}

#[cfg(not(bloomsled_loom))]
thread_local! {
    static LATEST: RefCell<Vec<Latest>> = const { RefCell::new(Vec::new()) };
}

// Under loom, one per loom thread (loom runs its threads on one OS thread); loom's macro
// takes no `const` initializer and its key has only `with`.
#[cfg(bloomsled_loom)]
loom::thread_local! {
    static LATEST: RefCell<Vec<Latest>> = RefCell::new(Vec::new());
}

/// Which namespace a table name lives in.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
pub(crate) enum Kind {
    Table,
    Multimap,
}

impl Shared {
    /// `journals`: the folder of the crash journals, if this handle keeps them.
    pub(crate) fn new(
        enabled: bool,
        source: Source,
        on_disk: OnDisk,
        path: Option<std::path::PathBuf>,
        journals: Option<std::path::PathBuf>,
    ) -> Shared {
        Shared {
            enabled,
            counting: Tuning::default().counting,
            bypass_after_hits: Tuning::default().bypass_after_hits,
            tables: RwLock::default(),
            multimap_tables: RwLock::default(),
            epoch: AtomicU64::new(0),
            unsettled: AtomicUsize::new(0),
            started: AtomicU64::new(0),
            finished: AtomicU64::new(0),
            wide: Commits::default(),
            source,
            version: Version::default(),
            id: NEXT_ID.fetch_add(1, SeqCst),
            writers: AtomicUsize::new(0),
            on_disk: Mutex::new(on_disk),
            loaded: AtomicU64::new(0),
            replayed: AtomicU64::new(0),
            scanned: AtomicU64::new(0),
            journals: Journals::new(journals.filter(|_| enabled)),
            builds: Builds::default(),
            path,
        }
    }

    /// This database with a builder's settings (before any table is made).
    pub(crate) fn tuned(mut self, tuning: Tuning) -> Shared {
        self.counting = tuning.counting;
        self.bypass_after_hits = tuning.bypass_after_hits;
        self
    }

    fn map(&self, kind: Kind) -> &RwLock<Names> {
        match kind {
            Kind::Table => &self.tables,
            Kind::Multimap => &self.multimap_tables,
        }
    }

    /// The table's filter if it has one yet (the per-request path: no allocation).
    pub(crate) fn lookup(&self, kind: Kind, name: &str) -> Option<Arc<TableFilter>> {
        if !self.enabled {
            return None;
        }
        let map = self.map(kind).read().unwrap_or_else(|e| e.into_inner());
        map.get(name).cloned()
    }

    /// True if the latest committed state certainly lacks `key` in table `name`.
    ///
    /// No lock and no read-modify-write on the way: the filter comes from this thread's
    /// cache, valid while `version` has not moved (rule 4). A locked instruction per lookup
    /// would wait for the previous lookup's cache miss, so a stream of lookups would pay one
    /// memory latency each instead of overlapping them.
    #[inline]
    pub(crate) fn rules_out_latest(self: &Arc<Self>, kind: Kind, name: &str, key: &[u8]) -> bool {
        if !self.enabled {
            return false;
        }
        let version = self.version.0.load(SeqCst);
        let cached = LATEST.with(|entries| {
            entries
                .borrow()
                .iter()
                .find(|e| e.db == self.id && e.kind == kind && &*e.name == name)
                .filter(|e| e.version == version)
                .map(|e| {
                    let absent = !e.built.may_contain(key);
                    if absent {
                        // Counted here only when ruled out: otherwise the read table counts.
                        e.tf.lookups.lookup();
                    }
                    absent
                })
        });
        match cached {
            Some(absent) => absent,
            None => self.rules_out_latest_uncached(kind, name, key, version),
        }
    }

    /// [`Shared::rules_out_latest`] through the locks; caches the table's filter if it is
    /// trusted. `version` was read before anything else.
    #[cold]
    fn rules_out_latest_uncached(
        self: &Arc<Self>,
        kind: Kind,
        name: &str,
        key: &[u8],
        version: u64,
    ) -> bool {
        let Some(tf) = self.lookup(kind, name) else {
            return false;
        };
        let built = tf.read().current.clone();
        if built.trusted_epoch != Some(self.epoch_of(&tf)) {
            return false;
        }
        let absent = !built.may_contain(key);
        if absent {
            tf.lookups.lookup();
        }
        LATEST.with(|entries| {
            let mut entries = entries.borrow_mut();
            entries.retain(|e| {
                e.shared.strong_count() > 0
                    && !(e.db == self.id && e.kind == kind && &*e.name == name)
            });
            if entries.len() >= LATEST_ENTRIES {
                entries.remove(0);
            }
            entries.push(Latest {
                db: self.id,
                kind,
                name: name.into(),
                version,
                built,
                tf,
                shared: Arc::downgrade(self),
            });
        });
        absent
    }

    /// `tf`'s current filter if a transaction whose state is at least `seq` commits new
    /// may trust it (rule 3): what a read transaction's table keeps at its open.
    pub(crate) fn trusted_current(&self, tf: &TableFilter, seq: u64) -> Option<Arc<Built>> {
        let current = tf.read().current.clone();
        current
            .trusted_for(self.epoch_of(tf), seq)
            .then_some(current)
    }

    /// Moves `version` (rule 4): after a change of a table's `current`, under its write
    /// lock, or after a move of the epoch.
    fn changed(&self) {
        self.version.0.fetch_add(1, SeqCst);
    }

    /// The table's filter, made (empty, untrusted) at its first use.
    pub(crate) fn table(&self, kind: Kind, name: &str) -> Option<Arc<TableFilter>> {
        if !self.enabled {
            return None;
        }
        if let Some(tf) = self.lookup(kind, name) {
            return Some(tf);
        }
        let mut map = self.map(kind).write().unwrap_or_else(|e| e.into_inner());
        if let Some(tf) = map.get(name) {
            return Some(tf.clone());
        }
        let key = persist::key(kind, name);
        let recorded = self.on_disk().seeds.get(&key).copied();
        let seed = match recorded {
            Some(seed) => seed,
            None => bloomsled::hash::secret_seed().ok()?,
        };
        let tf = Arc::new(TableFilter::new(seed, key, self.counting)?);
        map.insert(name.to_string(), tf.clone());
        Some(tf)
    }

    pub(crate) fn on_disk(&self) -> MutexGuard<'_, OnDisk> {
        self.on_disk.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Every table stops appending to its crash journal (a clean close committed).
    pub(crate) fn drop_journals(&self) {
        for kind in [Kind::Table, Kind::Multimap] {
            let map = self.map(kind).read().unwrap_or_else(|e| e.into_inner());
            for tf in map.values() {
                tf.slots.write().unwrap_or_else(|e| e.into_inner()).journal = None;
            }
        }
    }

    /// Every table's filter this handle made, with its kind and name.
    #[cfg(feature = "metrics")]
    pub(crate) fn all_tables(&self) -> Vec<(Kind, String, Arc<TableFilter>)> {
        let mut out = Vec::new();
        for kind in [Kind::Table, Kind::Multimap] {
            let map = self.map(kind).read().unwrap_or_else(|e| e.into_inner());
            out.extend(map.iter().map(|(n, tf)| (kind, n.clone(), tf.clone())));
        }
        out
    }

    /// The filters complete for the latest committed state, by their key in bloomsled's
    /// tables: those trusted at the current epoch, while no restore (or rename of the
    /// table) is in flight.
    pub(crate) fn clean_filters(&self) -> Vec<persist::Clean> {
        if !self.enabled || self.unsettled.load(SeqCst) > 0 {
            return Vec::new();
        }
        let mut out = Vec::new();
        for kind in [Kind::Table, Kind::Multimap] {
            let map = self.map(kind).read().unwrap_or_else(|e| e.into_inner());
            for tf in map.values() {
                let current = tf.read().current.clone();
                let renaming = tf.unsettled.load(SeqCst) > 0;
                if current.trusted_epoch == Some(self.epoch_of(tf)) && !renaming {
                    let loaded = tf.source().0 == Some(FilterSource::Loaded);
                    out.push((tf.key.to_string(), current, loaded));
                }
            }
        }
        out
    }
}

/// The protocol's rules under loom, on this module's code (see its file).
#[cfg(all(test, bloomsled_loom))]
mod loom_model;

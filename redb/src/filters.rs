//! The filters of one database's tables, and the protocol that keeps them complete.
//!
//! Each table has a [`TableFilter`]: its `current` [`Stages`] (what lookups ask) and, while a
//! build runs, its `pending` stages (what the build fills). A stage list is a scalable Bloom
//! filter: the core's [`Filter`]s of growing capacity sharing one secret seed, so a key is
//! hashed once and is "maybe" if any stage holds it. Stages are only ever added, never
//! cleared: a handle that cached a stage list keeps every key that list ever held.
//!
//! The rules (the argument is in `docs/redb.md`, "No false negative"):
//! 1. Every write that can create a key sets its bits in `current` and `pending` before redb
//!    stores it, and logs its hash in its write transaction.
//! 2. A build installs `pending` (bumping `build_gen`) before it begins the read transaction it
//!    scans; a commit holds a read guard of each table it wrote from before checking `build_gen`
//!    until redb's commit returns, and re-inserts its logged hashes if `build_gen` moved since the
//!    transaction first opened the table. So a key is in the scan or in `pending`.
//! 3. A built list is trusted by a transaction only if its epoch is the database's epoch
//!    (restores and renames bump it) and the transaction's state is at least as new as the
//!    scan's (`valid_from`, in commits): an older snapshot may hold keys removed since.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering::SeqCst};
use std::sync::{Arc, Mutex, RwLock, RwLockReadGuard};

use bloomsled::{Filter, FilterConfig};

/// The smallest capacity a table's first stage is sized for.
const MIN_CAPACITY: u64 = 1024;
/// Each new stage holds this many times the capacity of all stages before it.
const GROWTH: u64 = 4;
/// A list with this many stages is rebuilt as one, sized for its keys, after the commit
/// that grew it.
const COMPACT_STAGES: usize = 3;

/// A scalable filter: stages of growing capacity, one seed, the newest takes inserts.
#[derive(Clone)]
pub(crate) struct Stages {
    filters: Vec<Arc<Filter>>,
    seed: u64,
    /// `Some(epoch)`: complete for every state at least as new as `valid_from`, unless the
    /// database's epoch moved since. `None`: still being built, never rules a key out.
    trusted_epoch: Option<u64>,
    /// The commit count of the state the build scanned.
    valid_from: u64,
}

impl Stages {
    fn new(seed: u64, capacity: u64) -> Option<Stages> {
        Some(Stages {
            filters: vec![Arc::new(stage(seed, capacity)?)],
            seed,
            trusted_epoch: None,
            valid_from: u64::MAX,
        })
    }

    /// False: no key with these bytes was ever inserted.
    #[inline]
    pub(crate) fn may_contain(&self, key: &[u8]) -> bool {
        if let [only] = self.filters.as_slice() {
            return only.contains(key);
        }
        let h = bloomsled::hash::hash_key(key, self.seed);
        self.filters.iter().any(|f| f.contains_hash(h))
    }

    fn insert_hash(&self, h: u64) -> bool {
        let newest = self.filters.last().expect("a stage list is never empty");
        newest.insert_hash(h);
        newest.items() > newest.capacity()
    }

    fn grown(&self) -> Option<Stages> {
        let total: u64 = self.filters.iter().map(|f| f.capacity()).sum();
        let mut filters = self.filters.clone();
        filters.push(Arc::new(stage(self.seed, total.saturating_mul(GROWTH))?));
        Some(Stages {
            filters,
            seed: self.seed,
            trusted_epoch: self.trusted_epoch,
            valid_from: self.valid_from,
        })
    }

    fn full(&self) -> bool {
        let newest = self.filters.last().expect("a stage list is never empty");
        newest.items() > newest.capacity()
    }

    /// Whether a transaction whose state is at least `seq` commits new may trust this list.
    pub(crate) fn trusted_for(&self, epoch: u64, seq: u64) -> bool {
        self.trusted_epoch == Some(epoch) && seq >= self.valid_from
    }

    /// How many stages the list has (1 after a build at its size).
    pub(crate) fn len(&self) -> usize {
        self.filters.len()
    }
}

fn stage(seed: u64, capacity: u64) -> Option<Filter> {
    FilterConfig::new(capacity.max(MIN_CAPACITY))
        .seed(seed)
        .build()
        .ok()
}

/// What the lookups and writes of one table share.
pub(crate) struct Slots {
    pub(crate) current: Arc<Stages>,
    pending: Option<Arc<Stages>>,
    /// Bumped each time a build installs `pending`.
    pub(crate) build_gen: u64,
}

impl Slots {
    /// Sets `h` in every list; true if a newest stage is over its capacity.
    fn insert_hash(&self, h: u64) -> bool {
        let mut full = self.current.insert_hash(h);
        if let Some(p) = &self.pending {
            full |= p.insert_hash(h);
        }
        full
    }
}

/// One table's filter (see the module doc).
pub(crate) struct TableFilter {
    pub(crate) slots: RwLock<Slots>,
    seed: u64,
    building: Mutex<()>,
}

impl TableFilter {
    fn new(seed: u64) -> Option<TableFilter> {
        Some(TableFilter {
            slots: RwLock::new(Slots {
                current: Arc::new(Stages::new(seed, MIN_CAPACITY)?),
                pending: None,
                build_gen: 0,
            }),
            seed,
            building: Mutex::new(()),
        })
    }

    /// True if the list has grown to [`COMPACT_STAGES`] stages.
    pub(crate) fn wants_compaction(&self) -> bool {
        self.read().current.len() >= COMPACT_STAGES
    }

    pub(crate) fn read(&self) -> RwLockReadGuard<'_, Slots> {
        self.slots.read().unwrap_or_else(|e| e.into_inner())
    }

    /// Sets the key's bits in every list (rule 1) and returns its hash for the write log.
    pub(crate) fn insert(&self, key: &[u8]) -> u64 {
        let h = bloomsled::hash::hash_key(key, self.seed);
        let full = self.read().insert_hash(h);
        if full {
            self.grow();
        }
        h
    }

    /// Re-inserts logged hashes under the caller's guard (rule 2); growth waits for later.
    pub(crate) fn reinsert(slots: &Slots, hashes: &[u64]) {
        for &h in hashes {
            slots.insert_hash(h);
        }
    }

    fn grow(&self) {
        let mut s = self.slots.write().unwrap_or_else(|e| e.into_inner());
        if s.current.full()
            && let Some(g) = s.current.grown()
        {
            s.current = Arc::new(g);
        }
        if let Some(p) = s.pending.as_ref().filter(|p| p.full())
            && let Some(g) = p.grown()
        {
            s.pending = Some(Arc::new(g));
        }
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

/// What one database's handles share: the tables' filters and the counters of the protocol.
pub(crate) struct Shared {
    /// False when another process may write the file: nothing it writes reaches our
    /// filters, so every lookup goes to redb.
    pub(crate) enabled: bool,
    tables: RwLock<Names>,
    multimap_tables: RwLock<Names>,
    /// Bumped when a restore or rename begins and when its transaction ends.
    pub(crate) epoch: AtomicU64,
    /// Write transactions that restored a savepoint or renamed a table and have not ended.
    unsettled: AtomicUsize,
    /// Commits begun (bumped before redb's commit) and ended (after it returns).
    pub(crate) started: AtomicU64,
    pub(crate) finished: AtomicU64,
    pub(crate) source: Source,
}

/// The tables' map's hasher: the core's xxh3 (seed 0) instead of SipHash, whose cost per
/// name is most of a per-request lookup's map access. Table names are the program's own,
/// not an adversary's, so a fixed seed is fine here.
#[derive(Default, Clone, Copy)]
pub(crate) struct NameHasher(u64);

impl std::hash::Hasher for NameHasher {
    fn write(&mut self, bytes: &[u8]) {
        self.0 = bloomsled::hash::hash_key(bytes, self.0);
    }

    fn finish(&self) -> u64 {
        self.0
    }
}

type Names = HashMap<String, Arc<TableFilter>, std::hash::BuildHasherDefault<NameHasher>>;

/// Which namespace a table name lives in.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
pub(crate) enum Kind {
    Table,
    Multimap,
}

impl Shared {
    pub(crate) fn new(enabled: bool, source: Source) -> Shared {
        Shared {
            enabled,
            tables: RwLock::default(),
            multimap_tables: RwLock::default(),
            epoch: AtomicU64::new(0),
            unsettled: AtomicUsize::new(0),
            started: AtomicU64::new(0),
            finished: AtomicU64::new(0),
            source,
        }
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
    #[inline]
    pub(crate) fn rules_out_latest(&self, kind: Kind, name: &str, key: &[u8]) -> bool {
        if !self.enabled {
            return false;
        }
        let map = self.map(kind).read().unwrap_or_else(|e| e.into_inner());
        let Some(tf) = map.get(name) else {
            return false;
        };
        let slots = tf.read();
        slots.current.trusted_epoch == Some(self.epoch.load(SeqCst))
            && !slots.current.may_contain(key)
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
        let tf = Arc::new(TableFilter::new(bloomsled::hash::secret_seed().ok()?)?);
        map.insert(name.to_string(), tf.clone());
        Some(tf)
    }

    /// Marks the start of a restore or rename (see `Unsettle`).
    pub(crate) fn unsettle(self: &Arc<Self>) -> Unsettle {
        self.unsettled.fetch_add(1, SeqCst);
        self.epoch.fetch_add(1, SeqCst);
        Unsettle {
            shared: self.clone(),
        }
    }

    /// Builds `tf` from a scan of the latest committed state, synchronously, if it is needed:
    /// `compact` false, its list is not trusted at the current epoch (never built, or a
    /// restore or rename since); `compact` true, the list has grown to [`COMPACT_STAGES`]
    /// stages. Nothing is done while a build runs already or a restore or rename is in
    /// flight. `len` and `scan` read the table in a read transaction the build begins (rules
    /// 2 and 3). A transaction older than an existing list's scan does not rebuild it: it
    /// answers from redb.
    pub(crate) fn build_if_needed(
        &self,
        tf: &TableFilter,
        compact: bool,
        len: impl Fn(&redb::ReadTransaction) -> Option<u64>,
        scan: impl Fn(&redb::ReadTransaction, &mut dyn FnMut(&[u8])) -> bool,
    ) {
        let needed = |epoch: u64| {
            if compact {
                tf.wants_compaction()
            } else {
                tf.read().current.trusted_epoch != Some(epoch)
            }
        };
        if !needed(self.epoch.load(SeqCst)) {
            return;
        }
        let Ok(_building) = tf.building.try_lock() else {
            return;
        };
        let epoch = self.epoch.load(SeqCst);
        if self.unsettled.load(SeqCst) > 0 || !needed(epoch) {
            return;
        }
        let Some(sizing) = self.source.begin_read() else {
            return;
        };
        let Some(keys) = len(&sizing) else {
            return;
        };
        drop(sizing);
        let Some(fresh) = Stages::new(tf.seed, keys.saturating_mul(2)) else {
            return;
        };
        {
            let mut s = tf.slots.write().unwrap_or_else(|e| e.into_inner());
            s.pending = Some(Arc::new(fresh));
            s.build_gen += 1;
        }
        let scanned = self.source.begin_read().is_some_and(|txn| {
            let valid_from = self.started.load(SeqCst);
            let ok = scan(&txn, &mut |key| {
                tf.insert(key);
            });
            ok.then_some(valid_from).is_some_and(|v| {
                let mut s = tf.slots.write().unwrap_or_else(|e| e.into_inner());
                let Some(pending) = s.pending.take() else {
                    return false;
                };
                if self.epoch.load(SeqCst) != epoch {
                    return false;
                }
                let mut built = Arc::unwrap_or_clone(pending);
                built.trusted_epoch = Some(epoch);
                built.valid_from = v;
                s.current = Arc::new(built);
                true
            })
        });
        if !scanned {
            tf.slots.write().unwrap_or_else(|e| e.into_inner()).pending = None;
        }
    }
}

/// Held by a write transaction from its first restore or rename until it ends: builds wait,
/// and the epoch moves again at the end, so no list built before the transaction's state is
/// visible is trusted after it.
pub(crate) struct Unsettle {
    shared: Arc<Shared>,
}

impl Drop for Unsettle {
    fn drop(&mut self) {
        self.shared.epoch.fetch_add(1, SeqCst);
        self.shared.unsettled.fetch_sub(1, SeqCst);
    }
}

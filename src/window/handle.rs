//! `Window`: the sled-shaped handle of a window, and its shared state.

use std::fmt;
use std::sync::{Arc, Mutex, RwLock, RwLockReadGuard, Weak};
use std::time::Duration;

use sled::IVec;

use super::config::WindowConfig;
use super::ring::{self, Gen, Ring, Site};
use super::RotationStep;
use crate::clock::epoch::Epochs;
use crate::clock::Clock;
use crate::counters::my_stripe;
use crate::error::{Error, Result};
use crate::filter::Filter;
use crate::persist::RecoveryReport;
use crate::stats::LookupCounters;
use crate::store::{read_any_filter, Db, Tree, TreeConfig};
use crate::Stats;

/// Read locks on the ring, one per stripe: a thread locks its own stripe's, so lookups from
/// many threads never write a shared cache line; a rotation takes every stripe's write lock.
const STRIPES: usize = 16;

#[repr(align(128))]
struct Stripe(RwLock<Arc<Ring>>);

/// A window: keys that expire together with their filters, kept in a ring of generation
/// trees (see [`crate::window`] for the guarantee and the crash argument).
///
/// Opened with [`Db::open_window`]. Cheap to clone (one `Arc`), `Send + Sync`; every handle
/// of one window in a process shares its ring.
///
/// ```
/// use std::time::Duration;
/// use bloomsled::window::{ManualClock, WindowConfig};
/// let db = bloomsled::Config::new().temporary(true).open()?;
/// let clock = ManualClock::new(0);
/// let seen = db.open_window("seen", WindowConfig::new(Duration::from_secs(3), 3).clock(clock.clone()))?;
/// seen.insert("a", "")?;
/// clock.advance(Duration::from_secs(2));
/// assert!(seen.contains_key("a")?);   // 2 s old: inside the window
/// clock.advance(Duration::from_secs(1));
/// assert!(!seen.contains_key("a")?);  // 3 s old: its generation was dropped
/// # Ok::<(), bloomsled::Error>(())
/// ```
#[derive(Clone)]
pub struct Window {
    state: Arc<WindowState>,
}

pub(crate) struct WindowState {
    db: Db,
    name: IVec,
    epochs: Epochs,
    tree: Option<TreeConfig>,
    clock: Arc<dyn Clock>,
    hook: Option<Arc<dyn Fn(RotationStep) + Send + Sync>>,
    stripes: Box<[Stripe]>,
    /// Held by a rotation; holds the expired generations whose drop failed (retried).
    rotating: Mutex<Vec<u64>>,
    counters: LookupCounters,
}

impl fmt::Debug for Window {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Window")
            .field("name", &String::from_utf8_lossy(&self.state.name))
            .field("width_ms", &self.state.epochs.width_ms())
            .field("generations", &self.state.epochs.generations())
            .finish()
    }
}

/// Windows open in this process, by database and name: a second open shares the first's
/// ring, so that one process never rotates one window twice over.
type Registry = Vec<(usize, IVec, Weak<WindowState>)>;
static OPEN: Mutex<Registry> = Mutex::new(Vec::new());

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// A filter's answer for `key`, hashed `h` under `seed` (a filter with another seed hashes
/// the key itself).
#[inline(always)]
fn probe(f: &Filter, key: &[u8], seed: u64, h: u64) -> bool {
    if f.seed() == seed {
        f.contains_hash(h)
    } else {
        f.contains(key)
    }
}

/// The filter states one lookup read, one per live generation: inline for up to 16
/// generations, on the heap beyond.
struct States {
    inline: [u64; 16],
    heap: Vec<u64>,
    n: usize,
}

impl States {
    #[inline(always)]
    fn new(n: usize) -> States {
        States {
            inline: [0; 16],
            heap: if n > 16 { vec![0; n] } else { Vec::new() },
            n,
        }
    }

    #[inline(always)]
    fn slots(&mut self) -> &mut [u64] {
        if self.n > 16 {
            &mut self.heap
        } else {
            &mut self.inline[..self.n]
        }
    }

    /// True if no generation's filter was swapped since its state was read.
    #[inline(always)]
    fn unchanged(&mut self, live: &[Gen]) -> bool {
        self.slots()
            .iter()
            .zip(live)
            .all(|(s, g)| g.tree.state.filters.still(*s))
    }
}

/// One generation's report, in [`WindowStats`].
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct GenerationStats {
    /// The generation's index: it covers `epoch * width` to `(epoch + 1) * width` ms.
    pub epoch: u64,
    /// When the generation starts, in ms since the Unix epoch.
    pub start_ms: u64,
    /// When it expires (is dropped), in ms since the Unix epoch.
    pub expires_at_ms: u64,
    /// Its tree's name (reserved: see [`crate::window`]).
    pub tree: IVec,
    /// Its filter.
    pub stats: Stats,
    /// How its filter was restored at open.
    pub recovery: RecoveryReport,
}

/// A window's report: its partition, its lookups, and each live generation, newest first.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct WindowStats {
    /// The window's name.
    pub name: IVec,
    /// The span of the window.
    pub span: Duration,
    /// The number of generations.
    pub generations: u32,
    /// The newest generation the window has reached.
    pub newest_epoch: u64,
    /// Lookups (`get`, `contains_key`, `contains_many`, `get_many`; per key).
    pub lookups: u64,
    /// Lookups every generation's filter answered "absent".
    pub store_lookups_skipped: u64,
    /// Store reads of a generation whose filter said "maybe" and that did not hold the key.
    pub false_positives: u64,
    /// The live generations, newest first.
    pub live: Vec<GenerationStats>,
}

impl Db {
    /// Opens (creating if needed) the window `name`: a ring of `config`'s generations whose
    /// keys and filters expire together (see [`crate::window`]). A window reopened after a
    /// restart keeps its generations and their times; one left half-way through a rotation
    /// by a crash is completed here. Opening it with another span or number of generations
    /// than it was created with is [`Error::InvalidConfig`].
    ///
    /// ```
    /// use std::time::Duration;
    /// use bloomsled::window::WindowConfig;
    /// let db = bloomsled::Config::new().temporary(true).open()?;
    /// let recent = db.open_window("recent", WindowConfig::new(Duration::from_secs(3600), 6))?;
    /// recent.insert("token-1", "revoked")?;
    /// assert!(recent.contains_key("token-1")?);
    /// # Ok::<(), bloomsled::Error>(())
    /// ```
    pub fn open_window<N: AsRef<[u8]>>(&self, name: N, config: WindowConfig) -> Result<Window> {
        Window::open(self, name.as_ref(), config)
    }

    /// The names of the windows this database holds (those with a record; none for a
    /// temporary database).
    pub fn window_names(&self) -> Result<Vec<IVec>> {
        Ok(match self.meta() {
            Some(m) => m.window_names()?.into_iter().map(IVec::from).collect(),
            None => vec![],
        })
    }

    /// Opens the existing window `name` with the span and generations it was created with,
    /// on the wall clock (for tools such as `bloomsled stats`). A window with no record is
    /// [`Error::InvalidConfig`].
    pub fn open_existing_window<N: AsRef<[u8]>>(&self, name: N) -> Result<Window> {
        let name = name.as_ref();
        let r = self
            .meta()
            .map(|m| m.read_window(name))
            .transpose()?
            .flatten()
            .ok_or_else(|| {
                Error::config(format!(
                    "no window {:?} in this database",
                    String::from_utf8_lossy(name)
                ))
            })?
            .map_err(Error::Decode)?;
        let span = Duration::from_millis(r.width_ms.saturating_mul(u64::from(r.generations)));
        Window::open(self, name, WindowConfig::new(span, r.generations))
    }
}

impl Window {
    /// The windows of the database `db_id` (see `Db::identity`) open in this process.
    #[cfg_attr(not(feature = "metrics"), allow(dead_code))]
    pub(crate) fn open_in(db_id: usize) -> Vec<Window> {
        lock(&OPEN)
            .iter()
            .filter(|(id, _, _)| *id == db_id)
            .filter_map(|(_, _, w)| w.upgrade())
            .map(|state| Window { state })
            .collect()
    }

    /// The window's own lookup and write counters (its generations' trees keep theirs).
    #[cfg_attr(not(feature = "metrics"), allow(dead_code))]
    pub(crate) fn counters(&self) -> &LookupCounters {
        &self.state.counters
    }

    fn open(db: &Db, name: &[u8], config: WindowConfig) -> Result<Window> {
        if name.is_empty() {
            return Err(Error::config("a window's name must not be empty"));
        }
        let epochs = config.epochs()?;
        #[cfg(feature = "metrics")]
        crate::store::telemetry::also_record(super::telemetry::record_windows_of);
        let mut open = lock(&OPEN);
        open.retain(|(_, _, w)| w.strong_count() > 0);
        let found = open
            .iter()
            .find(|(db_id, n, _)| *db_id == db.identity() && n == name)
            .and_then(|(_, _, w)| w.upgrade());
        if let Some(state) = found {
            if state.epochs != epochs {
                return Err(Error::config(format!(
                    "window {:?} is open with {} generations of {} ms",
                    String::from_utf8_lossy(name),
                    state.epochs.generations(),
                    state.epochs.width_ms()
                )));
            }
            return Ok(Window { state });
        }
        let hook = config.hook.clone();
        let no_hook = |_: RotationStep| {};
        let site = Site {
            db,
            name,
            epochs: &epochs,
            tree: &config.tree,
            hook: hook.as_deref().unwrap_or(&no_hook),
        };
        // Reconcile what is on disk with the record (see the crash argument).
        let record = site.read_record()?;
        let on_disk = site.trees_on_disk();
        let (newest, live, dropping) = match &record {
            Some(r) => (r.newest, r.live.clone(), r.dropping.clone()),
            None => (
                on_disk.iter().copied().max().unwrap_or(0),
                on_disk.clone(),
                vec![],
            ),
        };
        let orphans: Vec<u64> = on_disk
            .iter()
            .copied()
            .filter(|e| !live.contains(e) && !dropping.contains(e))
            .collect();
        let now = epochs.epoch_of(config.clock.now_ms());
        let t = ring::target(&epochs, newest, &live, &dropping, &orphans, now);
        let ring = site.record_and_create(&t, &[])?;
        site.drop_expired(&t)?;
        let ring = Arc::new(ring);
        let state = Arc::new(WindowState {
            db: db.clone(),
            name: IVec::from(name),
            epochs,
            tree: config.tree,
            clock: config.clock,
            hook,
            stripes: (0..STRIPES)
                .map(|_| Stripe(RwLock::new(ring.clone())))
                .collect(),
            rotating: Mutex::new(vec![]),
            counters: LookupCounters::default(),
        });
        open.push((db.identity(), IVec::from(name), Arc::downgrade(&state)));
        Ok(Window { state })
    }

    /// The ring for an operation at the clock's time, rotated first if the clock has
    /// entered a newer generation; with the newest generation the operation runs under.
    #[inline]
    fn ring(&self) -> Result<RwLockReadGuard<'_, Arc<Ring>>> {
        let now_ms = self.state.clock.now_ms();
        let stripe = &self.state.stripes[my_stripe() % STRIPES].0;
        loop {
            let ring = stripe.read().unwrap_or_else(|p| p.into_inner());
            if now_ms < ring.ends_ms {
                return Ok(ring);
            }
            let now = self.state.epochs.epoch_of(now_ms);
            if now <= ring.newest {
                return Ok(ring);
            }
            drop(ring);
            self.rotate(now)?;
        }
    }

    /// The ring for a lookup, and the newest generation to judge expiry by: if a due
    /// rotation fails, the lookup still skips the generations it would have dropped.
    #[inline]
    fn ring_for_lookup(&self) -> (RwLockReadGuard<'_, Arc<Ring>>, u64) {
        let now_ms = self.state.clock.now_ms();
        let stripe = &self.state.stripes[my_stripe() % STRIPES].0;
        let ring = stripe.read().unwrap_or_else(|p| p.into_inner());
        if now_ms < ring.ends_ms {
            let newest = ring.newest;
            return (ring, newest);
        }
        let now = self.state.epochs.epoch_of(now_ms);
        if now <= ring.newest {
            let newest = ring.newest;
            return (ring, newest);
        }
        drop(ring);
        if let Err(e) = self.rotate(now) {
            log::warn!(
                "bloomsled: rotation of window {:?} failed: {e}",
                String::from_utf8_lossy(&self.state.name)
            );
        }
        let ring = stripe.read().unwrap_or_else(|p| p.into_inner());
        let newest = ring.newest.max(now);
        (ring, newest)
    }

    /// Moves the ring to generation `to` (see the crash argument in [`crate::window`]).
    #[cold]
    fn rotate(&self, to: u64) -> Result<()> {
        let st = &*self.state;
        let mut pending = lock(&st.rotating);
        let old = st.stripes[0]
            .0
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .clone();
        if to <= old.newest {
            return Ok(()); // another thread rotated meanwhile
        }
        let no_hook = |_: RotationStep| {};
        let site = Site {
            db: &st.db,
            name: &st.name,
            epochs: &st.epochs,
            tree: &st.tree,
            hook: st.hook.as_deref().unwrap_or(&no_hook),
        };
        let live: Vec<u64> = old.gens.iter().rev().map(|g| g.epoch).collect();
        let t = ring::target(&st.epochs, old.newest, &live, &pending, &[], to);
        // 1, 2: recorded durably, then the newest generation's tree created.
        let new = Arc::new(site.record_and_create(&t, &old.gens)?);
        // 3: published; taking each write lock waits for the operations on the old ring.
        for s in st.stripes.iter() {
            *s.0.write().unwrap_or_else(|p| p.into_inner()) = new.clone();
        }
        drop(old);
        (site.hook)(RotationStep::Published);
        // 4: the expired generations dropped whole; a failure is retried next time.
        *pending = t.dropping.clone();
        site.drop_expired(&t)?;
        pending.clear();
        Ok(())
    }

    /// Asks the live generations' filters about `key`, newest first, and calls `visit` on
    /// each generation whose filter says "maybe" until it returns `Some`. `Ok(None)`: no
    /// live generation holds the key.
    ///
    /// The key is hashed once (with the ring's seed; a filter with another seed hashes it
    /// itself); a key no filter holds is answered by one validated pass over every filter
    /// ([`read_any_filter`]); otherwise the filters are read one by one as
    /// [`crate::store`]'s lookups read them: an "absent" answer counts only if no rebuild
    /// swapped the filter meanwhile (else the whole lookup runs again).
    #[inline(always)]
    fn lookup<R>(
        ring: &Ring,
        epochs: &Epochs,
        newest: u64,
        key: &[u8],
        mut visit: impl FnMut(&Gen) -> Result<Option<R>>,
    ) -> Result<Option<R>> {
        let live = Self::live(ring, epochs, newest);
        let (seed, h) = (ring.hasher.seed(), ring.hasher.hash(key));
        // Most lookups of a window are of keys no generation holds: one validated probe of
        // every filter at once answers those (see `Window::may_contain`).
        if read_any_filter(Self::filters(live), seed, h) == Some(false) {
            return Ok(None);
        }
        let mut states = States::new(live.len());
        loop {
            for (s, g) in states.slots().iter_mut().zip(live) {
                let maybe;
                (*s, maybe) = g.tree.state.filters.probe_racy(|f| probe(f, key, seed, h));
                if maybe {
                    if let Some(r) = visit(g)? {
                        return Ok(Some(r));
                    }
                }
            }
            if states.unchanged(live) {
                return Ok(None);
            }
        }
    }

    /// Inserts `key` into the current generation, returning the value it had *in that
    /// generation* (an older generation may hold an older value, which [`Window::get`]
    /// no longer returns).
    ///
    /// ```
    /// # use std::time::Duration;
    /// # let db = bloomsled::Config::new().temporary(true).open()?;
    /// # let w = db.open_window("w", bloomsled::window::WindowConfig::new(Duration::from_secs(60), 6))?;
    /// assert_eq!(w.insert("k", "1")?, None);
    /// assert_eq!(w.insert("k", "2")?.as_deref(), Some(&b"1"[..]));
    /// # Ok::<(), bloomsled::Error>(())
    /// ```
    pub fn insert<K: AsRef<[u8]>, V: Into<IVec>>(&self, key: K, value: V) -> Result<Option<IVec>> {
        let ring = self.ring()?;
        self.state.counters.inserted(1);
        ring.gens[0].tree.insert(key, value)
    }

    /// Removes `key` from every live generation; returns the newest value it had.
    ///
    /// ```
    /// # use std::time::Duration;
    /// # let db = bloomsled::Config::new().temporary(true).open()?;
    /// # let w = db.open_window("w", bloomsled::window::WindowConfig::new(Duration::from_secs(60), 6))?;
    /// w.insert("k", "1")?;
    /// assert_eq!(w.remove("k")?.as_deref(), Some(&b"1"[..]));
    /// assert!(!w.contains_key("k")?);
    /// # Ok::<(), bloomsled::Error>(())
    /// ```
    pub fn remove<K: AsRef<[u8]>>(&self, key: K) -> Result<Option<IVec>> {
        let key = key.as_ref();
        let ring = self.ring()?;
        self.state.counters.removed(1);
        let mut newest = None;
        // A generation whose filter rules the key out does not hold it.
        Self::lookup(&ring, &self.state.epochs, ring.newest, key, |g| {
            let old = g.tree.remove(key)?;
            newest = newest.take().or(old);
            Ok(None::<()>)
        })?;
        Ok(newest)
    }

    /// The newest value of `key` in the live generations. Filters are asked newest first;
    /// a generation's store is read only where its filter says "maybe".
    ///
    /// ```
    /// # use std::time::Duration;
    /// # let db = bloomsled::Config::new().temporary(true).open()?;
    /// # let w = db.open_window("w", bloomsled::window::WindowConfig::new(Duration::from_secs(60), 6))?;
    /// w.insert("k", "1")?;
    /// assert_eq!(w.get("k")?.as_deref(), Some(&b"1"[..]));
    /// assert_eq!(w.get("other")?, None);
    /// # Ok::<(), bloomsled::Error>(())
    /// ```
    #[inline]
    pub fn get<K: AsRef<[u8]>>(&self, key: K) -> Result<Option<IVec>> {
        let key = key.as_ref();
        let (ring, newest) = self.ring_for_lookup();
        self.state.counters.lookup();
        self.found(&ring, newest, key, true)
    }

    /// True if a live generation holds `key`; filters first, newest first.
    ///
    /// ```
    /// # use std::time::Duration;
    /// # let db = bloomsled::Config::new().temporary(true).open()?;
    /// # let w = db.open_window("w", bloomsled::window::WindowConfig::new(Duration::from_secs(60), 6))?;
    /// w.insert("k", "")?;
    /// assert!(w.contains_key("k")?);
    /// # Ok::<(), bloomsled::Error>(())
    /// ```
    #[inline]
    pub fn contains_key<K: AsRef<[u8]>>(&self, key: K) -> Result<bool> {
        let key = key.as_ref();
        let (ring, newest) = self.ring_for_lookup();
        self.state.counters.lookup();
        let c = &self.state.counters;
        let mut passed = false;
        let found = Self::lookup(&ring, &self.state.epochs, newest, key, |g| {
            if !std::mem::replace(&mut passed, true) {
                c.passed_on();
            }
            if g.tree.inner.contains_key(key)? {
                return Ok(Some(()));
            }
            c.false_positive();
            Ok(None)
        })?;
        Ok(found.is_some())
    }

    /// The filters' answer alone, with no store access: `false` means no live generation
    /// holds `key`.
    ///
    /// ```
    /// # use std::time::Duration;
    /// # let db = bloomsled::Config::new().temporary(true).open()?;
    /// # let w = db.open_window("w", bloomsled::window::WindowConfig::new(Duration::from_secs(60), 6))?;
    /// w.insert("k", "")?;
    /// assert!(w.may_contain("k"));
    /// # Ok::<(), bloomsled::Error>(())
    /// ```
    #[inline]
    pub fn may_contain<K: AsRef<[u8]>>(&self, key: K) -> bool {
        let key = key.as_ref();
        let (ring, newest) = self.ring_for_lookup();
        let live = Self::live(&ring, &self.state.epochs, newest);
        let (seed, h) = (ring.hasher.seed(), ring.hasher.hash(key));
        // Every generation's filter probed in one call: the key's draws computed once, each
        // filter's block tested with no branch on what another's held, so the blocks' loads
        // overlap; validated against filter swaps like a tree's lookup.
        if let Some(any) = read_any_filter(Self::filters(live), seed, h) {
            return any;
        }
        // Filters that cannot share one call (another seed or `k`): one at a time.
        let mut states = States::new(live.len());
        loop {
            // Every generation probed, the answers or-ed: no branch on what a probe loads,
            // so the probes' cache misses overlap (see `store::filters`).
            let mut any = false;
            for (s, g) in states.slots().iter_mut().zip(live) {
                let maybe;
                (*s, maybe) = g.tree.state.filters.probe_racy(|f| probe(f, key, seed, h));
                any |= maybe;
            }
            if any || states.unchanged(live) {
                return any;
            }
        }
    }

    /// The filters of `live`, for [`read_any_filter`].
    #[inline(always)]
    fn filters(live: &[Gen]) -> impl Iterator<Item = &crate::store::Filters> + Clone {
        live.iter().map(|g| &g.tree.state.filters)
    }

    /// The live generations of `ring` when the newest is `newest`, newest first.
    #[inline(always)]
    fn live<'r>(ring: &'r Ring, epochs: &Epochs, newest: u64) -> &'r [Gen] {
        if newest == ring.newest {
            return &ring.gens; // a ring holds the live generations of its newest
        }
        // Expired generations, if any (a rotation that failed), are the oldest: at the end.
        let n = ring
            .gens
            .iter()
            .take_while(|g| !epochs.is_expired(g.epoch, newest))
            .count();
        &ring.gens[..n]
    }

    /// The filters' answer for many keys: one pass that hashes each key once and probes
    /// every live generation's filter, their blocks prefetched together.
    fn probe_many<K: AsRef<[u8]>>(&self, ring: &Ring, newest: u64, keys: &[K]) -> Vec<bool> {
        let gens: Vec<&Gen> = Self::live(ring, &self.state.epochs, newest)
            .iter()
            .collect();
        if gens.is_empty() {
            return vec![false; keys.len()];
        }
        let mut out = vec![true; keys.len()];
        let seed = ring.hasher.seed();
        let hashes: Vec<u64> = keys.iter().map(|k| ring.hasher.hash(k.as_ref())).collect();
        loop {
            let pinned: Vec<(u64, Option<&Filter>)> =
                gens.iter().map(|g| g.tree.state.filters.pinned()).collect();
            let filters: Option<Vec<&Filter>> = pinned
                .iter()
                .map(|(_, f)| f.filter(|f| f.seed() == seed))
                .collect();
            let Some(filters) = filters else {
                // Mixed seeds (a generation reopened with another seed): one pass each.
                out.fill(false);
                for g in &gens {
                    let maybe = g.tree.state.filters.contains_many(keys);
                    out.iter_mut().zip(maybe).for_each(|(o, m)| *o |= m);
                }
                return out;
            };
            Filter::contains_any_hash_many(&filters, &hashes, &mut out);
            let unchanged = gens
                .iter()
                .zip(&pinned)
                .all(|(g, (s, _))| g.tree.state.filters.still(*s));
            if unchanged || out.iter().all(|&m| m) {
                return out;
            }
        }
    }

    /// [`Window::may_contain`] for many keys, batched: each key hashed once, the blocks of
    /// every live generation's filter prefetched together, no store access.
    ///
    /// ```
    /// # use std::time::Duration;
    /// # let db = bloomsled::Config::new().temporary(true).open()?;
    /// # let w = db.open_window("w", bloomsled::window::WindowConfig::new(Duration::from_secs(60), 6))?;
    /// w.insert("a", "")?;
    /// assert_eq!(w.may_contain_many(&["a"]), vec![true]);
    /// # Ok::<(), bloomsled::Error>(())
    /// ```
    pub fn may_contain_many<K: AsRef<[u8]>>(&self, keys: &[K]) -> Vec<bool> {
        let (ring, newest) = self.ring_for_lookup();
        self.probe_many(&ring, newest, keys)
    }

    /// `contains_key` for many keys: one batched probe of every generation's filter (see
    /// [`Window::may_contain`]), then the stores only for the keys some filter passed.
    ///
    /// ```
    /// # use std::time::Duration;
    /// # let db = bloomsled::Config::new().temporary(true).open()?;
    /// # let w = db.open_window("w", bloomsled::window::WindowConfig::new(Duration::from_secs(60), 6))?;
    /// w.insert("a", "")?;
    /// assert_eq!(w.contains_many(&["a", "b"])?, vec![true, false]);
    /// # Ok::<(), bloomsled::Error>(())
    /// ```
    pub fn contains_many<K: AsRef<[u8]>>(&self, keys: &[K]) -> Result<Vec<bool>> {
        let (ring, newest) = self.ring_for_lookup();
        let mut out = self.probe_many(&ring, newest, keys);
        self.count_batch(&out);
        for (key, maybe) in keys.iter().zip(out.iter_mut()) {
            if *maybe {
                *maybe = self.found(&ring, newest, key.as_ref(), false)?.is_some();
            }
        }
        Ok(out)
    }

    /// `get` for many keys, with the batched probe of [`Window::contains_many`].
    ///
    /// ```
    /// # use std::time::Duration;
    /// # let db = bloomsled::Config::new().temporary(true).open()?;
    /// # let w = db.open_window("w", bloomsled::window::WindowConfig::new(Duration::from_secs(60), 6))?;
    /// w.insert("a", "1")?;
    /// let got = w.get_many(&["a", "b"])?;
    /// assert_eq!((got[0].as_deref(), &got[1]), (Some(&b"1"[..]), &None));
    /// # Ok::<(), bloomsled::Error>(())
    /// ```
    pub fn get_many<K: AsRef<[u8]>>(&self, keys: &[K]) -> Result<Vec<Option<IVec>>> {
        let (ring, newest) = self.ring_for_lookup();
        let maybe = self.probe_many(&ring, newest, keys);
        self.count_batch(&maybe);
        keys.iter()
            .zip(maybe)
            .map(|(key, maybe)| {
                if maybe {
                    self.found(&ring, newest, key.as_ref(), false)
                } else {
                    Ok(None)
                }
            })
            .collect()
    }

    fn count_batch(&self, maybe: &[bool]) {
        let passed = maybe.iter().filter(|m| **m).count() as u64;
        self.state
            .counters
            .lookups(maybe.len() as u64 - passed, passed);
    }

    /// The newest value of `key` in the live generations, counted as one lookup's store
    /// reads (and as passed on, if `count_passed`).
    fn found(
        &self,
        ring: &Ring,
        newest: u64,
        key: &[u8],
        count_passed: bool,
    ) -> Result<Option<IVec>> {
        let c = &self.state.counters;
        let mut passed = !count_passed;
        Self::lookup(ring, &self.state.epochs, newest, key, |g| {
            if !std::mem::replace(&mut passed, true) {
                c.passed_on();
            }
            let v = g.tree.inner.get(key)?;
            if v.is_none() {
                c.false_positive();
            }
            Ok(v)
        })
    }

    /// Makes every write so far durable (sled's `flush`, for the whole database).
    pub fn flush(&self) -> Result<usize> {
        let ring = self.ring()?;
        ring.gens[0].tree.flush()
    }

    /// The window's name.
    pub fn name(&self) -> IVec {
        self.state.name.clone()
    }

    /// The span of the window.
    pub fn span(&self) -> Duration {
        Duration::from_millis(self.state.epochs.span_ms())
    }

    /// The number of generations.
    pub fn generations(&self) -> u32 {
        self.state.epochs.generations()
    }

    /// The live generations' trees, newest first: read-only access to what a generation
    /// holds (iteration, `len`). Writing to them directly bypasses the window's clock.
    pub fn generation_trees(&self) -> Result<Vec<(u64, Tree)>> {
        let ring = self.ring()?;
        Ok(ring
            .gens
            .iter()
            .map(|g| (g.epoch, g.tree.clone()))
            .collect())
    }

    /// The window's report: its lookups and each live generation's filter.
    ///
    /// ```
    /// # use std::time::Duration;
    /// # let db = bloomsled::Config::new().temporary(true).open()?;
    /// let w = db.open_window("w", bloomsled::window::WindowConfig::new(Duration::from_secs(60), 6))?;
    /// w.insert("a", "")?;
    /// w.get("b")?;
    /// let s = w.stats();
    /// assert_eq!((s.generations, s.lookups, s.live.len()), (6, 1, 1));
    /// assert_eq!(s.live[0].stats.items, 1);
    /// # Ok::<(), bloomsled::Error>(())
    /// ```
    pub fn stats(&self) -> WindowStats {
        let (ring, newest) = self.ring_for_lookup();
        let ep = &self.state.epochs;
        let (lookups, skipped) = self.state.counters.lookups_and_skipped();
        WindowStats {
            name: self.state.name.clone(),
            span: self.span(),
            generations: ep.generations(),
            newest_epoch: newest,
            lookups,
            store_lookups_skipped: skipped,
            false_positives: self.state.counters.false_positives(),
            live: Self::live(&ring, ep, newest)
                .iter()
                .map(|g| GenerationStats {
                    epoch: g.epoch,
                    start_ms: ep.start_ms(g.epoch),
                    expires_at_ms: ep.expires_at_ms(g.epoch),
                    tree: g.tree.name(),
                    stats: g.tree.stats(),
                    recovery: g.tree.recovery_report(),
                })
                .collect(),
        }
    }

    /// The names of the live generations' trees, newest first.
    pub fn tree_names(&self) -> Vec<IVec> {
        let (ring, _) = self.ring_for_lookup();
        ring::tree_names(&ring)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::clock::ManualClock;
    use crate::Config;

    const W: u64 = 1_000;
    const T0: u64 = 1_700_000_000_000;

    fn key(g: u64, i: u64) -> Vec<u8> {
        format!("https://example.com/g{g}/{i}").into_bytes()
    }

    /// Generations whose filters have different seeds (the window reopened with another
    /// tree seed) cannot share one probe: `read_any_filter` declines, and lookups ask each
    /// filter with its own hash, still finding every key and ruling out absent ones.
    #[test]
    fn generations_with_different_seeds_are_probed_one_by_one() {
        let dir = tempfile::tempdir().unwrap();
        let clock = ManualClock::new(T0);
        let config = |seed: u64| {
            WindowConfig::new(Duration::from_millis(3 * W), 3)
                .tree_config(TreeConfig::new().expected_items(1_000).seed(seed))
                .clock(clock.clone())
        };
        {
            let db = Config::new().path(dir.path()).open().unwrap();
            let w = db.open_window("seeds", config(1)).unwrap();
            for i in 0..300 {
                w.insert(key(0, i), &b"v"[..]).unwrap();
            }
        }
        clock.set(T0 + W);
        let db = Config::new().path(dir.path()).open().unwrap();
        let w = db.open_window("seeds", config(2)).unwrap();
        for i in 0..300 {
            w.insert(key(1, i), &b"v"[..]).unwrap();
        }
        let (ring, newest) = w.ring_for_lookup();
        let live = Window::live(&ring, &w.state.epochs, newest);
        let seeds: Vec<u64> = live
            .iter()
            .map(|g| g.tree.state.filters.pinned().1.unwrap().seed())
            .collect();
        assert_eq!(seeds, vec![2, 1], "the generations' seeds, newest first");
        let h = ring.hasher.hash(b"any key");
        assert_eq!(
            read_any_filter(Window::filters(live), ring.hasher.seed(), h),
            None
        );
        drop(ring);
        let keys: Vec<Vec<u8>> = (0..300).flat_map(|i| [key(0, i), key(1, i)]).collect();
        for k in &keys {
            assert!(w.may_contain(k) && w.contains_key(k).unwrap(), "{k:?}");
        }
        assert!(w.may_contain_many(&keys).iter().all(|m| *m));
        let maybe = (0..1_000).filter(|i| w.may_contain(key(7, *i))).count();
        assert!(
            maybe < 100,
            "{maybe} of 1,000 absent keys passed the filters"
        );
    }
}

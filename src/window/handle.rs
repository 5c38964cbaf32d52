//! `Window`: the sled-shaped handle of a window, and its shared state.

use std::fmt;
use std::sync::{Arc, Mutex, RwLock, RwLockReadGuard, Weak};
use std::time::Duration;

use sled::IVec;

use super::config::WindowConfig;
use super::ring::{self, Ring, Site};
use super::RotationStep;
use crate::clock::generations::Generations;
use crate::clock::Clock;
use crate::counters::my_stripe;
use crate::error::{Error, Result};
use crate::stats::LookupCounters;
use crate::store::{Db, Tree, TreeConfig};

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
/// use bloomsled::clock::ManualClock;
/// use bloomsled::window::WindowConfig;
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
    pub(super) state: Arc<WindowState>,
}

pub(crate) struct WindowState {
    pub(super) db: Db,
    pub(super) name: IVec,
    pub(super) generations: Generations,
    tree: Option<TreeConfig>,
    clock: Arc<dyn Clock>,
    hook: Option<Arc<dyn Fn(RotationStep) + Send + Sync>>,
    stripes: Box<[Stripe]>,
    /// Held by a rotation; holds the expired generations whose drop failed (retried).
    rotating: Mutex<Vec<u64>>,
    pub(super) counters: LookupCounters,
}

impl fmt::Debug for Window {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Window")
            .field("name", &String::from_utf8_lossy(&self.state.name))
            .field("width_ms", &self.state.generations.width_ms())
            .field("generations", &self.state.generations.generations())
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

    /// Opens the window `name` of `db`, or the handle already open on it.
    ///
    /// Long because the crash argument (see the module docs) reads as one sequence: an
    /// open handle is reused, else the record and the trees on disk are reconciled, the
    /// ring is recorded and created, and the handle registered under the same lock.
    pub(super) fn open(db: &Db, name: &[u8], config: WindowConfig) -> Result<Window> {
        if name.is_empty() {
            return Err(Error::config("a window's name must not be empty"));
        }
        let generations = config.generations()?;
        #[cfg(feature = "metrics")]
        crate::store::telemetry::also_record(super::telemetry::record_windows_of);
        let mut open = lock(&OPEN);
        open.retain(|(_, _, w)| w.strong_count() > 0);
        let found = open
            .iter()
            .find(|(db_id, n, _)| *db_id == db.identity() && n == name)
            .and_then(|(_, _, w)| w.upgrade());
        if let Some(state) = found {
            if state.generations != generations {
                return Err(Error::config(format!(
                    "window {:?} is open with {} generations of {} ms",
                    String::from_utf8_lossy(name),
                    state.generations.generations(),
                    state.generations.width_ms()
                )));
            }
            return Ok(Window { state });
        }
        let hook = config.hook.clone();
        let no_hook = |_: RotationStep| {};
        let site = Site {
            db,
            name,
            generations: &generations,
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
        let now = generations.generation_of(config.clock.now_ms());
        let t = ring::target(&generations, newest, &live, &dropping, &orphans, now);
        let ring = site.record_and_create(&t, &[])?;
        site.drop_expired(&t)?;
        let ring = Arc::new(ring);
        let state = Arc::new(WindowState {
            db: db.clone(),
            name: IVec::from(name),
            generations,
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
    pub(super) fn ring(&self) -> Result<RwLockReadGuard<'_, Arc<Ring>>> {
        let now_ms = self.state.clock.now_ms();
        let stripe = &self.state.stripes[my_stripe() % STRIPES].0;
        loop {
            let ring = stripe.read().unwrap_or_else(|p| p.into_inner());
            if now_ms < ring.ends_ms {
                return Ok(ring);
            }
            let now = self.state.generations.generation_of(now_ms);
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
    pub(super) fn ring_for_lookup(&self) -> (RwLockReadGuard<'_, Arc<Ring>>, u64) {
        let now_ms = self.state.clock.now_ms();
        let stripe = &self.state.stripes[my_stripe() % STRIPES].0;
        let ring = stripe.read().unwrap_or_else(|p| p.into_inner());
        if now_ms < ring.ends_ms {
            let newest = ring.newest;
            return (ring, newest);
        }
        let now = self.state.generations.generation_of(now_ms);
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
            generations: &st.generations,
            tree: &st.tree,
            hook: st.hook.as_deref().unwrap_or(&no_hook),
        };
        let live: Vec<u64> = old.gens.iter().rev().map(|g| g.index).collect();
        let t = ring::target(&st.generations, old.newest, &live, &pending, &[], to);
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
        Self::lookup(&ring, &self.state.generations, ring.newest, key, |g| {
            let old = g.tree.remove(key)?;
            newest = newest.take().or(old);
            Ok(None::<()>)
        })?;
        Ok(newest)
    }

    /// Makes every write so far durable, against a power cut too: [`crate::Tree::flush`]
    /// (sled's flush of the whole database, then an fsync of sled's log).
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
        Duration::from_millis(self.state.generations.span_ms())
    }

    /// The number of generations.
    pub fn generations(&self) -> u32 {
        self.state.generations.generations()
    }

    /// The live generations' trees, newest first: read-only access to what a generation
    /// holds (iteration, `len`). Writing to them directly bypasses the window's clock.
    pub fn generation_trees(&self) -> Result<Vec<(u64, Tree)>> {
        let ring = self.ring()?;
        Ok(ring
            .gens
            .iter()
            .map(|g| (g.index, g.tree.clone()))
            .collect())
    }

    /// The names of the live generations' trees, newest first.
    pub fn tree_names(&self) -> Vec<IVec> {
        let (ring, _) = self.ring_for_lookup();
        ring::tree_names(&ring)
    }
}

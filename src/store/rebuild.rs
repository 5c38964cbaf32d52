//! Online rebuild and resize of a tree's filter.
//!
//! A rebuild allocates a new filter (sized for the live keys, doubling the capacity as often
//! as needed) or reuses a retired one of that exact shape, publishes it as "being built",
//! then reads the tree's keys in chunks, each chunk under the gate's write side (see
//! [`super::filters`]): writers apply their change to the new filter as well when their key
//! is at or before the scan's cursor, so every key reaches it exactly once. When the scan
//! reaches the end, the new filter becomes current in one store, still under the gate. The
//! on-disk state is not touched until the snapshot that follows, so a crash at any point of
//! a rebuild recovers like any other crash.
//!
//! Automatic rebuilds run in a background thread, triggered (checked every 256 written keys)
//! when the live keys pass the capacity or the modelled false-positive rate passes the
//! configured bound.

use std::ops::Bound;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Mutex;
use std::thread;
use std::time::{Duration, Instant};

use sled::IVec;

use super::tree::TreeShared;
use crate::error::{Error, Result};
use crate::filter::any::{AnyFilter, FilterMode};
use crate::filter::{math, FilterConfig};
use crate::hash::hash_key;
use crate::persist::SnapshotInfo;

/// Keys read per hold of the gate: long enough to amortize re-positioning sled's iterator
/// (a few microseconds), short enough that a writer waits at most about 0.1 ms.
const CHUNK: usize = 256;

/// Longest the rebuild yields between chunks to writers that were blocked on the gate.
const MAX_YIELD: Duration = Duration::from_millis(2);

/// Below this share of the capacity, the live keys leave room to grow after a rebuild.
const FILL_AFTER_REBUILD: f64 = 0.75;

/// Scans one rebuild may start before it settles for the size it has.
const MAX_ATTEMPTS: u32 = 8;

/// How a scan ended.
enum Scan {
    /// The new filter is current; this many keys were read.
    Swapped(u64),
    /// The new filter filled past its capacity before the scan ended (writers outpaced the
    /// estimate); it was abandoned holding this many items.
    Outgrown(u64),
}

/// What a rebuild did.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct RebuildReport {
    /// Keys read from the store into the new filter.
    pub keys_scanned: u64,
    /// Capacity of the filter it replaced.
    pub old_capacity: u64,
    /// Capacity of the new filter.
    pub capacity: u64,
    /// Bits of the new filter.
    pub num_bits: u64,
    /// From the start of the rebuild to the swap.
    pub duration: Duration,
    /// The snapshot written after the swap (`None` for a temporary database or if it
    /// failed; the failure is logged and the next snapshot retries).
    pub snapshot: Option<SnapshotInfo>,
    /// True if started automatically.
    pub automatic: bool,
}

/// When and how to rebuild, from the configuration.
#[derive(Debug, Clone)]
pub(crate) struct RebuildPolicy {
    pub(crate) auto: bool,
    /// Modelled false-positive rate that triggers a rebuild; `None`: twice the target.
    pub(crate) bound: Option<f64>,
    /// Sizing of new filters (capacity, rate or bits per key, k).
    pub(crate) base: FilterConfig,
}

impl RebuildPolicy {
    /// The most items the filter holds before its modelled false-positive rate passes the
    /// bound (plain mode counts removed keys: their bits are still set).
    pub(crate) fn items_limit(&self, f: &AnyFilter) -> u64 {
        let bits = f.bits();
        let bound = self.bound.unwrap_or(2.0 * bits.target_fpr());
        let m = bits.num_bits() as f64;
        let k = bits.num_hashes();
        let fpr_at = |n: u64| math::blocked_fpr(m / n as f64, k);
        let (mut lo, mut hi) = (1u64, bits.num_bits().max(2));
        if fpr_at(lo) > bound {
            return 0;
        }
        if fpr_at(hi) <= bound {
            return hi;
        }
        // fpr_at(lo) <= bound < fpr_at(hi); the model is increasing in n.
        while hi - lo > 1 {
            let mid = lo + (hi - lo) / 2;
            if fpr_at(mid) <= bound {
                lo = mid;
            } else {
                hi = mid;
            }
        }
        lo
    }

    /// Capacity for `live` keys: the configured capacity doubled until they fill at most
    /// three quarters of it.
    pub(crate) fn capacity_for(&self, live: u64) -> u64 {
        let mut cap = self.base.capacity().max(1);
        while live as f64 > FILL_AFTER_REBUILD * cap as f64 {
            match cap.checked_mul(2) {
                Some(c) => cap = c,
                None => break,
            }
        }
        cap
    }
}

/// Per-tree rebuild bookkeeping.
pub(crate) struct RebuildState {
    pub(crate) policy: RebuildPolicy,
    /// One rebuild at a time.
    lock: Mutex<()>,
    /// An automatic rebuild was started and has not finished.
    pending: AtomicBool,
    running: AtomicBool,
    /// Automatic rebuilds failed once (logged); they are not retried.
    auto_failed: AtomicBool,
    pub(crate) rebuilds: AtomicU64,
    pub(crate) resizes: AtomicU64,
    /// The stale total when the current filter's scan started.
    pub(crate) stale_base: AtomicU64,
    /// `items_limit` of the current filter.
    limit: AtomicU64,
}

impl RebuildState {
    pub(crate) fn new(policy: RebuildPolicy, limit: u64) -> Self {
        RebuildState {
            policy,
            lock: Mutex::new(()),
            pending: AtomicBool::new(false),
            running: AtomicBool::new(false),
            auto_failed: AtomicBool::new(false),
            rebuilds: AtomicU64::new(0),
            resizes: AtomicU64::new(0),
            stale_base: AtomicU64::new(0),
            limit: AtomicU64::new(limit),
        }
    }

    pub(crate) fn in_progress(&self) -> bool {
        self.pending.load(Ordering::Acquire) || self.running.load(Ordering::Acquire)
    }
}

impl TreeShared {
    /// Live keys as far as the filter knows: counted in less counted out (counting mode),
    /// or bit-setting inserts less stale removes (plain mode).
    fn live_estimate(&self, f: &AnyFilter) -> u64 {
        match f.mode() {
            FilterMode::Counting => f.items(),
            FilterMode::Plain => f.items().saturating_sub(self.stale()),
        }
    }

    /// Starts an automatic rebuild in the background if the filter needs one.
    pub(crate) fn check_rebuild(&self) {
        let r = &self.rebuild;
        if !r.policy.auto
            || r.in_progress()
            || r.auto_failed.load(Ordering::Relaxed)
            || self.closing.load(Ordering::Relaxed)
        {
            return;
        }
        let (live, items, capacity) = {
            let gate = self.filters.enter();
            let f = gate.current();
            (self.live_estimate(f), f.items(), f.capacity())
        };
        let limit = r.limit.load(Ordering::Relaxed);
        if live <= capacity && items <= limit {
            return;
        }
        if r.pending.swap(true, Ordering::AcqRel) {
            return;
        }
        log::info!(
            "bloomsled: tree {:?}: {live} live keys, {items} in the filter, capacity \
             {capacity}, limit {limit}: rebuilding in the background",
            self.report.tree
        );
        let me = self.me.clone();
        let spawned = thread::Builder::new()
            .name("bloomsled-rebuild".into())
            .spawn(move || {
                let Some(s) = me.upgrade() else { return };
                match s.rebuild_now(true) {
                    Ok(_) => {}
                    Err(Error::Closed(_)) => {}
                    Err(e) => {
                        log::error!(
                            "bloomsled: tree {:?}: automatic rebuild failed, not retried: {e}",
                            s.report.tree
                        );
                        s.rebuild.auto_failed.store(true, Ordering::Relaxed);
                    }
                }
                s.rebuild.pending.store(false, Ordering::Release);
            });
        if let Err(e) = spawned {
            log::warn!("bloomsled: cannot start a rebuild thread: {e}");
            r.pending.store(false, Ordering::Release);
        }
    }

    /// Blocks until no rebuild is running or pending.
    pub(crate) fn wait_for_rebuild(&self) {
        loop {
            drop(self.rebuild.lock.lock().unwrap_or_else(|p| p.into_inner()));
            if !self.rebuild.in_progress() {
                return;
            }
            thread::sleep(Duration::from_millis(1));
        }
    }

    /// Rebuilds the filter from the keys (see the module docs).
    pub(crate) fn rebuild_now(&self, automatic: bool) -> Result<RebuildReport> {
        let _one = self.rebuild.lock.lock().unwrap_or_else(|p| p.into_inner());
        self.rebuild.running.store(true, Ordering::Release);
        let r = self.rebuild_locked(automatic);
        self.rebuild.running.store(false, Ordering::Release);
        r
    }

    fn rebuild_locked(&self, automatic: bool) -> Result<RebuildReport> {
        let start = Instant::now();
        let old_capacity = self.filters.enter().current().capacity();
        // The filter's own count is only an estimate (an overfull plain filter undercounts
        // badly, and writers may add keys faster than the scan reads them). A scan whose new
        // filter overflows its capacity is abandoned and restarted sized for what it found
        // (at least the next doubling);
        // one that ends with more keys than its size suits is followed by one more at the
        // size it measured.
        let mut known = None;
        let mut attempts = 0;
        let (scanned, capacity, slot) = loop {
            attempts += 1;
            let (capacity, slot, end) = self.rebuild_once(known, attempts >= MAX_ATTEMPTS)?;
            let scanned = match end {
                Scan::Outgrown(items) => {
                    known = Some(items);
                    continue;
                }
                Scan::Swapped(n) => n,
            };
            let fits = scanned as f64 <= FILL_AFTER_REBUILD * capacity as f64;
            if fits
                || attempts >= MAX_ATTEMPTS
                || self.rebuild.policy.capacity_for(scanned) <= capacity
            {
                break (scanned, capacity, slot);
            }
            known = Some(scanned);
        };
        let duration = start.elapsed();
        let new = self
            .filters
            .get(slot)
            .ok_or_else(|| Error::ReportableBug("the rebuilt filter's slot vanished".into()))?;
        self.rebuild
            .limit
            .store(self.rebuild.policy.items_limit(new), Ordering::Relaxed);
        self.rebuild.rebuilds.fetch_add(1, Ordering::Relaxed);
        if capacity != old_capacity {
            self.rebuild.resizes.fetch_add(1, Ordering::Relaxed);
        }
        let snapshot = if self.persist.is_some() && !self.closing.load(Ordering::Relaxed) {
            match self.snapshot() {
                Ok(info) => Some(info),
                Err(e) => {
                    log::warn!(
                        "bloomsled: tree {:?}: snapshot after rebuild failed: {e}",
                        self.report.tree
                    );
                    None
                }
            }
        } else {
            None
        };
        log::info!(
            "bloomsled: tree {:?}: filter rebuilt from {scanned} keys in {duration:?}, \
             capacity {old_capacity} -> {capacity}",
            self.report.tree
        );
        Ok(RebuildReport {
            keys_scanned: scanned,
            old_capacity,
            capacity,
            num_bits: new.bits().num_bits(),
            duration,
            snapshot,
            automatic,
        })
    }

    /// One scan into a new filter sized for `live` keys (default: the current filter's
    /// estimate), swapped in at the end. Returns its capacity, slot and how it ended.
    fn rebuild_once(&self, live: Option<u64>, last: bool) -> Result<(u64, usize, Scan)> {
        self.check_open()?;
        let policy = &self.rebuild.policy;
        let (seed, estimate) = {
            let gate = self.filters.enter();
            let f = gate.current();
            (f.bits().seed(), self.live_estimate(f))
        };
        let capacity = policy.capacity_for(live.unwrap_or(estimate));
        let shape = policy
            .base
            .clone()
            .expected_items(capacity)
            .seed(seed)
            .shape()?;
        let mode = self.mode;
        let slot = self.filters.prepare(
            |f| f.same_kind(mode, &shape, capacity),
            || AnyFilter::new(mode, shape, capacity),
        )?;
        let stale_before = self.stale_total();
        {
            let mut gate = self.filters.close_gate();
            gate.building = Some(slot);
            gate.cursor = None;
        }
        let end = self.scan_and_swap(slot, stale_before, last);
        if !matches!(end, Ok(Scan::Swapped(_))) {
            let mut gate = self.filters.close_gate();
            gate.building = None;
            gate.cursor = None;
        }
        Ok((capacity, slot, end?))
    }

    fn check_open(&self) -> Result<()> {
        if self.closing.load(Ordering::Relaxed) {
            return Err(Error::Closed(format!(
                "tree {:?} closed during a rebuild",
                self.report.tree
            )));
        }
        Ok(())
    }

    /// Reads every key into the filter of `slot`, a chunk per hold of the gate, and makes
    /// it current once the scan reaches the end; gives up if the filter outgrows its
    /// capacity first, unless this is the last try.
    fn scan_and_swap(&self, slot: usize, stale_before: u64, last_try: bool) -> Result<Scan> {
        let new = self
            .filters
            .get(slot)
            .ok_or_else(|| Error::ReportableBug("the rebuild's filter slot is empty".into()))?;
        let seed = new.bits().seed();
        let mut scanned = 0u64;
        loop {
            self.check_open()?;
            let mut gate = self.filters.close_gate();
            let from = gate
                .cursor
                .clone()
                .map_or(Bound::Unbounded, Bound::Excluded);
            let mut n = 0;
            let mut last = None;
            for key in self
                .sled
                .range::<IVec, _>((from, Bound::Unbounded))
                .keys()
                .take(CHUNK)
            {
                let key = key?;
                new.admit_hash(hash_key(&key, seed));
                last = Some(key);
                n += 1;
            }
            scanned += n as u64;
            if let Some(last) = last {
                gate.cursor = Some(last);
            }
            if n < CHUNK {
                self.filters.swap(&mut gate, slot);
                gate.building = None;
                gate.cursor = None;
                self.rebuild
                    .stale_base
                    .store(stale_before, Ordering::Relaxed);
                return Ok(Scan::Swapped(scanned));
            }
            drop(gate);
            if !last_try && new.items() > new.capacity() {
                return Ok(Scan::Outgrown(new.items()));
            }
            // Writers woken by the release must get the gate before the next chunk takes
            // it back; once one holds it, the next `close_gate` queues behind it.
            let yielded = Instant::now();
            while self.filters.writers_waiting() && yielded.elapsed() < MAX_YIELD {
                thread::yield_now();
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn policy(capacity: u64) -> RebuildPolicy {
        RebuildPolicy {
            auto: true,
            bound: None,
            base: FilterConfig::new(capacity),
        }
    }

    #[test]
    fn capacity_doubles_until_the_live_keys_fit_with_room() {
        let p = policy(1000);
        assert_eq!(p.capacity_for(0), 1000);
        assert_eq!(p.capacity_for(750), 1000);
        assert_eq!(p.capacity_for(751), 2000);
        assert_eq!(p.capacity_for(1001), 2000);
        assert_eq!(p.capacity_for(1_000_000), 2_048_000);
        assert_eq!(
            policy(u64::MAX / 2 + 1).capacity_for(u64::MAX),
            u64::MAX / 2 + 1
        );
    }

    #[test]
    fn items_limit_is_where_the_model_crosses_the_bound() {
        let p = policy(10_000);
        let f = AnyFilter::new(FilterMode::Plain, p.base.shape().unwrap(), 10_000).unwrap();
        let limit = p.items_limit(&f);
        let bits = f.bits();
        let fpr = |n: u64| math::blocked_fpr(bits.num_bits() as f64 / n as f64, bits.num_hashes());
        let bound = 2.0 * bits.target_fpr();
        assert!(fpr(limit) <= bound && fpr(limit + 1) > bound);
        // Twice the rate is reached well past capacity, and well before twice capacity.
        assert!(limit > 11_000 && limit < 20_000, "{limit}");
    }
}

//! The `Stats` report, and the per-tree counters behind it.

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::time::{SystemTime, UNIX_EPOCH};

use crate::counters::Counters;

/// A tree's lookup and write counters: what [`Stats`] reports about the filter's work.
/// Each event bumps one striped counter, so the lookup path pays one add and no shared
/// cache line.
///
/// A lookup bumps `LOOKUPS` whatever the filter said, and only the lookups passed on to the
/// store bump `PASSED` (on the store's path, which waits for the filter's answer anyway):
/// which counter a lookup bumps never depends on the filter's answer, so the next lookups
/// run on without waiting for this one's cache miss. Skipped = lookups − passed.
///
/// Writes (keys inserted, removed) and snapshots are counted here too, off the lookup path,
/// for the `metrics` feature's counters (see `crate::telemetry`).
#[derive(Default)]
pub(crate) struct LookupCounters(
    Counters<8>,
    AtomicU64,
    /// What the last recording of metrics handed to the facade.
    #[cfg(feature = "metrics")]
    pub(crate) crate::telemetry::Recorded,
);

const LOOKUPS: usize = 0;
const PASSED: usize = 1;
const FALSE_POSITIVES: usize = 2;
const STALE: usize = 3;
const INSERTS: usize = 4;
const REMOVES: usize = 5;
const SNAPSHOTS: usize = 6;
const REMEMBERED: usize = 7;

impl LookupCounters {
    /// One lookup, before the filter answers.
    #[inline]
    pub(crate) fn lookup(&self) {
        self.0.add(LOOKUPS, 1);
    }

    /// The filter said "maybe": the lookup goes on to the store.
    #[inline]
    pub(crate) fn passed_on(&self) {
        self.0.add(PASSED, 1);
    }

    /// Many lookups at once: `absent` of them answered by the filter, `maybe` passed on.
    #[inline]
    pub(crate) fn lookups(&self, absent: u64, maybe: u64) {
        self.0.add(LOOKUPS, absent + maybe);
        self.0.add(PASSED, maybe);
    }

    /// The filter said "maybe" and the store said no.
    #[inline]
    pub(crate) fn false_positive(&self) {
        self.0.add(FALSE_POSITIVES, 1);
    }

    /// `n` removes whose bits stay set (plain mode).
    #[inline]
    pub(crate) fn stale(&self, n: u64) {
        self.0.add(STALE, n);
    }

    /// `n` keys written (inserted or overwritten), counted as they reach the filter.
    #[inline]
    pub(crate) fn inserted(&self, n: u64) {
        self.0.add(INSERTS, n);
    }

    /// The filter said "maybe" and the false-positive memory said "absent" (no store read).
    #[inline]
    pub(crate) fn remembered(&self) {
        self.0.add(REMEMBERED, 1);
    }

    /// Lookups the false-positive memory answered.
    pub(crate) fn remembered_total(&self) -> u64 {
        self.0.sum(REMEMBERED)
    }

    /// `n` keys removed (or asked to be removed, inside a plain-mode batch).
    #[inline]
    pub(crate) fn removed(&self, n: u64) {
        self.0.add(REMOVES, n);
    }

    /// One snapshot written, now.
    pub(crate) fn snapshot_written(&self) {
        self.0.add(SNAPSHOTS, 1);
        let ms = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_millis() as u64);
        self.1.store(ms, Relaxed);
    }

    /// When this process last wrote a snapshot (ms since the Unix epoch), if it did.
    #[cfg_attr(not(feature = "metrics"), allow(dead_code))]
    pub(crate) fn last_snapshot_ms(&self) -> Option<u64> {
        Some(self.1.load(Relaxed)).filter(|&ms| ms != 0)
    }

    /// Keys written, keys removed and snapshots written (see the three methods above).
    #[cfg_attr(not(feature = "metrics"), allow(dead_code))]
    pub(crate) fn writes(&self) -> (u64, u64, u64) {
        (
            self.0.sum(INSERTS),
            self.0.sum(REMOVES),
            self.0.sum(SNAPSHOTS),
        )
    }

    /// Lookups of every kind, and those answered by the filter alone (lookups − passed).
    pub(crate) fn lookups_and_skipped(&self) -> (u64, u64) {
        // `PASSED` is read second: a lookup that lands between the two reads can only make
        // "skipped" smaller than it was, never negative or larger than the lookups.
        let lookups = self.0.sum(LOOKUPS);
        (lookups, lookups.saturating_sub(self.0.sum(PASSED)))
    }

    /// False positives seen.
    pub(crate) fn false_positives(&self) -> u64 {
        self.0.sum(FALSE_POSITIVES)
    }

    /// Stale removes counted since the tree was opened.
    pub(crate) fn stale_total(&self) -> u64 {
        self.0.sum(STALE)
    }
}

/// A point-in-time report on one tree's filter and how it served lookups.
///
/// ```
/// let db = bloomsled::Config::new().temporary(true).open()?;
/// db.insert("a", "1")?;
/// db.get("b")?;
/// let s = db.stats();
/// assert_eq!(s.lookups, 1);
/// assert!(s.estimated_fpr < 0.01);
/// # Ok::<(), bloomsled::Error>(())
/// ```
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct Stats {
    /// Keys added to the filter (inserts that set a new bit).
    pub items: u64,
    /// Items the filter is sized for.
    pub capacity: u64,
    /// Filter size in bits.
    pub num_bits: u64,
    /// Bits set per key.
    pub num_hashes: u32,
    /// Bits per item at capacity.
    pub bits_per_key: f64,
    /// Fraction of filter bits set.
    pub fill_ratio: f64,
    /// False-positive rate of the filter as it is now (from the bits).
    pub estimated_fpr: f64,
    /// False-positive rate the model predicts at capacity.
    pub target_fpr: f64,
    /// Store lookups asked (`get`, `contains_key`, and their batch forms).
    pub lookups: u64,
    /// Lookups the filter answered "absent" without touching the store.
    pub store_lookups_skipped: u64,
    /// Lookups where the filter said "maybe" and the store said no.
    pub false_positives: u64,
    /// Lookups where the filter said "maybe" and the false-positive memory answered
    /// "absent" without the store: known false positives paid again for nothing (see
    /// [`crate::Config::false_positive_memory`]). Store reads of lookups are
    /// `lookups - store_lookups_skipped - false_positives_remembered`.
    pub false_positives_remembered: u64,
    /// False positives the tree can remember (0: the memory is off).
    pub false_positive_memory: usize,
    /// Keys removed from the store whose bits stay in the filter (plain mode; counted since
    /// the filter was last rebuilt; removes inside a plain-mode batch are counted whether or
    /// not the key existed).
    pub stale_entries: u64,
    /// Plain or counting.
    pub mode: crate::filter::FilterMode,
    /// Counters stuck at their maximum (counting mode; they can never be cleared again).
    pub stuck_counters: u64,
    /// Rebuilds of the filter from the keys since the tree was opened (on demand or
    /// automatic; resizes included).
    pub rebuilds: u64,
    /// Rebuilds that changed the capacity.
    pub resizes: u64,
    /// True while a rebuild is running or about to.
    pub rebuild_in_progress: bool,
    /// False while the filter is being rebuilt after open (its snapshot was not trusted):
    /// until then every lookup goes to the store, and the filter fields above describe the
    /// pass-all stand-in that answers "maybe" for every key.
    pub filter_in_use: bool,
    /// How far the running rebuild (after open, on demand or automatic) has come.
    pub rebuild_progress: Option<crate::persist::RebuildProgress>,
    /// Memory of the current filter in bytes (counting mode: bits and counters).
    pub memory_bytes: usize,
    /// Memory of every filter the tree holds, in bytes: the current one, the one being
    /// built, and retired ones kept for reuse by later rebuilds (see `Tree::rebuild`);
    /// a large retired filter (2 MiB and more, on Linux) gives its memory back to the
    /// operating system and is not counted.
    pub allocated_bytes: usize,
}

impl Stats {
    /// Share of lookups the filter answered alone (0 when there were none).
    pub fn skip_ratio(&self) -> f64 {
        if self.lookups == 0 {
            0.0
        } else {
            self.store_lookups_skipped as f64 / self.lookups as f64
        }
    }

    /// False positives seen over lookups of keys that were absent (0 when none); lookups
    /// the false-positive memory answered are not counted (the filter's rate, not the
    /// memory's).
    pub fn observed_fpr(&self) -> f64 {
        let absent = self.store_lookups_skipped + self.false_positives;
        if absent == 0 {
            0.0
        } else {
            self.false_positives as f64 / absent as f64
        }
    }
}

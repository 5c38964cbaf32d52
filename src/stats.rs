//! Counters that many threads bump without sharing a cache line, and the `Stats` report.

use std::cell::Cell;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering::Relaxed};

const STRIPES: usize = 16;

/// One stripe of `N` counters per 128 bytes (two cache lines: adjacent-line prefetchers
/// pair them).
#[repr(align(128))]
struct Stripe<const N: usize>([AtomicU64; N]);

/// `N` sums spread over stripes. Each thread adds to its own stripe, so a hot lookup path
/// from many threads never bounces a shared cache line between cores.
pub(crate) struct Counters<const N: usize> {
    stripes: [Stripe<N>; STRIPES],
}

impl<const N: usize> Default for Counters<N> {
    fn default() -> Self {
        Counters {
            stripes: std::array::from_fn(|_| Stripe(std::array::from_fn(|_| AtomicU64::new(0)))),
        }
    }
}

#[inline]
fn my_stripe() -> usize {
    static NEXT: AtomicUsize = AtomicUsize::new(0);
    thread_local! {
        // Const-initialized (no lazy-init check on each access); assigned on first use.
        static STRIPE: Cell<usize> = const { Cell::new(usize::MAX) };
    }
    STRIPE.with(|s| {
        let v = s.get();
        if v != usize::MAX {
            return v;
        }
        let v = NEXT.fetch_add(1, Relaxed) % STRIPES;
        s.set(v);
        v
    })
}

impl<const N: usize> Counters<N> {
    /// Adds `n` to counter `which`.
    ///
    /// A plain load and store, not a locked read-modify-write: a stripe belongs to one
    /// thread unless more than [`STRIPES`] threads count at once, and then an increment that
    /// races another on the same stripe may be lost. Statistics tolerate that; a locked add
    /// on every lookup would cost more than the filter probe itself.
    #[inline]
    pub(crate) fn add(&self, which: usize, n: u64) {
        let c = &self.stripes[my_stripe()].0[which];
        c.store(c.load(Relaxed).wrapping_add(n), Relaxed);
    }

    /// Sets every counter to zero.
    pub(crate) fn reset(&self) {
        for s in &self.stripes {
            for c in &s.0 {
                c.store(0, Relaxed);
            }
        }
    }

    /// The total of counter `which`.
    pub(crate) fn sum(&self, which: usize) -> u64 {
        self.stripes
            .iter()
            .fold(0u64, |a, s| a.wrapping_add(s.0[which].load(Relaxed)))
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
    /// Keys removed from the store whose bits stay in the filter (plain mode; counted since
    /// the filter was last rebuilt; removes inside a plain-mode batch are counted whether or
    /// not the key existed).
    pub stale_entries: u64,
    /// Plain or counting.
    pub mode: crate::FilterMode,
    /// Counters stuck at their maximum (counting mode; they can never be cleared again).
    pub stuck_counters: u64,
    /// Rebuilds of the filter from the keys since the tree was opened (on demand or
    /// automatic; resizes included).
    pub rebuilds: u64,
    /// Rebuilds that changed the capacity.
    pub resizes: u64,
    /// True while a rebuild is running or about to.
    pub rebuild_in_progress: bool,
    /// Memory of the current filter in bytes (counting mode: bits and counters).
    pub memory_bytes: usize,
    /// Memory of every filter the tree holds, in bytes: the current one, the one being
    /// built, and retired ones kept for reuse by later rebuilds (see `Tree::rebuild`).
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

    /// False positives seen over lookups of keys that were absent (0 when none).
    pub fn observed_fpr(&self) -> f64 {
        let absent = self.store_lookups_skipped + self.false_positives;
        if absent == 0 {
            0.0
        } else {
            self.false_positives as f64 / absent as f64
        }
    }
}

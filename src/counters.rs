//! Counters that many threads bump without sharing a cache line: each thread adds to its own
//! stripe, and a read sums the stripes.

use std::cell::Cell;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering::Relaxed};

/// Stripes per set of counters: every tree has two sets (its lookups' and its filter's
/// items), so this is a per-tree cost (8 × 64 bytes each); threads past this many share a
/// stripe, and a racing increment may then be lost (see [`Counters::add`]).
const STRIPES: usize = 8;

/// One stripe of `N` counters per cache line (64 bytes for `N` up to 8).
#[repr(align(64))]
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
pub(crate) fn my_stripe() -> usize {
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

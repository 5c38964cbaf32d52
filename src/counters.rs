//! Counters that many threads bump without sharing a cache line: each thread adds to its own
//! stripe, and a read sums the stripes.

use std::cell::Cell;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering::Relaxed};

/// At most this many stripes per set of counters. Every tree has two sets (its lookups' and
/// its filter's items), so stripes are a per-tree cost (64 bytes each): a set has one per
/// core the process may run on (see [`stripes`]), since no more threads than cores bump a
/// counter at the same instant, and at most this many.
const STRIPES: usize = 8;

/// Stripes per set: the cores this process may run on, rounded up to a power of two, at
/// most [`STRIPES`]; read once.
fn stripes() -> usize {
    static STRIPES_HERE: AtomicUsize = AtomicUsize::new(0);
    match STRIPES_HERE.load(Relaxed) {
        0 => {
            let n = std::thread::available_parallelism()
                .map_or(STRIPES, |n| n.get())
                .next_power_of_two()
                .min(STRIPES);
            STRIPES_HERE.store(n, Relaxed);
            n
        }
        n => n,
    }
}

/// One stripe of `N` counters per cache line (64 bytes for `N` up to 8).
#[repr(align(64))]
struct Stripe<const N: usize>([AtomicU64; N]);

/// `N` sums spread over stripes. Each thread adds to its own stripe, so a hot lookup path
/// from many threads never bounces a shared cache line between cores.
pub struct Counters<const N: usize> {
    /// A power-of-two count of stripes ([`stripes`]).
    stripes: Box<[Stripe<N>]>,
}

impl<const N: usize> Default for Counters<N> {
    fn default() -> Self {
        Counters {
            stripes: (0..stripes())
                .map(|_| Stripe(std::array::from_fn(|_| AtomicU64::new(0))))
                .collect(),
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
    /// A plain load and store, not a locked read-modify-write: threads that share a stripe
    /// (more threads than stripes) may lose an increment that races another on the same
    /// stripe. Statistics tolerate that; a locked add on every lookup would cost more than
    /// the filter probe itself. Counts that must be exact use [`Counters::add_exact`].
    #[inline]
    pub fn add(&self, which: usize, n: u64) {
        let c = self.mine(which);
        c.store(c.load(Relaxed).wrapping_add(n), Relaxed);
    }

    /// Adds `n` to counter `which` with a locked add: never lost, whatever the threads.
    #[inline]
    pub(crate) fn add_exact(&self, which: usize, n: u64) {
        self.mine(which).fetch_add(n, Relaxed);
    }

    /// This thread's copy of counter `which`.
    #[inline]
    fn mine(&self, which: usize) -> &AtomicU64 {
        // `stripes()` is a power of two, so the mask keeps every stripe in use.
        &self.stripes[my_stripe() & (self.stripes.len() - 1)].0[which]
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
    pub fn sum(&self, which: usize) -> u64 {
        self.stripes
            .iter()
            .fold(0u64, |a, s| a.wrapping_add(s.0[which].load(Relaxed)))
    }
}

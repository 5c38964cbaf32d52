//! Counters that many threads bump without sharing a cache line: once a set is busy, each
//! thread adds to its own stripe, and a read sums the stripes.

use std::cell::Cell;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering::Relaxed};
use std::sync::OnceLock;

/// At most this many stripes per busy set of counters. Every tree has two sets (its
/// lookups' and its filter's items), so stripes are a per-tree cost (64 bytes each): a busy
/// set has one per core the process may run on (see [`stripes`]), since no more threads
/// than cores bump a counter at the same instant, and at most this many.
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

impl<const N: usize> Stripe<N> {
    fn new() -> Self {
        Stripe(std::array::from_fn(|_| AtomicU64::new(0)))
    }
}

/// A set's adds before it takes a stripe per core: a set that has counted fewer has been
/// too quiet for threads to contend on it, and costs one cache line.
const BUSY: u64 = 1 << 16;

/// `N` counters, each thread adding to its own stripe once the set is busy.
///
/// A set starts with its counters inline, unpadded; the first add that finds one at
/// 65,536 or more makes one stripe per core (at most eight), and adds go to those from
/// then on. Thousands of trees that are rarely used (each has two sets) cost `8 × N` bytes
/// a set, not a cache line per core; a busy set costs what it did before. The inline
/// counters keep their counts: a sum reads them too. (While quiet, they may share a line
/// with their owner's other fields: at most 65,536 adds, a bounded cost.)
pub struct Counters<const N: usize> {
    first: [AtomicU64; N],
    more: OnceLock<Box<[Stripe<N>]>>,
}

impl<const N: usize> Default for Counters<N> {
    fn default() -> Self {
        Counters {
            first: std::array::from_fn(|_| AtomicU64::new(0)),
            more: OnceLock::new(),
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

    /// This thread's copy of counter `which`: the inline one while it holds less than
    /// [`BUSY`], then its stripe (made by the first add that finds the inline copy busy).
    /// A striped set's add checks nothing more than whether it is striped.
    #[inline]
    fn mine(&self, which: usize) -> &AtomicU64 {
        match self.more.get() {
            Some(more) => Self::stripe_of(more, which),
            None => {
                let c = &self.first[which];
                if c.load(Relaxed) < BUSY {
                    c
                } else {
                    self.grow(which)
                }
            }
        }
    }

    #[inline(always)]
    fn stripe_of(more: &[Stripe<N>], which: usize) -> &AtomicU64 {
        // `stripes()` is a power of two, so the mask keeps every stripe in use.
        &more[my_stripe() & (more.len() - 1)].0[which]
    }

    /// Makes the set's stripes (one per core; one on a machine of one core, so that the
    /// check above is not made again) and returns this thread's copy of `which`.
    #[cold]
    #[inline(never)]
    fn grow(&self, which: usize) -> &AtomicU64 {
        let more = self
            .more
            .get_or_init(|| (0..stripes()).map(|_| Stripe::new()).collect());
        Self::stripe_of(more, which)
    }

    /// Every copy of the counters: the inline one, then the per-core stripes if the set
    /// has them.
    fn all(&self) -> impl Iterator<Item = &[AtomicU64; N]> {
        std::iter::once(&self.first).chain(
            self.more
                .get()
                .into_iter()
                .flat_map(|m| m.iter().map(|s| &s.0)),
        )
    }

    /// Sets every counter to zero.
    pub(crate) fn reset(&self) {
        for s in self.all() {
            for c in s {
                c.store(0, Relaxed);
            }
        }
    }

    /// The total of counter `which`.
    pub fn sum(&self, which: usize) -> u64 {
        self.all()
            .fold(0u64, |a, s| a.wrapping_add(s[which].load(Relaxed)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_quiet_set_stays_inline_and_a_busy_one_keeps_its_counts() {
        let c = Counters::<2>::default();
        for _ in 0..BUSY - 1 {
            c.add(0, 1);
        }
        c.add_exact(1, 5);
        c.add(0, 1);
        assert!(c.more.get().is_none(), "striped before it was busy");
        assert_eq!((c.sum(0), c.sum(1)), (BUSY, 5));
        // The next add finds the inline copy busy and makes the stripes.
        c.add(0, 9);
        assert!(c.more.get().is_some());
        c.add(0, 1);
        c.add_exact(1, 1);
        assert_eq!((c.sum(0), c.sum(1)), (BUSY + 10, 6), "inline counts kept");
        c.reset();
        assert_eq!((c.sum(0), c.sum(1)), (0, 0));
    }

    #[test]
    fn one_large_add_makes_the_stripes_at_the_next() {
        let c = Counters::<1>::default();
        c.add(0, 3 * BUSY);
        assert!(c.more.get().is_none());
        c.add_exact(0, 1);
        assert!(c.more.get().is_some());
        assert_eq!(c.sum(0), 3 * BUSY + 1);
    }

    #[test]
    fn exact_adds_from_many_threads_across_the_switch_lose_nothing() {
        let c = Counters::<1>::default();
        let per = BUSY / 2 + 1_000;
        std::thread::scope(|s| {
            for _ in 0..4 {
                s.spawn(|| {
                    for _ in 0..per {
                        c.add_exact(0, 1);
                    }
                });
            }
        });
        assert_eq!(c.sum(0), 4 * per);
        assert!(c.more.get().is_some());
    }
}

//! The counting variant: a 4-bit saturating counter behind every bit, so keys can be removed.
//!
//! A [`CountingFilter`] is a plain blocked [`Filter`] (the bits lookups read, at exactly the
//! speed and false-positive rate of the plain filter) plus one 4-bit counter per bit, kept
//! off the lookup path. The invariant is "bit set ⇔ counter non-zero": an insert raises the
//! key's `k` counters and sets their bits; a remove lowers them and clears a bit whose
//! counter reaches zero. A counter that reaches 15 sticks there for good, so an overflow can
//! only ever cost false positives, never a false negative.
//!
//! Writers of one block serialize on a striped lock (the counters and the bits must change
//! together: an unlocked decrement racing an increment could clear a bit the increment
//! needs). Readers take no lock: they read the bits, which are only cleared when no key
//! counted in them remains.
//!
//! Memory: the bits plus four times as many counter bits, 5 bits per filter bit.

use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};
#[cfg(not(bloomsled_loom))]
use std::sync::{Mutex, MutexGuard};

// Under loom a stripe is loom's lock: the bits a writer sets under it are loom's atomics, so
// a writer may be preempted while it holds the stripe, and another must then wait in loom,
// not block the one thread loom runs its threads on.
#[cfg(bloomsled_loom)]
use loom::sync::{Mutex, MutexGuard};

use super::layout::{block_index, block_masks, nonzero_nibbles, BLOCK_BITS, BLOCK_WORDS};
use super::{Filter, FilterConfig};
use crate::error::{Error, FilterShape, Result};

/// Counter words per 512-bit block: one 4-bit counter per bit.
pub(crate) const COUNTER_WORDS: usize = BLOCK_BITS * 4 / 64;

/// The value at which a counter sticks.
pub const COUNTER_MAX: u8 = 15;

/// Lock stripes per filter: block `i` uses stripe `i % LOCK_STRIPES`.
#[cfg(not(bloomsled_loom))]
const LOCK_STRIPES: usize = 256;
/// Under loom, one stripe (each is an object loom tracks; no rule rests on their number).
#[cfg(bloomsled_loom)]
const LOCK_STRIPES: usize = 1;

/// A lock on its own cache line, so that writers on different stripes never share one.
#[repr(align(64))]
#[derive(Default)]
struct Stripe(Mutex<()>);

/// A Bloom filter that supports removal: 4-bit saturating counters behind cache-line
/// blocked bits.
///
/// Lookups read only the bits, exactly like [`Filter`]; inserts and removes take a striped
/// lock. Removing a key that was never inserted would corrupt other keys' counts, so only
/// remove what you inserted (the store does this for you in counting mode: it removes a
/// key from the filter only when sled actually removed it).
///
/// ```
/// use bloomsled::CountingFilter;
/// let f = CountingFilter::new(1_000, 0.01)?;
/// f.insert(b"alice");
/// f.insert(b"bob");
/// assert!(f.contains(b"alice"));
/// assert!(f.remove(b"alice"));
/// assert!(!f.contains(b"alice"));
/// assert!(f.contains(b"bob"));
/// assert_eq!(f.items(), 1);
/// # Ok::<(), bloomsled::Error>(())
/// ```
// `repr(C)` with the bits first: see `AnyFilter`.
#[repr(C)]
pub struct CountingFilter {
    bits: Filter,
    counters: Box<[AtomicU64]>,
    locks: Box<[Stripe]>,
    live: AtomicU64,
}

impl CountingFilter {
    /// A counting filter for `expected_items` items at false-positive rate `fpr`.
    pub fn new(expected_items: u64, fpr: f64) -> Result<CountingFilter> {
        let config = FilterConfig::new(expected_items).false_positive_rate(fpr);
        CountingFilter::with_shape(config.shape()?, expected_items)
    }

    /// An empty counting filter of exactly this shape, sized for `capacity` items.
    pub fn with_shape(shape: FilterShape, capacity: u64) -> Result<CountingFilter> {
        let bits = Filter::with_shape(shape, capacity)?;
        let counters =
            zeroed_words(bits.num_blocks() as usize * COUNTER_WORDS).ok_or(Error::OutOfMemory {
                what: "the counters of a counting filter",
                bytes: bits.num_blocks() * COUNTER_WORDS as u64 * 8,
            })?;
        Ok(CountingFilter {
            bits,
            counters,
            locks: (0..LOCK_STRIPES).map(|_| Stripe::default()).collect(),
            live: AtomicU64::new(0),
        })
    }

    /// Rebuilds a counting filter from its counter words (32 per block, counter `j` of a
    /// block in bits `4·(j % 16)..` of word `j / 16`); the bits are derived from them.
    pub(crate) fn from_counter_words(
        words: &[u64],
        num_hashes: u32,
        seed: u64,
        capacity: u64,
        items: u64,
    ) -> Result<CountingFilter> {
        if words.is_empty() || !words.len().is_multiple_of(COUNTER_WORDS) {
            return Err(Error::Corrupt(format!(
                "{} counter words is not a whole, non-zero number of blocks",
                words.len()
            )));
        }
        let num_blocks = (words.len() / COUNTER_WORDS) as u64;
        let shape = FilterShape {
            num_blocks,
            num_hashes,
            seed,
        };
        if capacity == 0 {
            return Err(Error::Corrupt("capacity 0".into()));
        }
        let f = CountingFilter::with_shape(shape, capacity).map_err(|e| match e {
            Error::OutOfMemory { .. } => e,
            e => Error::Corrupt(e.to_string()),
        })?;
        for (block, chunk) in words.chunks_exact(COUNTER_WORDS).enumerate() {
            f.store_counter_block(block, chunk);
        }
        f.live.store(items, Ordering::Relaxed);
        Ok(f)
    }

    /// Stores block `i`'s counter words (32 of them: counter `j` of the block in bits
    /// `4·(j % 16)..` of word `j / 16`) and sets the bits of its non-zero counters:
    /// how a counting filter is filled block by block from another store.
    ///
    /// ```
    /// let f = bloomsled::CountingFilter::new(1_000, 0.01).unwrap();
    /// let mut counters = [0u64; 32];
    /// counters[0] = 1; // counter 0 of block 0 is 1: bit 0 is set
    /// f.store_counter_block(0, &counters);
    /// assert_eq!(f.bits().block_words(0)[0], 1);
    /// ```
    pub fn store_counter_block(&self, i: usize, chunk: &[u64]) {
        let mut bits = [0u64; BLOCK_WORDS];
        for (j, &w) in chunk.iter().enumerate().take(COUNTER_WORDS) {
            self.counters[i * COUNTER_WORDS + j].store(w, Ordering::Relaxed);
            bits[j / 4] |= nonzero_nibbles(w) << (16 * (j % 4));
        }
        for (j, &b) in bits.iter().enumerate() {
            self.bits.blocks.store_word(i, j, b);
        }
    }

    /// Sets the live item count (after [`CountingFilter::store_counter_block`]).
    ///
    /// ```
    /// let f = bloomsled::CountingFilter::new(1_000, 0.01).unwrap();
    /// f.set_items(3);
    /// assert_eq!(f.items(), 3);
    /// ```
    pub fn set_items(&self, n: u64) {
        self.live.store(n, Ordering::Relaxed);
    }

    /// Inserts `key`: raises its counters and sets its bits.
    #[inline]
    pub fn insert(&self, key: &[u8]) {
        self.insert_hash(self.bits.hash(key))
    }

    /// [`CountingFilter::insert`] by hash (see [`Filter::insert_hash`]).
    pub fn insert_hash(&self, h: u64) {
        let i = block_index(h, self.bits.num_blocks());
        let masks = block_masks(h, self.bits.num_hashes());
        let _lock = self.lock(i);
        for pos in positions(&masks) {
            let (w, shift) = self.slot(i, pos);
            let v = w.load(Ordering::Relaxed);
            if (v >> shift) & 0xf < u64::from(COUNTER_MAX) {
                w.store(v + (1 << shift), Ordering::Release);
            }
        }
        self.bits.blocks.set(i, &masks);
        self.live.fetch_add(1, Ordering::Relaxed);
    }

    /// Removes one insert of `key`: lowers its counters, clearing the bits that reach zero.
    /// Returns `false`, changing nothing, if the key cannot be in the filter (one of its
    /// counters is zero).
    #[inline]
    pub fn remove(&self, key: &[u8]) -> bool {
        self.remove_hash(self.bits.hash(key))
    }

    /// [`CountingFilter::remove`] by hash.
    pub fn remove_hash(&self, h: u64) -> bool {
        let i = block_index(h, self.bits.num_blocks());
        let masks = block_masks(h, self.bits.num_hashes());
        let _lock = self.lock(i);
        if positions(&masks).any(|pos| {
            let (w, shift) = self.slot(i, pos);
            (w.load(Ordering::Relaxed) >> shift) & 0xf == 0
        }) {
            return false;
        }
        let mut emptied = [0u64; BLOCK_WORDS];
        for pos in positions(&masks) {
            let (w, shift) = self.slot(i, pos);
            let v = w.load(Ordering::Relaxed);
            let c = (v >> shift) & 0xf;
            if c == u64::from(COUNTER_MAX) {
                continue; // stuck
            }
            w.store(v - (1 << shift), Ordering::Release);
            if c == 1 {
                emptied[pos / 64] |= 1 << (pos % 64);
            }
        }
        self.bits.blocks.clear(i, &emptied);
        // Saturating: a filter loaded from a snapshot may count fewer items than it holds.
        let _ = self
            .live
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |n| n.checked_sub(1));
        true
    }

    /// True if `key` may be in the filter.
    #[inline]
    pub fn contains(&self, key: &[u8]) -> bool {
        self.bits.contains(key)
    }

    /// [`CountingFilter::contains`] by hash.
    #[inline]
    pub fn contains_hash(&self, h: u64) -> bool {
        self.bits.contains_hash(h)
    }

    /// The smallest of `key`'s counters: an upper bound on how many times it is in the
    /// filter (0 means absent; [`COUNTER_MAX`] means at least that many, or stuck).
    pub fn count(&self, key: &[u8]) -> u8 {
        let h = self.bits.hash(key);
        let i = block_index(h, self.bits.num_blocks());
        let masks = block_masks(h, self.bits.num_hashes());
        positions(&masks)
            .map(|pos| {
                let (w, shift) = self.slot(i, pos);
                ((w.load(Ordering::Acquire) >> shift) & 0xf) as u8
            })
            .min()
            .unwrap_or(0)
    }

    /// This filter with the probe of `kind` (see [`Filter::with_kernel`]).
    #[cfg(test)]
    pub(crate) fn with_kernel(mut self, kind: super::kernel::KernelKind) -> CountingFilter {
        self.bits = self.bits.with_kernel(kind);
        self
    }

    /// The bits that lookups read, as a plain [`Filter`] (shape, statistics, probing).
    pub fn bits(&self) -> &Filter {
        &self.bits
    }

    /// Keys counted in: inserts less removes.
    pub fn items(&self) -> u64 {
        self.live.load(Ordering::Relaxed)
    }

    /// Number of counters stuck at [`COUNTER_MAX`] (O(size)).
    pub fn stuck_counters(&self) -> u64 {
        self.counters
            .iter()
            .map(|w| u64::from(max_nibbles(w.load(Ordering::Relaxed)).count_ones()))
            .sum()
    }

    /// Number of non-zero counters (O(size)); equal to the number of set bits.
    pub fn nonzero_counters(&self) -> u64 {
        self.counters
            .iter()
            .map(|w| u64::from(nonzero_nibbles(w.load(Ordering::Relaxed)).count_ones()))
            .sum()
    }

    /// Bytes of memory: bits and counters.
    pub fn memory_bytes(&self) -> usize {
        self.bits.memory_bytes() + self.counters.len() * 8
    }

    /// A copy of every counter word (a relaxed snapshot under concurrent writers).
    #[cfg(test)]
    pub(crate) fn counter_words(&self) -> Vec<u64> {
        self.counters
            .iter()
            .map(|w| w.load(Ordering::Acquire))
            .collect()
    }

    /// [`CountingFilter::counter_words`], or `None` if the memory cannot be reserved.
    pub(crate) fn try_counter_words(&self) -> Option<Vec<u64>> {
        let mut out = Vec::new();
        out.try_reserve_exact(self.counters.len()).ok()?;
        out.extend(self.counters.iter().map(|w| w.load(Ordering::Acquire)));
        Some(out)
    }

    /// Zeroes counters and bits (a recycled filter, before it is rebuilt).
    pub(crate) fn zero(&self) {
        for w in self.counters.iter() {
            w.store(0, Ordering::Relaxed);
        }
        self.bits.zero();
        self.live.store(0, Ordering::Relaxed);
    }

    #[inline]
    fn lock(&self, block: usize) -> MutexGuard<'_, ()> {
        // The critical sections cannot panic; a poisoned stripe is still consistent.
        self.locks[block % LOCK_STRIPES]
            .0
            .lock()
            .unwrap_or_else(|p| p.into_inner())
    }

    /// The word and bit shift of the counter for bit `pos` of block `i`.
    #[inline]
    fn slot(&self, i: usize, pos: usize) -> (&AtomicU64, u32) {
        (
            &self.counters[i * COUNTER_WORDS + pos / 16],
            (pos % 16) as u32 * 4,
        )
    }
}

/// The positions (0..512) of the set bits of a block pattern.
fn positions(masks: &[u64; BLOCK_WORDS]) -> impl Iterator<Item = usize> + '_ {
    masks.iter().enumerate().flat_map(|(j, &m)| {
        let mut m = m;
        std::iter::from_fn(move || {
            if m == 0 {
                return None;
            }
            let b = m.trailing_zeros() as usize;
            m &= m - 1;
            Some(j * 64 + b)
        })
    })
}

/// Bit `n` set for each nibble `n` of `w` equal to [`COUNTER_MAX`].
fn max_nibbles(w: u64) -> u64 {
    let mut out = 0;
    for n in 0..16 {
        if (w >> (4 * n)) & 0xf == u64::from(COUNTER_MAX) {
            out |= 1 << n;
        }
    }
    out
}

fn zeroed_words(n: usize) -> Option<Box<[AtomicU64]>> {
    let mut v: Vec<AtomicU64> = Vec::new();
    v.try_reserve_exact(n).ok()?;
    v.resize_with(n, || AtomicU64::new(0));
    Some(v.into_boxed_slice())
}

impl fmt::Debug for CountingFilter {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CountingFilter")
            .field("bits", &self.bits)
            .field("items", &self.items())
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn insert_remove_round_trip_leaves_zero() {
        let f = CountingFilter::new(1000, 0.01).unwrap();
        let keys: Vec<Vec<u8>> = (0..1000u32).map(|i| i.to_le_bytes().to_vec()).collect();
        for k in &keys {
            f.insert(k);
        }
        for k in &keys {
            assert!(f.contains(k));
        }
        for k in &keys[..500] {
            assert!(f.remove(k));
        }
        for k in &keys[500..] {
            assert!(f.contains(k), "false negative after removes");
        }
        for k in &keys[500..] {
            assert!(f.remove(k));
        }
        assert_eq!(f.nonzero_counters() - f.stuck_counters(), 0);
        assert_eq!(f.items(), 0);
        assert_eq!(f.bits().fill_ratio() * f.bits().num_bits() as f64, 0.0);
    }

    #[test]
    fn counters_saturate_and_stick() {
        // A fixed seed whose k positions for "k" are k distinct counters.
        let shape = FilterConfig::new(10)
            .false_positive_rate(0.01)
            .seed(crate::hash::DEFAULT_SEED)
            .shape()
            .unwrap();
        let f = CountingFilter::with_shape(shape, 10).unwrap();
        for _ in 0..20 {
            f.insert(b"k");
        }
        assert_eq!(f.count(b"k"), COUNTER_MAX);
        for _ in 0..40 {
            f.remove(b"k");
        }
        // Stuck counters never reach zero: the key stays "maybe" for good.
        assert!(f.contains(b"k"));
        assert_eq!(f.count(b"k"), COUNTER_MAX);
        assert!(f.stuck_counters() >= u64::from(f.bits().num_hashes()));
    }

    #[test]
    fn removing_an_absent_key_changes_nothing() {
        let f = CountingFilter::new(100, 0.01).unwrap();
        f.insert(b"a");
        let before = f.counter_words();
        assert!(!f.remove(b"definitely-not-there-at-all"));
        assert_eq!(before, f.counter_words());
    }

    #[test]
    fn counter_words_round_trip_derives_the_bits() {
        let f = CountingFilter::new(500, 0.01).unwrap();
        for i in 0..400u32 {
            f.insert(&i.to_be_bytes());
        }
        let shape = f.bits().shape();
        let g = CountingFilter::from_counter_words(
            &f.counter_words(),
            shape.num_hashes,
            shape.seed,
            500,
            f.items(),
        )
        .unwrap();
        assert_eq!(f.bits().words(), g.bits().words());
        assert_eq!(g.items(), 400);
        for i in 0..400u32 {
            assert!(g.remove(&i.to_be_bytes()));
        }
        assert_eq!(g.nonzero_counters() - g.stuck_counters(), 0);
    }

    #[test]
    fn bad_counter_words_are_errors() {
        assert!(CountingFilter::from_counter_words(&[], 7, 0, 10, 0).is_err());
        assert!(CountingFilter::from_counter_words(&[0; 31], 7, 0, 10, 0).is_err());
        assert!(CountingFilter::from_counter_words(&[0; 32], 0, 0, 10, 0).is_err());
        assert!(CountingFilter::from_counter_words(&[0; 32], 7, 0, 0, 0).is_err());
    }

    #[test]
    fn concurrent_insert_remove_of_overlapping_keys_stays_exact() {
        let f = CountingFilter::with_shape(
            FilterShape {
                num_blocks: 4,
                num_hashes: 6,
                seed: 1,
            },
            100,
        )
        .unwrap();
        // Few blocks: threads collide on the same counters and bits all the time.
        std::thread::scope(|s| {
            for t in 0..4u32 {
                let f = &f;
                s.spawn(move || {
                    for round in 0..200u32 {
                        let keys: Vec<[u8; 8]> = (0..10u32)
                            .map(|i| {
                                let mut k = [0u8; 8];
                                k[..4].copy_from_slice(&t.to_le_bytes());
                                k[4..].copy_from_slice(&(round * 10 + i).to_le_bytes());
                                k
                            })
                            .collect();
                        for k in &keys {
                            f.insert(k);
                        }
                        for k in &keys {
                            assert!(f.contains(k));
                        }
                        for k in &keys {
                            assert!(f.remove(k));
                        }
                    }
                });
            }
        });
        assert_eq!(f.items(), 0);
        // Every counter is back to zero unless it got stuck.
        assert_eq!(f.nonzero_counters(), f.stuck_counters());
    }
}

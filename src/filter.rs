//! The in-memory Bloom filter: cache-line blocked, lock-free, no I/O.
//!
//! A key is hashed once (xxh3-64 with the filter's seed). The hash picks one 512-bit block
//! (multiply-shift) and `k` distinct bits inside it, so an insert or a lookup touches one
//! cache line. Words are `AtomicU64`: inserts are `fetch_or`, lookups plain loads, and any
//! number of threads may insert and query at once through `&Filter`.

pub(crate) mod any;
#[cfg(all(target_arch = "x86_64", not(bloomsled_loom)))]
mod avx2;
mod batch;
mod bits;
mod config;
mod counting;
mod kernel;
pub mod layout;
pub(crate) mod math;
#[cfg(all(target_arch = "x86_64", not(bloomsled_loom)))]
mod simd;

pub use any::FilterMode;
pub(crate) use bits::prefetch;
pub use config::{FilterConfig, Sizing, DEFAULT_FALSE_POSITIVE_RATE};
pub use counting::{CountingFilter, COUNTER_MAX};

use std::fmt;

use crate::counters::Counters;
use crate::error::{Error, FilterShape, Result};
use crate::hash::SeededHash;
use bits::{Block, Blocks};
use kernel::Kernel;
use layout::{block_index, BLOCK_WORDS};

/// Bits in one block: one 64-byte cache line (see the block layout, `filter::layout`).
pub(crate) const BLOCK_BITS: u64 = layout::BLOCK_BITS as u64;

/// The most bits a key may set (`num_hashes`).
pub(crate) const MAX_HASHES: u32 = layout::MAX_HASHES;

/// Largest filter bloomsled will allocate: 2^40 bits (128 GiB).
pub(crate) const MAX_BITS: u64 = 1 << 40;

/// A cache-line-blocked Bloom filter, usable on its own.
///
/// `insert`/`contains` take `&self` and are lock-free, so one filter can be shared across
/// threads (`Arc<Filter>`). It never returns a false negative: after `insert(k)` returns,
/// `contains(k)` is true in every thread that observes the insert.
///
/// ```
/// use bloomsled::Filter;
/// let f = Filter::new(1_000, 0.01)?;
/// f.insert(b"alice");
/// assert!(f.contains(b"alice"));
/// assert!(!f.contains(b"bob")); // false positives are possible, but rare at 1%
/// # Ok::<(), bloomsled::Error>(())
/// ```
pub struct Filter {
    blocks: Blocks,
    /// The probe and insert compiled for `num_hashes` (see `filter::kernel`).
    kernel: Kernel,
    num_hashes: u32,
    /// xxh3 with the filter's seed, its secret derived once (see [`SeededHash`]).
    hasher: SeededHash,
    capacity: u64,
    items: Counters<1>,
}

impl Filter {
    /// A filter for `expected_items` items at false-positive rate `fpr`.
    pub fn new(expected_items: u64, fpr: f64) -> Result<Filter> {
        FilterConfig::new(expected_items)
            .false_positive_rate(fpr)
            .build()
    }

    /// A filter for `expected_items` items at `bits_per_key` bits each.
    pub fn with_bits_per_key(expected_items: u64, bits_per_key: f64) -> Result<Filter> {
        FilterConfig::new(expected_items)
            .bits_per_key(bits_per_key)
            .build()
    }

    /// An empty filter of exactly this shape, sized for `capacity` items.
    pub fn with_shape(shape: FilterShape, capacity: u64) -> Result<Filter> {
        let kernel = check_shape(&shape)?;
        let blocks = usize::try_from(shape.num_blocks)
            .ok()
            .and_then(Blocks::zeroed)
            .ok_or(Error::OutOfMemory {
                what: "a filter",
                bytes: shape.num_blocks.saturating_mul(64),
            })?;
        Ok(Filter {
            blocks,
            kernel,
            num_hashes: shape.num_hashes,
            hasher: SeededHash::new(shape.seed),
            capacity: capacity.max(1),
            items: Counters::default(),
        })
    }

    /// Rebuilds a filter from its parts (words in block order, 8 per block).
    pub(crate) fn from_parts(
        words: &[u64],
        num_hashes: u32,
        seed: u64,
        capacity: u64,
        items: u64,
    ) -> Result<Filter> {
        let shape = FilterShape {
            num_blocks: (words.len() / BLOCK_WORDS) as u64,
            num_hashes,
            seed,
        };
        if capacity == 0 {
            return Err(Error::Corrupt("capacity 0".into()));
        }
        if words.is_empty() || !words.len().is_multiple_of(BLOCK_WORDS) {
            return Err(Error::Corrupt(format!(
                "{} words is not a whole, non-zero number of 512-bit blocks",
                words.len()
            )));
        }
        let kernel = check_shape(&shape).map_err(|e| Error::Corrupt(e.to_string()))?;
        let blocks = Blocks::from_words(words).ok_or(Error::OutOfMemory {
            what: "a filter",
            bytes: words.len() as u64 * 8,
        })?;
        let f = Filter {
            blocks,
            kernel,
            num_hashes,
            hasher: SeededHash::new(seed),
            capacity,
            items: Counters::default(),
        };
        f.items.add(0, items);
        Ok(f)
    }

    /// Block `i`'s 8 words (a relaxed snapshot; word `j` holds bits `64·j..64·j + 64`): how
    /// a filter is copied block by block to another store (the shared filter of
    /// `bloomsled-redis`).
    /// Panics if `i` is not below [`Filter::num_blocks`].
    ///
    /// ```
    /// let f = bloomsled::Filter::new(1_000, 0.01).unwrap();
    /// assert_eq!(f.block_words(0), [0; bloomsled::layout::BLOCK_WORDS]);
    /// ```
    pub fn block_words(&self, i: usize) -> [u64; BLOCK_WORDS] {
        std::array::from_fn(|j| self.blocks.load_word(i, j))
    }

    /// Stores block `i`'s words (filling a filter read from elsewhere block by block, with no
    /// second copy of it in memory); [`Filter::set_items`] then gives its item count.
    /// Panics if `i` is not below [`Filter::num_blocks`].
    ///
    /// ```
    /// let f = bloomsled::Filter::new(1_000, 0.01).unwrap();
    /// f.store_block(0, &[1; bloomsled::layout::BLOCK_WORDS]);
    /// assert_eq!(f.block_words(0), [1; 8]);
    /// ```
    pub fn store_block(&self, i: usize, words: &[u64; BLOCK_WORDS]) {
        for (j, &w) in words.iter().enumerate() {
            self.blocks.store_word(i, j, w);
        }
    }

    /// Sets the item count (after [`Filter::store_block`]).
    ///
    /// ```
    /// let f = bloomsled::Filter::new(1_000, 0.01).unwrap();
    /// f.set_items(7);
    /// assert_eq!(f.items(), 7);
    /// ```
    pub fn set_items(&self, n: u64) {
        self.items.reset();
        self.items.add(0, n);
    }

    /// Inserts `key`; returns `true` if it was new (this insert set at least one bit), `false`
    /// if it was possibly present already — as `HashSet::insert`, `SharedFilter::insert`
    /// and Redis' `BF.ADD` answer. Check-and-set in one probe, as crawler dedup wants
    /// (`if f.insert(url) { crawl(url) }`).
    ///
    /// Under concurrency the answer comes from the atomic `fetch_or`s themselves: of several
    /// threads inserting the same new key at once, at least one gets `true`.
    ///
    /// ```
    /// let f = bloomsled::Filter::new(1_000, 0.01)?;
    /// assert!(f.insert(b"https://example.com/"), "new");
    /// assert!(!f.insert(b"https://example.com/"), "seen before");
    /// # Ok::<(), bloomsled::Error>(())
    /// ```
    #[inline]
    pub fn insert(&self, key: &[u8]) -> bool {
        self.insert_hash(self.hash(key))
    }

    /// Inserts a key by its hash, as computed by [`crate::hash::hash_key`] with this
    /// filter's [`seed`](Filter::seed); returns what [`Filter::insert`] returns (`true`: new).
    ///
    /// ```
    /// let f = bloomsled::Filter::new(1_000, 0.01)?;
    /// let h = bloomsled::hash::hash_key(b"k", f.seed());
    /// assert!(f.insert_hash(h));
    /// assert!(f.contains(b"k"));
    /// # Ok::<(), bloomsled::Error>(())
    /// ```
    #[inline]
    pub fn insert_hash(&self, h: u64) -> bool {
        let i = block_index(h, self.blocks.len() as u64);
        let new = self.kernel.insert(self.blocks.block(i), h);
        if new {
            self.items.add_exact(0, 1);
        }
        new
    }

    /// True if `key` may have been inserted; false means it certainly was not.
    #[inline(always)]
    pub fn contains(&self, key: &[u8]) -> bool {
        self.contains_hash(self.hash(key))
    }

    /// [`Filter::contains`] for a key's hash (see [`Filter::insert_hash`]).
    #[inline]
    pub fn contains_hash(&self, h: u64) -> bool {
        self.probe(h, block_index(h, self.blocks.len() as u64))
    }

    /// [`Filter::contains_hash`] for a caller that branches on the answer (`Tree::get`): the
    /// same answer, by `Kernel::contains_for_lookup` (the scalar kind's early exit, a vector
    /// kind's vector probe).
    #[inline(always)]
    pub(crate) fn contains_hash_for_lookup(&self, h: u64) -> bool {
        let i = block_index(h, self.blocks.len() as u64);
        self.kernel.contains_for_lookup(self.blocks.block(i), h)
    }

    /// Tests hash `h` against block `i`: all `k` bits read and ANDed, no early exit (see
    /// [`layout::all_set_k`]), by the copy of the probe compiled for this filter's `k`
    /// (`filter::kernel`). With no branch on what the loads return, consecutive keys'
    /// cache misses overlap, which an early exit at the first unset bit would prevent.
    #[inline(always)]
    fn probe(&self, h: u64, i: usize) -> bool {
        self.kernel.contains(self.blocks.block(i), h)
    }

    /// The block hash `h` selects in this filter.
    #[inline(always)]
    pub(crate) fn block_for(&self, h: u64) -> &Block {
        self.blocks.block(block_index(h, self.blocks.len() as u64))
    }

    /// True if one of `blocks` holds all of `h`'s bits, where `blocks` are the blocks `h`
    /// selects ([`Filter::block_for`]) in filters with this filter's `k`: their
    /// [`Filter::contains_hash`] answers or-ed, in one call that computes `h`'s draws once
    /// (`filter::kernel`). A window's lookup probes its generations' filters with it.
    #[inline(always)]
    pub(crate) fn contains_in_any(&self, blocks: &[&Block], h: u64) -> bool {
        self.kernel.contains_any(blocks, h)
    }

    /// This filter with the probe of `kind` (a kind this CPU runs): how the tests run every
    /// kernel in one process (`BLOOMSLED_KERNEL` picks one per process).
    #[cfg(test)]
    pub(crate) fn with_kernel(mut self, kind: kernel::KernelKind) -> Filter {
        assert!(kind.is_supported(), "{kind:?} on a CPU without it");
        self.kernel = Kernel::for_kind(kind, self.num_hashes).expect("a valid k");
        self
    }

    /// Merges `other` into `self`, so that `self` contains every key of both. The two must
    /// have the same shape and seed: filters built apart draw secret seeds of their own, so
    /// build both from one [`FilterConfig`] with a fixed [`FilterConfig::seed`] (or clone one);
    /// otherwise this is [`Error::ShapeMismatch`], never a filter that misses keys.
    ///
    /// ```
    /// use bloomsled::FilterConfig;
    /// let cfg = FilterConfig::new(1_000).seed(11);
    /// let (a, b) = (cfg.build()?, cfg.build()?);
    /// b.insert(b"k");
    /// a.union(&b)?;
    /// assert!(a.contains(b"k"));
    /// # Ok::<(), bloomsled::Error>(())
    /// ```
    pub fn union(&self, other: &Filter) -> Result<()> {
        if self.shape() != other.shape() {
            return Err(Error::ShapeMismatch {
                ours: self.shape(),
                theirs: other.shape(),
            });
        }
        self.blocks.union(&other.blocks);
        self.items.add(0, other.items());
        Ok(())
    }

    /// Shape: block count, `k`, seed.
    pub fn shape(&self) -> FilterShape {
        FilterShape {
            num_blocks: self.blocks.len() as u64,
            num_hashes: self.num_hashes,
            seed: self.seed(),
        }
    }

    /// Total bits (a multiple of 512).
    pub fn num_bits(&self) -> u64 {
        self.blocks.len() as u64 * BLOCK_BITS
    }

    /// Number of 512-bit blocks.
    pub fn num_blocks(&self) -> u64 {
        self.blocks.len() as u64
    }

    /// Bits set per key (`k`).
    #[inline]
    pub fn num_hashes(&self) -> u32 {
        self.num_hashes
    }

    /// The hash seed.
    #[inline]
    pub fn seed(&self) -> u64 {
        self.hasher.seed()
    }

    /// `key`'s hash under this filter's seed: [`crate::hash::hash_key`]`(key, self.seed())`,
    /// the hash [`Filter::contains_hash`] and [`Filter::insert_hash`] take.
    ///
    /// ```
    /// let f = bloomsled::Filter::new(1_000, 0.01)?;
    /// assert_eq!(f.hash(b"k"), bloomsled::hash::hash_key(b"k", f.seed()));
    /// # Ok::<(), bloomsled::Error>(())
    /// ```
    #[inline(always)]
    pub fn hash(&self, key: &[u8]) -> u64 {
        self.hasher.hash(key)
    }

    /// The number of items the filter was sized for.
    pub fn capacity(&self) -> u64 {
        self.capacity
    }

    /// Bits per expected item.
    pub fn bits_per_key(&self) -> f64 {
        self.num_bits() as f64 / self.capacity as f64
    }

    /// Number of inserts that set at least one new bit: the distinct keys inserted, less the
    /// few that were false positives when inserted.
    pub fn items(&self) -> u64 {
        self.items.sum(0)
    }

    /// Bytes of filter memory.
    pub fn memory_bytes(&self) -> usize {
        self.blocks.len() * 64
    }

    /// Fraction of bits set (O(size): reads every word).
    pub fn fill_ratio(&self) -> f64 {
        let ones: u64 = (0..self.blocks.len())
            .map(|i| u64::from(self.blocks.count_ones(i)))
            .sum();
        ones as f64 / self.num_bits() as f64
    }

    /// The false-positive rate of the filter as it is now, for a random absent key: the
    /// mean over blocks of the chance that the key's `k` draws (repeats allowed) all hit set
    /// bits of the block. Exact for the current bits (O(size): reads every word).
    pub fn estimated_fpr(&self) -> f64 {
        let distinct = math::distinct_draws(self.num_hashes);
        let total: f64 = (0..self.blocks.len())
            .map(|i| math::all_set_probability(f64::from(self.blocks.count_ones(i)), &distinct))
            .sum();
        total / self.blocks.len() as f64
    }

    /// The false-positive rate the blocked model predicts once `capacity` items are in.
    pub fn target_fpr(&self) -> f64 {
        math::blocked_fpr(self.bits_per_key(), self.num_hashes)
    }

    /// Zeroes a retired filter, giving its memory back to the operating system where it
    /// can (see `Blocks::release`); true if it did.
    pub(crate) fn release(&self) -> bool {
        self.items.reset();
        self.blocks.release()
    }

    /// Zeroes every bit and the item count (a recycled filter, before it is rebuilt).
    pub(crate) fn zero(&self) {
        self.blocks.zero();
        self.items.reset();
    }

    /// A copy of every word, block by block (a relaxed snapshot under concurrent inserts).
    pub(crate) fn words(&self) -> Vec<u64> {
        self.blocks.words().collect()
    }

    /// [`Filter::words`], or `None` if the copy's memory cannot be reserved.
    pub(crate) fn try_words(&self) -> Option<Vec<u64>> {
        let mut out = Vec::new();
        out.try_reserve_exact(self.blocks.len() * BLOCK_WORDS)
            .ok()?;
        out.extend(self.blocks.words());
        Some(out)
    }
}

/// The name of the probe kernel this process's filters run: `"scalar"`, `"avx2"` or
/// `"avx512"`.
///
/// The fastest one the CPU runs, detected at run time, unless the environment variable
/// `BLOOMSLED_KERNEL` names another one the CPU runs (`scalar`, `avx2` or `avx512`): a way to
/// measure or compare the kernels on one machine. The variable is read once, when the first
/// filter is made (or this function first called); an unknown value, or a kernel this CPU
/// cannot run, is logged as a warning (`log` crate) and the fastest kernel used instead.
/// Every kernel sets and tests the same bits: snapshots and shared filters do not depend on
/// it.
///
/// ```
/// let k = bloomsled::probe_kernel();
/// assert!(["scalar", "avx2", "avx512"].contains(&k));
/// ```
pub fn probe_kernel() -> &'static str {
    kernel::KernelKind::selected().name()
}

/// Checks a shape's block count and `k`, and gives the kernels of its `k`.
fn check_shape(shape: &FilterShape) -> Result<Kernel> {
    if shape.num_blocks == 0 || shape.num_blocks.saturating_mul(BLOCK_BITS) > MAX_BITS {
        return Err(Error::config(format!(
            "block count must be between 1 and {}, got {}",
            MAX_BITS / BLOCK_BITS,
            shape.num_blocks
        )));
    }
    Kernel::for_k(shape.num_hashes).ok_or_else(|| {
        Error::config(format!(
            "num_hashes must be between 1 and {MAX_HASHES}, got {}",
            shape.num_hashes
        ))
    })
}

impl Clone for Filter {
    /// A snapshot copy: inserts racing with the clone may or may not be included.
    fn clone(&self) -> Self {
        Filter::from_parts(
            &self.words(),
            self.num_hashes,
            self.seed(),
            self.capacity,
            self.items(),
        )
        .expect("a live filter's own parts are valid")
    }
}

impl fmt::Debug for Filter {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Filter")
            .field("num_bits", &self.num_bits())
            .field("num_hashes", &self.num_hashes)
            .field("seed", &self.seed())
            .field("capacity", &self.capacity)
            .field("items", &self.items())
            .finish()
    }
}

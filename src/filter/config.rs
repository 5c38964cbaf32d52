//! How a new filter is sized: capacity, rate or bits per key, `k`, seed.

use super::{math, Filter, BLOCK_BITS, MAX_BITS, MAX_HASHES};
use crate::error::{Error, FilterShape, Result};

/// How a filter is sized: by target false-positive rate or by bits per key.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Sizing {
    /// Size for this false-positive rate at capacity, using the blocked-layout model.
    FalsePositiveRate(f64),
    /// Use this many bits per expected item.
    BitsPerKey(f64),
}

/// Parameters of a new [`Filter`]: capacity, sizing, and optionally `k` and the seed.
///
/// ```
/// use bloomsled::FilterConfig;
/// let f = FilterConfig::new(10_000).false_positive_rate(0.001).build()?;
/// assert!(f.num_bits() >= 10_000 * 14);
/// # Ok::<(), bloomsled::Error>(())
/// ```
#[derive(Debug, Clone, PartialEq)]
pub struct FilterConfig {
    capacity: u64,
    sizing: Sizing,
    num_hashes: Option<u32>,
    /// `None`: a secret seed is drawn from the OS when a filter is made (see
    /// [`FilterConfig::seed`]).
    seed: Option<u64>,
    /// A tree's filter that starts at `capacity` and grows with its keys (no one sized
    /// it); a filter on its own never grows.
    grows: bool,
}

/// The capacity a tree's filter starts at when no setting sizes it: it grows from here
/// with the tree's keys (see `docs/guide.md`, "Sizing").
pub(crate) const INITIAL_CAPACITY: u64 = 128;

/// The false-positive rate filters are sized for unless told otherwise: 0.1%.
///
/// Chosen from the cost model of an absent `get`: the filter's probe costs tens of
/// nanoseconds, and every false positive costs one sled lookup, about a hundred times more.
/// At 1% the false positives cost more than the probe; at 0.1% they cost a small fraction
/// of it, for about 1.5 times the memory of a 1% filter (15 bits per key instead of 10). The
/// stream benchmark (`docs/benchmarks.md`) measures both.
///
/// ```
/// let db = bloomsled::Config::new().temporary(true).open()?;
/// assert!(db.stats().target_fpr < 0.0011);
/// # Ok::<(), bloomsled::Error>(())
/// ```
pub const DEFAULT_FALSE_POSITIVE_RATE: f64 = 0.001;

impl Default for FilterConfig {
    /// One million items at [`DEFAULT_FALSE_POSITIVE_RATE`].
    fn default() -> Self {
        FilterConfig {
            capacity: 1_000_000,
            sizing: Sizing::FalsePositiveRate(DEFAULT_FALSE_POSITIVE_RATE),
            num_hashes: None,
            seed: None,
            grows: false,
        }
    }
}

impl FilterConfig {
    /// A configuration for `expected_items` items at [`DEFAULT_FALSE_POSITIVE_RATE`].
    pub fn new(expected_items: u64) -> Self {
        FilterConfig {
            capacity: expected_items,
            ..Self::default()
        }
    }

    /// Sets the number of items the filter is sized for.
    pub fn expected_items(mut self, n: u64) -> Self {
        self.capacity = n;
        self.grows = false;
        self
    }

    /// The sizing of a tree no setting sized: [`INITIAL_CAPACITY`] items, growing with
    /// the tree's keys.
    pub(crate) fn growing() -> Self {
        FilterConfig {
            capacity: INITIAL_CAPACITY,
            grows: true,
            ..Self::default()
        }
    }

    /// This configuration, starting at `capacity` and growing with the tree's keys
    /// (`grows`), or sized for `capacity` for good.
    pub(crate) fn with_growth(mut self, capacity: u64, grows: bool) -> Self {
        self.capacity = capacity;
        self.grows = grows;
        self
    }

    /// True for a tree's filter that no setting sized: it grows with the tree's keys.
    pub(crate) fn grows(&self) -> bool {
        self.grows
    }

    /// Sizes the filter for false-positive rate `p` (in (0, 1)) at capacity.
    pub fn false_positive_rate(mut self, p: f64) -> Self {
        self.sizing = Sizing::FalsePositiveRate(p);
        self
    }

    /// Sizes the filter at `bits` bits per expected item (at least 1) instead of by rate.
    pub fn bits_per_key(mut self, bits: f64) -> Self {
        self.sizing = Sizing::BitsPerKey(bits);
        self
    }

    /// Overrides the number of bits set per key (1 to 32); by default the value that
    /// minimizes the blocked model's false-positive rate.
    pub fn num_hashes(mut self, k: u32) -> Self {
        self.num_hashes = Some(k);
        self
    }

    /// Fixes the hash seed. Unset (the default), every filter made from this configuration
    /// gets its own secret seed from the operating system's random source, so that nobody
    /// who knows the keys can compute its false positives offline (a chosen-key flood, the
    /// HashDoS of filters). Fix it for reproducible filters: golden files, tests, or filters
    /// built apart to be combined with [`Filter::union`], which needs equal seeds.
    ///
    /// ```
    /// use bloomsled::FilterConfig;
    /// let a = FilterConfig::new(1_000).seed(7).build()?;
    /// let b = FilterConfig::new(1_000).seed(7).build()?;
    /// a.union(&b)?; // same shape and seed
    /// let secret = FilterConfig::new(1_000).build()?;
    /// assert!(a.union(&secret).is_err()); // a secret seed differs from every other
    /// # Ok::<(), bloomsled::Error>(())
    /// ```
    pub fn seed(mut self, seed: u64) -> Self {
        self.seed = Some(seed);
        self
    }

    /// The number of items the filter is sized for, as set by
    /// [`FilterConfig::expected_items`] (a built filter calls it its
    /// [`capacity`](Filter::capacity)).
    ///
    /// ```
    /// let cfg = bloomsled::FilterConfig::new(5_000);
    /// assert_eq!(cfg.get_expected_items(), 5_000);
    /// ```
    pub fn get_expected_items(&self) -> u64 {
        self.capacity
    }

    /// The sizing rule: a false-positive rate or bits per key.
    ///
    /// ```
    /// use bloomsled::{FilterConfig, Sizing};
    /// let cfg = FilterConfig::new(5_000).bits_per_key(12.0);
    /// assert_eq!(cfg.sizing(), Sizing::BitsPerKey(12.0));
    /// ```
    pub fn sizing(&self) -> Sizing {
        self.sizing
    }

    /// The hash seed if [`FilterConfig::seed`] fixed one; `None` if each filter made from
    /// this configuration draws a secret one (a builder getter is the setter's name with
    /// `get_`, as in `std::process::Command`).
    ///
    /// ```
    /// let cfg = bloomsled::FilterConfig::new(5_000);
    /// assert_eq!(cfg.get_seed(), None);
    /// assert_eq!(cfg.seed(7).get_seed(), Some(7));
    /// ```
    pub fn get_seed(&self) -> Option<u64> {
        self.seed
    }

    /// This configuration with its seed fixed: the one set, else `seed`.
    pub(crate) fn seed_or(mut self, seed: u64) -> Self {
        self.seed.get_or_insert(seed);
        self
    }

    /// The number of bits set per key, if [`FilterConfig::num_hashes`] overrides the
    /// sizing's optimum.
    ///
    /// ```
    /// let cfg = bloomsled::FilterConfig::new(5_000);
    /// assert_eq!(cfg.get_num_hashes(), None);
    /// assert_eq!(cfg.num_hashes(4).get_num_hashes(), Some(4));
    /// ```
    pub fn get_num_hashes(&self) -> Option<u32> {
        self.num_hashes
    }

    /// Checks every setting and computes the shape; the errors `build` would return. With
    /// no seed set, the shape's seed is a secret one drawn now (each call draws another).
    ///
    /// ```
    /// let shape = bloomsled::FilterConfig::new(1_000).seed(3).shape()?;
    /// assert_eq!(shape.seed, 3);
    /// # Ok::<(), bloomsled::Error>(())
    /// ```
    pub fn shape(&self) -> Result<FilterShape> {
        if self.capacity == 0 {
            return Err(Error::config(
                "expected_items must be at least 1 (a filter sized for 0 items cannot hold any)",
            ));
        }
        let bits_per_key = match self.sizing {
            Sizing::FalsePositiveRate(p) => {
                if !(p > 0.0 && p < 1.0) {
                    return Err(Error::config(format!(
                        "false_positive_rate must be strictly between 0 and 1, got {p}"
                    )));
                }
                math::bits_per_key_for(p).ok_or_else(|| {
                    Error::config(format!(
                        "false_positive_rate {p} is below what a blocked filter reaches at {} \
                         bits per key; use a larger rate",
                        math::MAX_BITS_PER_KEY
                    ))
                })?
            }
            Sizing::BitsPerKey(b) => {
                if !(1.0..=math::MAX_BITS_PER_KEY).contains(&b) {
                    return Err(Error::config(format!(
                        "bits_per_key must be between 1 and {}, got {b}",
                        math::MAX_BITS_PER_KEY
                    )));
                }
                b
            }
        };
        let bits = (self.capacity as f64 * bits_per_key).ceil();
        if bits > MAX_BITS as f64 {
            return Err(Error::config(format!(
                "a filter for {} items at {bits_per_key} bits per key needs {bits} bits, over the \
                 limit of {MAX_BITS}",
                self.capacity
            )));
        }
        let num_blocks = ((bits as u64).div_ceil(BLOCK_BITS)).max(1);
        let k = match self.num_hashes {
            Some(k) if (1..=MAX_HASHES).contains(&k) => k,
            Some(k) => {
                return Err(Error::config(format!(
                    "num_hashes must be between 1 and {MAX_HASHES}, got {k}"
                )))
            }
            None => {
                math::blocked_optimal_k((num_blocks * BLOCK_BITS) as f64 / self.capacity as f64)
            }
        };
        let seed = self.seed.map_or_else(crate::hash::secret_seed, Ok)?;
        Ok(FilterShape {
            num_blocks,
            num_hashes: k,
            seed,
        })
    }

    /// Validates the configuration and allocates the filter (with a secret seed unless
    /// [`FilterConfig::seed`] fixed one).
    pub fn build(&self) -> Result<Filter> {
        let shape = self.shape()?;
        Filter::with_shape(shape, self.capacity)
    }
}

//! The filter-sizing setters `Config` and `TreeConfig` share, and `TreeConfig`, one tree's
//! own filter settings.

use super::Config;
use crate::error::Result;
use crate::filter::{FilterConfig, FilterMode};

/// The filter-sizing setters of [`Config`] and [`TreeConfig`] (and of any builder that holds
/// a `filter: FilterConfig`): one definition, so the two builders cannot drift apart. Each
/// forwards to the [`FilterConfig`] setter of the same name.
macro_rules! sizing_setters {
    ($builder:ident) => {
        impl $builder {
            /// Items the filter is sized for (at least 1). Unset (the default), a tree's
            /// filter starts at 128 items and grows with its keys, holding the
            /// false-positive rate, so a tree costs what it holds; set, the filter is sized
            /// for `n` from the start (and still grows if the tree outgrows it). A tree that
            /// already holds more keys when it is opened gets a filter sized for its key
            /// count instead.
            ///
            /// ```
            #[doc = concat!("let cfg = bloomsled::", stringify!($builder), "::new().expected_items(5_000);")]
            /// # let _ = cfg;
            /// ```
            pub fn expected_items(mut self, n: u64) -> $builder {
                self.filter = self.filter.expected_items(n);
                self
            }

            /// Target false-positive rate at capacity, in (0, 1) (default 0.001: see
            /// [`crate::DEFAULT_FALSE_POSITIVE_RATE`]).
            ///
            /// ```
            #[doc = concat!("let cfg = bloomsled::", stringify!($builder), "::new().false_positive_rate(0.01);")]
            /// # let _ = cfg;
            /// ```
            pub fn false_positive_rate(mut self, p: f64) -> $builder {
                self.filter = self.filter.false_positive_rate(p);
                self
            }

            /// Bits of filter per expected item (at least 1), instead of a target rate.
            ///
            /// ```
            #[doc = concat!("let cfg = bloomsled::", stringify!($builder), "::new().bits_per_key(16.0);")]
            /// # let _ = cfg;
            /// ```
            pub fn bits_per_key(mut self, bits: f64) -> $builder {
                self.filter = self.filter.bits_per_key(bits);
                self
            }

            /// Bits set per key (1 to 32), instead of the best value for the size.
            ///
            /// ```
            #[doc = concat!("let cfg = bloomsled::", stringify!($builder), "::new().num_hashes(6);")]
            /// # let _ = cfg;
            /// ```
            pub fn num_hashes(mut self, k: u32) -> $builder {
                self.filter = self.filter.num_hashes(k);
                self
            }

            /// Fixes the hash seed of new filters. Unset (the default), each new tree draws a
            /// secret seed from the operating system, stored in its record, so that its false
            /// positives cannot be computed offline from its keys; an existing tree keeps the
            /// seed its record stores unless this fixes another.
            ///
            /// ```
            #[doc = concat!("let cfg = bloomsled::", stringify!($builder), "::new().seed(42);")]
            /// # let _ = cfg;
            /// ```
            pub fn seed(mut self, seed: u64) -> $builder {
                self.filter = self.filter.seed(seed);
                self
            }

            /// Every filter setting at once, as a [`FilterConfig`].
            ///
            /// ```
            /// use bloomsled::FilterConfig;
            #[doc = concat!("let cfg = bloomsled::", stringify!($builder), "::new()")]
            ///     .filter(FilterConfig::new(5_000).bits_per_key(16.0));
            /// # let _ = cfg;
            /// ```
            pub fn filter(mut self, filter: FilterConfig) -> $builder {
                self.filter = filter;
                self
            }
        }
    };
}

sizing_setters!(Config);
sizing_setters!(TreeConfig);

/// One tree's own filter settings, for [`crate::Db::open_tree_with`]: expected items, rate or bits
/// per key, number of hashes, seed and mode. Unset, they are the defaults of a new
/// [`Config`] (a filter that grows with the tree, 0.1%, plain mode).
///
/// ```
/// use bloomsled::TreeConfig;
/// let db = bloomsled::Config::new().temporary(true).open()?;
/// let tags = db.open_tree_with("tags", TreeConfig::new().expected_items(500).counting(true))?;
/// tags.insert("rust", "")?;
/// tags.remove("rust")?;
/// assert!(!tags.may_contain("rust"));
/// # Ok::<(), bloomsled::Error>(())
/// ```
#[derive(Debug, Clone)]
pub struct TreeConfig {
    pub(crate) filter: FilterConfig,
    pub(crate) filter_mode: Option<FilterMode>,
}

impl Default for TreeConfig {
    fn default() -> Self {
        TreeConfig {
            filter: FilterConfig::growing(),
            filter_mode: None,
        }
    }
}

impl TreeConfig {
    /// Defaults: a filter that starts small and grows with the tree's keys, at 0.1% false
    /// positives; the tree's mode is kept.
    pub fn new() -> TreeConfig {
        TreeConfig::default()
    }

    /// Counting mode (`remove` takes keys out of the filter) or plain mode.
    pub fn counting(mut self, on: bool) -> TreeConfig {
        self.filter_mode = Some(if on {
            FilterMode::Counting
        } else {
            FilterMode::Plain
        });
        self
    }

    pub(crate) fn validate(&self) -> Result<()> {
        self.filter.shape().map(|_| ())
    }
}

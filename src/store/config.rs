//! `Config`: sled's settings plus the filter's.

use std::path::Path;

use sled::Mode;

use super::Db;
use crate::error::Result;
use crate::filter::FilterConfig;

/// Builder for a [`Db`]: the sled settings users tune, passed through unchanged, and the
/// filter settings every tree of the database uses.
///
/// ```
/// let db = bloomsled::Config::new()
///     .temporary(true)
///     .expected_items(100_000)
///     .false_positive_rate(0.001)
///     .cache_capacity(64 * 1024 * 1024)
///     .open()?;
/// assert!(db.stats().bits_per_key > 14.0);
/// # Ok::<(), bloomsled::Error>(())
/// ```
///
/// Invalid filter settings (zero capacity, a rate outside (0, 1), fewer than one bit per
/// key) are reported by [`Config::open`] as [`crate::Error::InvalidConfig`].
#[derive(Debug, Clone, Default)]
pub struct Config {
    pub(crate) sled: sled::Config,
    pub(crate) filter: FilterConfig,
}

impl Config {
    /// Defaults: sled's defaults, filters sized for 1M items at 1% false positives.
    pub fn new() -> Config {
        Config::default()
    }

    /// Directory of the database.
    pub fn path<P: AsRef<Path>>(mut self, path: P) -> Config {
        self.sled = self.sled.path(path);
        self
    }

    /// Items each tree's filter is sized for (default 1,000,000). A tree that already holds
    /// more keys when it is opened gets a filter sized for its key count instead.
    pub fn expected_items(mut self, n: u64) -> Config {
        self.filter = self.filter.expected_items(n);
        self
    }

    /// Target false-positive rate at capacity, in (0, 1) (default 0.01).
    pub fn false_positive_rate(mut self, p: f64) -> Config {
        self.filter = self.filter.false_positive_rate(p);
        self
    }

    /// Bits of filter per expected item (≥ 1), instead of a target rate.
    pub fn bits_per_key(mut self, bits: f64) -> Config {
        self.filter = self.filter.bits_per_key(bits);
        self
    }

    /// Bits set per key (1 to 32); by default the best value for the size.
    pub fn num_hashes(mut self, k: u32) -> Config {
        self.filter = self.filter.num_hashes(k);
        self
    }

    /// Hash seed of new filters.
    pub fn hash_seed(mut self, seed: u64) -> Config {
        self.filter = self.filter.seed(seed);
        self
    }

    /// sled: maximum bytes of the page cache (default 1 GiB). sled's real memory use can be
    /// several times this (sled issue #1309).
    pub fn cache_capacity(mut self, bytes: u64) -> Config {
        self.sled = self.sled.cache_capacity(bytes);
        self
    }

    /// sled: `Mode::LowSpace` (default) or `Mode::HighThroughput`.
    pub fn mode(mut self, mode: Mode) -> Config {
        self.sled = self.sled.mode(mode);
        self
    }

    /// sled: how often the background thread fsyncs, in ms (`None`: never; default 500).
    pub fn flush_every_ms(mut self, every_ms: Option<u64>) -> Config {
        self.sled = self.sled.flush_every_ms(every_ms);
        self
    }

    /// sled: delete the database when it is dropped (uses /dev/shm without a path).
    pub fn temporary(mut self, to: bool) -> Config {
        self.sled = self.sled.temporary(to);
        self
    }

    /// sled: fail to open if the database already exists.
    pub fn create_new(mut self, to: bool) -> Config {
        self.sled = self.sled.create_new(to);
        self
    }

    /// sled: persist the id generator every `interval` ids.
    pub fn idgen_persist_interval(mut self, interval: u64) -> Config {
        self.sled = self.sled.idgen_persist_interval(interval);
        self
    }

    /// sled: print a performance profile when the database is dropped.
    pub fn print_profile_on_drop(mut self, to: bool) -> Config {
        self.sled = self.sled.print_profile_on_drop(to);
        self
    }

    /// The filter settings.
    pub fn filter_config(&self) -> &FilterConfig {
        &self.filter
    }

    /// Checks the filter settings, opens sled, and builds each tree's filter.
    pub fn open(&self) -> Result<Db> {
        Db::open_with(self.clone())
    }
}

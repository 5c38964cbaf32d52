//! How a set is opened: its folder, width, filter sizing and the tuning of its runs.

use std::path::{Path, PathBuf};

use crate::error::{Error, Result};

use crate::format::MAX_WIDTH;
use crate::FingerprintSet;

/// Filter sizing of a new set when none is given: members.
pub const DEFAULT_EXPECTED_ITEMS: u64 = 1_000_000;
/// Filter sizing of a new set when none is given: false-positive rate.
pub const DEFAULT_SET_FALSE_POSITIVE_RATE: f64 = 0.01;
/// Default number of recent members kept in memory before they are written as a run.
pub const DEFAULT_MEMTABLE_ITEMS: usize = 64 * 1024;
/// Most members a memtable may be configured to hold (2^30).
pub const MAX_MEMTABLE_ITEMS: usize = 1 << 30;
/// Default number of runs of one tier merged into one run of the next.
pub const DEFAULT_MERGE_FACTOR: usize = 4;
/// Default number of fingerprints per run block (the unit a lookup reads and verifies).
pub const DEFAULT_BLOCK_ITEMS: u32 = 128;

/// How to open a [`FingerprintSet`]: its folder, fingerprint width and filter sizing, and
/// the tuning of its runs.
///
/// ```
/// # let dir = tempfile::tempdir()?;
/// let set = bloomsled_fpset::FingerprintSetConfig::new(dir.path().join("seen"))
///     .width(16)
///     .expected_items(10_000)
///     .false_positive_rate(0.001)
///     .memtable_items(1024)
///     .open()?;
/// assert!(set.insert(&[1u8; 16])?);
/// # Ok::<(), bloomsled_fpset::Error>(())
/// ```
#[derive(Debug, Clone)]
pub struct FingerprintSetConfig {
    pub(crate) path: PathBuf,
    pub(crate) width: usize,
    pub(crate) expected_items: Option<u64>,
    pub(crate) fpr: Option<f64>,
    pub(crate) memtable_items: usize,
    pub(crate) merge_factor: usize,
    pub(crate) block_items: u32,
}

impl FingerprintSetConfig {
    /// A set in folder `path` (created if missing) of 20-byte fingerprints. Unless
    /// [`expected_items`](Self::expected_items) or
    /// [`false_positive_rate`](Self::false_positive_rate) say otherwise, a new set's filter
    /// is sized for [`DEFAULT_EXPECTED_ITEMS`] at [`DEFAULT_SET_FALSE_POSITIVE_RATE`] and an
    /// existing set keeps its own sizing.
    ///
    /// ```
    /// # let dir = tempfile::tempdir()?;
    /// let set = bloomsled_fpset::FingerprintSetConfig::new(dir.path()).open()?;
    /// assert_eq!(set.width(), 20);
    /// # Ok::<(), bloomsled_fpset::Error>(())
    /// ```
    pub fn new(path: impl AsRef<Path>) -> Self {
        FingerprintSetConfig {
            path: path.as_ref().to_path_buf(),
            width: 20,
            expected_items: None,
            fpr: None,
            memtable_items: DEFAULT_MEMTABLE_ITEMS,
            merge_factor: DEFAULT_MERGE_FACTOR,
            block_items: DEFAULT_BLOCK_ITEMS,
        }
    }

    /// Bytes per fingerprint, 1 to 64 (fixed when the set is created).
    ///
    /// ```
    /// # let dir = tempfile::tempdir()?;
    /// let cfg = bloomsled_fpset::FingerprintSetConfig::new(dir.path()).width(32);
    /// assert_eq!(cfg.open()?.width(), 32);
    /// # Ok::<(), bloomsled_fpset::Error>(())
    /// ```
    pub fn width(mut self, bytes: usize) -> Self {
        self.width = bytes;
        self
    }

    /// Members the filter is sized for (its memory: about 1.2 bytes per item at 1%). A set
    /// may hold more; its filter then answers "maybe" more often, never wrongly.
    ///
    /// ```
    /// # let dir = tempfile::tempdir()?;
    /// let cfg = bloomsled_fpset::FingerprintSetConfig::new(dir.path()).expected_items(5);
    /// assert_eq!(cfg.open()?.stats().expected_items, 5);
    /// # Ok::<(), bloomsled_fpset::Error>(())
    /// ```
    pub fn expected_items(mut self, n: u64) -> Self {
        self.expected_items = Some(n);
        self
    }

    /// The filter's false-positive rate, in (0, 1): the share of new fingerprints whose
    /// lookup reads the runs.
    ///
    /// ```
    /// # let dir = tempfile::tempdir()?;
    /// let cfg = bloomsled_fpset::FingerprintSetConfig::new(dir.path()).false_positive_rate(0.5);
    /// assert_eq!(cfg.open()?.stats().false_positive_rate, 0.5);
    /// # Ok::<(), bloomsled_fpset::Error>(())
    /// ```
    pub fn false_positive_rate(mut self, p: f64) -> Self {
        self.fpr = Some(p);
        self
    }

    /// Recent members kept in memory (and in the log) before they are written as a run.
    ///
    /// ```
    /// # let dir = tempfile::tempdir()?;
    /// let set = bloomsled_fpset::FingerprintSetConfig::new(dir.path())
    ///     .width(4)
    ///     .memtable_items(2)
    ///     .open()?;
    /// set.insert(&[0; 4])?;
    /// set.insert(&[1; 4])?; // the memtable is full: written as a run
    /// assert_eq!(set.stats().runs, 1);
    /// # Ok::<(), bloomsled_fpset::Error>(())
    /// ```
    pub fn memtable_items(mut self, n: usize) -> Self {
        self.memtable_items = n;
        self
    }

    /// Runs of one tier merged into one run of the next (at least 2).
    ///
    /// ```
    /// # let dir = tempfile::tempdir()?;
    /// let set = bloomsled_fpset::FingerprintSetConfig::new(dir.path())
    ///     .width(4)
    ///     .memtable_items(1)
    ///     .merge_factor(2)
    ///     .open()?;
    /// set.insert(&[0; 4])?;
    /// set.insert(&[1; 4])?; // two tier-0 runs: merged into one
    /// assert_eq!((set.stats().runs, set.stats().merges), (1, 1));
    /// # Ok::<(), bloomsled_fpset::Error>(())
    /// ```
    pub fn merge_factor(mut self, n: usize) -> Self {
        self.merge_factor = n;
        self
    }

    /// Fingerprints per run block: what one lookup reads and verifies. Used for runs
    /// written from now on.
    ///
    /// ```
    /// # let dir = tempfile::tempdir()?;
    /// let set = bloomsled_fpset::FingerprintSetConfig::new(dir.path()).block_items(32).open()?;
    /// assert!(set.is_empty());
    /// # Ok::<(), bloomsled_fpset::Error>(())
    /// ```
    pub fn block_items(mut self, n: u32) -> Self {
        self.block_items = n;
        self
    }

    pub(crate) fn check(&self) -> Result<()> {
        if !(1..=MAX_WIDTH).contains(&self.width) {
            return Err(invalid_config(format!(
                "fingerprint width {} (1 to {MAX_WIDTH} bytes)",
                self.width
            )));
        }
        if self.expected_items == Some(0) {
            return Err(invalid_config("expected_items must be at least 1"));
        }
        if let Some(p) = self.fpr.filter(|p| !(*p > 0.0 && *p < 1.0)) {
            return Err(invalid_config(format!(
                "false_positive_rate {p} is outside (0, 1)"
            )));
        }
        if !(1..=MAX_MEMTABLE_ITEMS).contains(&self.memtable_items)
            || self.merge_factor < 2
            || self.block_items == 0
        {
            return Err(invalid_config(format!(
                "memtable_items {} (1 to 2^30), merge_factor {} (>= 2), block_items {} (>= 1)",
                self.memtable_items, self.merge_factor, self.block_items
            )));
        }
        Ok(())
    }

    /// Opens the set (creating it if the folder holds none). See [`FingerprintSet`].
    ///
    /// ```
    /// # let dir = tempfile::tempdir()?;
    /// let cfg = bloomsled_fpset::FingerprintSetConfig::new(dir.path()).width(8);
    /// let set = cfg.clone().open()?;
    /// assert!(matches!(cfg.open(), Err(bloomsled_fpset::Error::InUse { .. })));
    /// # Ok::<(), bloomsled_fpset::Error>(())
    /// ```
    pub fn open(self) -> Result<FingerprintSet> {
        self.check()?;
        FingerprintSet::open_with(self)
    }
}

/// The error of a setting out of its range.
pub(crate) fn invalid_config(what: impl Into<String>) -> Error {
    Error::InvalidConfig { what: what.into() }
}

//! An exact, disk-backed set of fixed-width fingerprints whose memory is bounded by its
//! filter, not by its members: "have I seen this URL?" for billions of URLs.
//!
//! A [`FingerprintSet`] is a small log-structured merge tree of sorted runs in files, with
//! a bloomsled [`Filter`] over every member in front of it:
//!
//! - **lookups**: the filter answers "new" without I/O; its "maybe" is confirmed by the
//!   memtable (recent members), then by the runs, largest first: each run finds the one
//!   block that can hold the fingerprint in an in-memory sparse index (the first
//!   fingerprint of every block) and reads it with a positioned read (`pread`, never
//!   `mmap`), checking the block's CRC32. The runs' data lives in the OS page cache, which
//!   is not counted in the process's memory and is given back under pressure.
//! - **adds**: into the filter, the memtable and the write-ahead log (one CRC-checked
//!   record each). [`FingerprintSet::sync`] makes every member added so far durable.
//!   A full memtable is written as a sorted run; runs are merged size-tiered (see
//!   `tiers.rs`) by a streaming merge with one block per input in memory.
//! - **files** (layouts in [`crate::format`]): `MANIFEST` lists the live runs and
//!   the log's generation and is replaced atomically (temporary file, fsync, rename,
//!   folder fsync). A run is listed only once it is complete and synced; the log it
//!   replaces is dropped only once the manifest lists the run. Files of the set's naming
//!   that the manifest does not list are leftovers of an interrupted flush or merge and
//!   are removed at open; other files in the folder are never touched.
//! - **restarts**: a clean [`FingerprintSet::close`] saves the filter and marks the
//!   manifest clean; an open trusts the saved filter only then (and clears the mark before
//!   any change). After a crash the filter is rebuilt by streaming the runs and the log,
//!   every block's CRC verified. A torn last log record (a crash mid-append) is cut off;
//!   a damaged record followed by good ones, a damaged run or a foreign manifest is an
//!   [`Error::FileDamaged`], and nothing is deleted.
//! - **one handle per folder**: a lock file; a second open gets [`Error::InUse`].
//!
//! ```
//! use bloomsled_fpset::FingerprintSet;
//! # let dir = tempfile::tempdir()?;
//! # let path = dir.path().join("seen");
//! let set = FingerprintSet::open(&path, 20, 1_000_000, 0.01)?;
//! let fp = [7u8; 20]; // e.g. a SHA-1 digest of a request
//! assert!(set.insert(&fp)?); // new
//! assert!(!set.insert(&fp)?); // seen
//! assert!(set.contains(&fp)?);
//! set.sync()?; // durable from here on, even after kill -9
//! set.close()?;
//! let set = FingerprintSet::open(&path, 20, 1_000_000, 0.01)?;
//! assert!(set.contains(&fp)?);
//! assert_eq!(set.len(), 1);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

#![deny(missing_docs)]
#![deny(unsafe_code)]
#![warn(unreachable_pub)]

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard};

use crate::format::{Manifest, RunEntry, MAX_WIDTH};
use bloomsled::{Error, Filter, Result};

mod dir;
/// The files' byte layouts (public only to the fuzz targets, feature `fuzzing`).
#[cfg(feature = "fuzzing")]
#[doc(hidden)]
pub mod format;
#[cfg(not(feature = "fuzzing"))]
#[allow(unreachable_pub)]
mod format;
mod memtable;
mod pread;
mod run;
mod tiers;
mod wal;

use dir::Folder;
use memtable::Memtable;
use run::{Cursor, Run, RunWriter};
use wal::Wal;

/// Filter sizing of a new set when none is given: members.
pub const DEFAULT_EXPECTED_ITEMS: u64 = 1_000_000;
/// Filter sizing of a new set when none is given: false-positive rate.
pub const DEFAULT_FALSE_POSITIVE_RATE: f64 = 0.01;
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
/// # Ok::<(), bloomsled::Error>(())
/// ```
#[derive(Debug, Clone)]
pub struct FingerprintSetConfig {
    path: PathBuf,
    width: usize,
    expected_items: Option<u64>,
    fpr: Option<f64>,
    memtable_items: usize,
    merge_factor: usize,
    block_items: u32,
}

impl FingerprintSetConfig {
    /// A set in folder `path` (created if missing) of 20-byte fingerprints. Unless
    /// [`expected_items`](Self::expected_items) or
    /// [`false_positive_rate`](Self::false_positive_rate) say otherwise, a new set's filter
    /// is sized for [`DEFAULT_EXPECTED_ITEMS`] at [`DEFAULT_FALSE_POSITIVE_RATE`] and an
    /// existing set keeps its own sizing.
    ///
    /// ```
    /// # let dir = tempfile::tempdir()?;
    /// let set = bloomsled_fpset::FingerprintSetConfig::new(dir.path()).open()?;
    /// assert_eq!(set.width(), 20);
    /// # Ok::<(), bloomsled::Error>(())
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
    /// # Ok::<(), bloomsled::Error>(())
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
    /// # Ok::<(), bloomsled::Error>(())
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
    /// # Ok::<(), bloomsled::Error>(())
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
    /// # Ok::<(), bloomsled::Error>(())
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
    /// # Ok::<(), bloomsled::Error>(())
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
    /// # Ok::<(), bloomsled::Error>(())
    /// ```
    pub fn block_items(mut self, n: u32) -> Self {
        self.block_items = n;
        self
    }

    fn check(&self) -> Result<()> {
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
    /// assert!(matches!(cfg.open(), Err(bloomsled::Error::InUse { .. })));
    /// # Ok::<(), bloomsled::Error>(())
    /// ```
    pub fn open(self) -> Result<FingerprintSet> {
        self.check()?;
        FingerprintSet::open_with(self)
    }
}

/// Counters and sizes of a [`FingerprintSet`] ([`FingerprintSet::stats`]).
#[derive(Debug, Clone, Default, PartialEq)]
#[non_exhaustive]
pub struct FingerprintSetStats {
    /// Members.
    pub members: u64,
    /// Members in the memtable (and the log).
    pub memtable_items: u64,
    /// Live runs.
    pub runs: u64,
    /// Run blocks read by lookups since open.
    pub block_reads: u64,
    /// Lookups whose filter said "maybe" for a fingerprint that is not a member.
    pub false_positives: u64,
    /// Memtables written as runs since open.
    pub flushes: u64,
    /// Merges since open.
    pub merges: u64,
    /// Members the filter is sized for.
    pub expected_items: u64,
    /// The filter's target false-positive rate.
    pub false_positive_rate: f64,
    /// Bytes of the filter.
    pub filter_bytes: u64,
    /// Bytes of the runs' in-memory indexes.
    pub index_bytes: u64,
    /// Bytes of the set's files on disk (runs and log).
    pub disk_bytes: u64,
    /// The filter was rebuilt from the files at open (no clean close before).
    pub filter_rebuilt: bool,
    /// Bytes of a torn log tail cut off at open (a crash mid-append).
    pub torn_bytes_cut: u64,
    /// Leftover files (of an interrupted flush, merge or close) removed at open.
    pub leftovers_removed: u64,
}

/// What open found, for [`FingerprintSetStats`].
#[derive(Debug, Clone, Copy, Default)]
struct Opened {
    filter_rebuilt: bool,
    torn_bytes_cut: u64,
    leftovers_removed: u64,
}

/// An exact set of fixed-width fingerprints on disk, with a Bloom filter in memory (see
/// the [module docs](self)). `Sync`: share it between threads behind an `Arc`; a lookup
/// the filter answers takes no lock.
#[derive(Debug)]
pub struct FingerprintSet {
    filter: Filter,
    config: FingerprintSetConfig,
    folder: Folder,
    inner: Mutex<Inner>,
    opened: Opened,
}

#[derive(Debug)]
struct Inner {
    /// The manifest on disk (never clean while open).
    manifest: Manifest,
    /// The live runs, parallel to `manifest.runs` (oldest first).
    runs: Vec<Arc<Run>>,
    /// Indexes into `runs`, largest first: the order lookups check them in.
    lookup_order: Vec<usize>,
    memtable: Memtable,
    wal: WalSlot,
    scratch: Vec<u8>,
    block_reads: u64,
    false_positives: u64,
    flushes: u64,
    merges: u64,
    /// Set when a log append, a sync, a flush or a merge failed: the files are consistent
    /// (the manifest decides) but this handle's view may not be; every later call fails
    /// until reopen.
    broken: Option<String>,
}

/// The log, with a `Debug` that does not dump its buffer.
struct WalSlot(Wal);

impl std::fmt::Debug for WalSlot {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Wal(generation {})", self.0.generation)
    }
}

impl FingerprintSet {
    /// Opens (or creates) the set in folder `path` holding `width`-byte fingerprints, its
    /// filter sized for `expected_items` at false-positive rate `fpr`; the other settings
    /// are [`FingerprintSetConfig`]'s defaults.
    ///
    /// A width other than the stored set's is an [`Error::InvalidConfig`]; a sizing other
    /// than the stored one rebuilds the filter to the new sizing.
    ///
    /// ```
    /// # let dir = tempfile::tempdir()?;
    /// let set = bloomsled_fpset::FingerprintSet::open(dir.path(), 20, 10_000, 0.01)?;
    /// assert!(set.is_empty());
    /// assert!(bloomsled_fpset::FingerprintSet::open(dir.path().join("x"), 20, 0, 0.01).is_err());
    /// # Ok::<(), bloomsled::Error>(())
    /// ```
    pub fn open(
        path: impl AsRef<Path>,
        width: usize,
        expected_items: u64,
        fpr: f64,
    ) -> Result<FingerprintSet> {
        FingerprintSetConfig::new(path)
            .width(width)
            .expected_items(expected_items)
            .false_positive_rate(fpr)
            .open()
    }

    fn open_with(config: FingerprintSetConfig) -> Result<FingerprintSet> {
        let folder = Folder::lock(&config.path)?;
        let width = config.width;
        let mut manifest = match folder.read_manifest()? {
            Some(m) => m,
            None => create(&folder, &config)?,
        };
        if manifest.width != width {
            return Err(invalid_config(format!(
                "{} holds {}-byte fingerprints, not {width}-byte ones",
                folder.path.display(),
                manifest.width
            )));
        }
        let leftovers_removed = folder.remove_leftovers(&manifest)? as u64;
        let mut runs = Vec::with_capacity(manifest.runs.len());
        for r in &manifest.runs {
            let path = folder.path.join(run::file_name(r.seq));
            runs.push(Arc::new(Run::open(
                &path,
                manifest.set_id,
                width,
                r.seq,
                r.count,
            )?));
        }
        let expected_items = config.expected_items.unwrap_or(manifest.expected_items);
        let fpr = config.fpr.unwrap_or(manifest.fpr);
        let same_sizing = manifest.expected_items == expected_items && manifest.fpr == fpr;
        let saved = (manifest.clean && same_sizing)
            .then(|| folder.load_filter(&manifest))
            .flatten();
        let filter_rebuilt = saved.is_none();
        let filter = match saved {
            Some(f) => f,
            None => rebuild_filter(&runs, expected_items, fpr)?,
        };
        let replayed = Wal::replay(&folder.path, manifest.set_id, width, manifest.wal_gen)?;
        let mut memtable = Memtable::new(width, config.memtable_items.min(1 << 20));
        for fp in replayed.members.chunks_exact(width) {
            // Already in a saved filter; inserting again changes nothing.
            filter.insert(fp);
            memtable.insert(fp);
        }
        // The clean mark is cleared (durably) before any change is accepted.
        let was_clean = manifest.clean;
        manifest.clean = false;
        manifest.expected_items = expected_items;
        manifest.fpr = fpr;
        folder.write_manifest(&manifest)?;
        if was_clean {
            let _ = std::fs::remove_file(folder.path.join(dir::FILTER));
        }
        let mut inner = Inner {
            manifest,
            runs,
            lookup_order: Vec::new(),
            memtable,
            wal: WalSlot(replayed.wal),
            scratch: Vec::new(),
            block_reads: 0,
            false_positives: 0,
            flushes: 0,
            merges: 0,
            broken: None,
        };
        inner.order_runs();
        let set = FingerprintSet {
            filter,
            config,
            folder,
            inner: Mutex::new(inner),
            opened: Opened {
                filter_rebuilt,
                torn_bytes_cut: replayed.cut_bytes,
                leftovers_removed,
            },
        };
        {
            let mut inner = set.lock()?;
            if inner.memtable.len() >= set.config.memtable_items {
                set.flush(&mut inner)?;
            }
        }
        Ok(set)
    }

    /// Bytes per fingerprint.
    ///
    /// ```
    /// # let dir = tempfile::tempdir()?;
    /// let set = bloomsled_fpset::FingerprintSet::open(dir.path(), 8, 100, 0.01)?;
    /// assert_eq!(set.width(), 8);
    /// # Ok::<(), bloomsled::Error>(())
    /// ```
    pub fn width(&self) -> usize {
        self.config.width
    }

    /// The set's folder.
    ///
    /// ```
    /// # let dir = tempfile::tempdir()?;
    /// let set = bloomsled_fpset::FingerprintSet::open(dir.path(), 8, 100, 0.01)?;
    /// assert_eq!(set.path(), dir.path());
    /// # Ok::<(), bloomsled::Error>(())
    /// ```
    pub fn path(&self) -> &Path {
        &self.folder.path
    }

    fn lock(&self) -> Result<MutexGuard<'_, Inner>> {
        let inner = self
            .inner
            .lock()
            .map_err(|_| Error::ReportableBug("fingerprint set lock poisoned".into()))?;
        if let Some(why) = &inner.broken {
            return Err(Error::Closed(format!(
                "fingerprint set {} failed ({why}); reopen it",
                self.folder.path.display()
            )));
        }
        Ok(inner)
    }

    fn check_width(&self, fp: &[u8]) -> Result<()> {
        if fp.len() != self.config.width {
            return Err(Error::KeyWidth {
                expected: self.config.width,
                got: fp.len(),
            });
        }
        Ok(())
    }

    /// Adds `fp`; `true` if it was new (as `HashSet::insert`). Durable after the next
    /// [`sync`](Self::sync) (or flush); a fingerprint of another width is an
    /// [`Error::KeyWidth`] and stores nothing.
    ///
    /// ```
    /// # let dir = tempfile::tempdir()?;
    /// let set = bloomsled_fpset::FingerprintSet::open(dir.path(), 4, 100, 0.01)?;
    /// assert!(set.insert(b"abcd")?);
    /// assert!(!set.insert(b"abcd")?);
    /// assert!(matches!(set.insert(b"abc"), Err(bloomsled::Error::KeyWidth { expected: 4, got: 3 })));
    /// # Ok::<(), bloomsled::Error>(())
    /// ```
    pub fn insert(&self, fp: &[u8]) -> Result<bool> {
        self.check_width(fp)?;
        let mut inner = self.lock()?;
        self.insert_locked(&mut inner, fp)
    }

    /// Adds every fingerprint (under one lock); for each, `true` if it was new (a repeat
    /// within the batch is not). Every width is checked before anything is stored.
    ///
    /// ```
    /// # let dir = tempfile::tempdir()?;
    /// let set = bloomsled_fpset::FingerprintSet::open(dir.path(), 2, 100, 0.01)?;
    /// assert_eq!(set.insert_many(&[b"ab", b"cd", b"ab"])?, [true, true, false]);
    /// # Ok::<(), bloomsled::Error>(())
    /// ```
    pub fn insert_many<K: AsRef<[u8]>>(&self, fps: &[K]) -> Result<Vec<bool>> {
        for fp in fps {
            self.check_width(fp.as_ref())?;
        }
        let mut inner = self.lock()?;
        fps.iter()
            .map(|fp| self.insert_locked(&mut inner, fp.as_ref()))
            .collect()
    }

    fn insert_locked(&self, inner: &mut Inner, fp: &[u8]) -> Result<bool> {
        if self.filter.contains(fp) && inner.contains_stored(fp)? {
            return Ok(false);
        }
        // Filter first: a lock-free reader never finds a member the filter denies.
        self.filter.insert(fp);
        inner.memtable.insert(fp);
        let appended = inner.wal.0.append(fp);
        inner.fail_on(appended)?;
        if inner.memtable.len() >= self.config.memtable_items {
            self.flush(inner)?;
        }
        Ok(true)
    }

    /// Whether `fp` is a member (exact: the filter's "maybe" is confirmed on disk). A
    /// fingerprint of another width is an [`Error::KeyWidth`].
    ///
    /// ```
    /// # let dir = tempfile::tempdir()?;
    /// let set = bloomsled_fpset::FingerprintSet::open(dir.path(), 4, 100, 0.01)?;
    /// set.insert(b"abcd")?;
    /// assert!(set.contains(b"abcd")?);
    /// assert!(!set.contains(b"abce")?);
    /// # Ok::<(), bloomsled::Error>(())
    /// ```
    pub fn contains(&self, fp: &[u8]) -> Result<bool> {
        self.check_width(fp)?;
        if !self.filter.contains(fp) {
            return Ok(false);
        }
        self.lock()?.contains_stored(fp)
    }

    /// [`contains`](Self::contains) for every fingerprint: the filter is probed for all of
    /// them in one batch, the lock taken once for those it passes.
    ///
    /// ```
    /// # let dir = tempfile::tempdir()?;
    /// let set = bloomsled_fpset::FingerprintSet::open(dir.path(), 2, 100, 0.01)?;
    /// set.insert(b"ab")?;
    /// assert_eq!(set.contains_many(&[b"ab", b"cd"])?, [true, false]);
    /// # Ok::<(), bloomsled::Error>(())
    /// ```
    pub fn contains_many<K: AsRef<[u8]>>(&self, fps: &[K]) -> Result<Vec<bool>> {
        for fp in fps {
            self.check_width(fp.as_ref())?;
        }
        let mut out = self.filter.contains_many(fps);
        if out.iter().any(|&maybe| maybe) {
            let mut inner = self.lock()?;
            for (fp, o) in fps.iter().zip(out.iter_mut()) {
                if *o {
                    *o = inner.contains_stored(fp.as_ref())?;
                }
            }
        }
        Ok(out)
    }

    /// Makes every member added so far durable (writes the log's buffer and fsyncs it):
    /// after it returns, they survive `kill -9` and a power loss.
    ///
    /// ```
    /// # let dir = tempfile::tempdir()?;
    /// let set = bloomsled_fpset::FingerprintSet::open(dir.path(), 4, 100, 0.01)?;
    /// set.insert(b"abcd")?;
    /// set.sync()?;
    /// # Ok::<(), bloomsled::Error>(())
    /// ```
    pub fn sync(&self) -> Result<()> {
        let mut inner = self.lock()?;
        // After a failed fsync the kernel may have dropped the unwritten pages and a retry
        // can report success: the handle is unusable until reopened (replay decides).
        let synced = inner.wal.0.sync();
        inner.fail_on(synced)
    }

    /// Number of members.
    ///
    /// ```
    /// # let dir = tempfile::tempdir()?;
    /// let set = bloomsled_fpset::FingerprintSet::open(dir.path(), 1, 100, 0.01)?;
    /// set.insert_many(&[b"a", b"b", b"a"])?;
    /// assert_eq!(set.len(), 2);
    /// # Ok::<(), bloomsled::Error>(())
    /// ```
    pub fn len(&self) -> u64 {
        match self.inner.lock() {
            Ok(inner) => inner.len(),
            Err(poisoned) => poisoned.into_inner().len(),
        }
    }

    /// Whether the set has no member.
    ///
    /// ```
    /// # let dir = tempfile::tempdir()?;
    /// let set = bloomsled_fpset::FingerprintSet::open(dir.path(), 1, 100, 0.01)?;
    /// assert!(set.is_empty());
    /// # Ok::<(), bloomsled::Error>(())
    /// ```
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Counters and sizes.
    ///
    /// ```
    /// # let dir = tempfile::tempdir()?;
    /// let set = bloomsled_fpset::FingerprintSet::open(dir.path(), 1, 100, 0.01)?;
    /// set.insert(b"a")?;
    /// let s = set.stats();
    /// assert_eq!((s.members, s.memtable_items, s.runs), (1, 1, 0));
    /// assert!(s.filter_rebuilt); // a new set has no saved filter
    /// # Ok::<(), bloomsled::Error>(())
    /// ```
    pub fn stats(&self) -> FingerprintSetStats {
        let inner = match self.inner.lock() {
            Ok(inner) => inner,
            Err(poisoned) => poisoned.into_inner(),
        };
        let width = self.config.width as u64;
        let runs_bytes: u64 = inner.runs.iter().map(|r| r.header.file_len()).sum();
        let wal_bytes = inner.memtable.len() as u64 * (width + 4);
        FingerprintSetStats {
            members: inner.len(),
            memtable_items: inner.memtable.len() as u64,
            runs: inner.runs.len() as u64,
            block_reads: inner.block_reads,
            false_positives: inner.false_positives,
            flushes: inner.flushes,
            merges: inner.merges,
            expected_items: inner.manifest.expected_items,
            false_positive_rate: inner.manifest.fpr,
            filter_bytes: self.filter.memory_bytes() as u64,
            index_bytes: inner.runs.iter().map(|r| r.memory_bytes() as u64).sum(),
            disk_bytes: runs_bytes + wal_bytes,
            filter_rebuilt: self.opened.filter_rebuilt,
            torn_bytes_cut: self.opened.torn_bytes_cut,
            leftovers_removed: self.opened.leftovers_removed,
        }
    }

    /// Every member, in no particular order (runs in ascending order, then the
    /// memtable), read from a snapshot of the set taken now; each run block is verified.
    ///
    /// ```
    /// # let dir = tempfile::tempdir()?;
    /// let set = bloomsled_fpset::FingerprintSet::open(dir.path(), 1, 100, 0.01)?;
    /// set.insert_many(&[b"b", b"a"])?;
    /// let mut all = set.iter()?.collect::<Result<Vec<_>, _>>()?;
    /// all.sort();
    /// assert_eq!(all, [b"a".to_vec(), b"b".to_vec()]);
    /// # Ok::<(), bloomsled::Error>(())
    /// ```
    pub fn iter(&self) -> Result<Members> {
        let inner = self.lock()?;
        let recent = inner.memtable.as_bytes().to_vec();
        Ok(Members {
            runs: inner.runs.iter().rev().cloned().collect(),
            cursor: None,
            recent,
            recent_pos: 0,
            width: self.config.width,
        })
    }

    /// Closes cleanly: makes every member durable, saves the filter and marks the
    /// manifest clean, so the next open loads the filter instead of rebuilding it. (A set
    /// dropped without `close` keeps what was synced; its next open rebuilds the filter.)
    ///
    /// ```
    /// # let dir = tempfile::tempdir()?;
    /// let set = bloomsled_fpset::FingerprintSet::open(dir.path(), 1, 100, 0.01)?;
    /// set.insert(b"a")?;
    /// set.close()?;
    /// let set = bloomsled_fpset::FingerprintSet::open(dir.path(), 1, 100, 0.01)?;
    /// assert!(!set.stats().filter_rebuilt);
    /// assert!(set.contains(b"a")?);
    /// # Ok::<(), bloomsled::Error>(())
    /// ```
    pub fn close(self) -> Result<()> {
        let mut inner = self.lock()?;
        inner.wal.0.sync()?;
        let (len, crc) = self.folder.save_filter(&self.filter)?;
        let mut m = inner.manifest.clone();
        m.clean = true;
        m.filter_len = len;
        m.filter_crc = crc;
        self.folder.write_manifest(&m)?;
        inner.manifest = m;
        Ok(())
    }

    /// Writes the memtable as a run, replaces the log, then merges while a merge is due.
    fn flush(&self, inner: &mut Inner) -> Result<()> {
        let result = self.flush_and_merge(inner);
        inner.fail_on(result)
    }

    fn flush_and_merge(&self, inner: &mut Inner) -> Result<()> {
        let cfg = &self.config;
        let dir = &self.folder.path;
        let m = &inner.manifest;
        let seq = m.next_seq;
        let sorted = inner.memtable.sorted();
        let path = dir.join(run::file_name(seq));
        let mut w = RunWriter::create(&path, m.set_id, cfg.width, seq, cfg.block_items)?;
        for fp in sorted {
            w.push(fp)?;
        }
        let new_run = w.finish()?;
        step("flush:run-written");
        let new_wal = Wal::create(dir, m.set_id, cfg.width, m.wal_gen + 1)?;
        let mut next = m.clone();
        next.wal_gen += 1;
        next.next_seq += 1;
        if let Some(r) = &new_run {
            next.runs.push(RunEntry {
                seq,
                count: r.header.count,
            });
        }
        self.folder.write_manifest(&next)?;
        step("flush:listed");
        // Listed: the old log is no longer needed.
        let old = std::mem::replace(&mut inner.wal.0, new_wal);
        drop(old);
        remove_quietly(&wal::path(dir, next.wal_gen - 1));
        inner.manifest = next;
        if let Some(r) = new_run {
            inner.runs.push(Arc::new(r));
        }
        inner.memtable.clear();
        inner.flushes += 1;
        inner.order_runs();
        while let Some(start) = tiers::merge_due(
            &inner
                .manifest
                .runs
                .iter()
                .map(|r| r.count)
                .collect::<Vec<_>>(),
            cfg.memtable_items as u64,
            cfg.merge_factor,
        ) {
            self.merge(inner, start)?;
        }
        Ok(())
    }

    /// Merges the runs from index `start` to the newest into one run.
    fn merge(&self, inner: &mut Inner, start: usize) -> Result<()> {
        let cfg = &self.config;
        let dir = &self.folder.path;
        let seq = inner.manifest.next_seq;
        let path = dir.join(run::file_name(seq));
        let mut w = RunWriter::create(
            &path,
            inner.manifest.set_id,
            cfg.width,
            seq,
            cfg.block_items,
        )?;
        let mut cursors: Vec<Cursor> = inner.runs[start..]
            .iter()
            .map(|r| Cursor::new(Arc::clone(r)))
            .collect();
        let mut least = [0u8; MAX_WIDTH];
        let width = cfg.width;
        loop {
            let mut from = None;
            for (i, c) in cursors.iter_mut().enumerate() {
                if let Some(fp) = c.peek()? {
                    if from.is_none() || fp < &least[..width] {
                        least[..width].copy_from_slice(fp);
                        from = Some(i);
                    }
                }
            }
            let Some(i) = from else { break };
            w.push(&least[..width])?;
            cursors[i].advance();
        }
        drop(cursors);
        let merged = w.finish()?;
        step("merge:run-written");
        let mut next = inner.manifest.clone();
        let inputs: Vec<u64> = next.runs.drain(start..).map(|r| r.seq).collect();
        next.next_seq += 1;
        if let Some(r) = &merged {
            next.runs.push(RunEntry {
                seq,
                count: r.header.count,
            });
        }
        self.folder.write_manifest(&next)?;
        step("merge:listed");
        for s in inputs {
            remove_quietly(&dir.join(run::file_name(s)));
        }
        inner.manifest = next;
        inner.runs.truncate(start);
        if let Some(r) = merged {
            inner.runs.push(Arc::new(r));
        }
        inner.merges += 1;
        inner.order_runs();
        Ok(())
    }
}

impl Inner {
    /// `result`, after marking the handle unusable if it is an error of a write path
    /// (its files are consistent, since the manifest decides, but this view may not be).
    fn fail_on<T>(&mut self, result: Result<T>) -> Result<T> {
        if let Err(e) = &result {
            self.broken = Some(e.to_string());
        }
        result
    }

    fn len(&self) -> u64 {
        self.manifest.runs.iter().map(|r| r.count).sum::<u64>() + self.memtable.len() as u64
    }

    fn order_runs(&mut self) {
        let mut order: Vec<usize> = (0..self.runs.len()).collect();
        order.sort_by_key(|&i| std::cmp::Reverse(self.runs[i].header.count));
        self.lookup_order = order;
    }

    /// Whether `fp` (which the filter passed) is in the memtable or a run.
    fn contains_stored(&mut self, fp: &[u8]) -> Result<bool> {
        if self.memtable.contains(fp) {
            return Ok(true);
        }
        for &i in &self.lookup_order {
            if self.runs[i].contains(fp, &mut self.scratch, &mut self.block_reads)? {
                return Ok(true);
            }
        }
        self.false_positives += 1;
        Ok(false)
    }
}

/// A new set in `folder`: its first log, then its manifest (a folder holding members
/// without a manifest is refused).
fn create(folder: &Folder, config: &FingerprintSetConfig) -> Result<Manifest> {
    if folder.has_orphan_members()? {
        return Err(folder.missing_manifest());
    }
    let m = Manifest {
        width: config.width,
        set_id: random_id()?,
        clean: false,
        expected_items: config.expected_items.unwrap_or(DEFAULT_EXPECTED_ITEMS),
        fpr: config.fpr.unwrap_or(DEFAULT_FALSE_POSITIVE_RATE),
        wal_gen: 1,
        next_seq: 1,
        filter_len: 0,
        filter_crc: 0,
        runs: Vec::new(),
    };
    drop(Wal::create(
        &folder.path,
        m.set_id,
        config.width,
        m.wal_gen,
    )?);
    folder.write_manifest(&m)?;
    Ok(m)
}

/// A filter over every member of `runs`, streamed block by block (each block verified).
fn rebuild_filter(runs: &[Arc<Run>], expected_items: u64, fpr: f64) -> Result<Filter> {
    let f = Filter::new(expected_items, fpr)?;
    for run in runs {
        let mut c = Cursor::new(Arc::clone(run));
        while let Some(fp) = c.peek()? {
            f.insert(fp);
            c.advance();
        }
    }
    Ok(f)
}

/// Removes a file the manifest no longer lists; a failure only leaves a leftover that the
/// next open removes.
fn remove_quietly(path: &Path) {
    if let Err(e) = std::fs::remove_file(path) {
        log::warn!(
            "bloomsled: cannot remove {}: {e} (removed at next open)",
            path.display()
        );
    }
}

/// A test seam: a function called at the named steps of a flush and a merge (see
/// `set_step_hook`, feature `failpoints`).
#[cfg(feature = "failpoints")]
static STEP_HOOK: std::sync::OnceLock<fn(&'static str)> = std::sync::OnceLock::new();

/// Test seam (feature `failpoints`; process-wide, set once): `hook` is called with the name
/// of each step of a flush or merge as it is reached: `"flush:run-written"` (the run is
/// synced, the manifest does not list it yet), `"flush:listed"` (the manifest lists it, the
/// old log is still there), `"merge:run-written"`, `"merge:listed"` (inputs still there).
/// Crash tests block a child there and kill it.
///
/// ```
/// bloomsled_fpset::set_step_hook(|step| eprintln!("reached {step}"));
/// ```
#[cfg(feature = "failpoints")]
pub fn set_step_hook(hook: fn(&'static str)) {
    let _ = STEP_HOOK.set(hook);
}

#[cfg(feature = "failpoints")]
fn step(name: &'static str) {
    if let Some(hook) = STEP_HOOK.get() {
        hook(name);
    }
}

#[cfg(not(feature = "failpoints"))]
#[inline(always)]
fn step(_name: &'static str) {}

fn random_id() -> Result<u64> {
    let mut b = [0u8; 8];
    getrandom::fill(&mut b).map_err(|e| Error::Io(std::io::Error::other(e.to_string())))?;
    Ok(u64::from_le_bytes(b))
}

/// Every member of a set ([`FingerprintSet::iter`]); an item is an error if a run block
/// fails its check.
pub struct Members {
    /// Runs still to read, the next one last.
    runs: Vec<Arc<Run>>,
    cursor: Option<Cursor>,
    recent: Vec<u8>,
    recent_pos: usize,
    width: usize,
}

impl Iterator for Members {
    type Item = Result<Vec<u8>>;

    fn next(&mut self) -> Option<Result<Vec<u8>>> {
        loop {
            if let Some(c) = &mut self.cursor {
                match c.peek() {
                    Ok(Some(fp)) => {
                        let fp = fp.to_vec();
                        c.advance();
                        return Some(Ok(fp));
                    }
                    Ok(None) => self.cursor = None,
                    Err(e) => {
                        self.cursor = None;
                        self.runs.clear();
                        return Some(Err(e));
                    }
                }
            }
            match self.runs.pop() {
                Some(r) => self.cursor = Some(Cursor::new(r)),
                None => break,
            }
        }
        if self.recent_pos < self.recent.len() {
            let fp = self.recent[self.recent_pos..self.recent_pos + self.width].to_vec();
            self.recent_pos += self.width;
            return Some(Ok(fp));
        }
        None
    }
}

/// The error of a setting out of its range.
fn invalid_config(what: impl Into<String>) -> Error {
    Error::InvalidConfig { what: what.into() }
}

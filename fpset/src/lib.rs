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
//! - **files** (layouts in `src/format.rs`): `MANIFEST` lists the live runs and
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
//!   [`Error::FileDamaged`], and nothing is deleted. The clean manifest also records the
//!   log's length, so after a clean close (no append can follow it) a log cut or grown
//!   since, or with any bad record, is an [`Error::FileDamaged`] too, not a torn tail.
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
#![cfg_attr(docsrs, feature(doc_cfg))]

use std::path::Path;
use std::sync::{Arc, Mutex, MutexGuard};

use crate::format::{Manifest, RunEntry};
use bloomsled::Filter;

mod config;
mod dir;
mod error;
// The files' byte layouts (public only to the fuzz targets, feature `fuzzing`).
#[cfg(feature = "fuzzing")]
#[doc(hidden)]
pub mod format;
#[cfg(not(feature = "fuzzing"))]
#[allow(unreachable_pub)]
mod format;
mod members;
mod memtable;
mod merge;
mod open;
mod pread;
mod run;
mod tiers;
mod wal;

use dir::Folder;
use memtable::Memtable;
use run::Run;
use wal::Wal;

pub use config::{
    FingerprintSetConfig, DEFAULT_BLOCK_ITEMS, DEFAULT_EXPECTED_ITEMS, DEFAULT_MEMTABLE_ITEMS,
    DEFAULT_MERGE_FACTOR, DEFAULT_SET_FALSE_POSITIVE_RATE, MAX_MEMTABLE_ITEMS,
};
pub use error::{Error, Result};
pub use members::Members;
#[cfg(feature = "failpoints")]
#[cfg_attr(docsrs, doc(cfg(feature = "failpoints")))]
pub use merge::set_step_hook;

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
pub(crate) struct Opened {
    pub(crate) filter_rebuilt: bool,
    pub(crate) torn_bytes_cut: u64,
    pub(crate) leftovers_removed: u64,
}

/// An exact set of fixed-width fingerprints on disk, with a Bloom filter in memory (see
/// the [module docs](self)). `Sync`: share it between threads behind an `Arc`; a lookup
/// the filter answers takes no lock.
#[derive(Debug)]
pub struct FingerprintSet {
    pub(crate) filter: Filter,
    pub(crate) config: FingerprintSetConfig,
    pub(crate) folder: Folder,
    pub(crate) inner: Mutex<Inner>,
    pub(crate) opened: Opened,
}

#[derive(Debug)]
pub(crate) struct Inner {
    /// The manifest on disk (never clean while open).
    pub(crate) manifest: Manifest,
    /// The live runs, parallel to `manifest.runs` (oldest first).
    pub(crate) runs: Vec<Arc<Run>>,
    /// Indexes into `runs`, largest first: the order lookups check them in.
    pub(crate) lookup_order: Vec<usize>,
    pub(crate) memtable: Memtable,
    pub(crate) wal: WalSlot,
    pub(crate) scratch: Vec<u8>,
    pub(crate) block_reads: u64,
    pub(crate) false_positives: u64,
    pub(crate) flushes: u64,
    pub(crate) merges: u64,
    /// Set when a log append, a sync, a flush or a merge failed: the files are consistent
    /// (the manifest decides) but this handle's view may not be; every later call fails
    /// until reopen.
    pub(crate) broken: Option<String>,
}

/// The log, with a `Debug` that does not dump its buffer.
pub(crate) struct WalSlot(pub(crate) Wal);

impl std::fmt::Debug for WalSlot {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Wal(generation {})", self.0.generation)
    }
}

impl FingerprintSet {
    /// Bytes per fingerprint.
    ///
    /// ```
    /// # let dir = tempfile::tempdir()?;
    /// let set = bloomsled_fpset::FingerprintSet::open(dir.path(), 8, 100, 0.01)?;
    /// assert_eq!(set.width(), 8);
    /// # Ok::<(), bloomsled_fpset::Error>(())
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
    /// # Ok::<(), bloomsled_fpset::Error>(())
    /// ```
    pub fn path(&self) -> &Path {
        &self.folder.path
    }

    pub(crate) fn lock(&self) -> Result<MutexGuard<'_, Inner>> {
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

    pub(crate) fn check_width(&self, fp: &[u8]) -> Result<()> {
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
    /// assert!(matches!(set.insert(b"abc"), Err(bloomsled_fpset::Error::KeyWidth { expected: 4, got: 3 })));
    /// # Ok::<(), bloomsled_fpset::Error>(())
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
    /// # Ok::<(), bloomsled_fpset::Error>(())
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

    pub(crate) fn insert_locked(&self, inner: &mut Inner, fp: &[u8]) -> Result<bool> {
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
    /// # Ok::<(), bloomsled_fpset::Error>(())
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
    /// # Ok::<(), bloomsled_fpset::Error>(())
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
    /// # Ok::<(), bloomsled_fpset::Error>(())
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
    /// # Ok::<(), bloomsled_fpset::Error>(())
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
    /// # Ok::<(), bloomsled_fpset::Error>(())
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
    /// # Ok::<(), bloomsled_fpset::Error>(())
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

    /// Closes cleanly: makes every member durable, saves the filter and marks the
    /// manifest clean, recording the log's length, so the next open loads the filter
    /// instead of rebuilding it, and refuses a log cut (or grown) since as
    /// [`Error::FileDamaged`] instead of dropping its last members as a torn tail. (A set
    /// dropped without `close` keeps what was synced; its next open rebuilds the filter
    /// and cuts a torn log tail.)
    ///
    /// ```
    /// # let dir = tempfile::tempdir()?;
    /// let set = bloomsled_fpset::FingerprintSet::open(dir.path(), 1, 100, 0.01)?;
    /// set.insert(b"a")?;
    /// set.close()?;
    /// let set = bloomsled_fpset::FingerprintSet::open(dir.path(), 1, 100, 0.01)?;
    /// assert!(!set.stats().filter_rebuilt);
    /// assert!(set.contains(b"a")?);
    /// # Ok::<(), bloomsled_fpset::Error>(())
    /// ```
    pub fn close(self) -> Result<()> {
        let mut inner = self.lock()?;
        inner.wal.0.sync()?;
        let (len, crc) = self.folder.save_filter(&self.filter)?;
        let mut m = inner.manifest.clone();
        m.clean = true;
        m.filter_len = len;
        m.filter_crc = crc;
        // Synced above: the log's length on disk, which the next open requires exactly.
        m.clean_wal_len = Some(inner.wal.0.len());
        self.folder.write_manifest(&m)?;
        inner.manifest = m;
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

    /// Keeps the runs largest first, the manifest's list and the open runs alike: the
    /// order `tiers::merge_due` reads (it decides nothing else: members have no age).
    fn sort_runs(&mut self) {
        let mut pairs: Vec<(RunEntry, Arc<Run>)> = self
            .manifest
            .runs
            .drain(..)
            .zip(self.runs.drain(..))
            .collect();
        pairs.sort_by_key(|p| std::cmp::Reverse(p.0.count));
        for (entry, run) in pairs {
            self.manifest.runs.push(entry);
            self.runs.push(run);
        }
        self.order_runs();
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

/// Removes a file the manifest no longer lists; a failure only leaves a leftover that the
/// next open removes.
pub(crate) fn remove_quietly(path: &Path) {
    if let Err(e) = std::fs::remove_file(path) {
        log::warn!(
            "bloomsled: cannot remove {}: {e} (removed at next open)",
            path.display()
        );
    }
}

/// The README's example, compiled as a doc test.
#[doc = include_str!("../README.md")]
#[cfg(doctest)]
pub struct ReadmeDoctests;

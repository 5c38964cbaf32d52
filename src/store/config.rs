//! `Config`: sled's settings plus the filter's.

use std::path::{Path, PathBuf};
use std::time::Duration;

use sled::Mode;

use super::repair::log_reads::{check_log_reads, recheck_log_reads};
use super::Db;
use crate::error::{Error, Result};
use crate::filter::{FilterConfig, FilterMode};
use crate::format;
use crate::persist::RecoveryPolicy;

/// The smallest page cache sled starts with (a smaller one fails sled's assertion).
const MIN_CACHE_CAPACITY: u64 = 256;

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
#[derive(Debug, Clone)]
pub struct Config {
    pub(crate) sled: sled::Config,
    pub(crate) filter: FilterConfig,
    pub(crate) path: PathBuf,
    pub(crate) temporary: bool,
    pub(crate) recovery: RecoveryPolicy,
    pub(crate) background_recovery: bool,
    pub(crate) crash_journal: bool,
    pub(crate) snapshot_every_writes: u64,
    pub(crate) snapshot_interval: Option<Duration>,
    pub(crate) page_size: u32,
    /// `None`: each tree keeps the mode it was created in (plain for new trees).
    pub(crate) filter_mode: Option<FilterMode>,
    pub(crate) auto_rebuild: bool,
    pub(crate) rebuild_fpr: Option<f64>,
    /// How much larger than its keys a growing tree's rebuilt filter is.
    /// `None`: [`Growth::DEFAULT`](crate::store::policy::Growth::DEFAULT).
    pub(crate) growth_factor: Option<f64>,
    /// False positives each tree remembers (0: none; `None`: in proportion to its filter,
    /// up to [`DEFAULT_FALSE_POSITIVE_MEMORY`]).
    pub(crate) false_positive_memory: Option<usize>,
    /// Record every open tree's and window's metrics this often (feature `metrics`).
    #[cfg(feature = "metrics")]
    pub(crate) metrics_interval: Option<Duration>,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            sled: sled::Config::default(),
            filter: FilterConfig::growing(),
            // sled's default directory.
            path: PathBuf::from("default.sled"),
            temporary: false,
            recovery: RecoveryPolicy::Repair,
            background_recovery: true,
            crash_journal: true,
            snapshot_every_writes: 0,
            snapshot_interval: None,
            page_size: format::DEFAULT_PAGE_SIZE,
            filter_mode: None,
            auto_rebuild: true,
            rebuild_fpr: None,
            growth_factor: None,
            false_positive_memory: None,
            #[cfg(feature = "metrics")]
            metrics_interval: None,
        }
    }
}

impl Config {
    /// Defaults: sled's defaults, filters that start small and grow with each tree's keys
    /// at a 0.1% false-positive rate
    /// ([`crate::DEFAULT_FALSE_POSITIVE_RATE`]).
    pub fn new() -> Config {
        Config::default()
    }

    /// Directory of the database.
    pub fn path<P: AsRef<Path>>(mut self, path: P) -> Config {
        // sled's `path` panics on a config whose settings are shared with a clone (it
        // unwraps `Arc::get_mut`), e.g. `config.clone().path(..)`: set it on a fresh copy.
        self.sled = unshared(&self.sled).path(&path);
        self.path = path.as_ref().to_path_buf();
        self
    }

    /// What to do at open when a tree's snapshot cannot be trusted (corrupt, truncated,
    /// foreign, future version, or stale after a crash): [`RecoveryPolicy::Repair`] (default)
    /// rebuilds the filter from the keys; [`RecoveryPolicy::Strict`] returns
    /// [`Error::SnapshotRejected`] naming what failed.
    pub fn recovery(mut self, recovery: RecoveryPolicy) -> Config {
        self.recovery = recovery;
        self
    }

    /// Keep a crash journal per tree (`true`, the default): each write appends its key's
    /// hash, before sled stores it, to a file mapped in memory (no system call, no fsync).
    /// After a process crash (`kill -9`, a panic, an OOM kill) in the same boot of the
    /// machine, `open` replays the journals over the last snapshot and serves from the real
    /// filter at once, instead of rebuilding it from a scan of every key; after a reboot or
    /// power loss they are not trusted and the filter is rebuilt as without them
    /// (see `docs/persistence.md`). Linux only (it needs the kernel's boot id); elsewhere
    /// this setting changes nothing. `false` saves about one page-cache store per write
    /// and 16 MiB (sparse) of files per tree.
    ///
    /// ```
    /// # let dir = tempfile::tempdir()?;
    /// let db = bloomsled::Config::new()
    ///     .path(dir.path())
    ///     .crash_journal(false)
    ///     .open()?;
    /// db.insert("k", "v")?;
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn crash_journal(mut self, on: bool) -> Config {
        self.crash_journal = on;
        self
    }

    /// Where a tree whose snapshot is not trusted ([`RecoveryPolicy::Repair`]) rebuilds its
    /// filter: in the background (`true`, the default) or before `open`/`open_tree`
    /// returns (`false`, for callers who prefer to wait).
    ///
    /// In the background, the tree serves at once and correctly: until its filter is back,
    /// every lookup goes to sled (the filter says "maybe"), and writes keep the filter being
    /// built exact. [`Tree::wait_for_filter`](crate::Tree::wait_for_filter) waits for it;
    /// [`crate::RecoveryReport::rebuilding`] and [`crate::Stats`] show the progress.
    ///
    /// ```
    /// # let dir = tempfile::tempdir()?;
    /// let db = bloomsled::Config::new()
    ///     .path(dir.path())
    ///     .background_recovery(false)
    ///     .open()?;
    /// assert!(db.stats().filter_in_use);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn background_recovery(mut self, on: bool) -> Config {
        self.background_recovery = on;
        self
    }

    /// Snapshot a tree automatically after every `n` writes to it (0, the default: off).
    ///
    /// Snapshots are always written when the last handle to a tree is dropped. After a
    /// crash, a tree written since its last snapshot is rebuilt from its keys whatever this
    /// setting, so periodic snapshots pay off for read-mostly trees: a crash during a quiet
    /// period then reloads instantly.
    pub fn snapshot_every_writes(mut self, n: u64) -> Config {
        self.snapshot_every_writes = n;
        self
    }

    /// Snapshot every tree written since its last snapshot every `interval`, from a
    /// background thread (off unless set). See [`Config::snapshot_every_writes`] for when
    /// this pays off.
    pub fn snapshot_interval(mut self, interval: Duration) -> Config {
        self.snapshot_interval = Some(interval);
        self
    }

    /// Record the metrics of every open tree and window (see [`crate::telemetry`]) through
    /// the `metrics` facade every `interval`, from a background thread (off unless set;
    /// [`crate::Db::record_metrics`] records on demand, e.g. when scraped). The lookup
    /// path is untouched either way: the thread reads the counters lookups keep anyway.
    ///
    /// ```
    /// # use std::time::Duration;
    /// let db = bloomsled::Config::new()
    ///     .temporary(true)
    ///     .metrics_interval(Duration::from_secs(10))
    ///     .open()?;
    /// # Ok::<(), bloomsled::Error>(())
    /// ```
    #[cfg_attr(docsrs, doc(cfg(feature = "metrics")))]
    #[cfg(feature = "metrics")]
    pub fn metrics_interval(mut self, interval: Duration) -> Config {
        self.metrics_interval = Some(interval);
        self
    }

    /// Bytes of bitset per CRC-checked snapshot page: a multiple of 64 from 64 B to 64 MiB
    /// (default 4 KiB). Pages of zeros are not stored, so smaller pages keep sparse filters
    /// small on disk, and locate damage more precisely.
    pub fn snapshot_page_size(mut self, bytes: u32) -> Config {
        self.page_size = bytes;
        self
    }

    /// Counting mode (off by default): each filter bit gets a 4-bit saturating counter, so
    /// removing a key clears its bits and the filter stays as accurate as the day it was
    /// built, however much is deleted. Lookups cost the same as in plain mode; filter memory
    /// is 5× (bits plus counters), and batches are applied as sled transactions so that
    /// every key is counted exactly once.
    ///
    /// A tree's record stores its mode, and an open that does not call `counting` keeps it.
    /// Opening a tree with the other mode set explicitly rebuilds its filter from the keys
    /// (or, with [`RecoveryPolicy::Strict`], is an error).
    ///
    /// ```
    /// let db = bloomsled::Config::new().temporary(true).counting(true).open()?;
    /// db.insert("k", "v")?;
    /// db.remove("k")?;
    /// assert!(!db.may_contain("k")); // removed from the filter too
    /// # Ok::<(), bloomsled::Error>(())
    /// ```
    pub fn counting(mut self, on: bool) -> Config {
        self.filter_mode = Some(if on {
            FilterMode::Counting
        } else {
            FilterMode::Plain
        });
        self
    }

    /// How many false positives each tree (and so each window generation) remembers (0
    /// turns the memory off). Unset, each tree remembers one per 128 keys its filter is
    /// sized for, at least 7 and at most [`DEFAULT_FALSE_POSITIVE_MEMORY`], so a small
    /// tree's memory is a cache line or two; set, every tree gets `entries`.
    ///
    /// A key the filter passes and the store does not hold is remembered, by two 64-bit
    /// hashes, in a small table (16 bytes an entry; CLOCK eviction): its next lookups answer
    /// "absent" without the store, until a write of the key takes it out, which every write
    /// does before the store holds the key. A flood that repeats a few missing ids (bots
    /// retrying, or an attacker replaying false positives found by probing) then costs one
    /// store read per id, not one per request. Keys the filter rejects never reach it, and
    /// [`crate::Stats::false_positives_remembered`] counts the lookups it answered.
    ///
    /// ```
    /// let db = bloomsled::Config::new().temporary(true).false_positive_memory(0).open()?;
    /// assert_eq!(db.stats().false_positive_memory, 0);
    /// # Ok::<(), bloomsled::Error>(())
    /// ```
    pub fn false_positive_memory(mut self, entries: usize) -> Config {
        self.false_positive_memory = Some(entries);
        self
    }

    /// Rebuild and resize filters automatically, in a background thread, while reads and
    /// writes go on (default: on). A tree's filter is rebuilt from its keys when its live
    /// keys pass its capacity (the new filter is sized up, doubling), or when removed keys
    /// and growth push the modelled false-positive rate above
    /// [`Config::rebuild_false_positive_rate`]. `Tree::rebuild` does the same on demand.
    pub fn auto_rebuild(mut self, on: bool) -> Config {
        self.auto_rebuild = on;
        self
    }

    /// The modelled false-positive rate, in (0, 1), above which a filter is rebuilt
    /// automatically (default: twice the target rate).
    pub fn rebuild_false_positive_rate(mut self, p: f64) -> Config {
        self.rebuild_fpr = Some(p);
        self
    }

    /// How much room a growing tree's rebuilt filter leaves, from 1.1 to 16: a tree that no
    /// setting sizes is rebuilt once its filter reaches its rate, into a filter for `factor`
    /// times its keys. A smaller factor keeps the filter closer to what its keys need (at
    /// most `factor` times it) for more rebuilds, each a background scan of the tree (about
    /// `factor / (factor - 1)` times its keys in all while it grows); a larger one the
    /// reverse. Unset, [`DEFAULT_GROWTH_FACTOR`] (2) below 1,048,576 keys, where a filter
    /// is small whatever its slack, and [`DEFAULT_LARGE_GROWTH_FACTOR`] (1.25) from there;
    /// set, `factor` at every size. Trees sized with `expected_items` double, as before.
    ///
    /// ```
    /// let db = bloomsled::Config::new().temporary(true).growth_factor(1.5).open()?;
    /// # Ok::<(), bloomsled::Error>(())
    /// ```
    pub fn growth_factor(mut self, factor: f64) -> Config {
        self.growth_factor = Some(factor);
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
        self.temporary = to;
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

    /// sled: size of sled's log segments (I/O buffers) in bytes: a power of two from 256 B
    /// to 16 MiB (default 512 KiB; sled documents it as a testing knob). Out of range,
    /// [`Config::open`] returns [`Error::Unsupported`], as sled does.
    pub fn segment_size(mut self, bytes: usize) -> Config {
        self.sled = self.sled.segment_size(bytes);
        self
    }

    /// sled: compress stored pages with zstd (default off). Needs bloomsled's `compression`
    /// cargo feature (sled's feature of that name); without it [`Config::open`] returns
    /// [`Error::Unsupported`], as sled does.
    ///
    /// ```
    /// let opened = bloomsled::Config::new().temporary(true).use_compression(true).open();
    /// if cfg!(feature = "compression") {
    ///     assert!(opened.is_ok());
    /// } else {
    ///     assert!(matches!(opened, Err(bloomsled::Error::Unsupported(_))));
    /// }
    /// ```
    pub fn use_compression(mut self, to: bool) -> Config {
        self.sled = self.sled.use_compression(to);
        self
    }

    /// sled: the zstd compression level used with [`Config::use_compression`], 1 to 22
    /// (default 5; 20 and above are zstd's "ultra" levels). Out of range,
    /// [`Config::open`] returns [`Error::Unsupported`], as sled does.
    pub fn compression_factor(mut self, level: i32) -> Config {
        self.sled = self.sled.compression_factor(level);
        self
    }

    /// sled: the error sled's background flusher hit, if any, for a database opened from
    /// this config (sled's `Config::global_error`). After one, sled refuses writes.
    pub fn global_error(&self) -> Result<()> {
        Ok(self.sled.global_error()?)
    }

    /// The filter settings, as set by `Config::filter` and the sizing setters.
    ///
    /// ```
    /// let cfg = bloomsled::Config::new().expected_items(5_000);
    /// assert_eq!(cfg.get_filter().get_expected_items(), 5_000);
    /// ```
    pub fn get_filter(&self) -> &FilterConfig {
        &self.filter
    }

    /// The errors `open` returns for invalid settings, before anything touches the disk.
    pub(crate) fn validate(&self) -> Result<()> {
        self.filter.shape()?;
        // sled asserts this when it starts (a panic); its other limits it reports itself.
        if self.sled.cache_capacity < MIN_CACHE_CAPACITY {
            return Err(Error::config(format!(
                "cache_capacity must be at least {MIN_CACHE_CAPACITY} bytes (sled's minimum), \
                 got {}",
                self.sled.cache_capacity
            )));
        }
        if !(64..=64 << 20).contains(&self.page_size) || !self.page_size.is_multiple_of(64) {
            return Err(Error::config(format!(
                "snapshot_page_size must be a multiple of 64 from 64 to {}, got {}",
                64 << 20,
                self.page_size
            )));
        }
        if let Some(p) = self.rebuild_fpr {
            if !(p > 0.0 && p < 1.0) {
                return Err(Error::config(format!(
                    "rebuild_false_positive_rate must be strictly between 0 and 1, got {p}"
                )));
            }
        }
        if let Some(factor) = self.growth_factor.filter(|f| !(1.1..=16.0).contains(f)) {
            return Err(Error::config(format!(
                "growth_factor must be from 1.1 to 16, got {factor}"
            )));
        }
        #[cfg(feature = "metrics")]
        if self.metrics_interval == Some(Duration::ZERO) {
            return Err(Error::config("metrics_interval must be longer than zero"));
        }
        if self.snapshot_interval == Some(Duration::ZERO) {
            return Err(Error::config("snapshot_interval must be longer than zero"));
        }
        Ok(())
    }

    /// Checks the settings, opens sled, and loads (or rebuilds) each tree's filter.
    ///
    /// A database whose lock is held is retried for up to half a second before
    /// [`Error::Io`] is returned: sled's I/O threads let go of a closed database's file a
    /// moment after its last handle is dropped, so a reopen right after a close in the same
    /// process could otherwise fail (sled's own test suite blocks on the lock for this).
    pub fn open(&self) -> Result<Db> {
        Db::open_with(self.clone())
    }

    /// Opens sled, retrying while its file lock is held (see [`Config::open`]).
    pub(crate) fn open_sled(&self) -> Result<sled::Db> {
        let mut waited = Duration::ZERO;
        let mut pause = Duration::from_millis(1);
        loop {
            // sled takes a failed read of its log at open for its end: read it first
            // (`store/repair/log_reads.rs`), and again once sled holds it.
            if !self.temporary {
                check_log_reads(&self.path, self.sled.segment_size).map_err(Error::Io)?;
            }
            match self.sled.open() {
                Err(sled::Error::Io(e)) if lock_held(&e) && waited < LOCK_WAIT => {
                    log::debug!("bloomsled: {e}; retrying");
                    std::thread::sleep(pause);
                    waited += pause;
                    pause = (pause * 2)
                        .min(LOCK_WAIT.saturating_sub(waited))
                        .max(Duration::from_millis(1));
                }
                // An I/O error names the store and the step (its kind kept).
                Err(sled::Error::Io(e)) => {
                    let what = format!("open of sled's store {}: {e}", self.path.display());
                    return Err(crate::error::Error::Io(std::io::Error::new(e.kind(), what)));
                }
                // A disk that failed sled's reads after the check's (a device that died
                // in between) fails the headers' reads now: the open fails instead of
                // serving what sled recovered, before any write of ours. sled's drop ends
                // in an fsync it unwraps: caught.
                Ok(db) if !self.temporary => {
                    let Err(e) = recheck_log_reads(&self.path, self.sled.segment_size) else {
                        return Ok(db);
                    };
                    let dropped = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                        drop(db);
                    }));
                    if dropped.is_err() {
                        log::error!("bloomsled: sled's fsync at drop failed (it panics): caught");
                    }
                    return Err(Error::Io(e));
                }
                opened => return Ok(opened?),
            }
        }
    }
}

/// The most false positives a tree remembers unless [`Config::false_positive_memory`] says
/// otherwise: 4,096 (rounded up to whole sets of 7; about 75 KiB), for a filter sized for
/// 512K keys or more; smaller filters remember fewer.
///
/// ```
/// assert_eq!(bloomsled::DEFAULT_FALSE_POSITIVE_MEMORY, 4_096);
/// ```
pub const DEFAULT_FALSE_POSITIVE_MEMORY: usize = 4_096;

/// How much larger than its keys a growing tree's rebuilt filter is below 1,048,576 keys,
/// unless [`Config::growth_factor`] says otherwise.
///
/// ```
/// assert_eq!(bloomsled::DEFAULT_GROWTH_FACTOR, 2.0);
/// ```
pub const DEFAULT_GROWTH_FACTOR: f64 = 2.0;

/// How much larger than its keys a growing tree's rebuilt filter is from 1,048,576 keys,
/// unless [`Config::growth_factor`] says otherwise: a large tree's filter stays within a
/// quarter of what its keys need, for a few more background scans while it grows (about
/// five times its keys in all, against twice for doubling).
///
/// ```
/// assert_eq!(bloomsled::DEFAULT_LARGE_GROWTH_FACTOR, 1.25);
/// ```
pub const DEFAULT_LARGE_GROWTH_FACTOR: f64 = 1.25;

/// How long [`Config::open`] waits for a held database lock.
const LOCK_WAIT: Duration = Duration::from_millis(500);

/// Whether sled failed to open because another handle holds the database's lock.
fn lock_held(e: &std::io::Error) -> bool {
    e.kind() == std::io::ErrorKind::WouldBlock || e.to_string().contains("could not acquire lock")
}

/// A sled config with the same settings as `c` that shares nothing with it.
fn unshared(c: &sled::Config) -> sled::Config {
    sled::Config::new()
        .cache_capacity(c.cache_capacity)
        .flush_every_ms(c.flush_every_ms)
        .segment_size(c.segment_size)
        .create_new(c.create_new)
        .mode(c.mode)
        .temporary(c.temporary)
        .use_compression(c.use_compression)
        .compression_factor(c.compression_factor)
        .print_profile_on_drop(c.print_profile_on_drop)
        .idgen_persist_interval(c.idgen_persist_interval)
}

pub(in crate::store) mod sizing;
pub use sizing::TreeConfig;

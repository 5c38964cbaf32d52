//! The filter's own methods on [`Tree`]: what sled's `Tree` does not have — the filter's
//! bits and statistics, rebuilds, snapshots, recovery and verification.

use std::sync::atomic::Ordering;

use std::time::Duration;

use super::rebuild::{Rebuild, RebuildReport};
use super::recovery;
use super::Tree;
use crate::error::Result;
use crate::filter::Filter;
use crate::persist::{RecoveryReport, SnapshotInfo, VerifyReport};
use crate::stats::Stats;

impl Tree {
    /// An image of this tree's filter: a copy of its bits as they are now (probing offline, statistics,
    /// serialization with [`Filter::to_bytes`]). O(filter size). In counting mode these
    /// are the bits lookups read (a counter is non-zero exactly where its bit is set).
    ///
    /// # Examples
    ///
    /// ```
    /// # let db = bloomsled::Config::new().temporary(true).open()?;
    /// db.insert("k", "v")?;
    /// let filter = db.filter_image();
    /// assert!(filter.contains(b"k"));
    /// db.insert("later", "v")?;
    /// assert!(db.may_contain("later")); // the copy does not follow the tree
    /// # Ok::<(), bloomsled::Error>(())
    /// ```
    pub fn filter_image(&self) -> Filter {
        self.state.filters.enter().current().bits().clone()
    }

    /// Rebuilds the filter from the keys now, while reads and writes go on, and returns
    /// what it did. The new filter is sized for the keys (doubling the capacity as often as
    /// needed, never below the configured one); writes during the scan reach both filters
    /// and the new one replaces the old atomically, then is snapshotted. If an automatic
    /// rebuild is running, this waits for it, then rebuilds again.
    ///
    /// Memory: while it runs, the old and the new filter both exist. The old one is kept
    /// afterwards and reused by a later rebuild of the same size, so a tree holds at most
    /// one filter per size it has had (sizes double, so all of them together take less
    /// than twice the largest) plus one spare.
    ///
    /// # Examples
    ///
    /// ```
    /// let db = bloomsled::Config::new().temporary(true).expected_items(100).open()?;
    /// for i in 0..1000u32 {
    ///     db.insert(i.to_be_bytes(), "")?;
    /// }
    /// db.remove(7u32.to_be_bytes())?;
    /// let r = db.rebuild()?;
    /// assert_eq!(r.keys_scanned, 999);
    /// assert!(r.capacity >= 999);
    /// # Ok::<(), bloomsled::Error>(())
    /// ```
    pub fn rebuild(&self) -> Result<RebuildReport> {
        Rebuild(&self.state).now(false)
    }

    /// Blocks until no rebuild of this tree is running or pending.
    ///
    /// # Examples
    ///
    /// ```
    /// let db = bloomsled::Config::new().temporary(true).expected_items(100).open()?;
    /// // Far past the expected 100 keys: the filter is resized in the background.
    /// for i in 0..20_000u32 {
    ///     db.insert(i.to_be_bytes(), "")?;
    /// }
    /// db.wait_for_rebuild();
    /// assert!(!db.stats().rebuild_in_progress);
    /// assert!((0..20_000u32).all(|i| db.may_contain(i.to_be_bytes())));
    /// # Ok::<(), bloomsled::Error>(())
    /// ```
    pub fn wait_for_rebuild(&self) {
        Rebuild(&self.state).wait()
    }

    /// Writes a snapshot of this tree's filter now, so the next open loads it without a scan
    /// (until the tree is written again). Writers are not held off.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// let db = bloomsled::open("my_db")?;
    /// db.insert("k", "v")?;
    /// let info = db.snapshot()?;
    /// println!("generation {} written, {} bytes", info.generation, info.bytes);
    /// # Ok::<(), bloomsled::Error>(())
    /// ```
    ///
    /// While the filter is being rebuilt after open (see [`Tree::wait_for_filter`]), this
    /// waits for it first: the stand-in that answers meanwhile is never written.
    pub fn snapshot(&self) -> Result<SnapshotInfo> {
        self.state.recovery.wait(None)?;
        self.state.snapshot()
    }

    /// How this tree's filter was obtained when it was opened: loaded from its snapshot, or
    /// rebuilt from a key scan and why. While the rebuild runs in the background,
    /// [`RecoveryReport::rebuilding`] says how far it has come; once it is done, the report
    /// counts the keys it scanned and the time from open to the filter being in use.
    ///
    /// # Examples
    ///
    /// ```
    /// let db = bloomsled::Config::new().temporary(true).open()?;
    /// let r = db.recovery_report();
    /// assert!(r.rebuilding.is_none());
    /// # Ok::<(), bloomsled::Error>(())
    /// ```
    pub fn recovery_report(&self) -> RecoveryReport {
        recovery::report(&self.state)
    }

    /// Waits up to `timeout` for this tree's filter to be in use: `Ok(true)` once it is (at
    /// once, unless the tree is being rebuilt after open, see
    /// [`Config::background_recovery`](crate::Config::background_recovery)), `Ok(false)` if
    /// the time ran out first. Until then the tree answers correctly, every lookup going to
    /// sled; a service that wants the filter's speed before it takes traffic waits here.
    /// Fails if the rebuild ended without a filter (the tree was closed, or an I/O error,
    /// which is logged); the tree then keeps answering from sled until
    /// [`Tree::rebuild`] succeeds.
    ///
    /// # Examples
    ///
    /// ```
    /// # let dir = tempfile::tempdir()?;
    /// let db = bloomsled::Config::new().path(dir.path()).open()?;
    /// assert!(db.wait_for_filter(std::time::Duration::from_secs(60))?);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn wait_for_filter(&self, timeout: Duration) -> Result<bool> {
        self.state.recovery.wait(Some(timeout))
    }

    /// Checks the tree end to end: every CRC of its snapshot file, and every stored key
    /// against the filter (O(keys): it scans the tree).
    ///
    /// # Examples
    ///
    /// ```
    /// # let dir = tempfile::tempdir()?;
    /// let db = bloomsled::Config::new().path(dir.path()).open()?;
    /// db.insert("k", "v")?;
    /// let report = db.verify()?;
    /// assert!(report.is_ok());
    /// assert_eq!(report.keys_checked, 1);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn verify(&self) -> Result<VerifyReport> {
        let mut keys_checked = 0;
        let mut false_negatives = 0;
        for key in self.inner.iter().keys() {
            let key = key?;
            keys_checked += 1;
            if !self.state.filters.contains(&key) {
                false_negatives += 1;
                log::error!(
                    "bloomsled: tree {:?}: stored key {:?} denied by the filter",
                    self.state.report.tree,
                    String::from_utf8_lossy(&key)
                );
            }
        }
        Ok(VerifyReport {
            keys_checked,
            false_negatives,
            snapshot: self
                .state
                .persist
                .as_ref()
                .map(|p| p.verify(self.state.mode)),
        })
    }

    /// The file holding this tree's filter snapshot (`None` for a temporary database).
    ///
    /// # Examples
    ///
    /// ```
    /// # let dir = tempfile::tempdir()?;
    /// let temporary = bloomsled::Config::new().temporary(true).open()?;
    /// assert_eq!(temporary.filter_snapshot_path(), None);
    /// let db = bloomsled::Config::new().path(dir.path()).open()?;
    /// assert!(db.filter_snapshot_path().unwrap().starts_with(dir.path()));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn filter_snapshot_path(&self) -> Option<&std::path::Path> {
        self.state.persist.as_ref().map(|p| p.snapshot_path())
    }

    /// Renamed [`Tree::filter_snapshot_path`]: `Config::snapshot_path` is sled's (a no-op
    /// setting), this is bloomsled's filter file; one name, one meaning.
    #[deprecated(since = "0.2.0", note = "renamed `filter_snapshot_path`")]
    pub fn snapshot_path(&self) -> Option<&std::path::Path> {
        self.filter_snapshot_path()
    }

    /// Filter and lookup statistics. Reads every filter word: O(filter size).
    ///
    /// # Examples
    ///
    /// ```
    /// # let db = bloomsled::Config::new().temporary(true).open()?;
    /// db.insert("a", "1")?;
    /// db.insert("b", "2")?;
    /// let stats = db.stats();
    /// assert_eq!(stats.items, 2);
    /// assert!(stats.target_fpr > 0.0 && stats.memory_bytes > 0);
    /// # Ok::<(), bloomsled::Error>(())
    /// ```
    pub fn stats(&self) -> Stats {
        let s = &self.state;
        let gate = s.filters.enter();
        let current = gate.current();
        let f = current.bits();
        let (lookups, store_lookups_skipped) = s.counters.lookups_and_skipped();
        Stats {
            items: current.items(),
            capacity: f.capacity(),
            num_bits: f.num_bits(),
            num_hashes: f.num_hashes(),
            bits_per_key: f.bits_per_key(),
            fill_ratio: f.fill_ratio(),
            estimated_fpr: f.estimated_fpr(),
            target_fpr: f.target_fpr(),
            lookups,
            store_lookups_skipped,
            false_positives: s.counters.false_positives(),
            stale_entries: s.stale(),
            mode: s.mode,
            stuck_counters: current.stuck_counters(),
            rebuilds: s.rebuild.rebuilds.load(Ordering::Relaxed),
            resizes: s.rebuild.resizes.load(Ordering::Relaxed),
            rebuild_in_progress: s.rebuild.in_progress(),
            filter_in_use: s.recovery.is_ready(),
            rebuild_progress: recovery::progress(s),
            memory_bytes: current.memory_bytes(),
            allocated_bytes: s.filters.allocated_bytes(),
        }
    }
}

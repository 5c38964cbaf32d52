//! What a tree's filter holds now, on [`Tree`]: its statistics, and an image (a copy) of
//! its bits. Both read every filter word.

use std::sync::atomic::Ordering;

use super::Tree;
use crate::filter::Filter;
use crate::stats::Stats;
use crate::store::recovery;

impl Tree {
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
            false_positives_remembered: s.counters.remembered_total(),
            false_positive_memory: s.filters.memory().capacity(),
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
}

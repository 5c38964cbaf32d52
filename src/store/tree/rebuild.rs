//! Rebuilding a tree's filter on demand, on [`Tree`]: rebuild now, or wait for a rebuild
//! under way (the machinery is [`crate::store::rebuild`]'s).

use super::Tree;
use crate::error::Result;
use crate::store::rebuild::{Rebuild, RebuildReport};

impl Tree {
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

    /// Blocks until no rebuild of this tree is running or pending, and none is due: if keys
    /// written since the last rebuild call for an automatic resize that has not started
    /// yet (a batch that landed as a rebuild was ending), it starts it and waits for it
    /// too.
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
}

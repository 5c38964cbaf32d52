//! How a tree's filter came back at open, on [`Tree`]: the recovery report, and waiting
//! for a filter still being rebuilt after open (the machinery is [`crate::store::recovery`]'s).

use std::time::Duration;

use crate::error::Result;
use crate::persist::RecoveryReport;
use crate::store::recovery;
use crate::store::Tree;

impl Tree {
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
}

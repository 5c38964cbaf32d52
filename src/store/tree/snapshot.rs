//! A tree's filter snapshot, on [`Tree`]: write one now, and the file it is written to.

use super::Tree;
use crate::error::Result;
use crate::persist::SnapshotInfo;

impl Tree {
    /// Writes a snapshot of this tree's filter now, so the next open loads it without a scan
    /// (until the tree is written again). Writers are not held off.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// let db = bloomsled::open("my_db")?;
    /// db.insert("k", "v")?;
    /// let info = db.snapshot()?;
    /// println!("sequence {} written, {} bytes", info.sequence, info.bytes);
    /// # Ok::<(), bloomsled::Error>(())
    /// ```
    ///
    /// While the filter is being rebuilt after open (see [`Tree::wait_for_filter`]), this
    /// waits for it first: the stand-in that answers meanwhile is never written.
    pub fn snapshot(&self) -> Result<SnapshotInfo> {
        self.state.recovery.wait(None)?;
        self.state.snapshot()
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
}

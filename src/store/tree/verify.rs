//! Checking a tree end to end, on [`Tree`]: its snapshot file's CRCs, and every stored key
//! against the filter.

use super::Tree;
use crate::error::Result;
use crate::persist::VerifyReport;

impl Tree {
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
}

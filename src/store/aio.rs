//! Async forms of what can block on a local database (feature `tokio`): opening, closing,
//! opening a tree, rebuilding, snapshotting and waiting for a filter, each run on tokio's
//! blocking pool (`spawn_blocking`) so that no runtime worker waits on the disk, a scan or
//! a lock. Lookups stay synchronous: they are answered from memory in nanoseconds (or by
//! sled's cache), cheaper than any hand-off to another thread.
//! [`Tree::flush_async`] is sled's own, which already runs on sled's I/O thread.

use std::time::Duration;

use crate::blocking::off_the_runtime;
use crate::error::Result;
use crate::persist::SnapshotInfo;

use super::config::Config;
use super::db::Db;
use super::rebuild::RebuildReport;
use super::tree::Tree;

#[cfg_attr(docsrs, doc(cfg(feature = "tokio")))]
impl Config {
    /// [`Config::open`] on tokio's blocking pool: sled's open, the snapshot loads (or the
    /// start of a background rebuild) happen off the runtime's workers.
    ///
    /// # Examples
    ///
    /// ```
    /// # tokio::runtime::Runtime::new()?.block_on(async {
    /// # let dir = tempfile::tempdir()?;
    /// let db = bloomsled::Config::new().path(dir.path()).open_async().await?;
    /// db.insert("k", "v")?;
    /// assert!(db.contains_key("k")?); // lookups stay synchronous
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// # })?;
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub async fn open_async(&self) -> Result<Db> {
        let config = self.clone();
        off_the_runtime("Config::open_async", move || config.open()).await
    }
}

#[cfg_attr(docsrs, doc(cfg(feature = "tokio")))]
impl Db {
    /// [`Db::close`] on tokio's blocking pool: the closing snapshots, sled's flush and the
    /// wait for background threads (what dropping the last handle does) happen off the
    /// runtime's workers.
    ///
    /// # Examples
    ///
    /// ```
    /// # tokio::runtime::Runtime::new()?.block_on(async {
    /// # let dir = tempfile::tempdir()?;
    /// let db = bloomsled::Config::new().path(dir.path()).open_async().await?;
    /// db.insert("k", "v")?;
    /// db.close_async().await?;
    /// let db = bloomsled::Config::new().path(dir.path()).open_async().await?;
    /// assert!(db.recovery_report().loaded());
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// # })?;
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub async fn close_async(self) -> Result<()> {
        off_the_runtime("Db::close_async", move || self.close()).await
    }

    /// [`Db::open_tree`] on tokio's blocking pool (loading the tree's snapshot, or
    /// starting its rebuild, reads the disk).
    ///
    /// # Examples
    ///
    /// ```
    /// # tokio::runtime::Runtime::new()?.block_on(async {
    /// # let db = bloomsled::Config::new().temporary(true).open_async().await?;
    /// let users = db.open_tree_async("users").await?;
    /// users.insert("alice", "1")?;
    /// assert!(users.contains_key("alice")?);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// # })?;
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub async fn open_tree_async<V: AsRef<[u8]>>(&self, name: V) -> Result<Tree> {
        let (db, name) = (self.clone(), name.as_ref().to_vec());
        off_the_runtime("Db::open_tree_async", move || db.open_tree(name)).await
    }
}

#[cfg_attr(docsrs, doc(cfg(feature = "tokio")))]
impl Tree {
    /// [`Tree::rebuild`] on tokio's blocking pool: the key scan runs off the runtime's
    /// workers, and lookups keep being answered meanwhile.
    ///
    /// # Examples
    ///
    /// ```
    /// # tokio::runtime::Runtime::new()?.block_on(async {
    /// let db = bloomsled::Config::new().temporary(true).expected_items(100).open_async().await?;
    /// for i in 0..1000u32 {
    ///     db.insert(i.to_be_bytes(), "")?;
    /// }
    /// let r = db.rebuild_async().await?;
    /// assert_eq!(r.keys_scanned, 1000);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// # })?;
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub async fn rebuild_async(&self) -> Result<RebuildReport> {
        let tree = self.clone();
        off_the_runtime("Tree::rebuild_async", move || tree.rebuild()).await
    }

    /// [`Tree::wait_for_filter`] on tokio's blocking pool: `Ok(true)` once the tree's
    /// filter is in use, `Ok(false)` if `timeout` ran out first. A service awaits this
    /// before it takes traffic, without parking a runtime worker.
    ///
    /// # Examples
    ///
    /// ```
    /// # tokio::runtime::Runtime::new()?.block_on(async {
    /// # let dir = tempfile::tempdir()?;
    /// let db = bloomsled::Config::new().path(dir.path()).open_async().await?;
    /// assert!(db.wait_for_filter_async(std::time::Duration::from_secs(60)).await?);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// # })?;
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub async fn wait_for_filter_async(&self, timeout: Duration) -> Result<bool> {
        let tree = self.clone();
        off_the_runtime("Tree::wait_for_filter_async", move || {
            tree.wait_for_filter(timeout)
        })
        .await
    }

    /// [`Tree::snapshot`] on tokio's blocking pool (it writes and fsyncs a file).
    ///
    /// # Examples
    ///
    /// ```
    /// # tokio::runtime::Runtime::new()?.block_on(async {
    /// # let dir = tempfile::tempdir()?;
    /// let db = bloomsled::Config::new().path(dir.path()).open_async().await?;
    /// db.insert("k", "v")?;
    /// let info = db.snapshot_async().await?;
    /// assert!(info.bytes > 0);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// # })?;
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub async fn snapshot_async(&self) -> Result<SnapshotInfo> {
        let tree = self.clone();
        off_the_runtime("Tree::snapshot_async", move || tree.snapshot()).await
    }
}

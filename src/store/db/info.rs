//! sled's database-wide facts, passed through: ids, checksum, size on disk, space amplification.

use crate::error::Result;

use crate::store::db::Db;

impl Db {
    /// A monotonic id, unique across restarts (sled's `generate_id`).
    ///
    /// # Examples
    ///
    /// ```
    /// # let db = bloomsled::Config::new().temporary(true).open()?;
    /// let a = db.generate_id()?;
    /// let b = db.generate_id()?;
    /// assert!(b > a);
    /// # Ok::<(), bloomsled::Error>(())
    /// ```
    pub fn generate_id(&self) -> Result<u64> {
        Ok(self.inner.generate_id()?)
    }

    /// CRC32 of all keys and values of all trees, in sled's definition (O(n)).
    ///
    /// # Examples
    ///
    /// ```
    /// # let db = bloomsled::Config::new().temporary(true).open()?;
    /// let other = bloomsled::Config::new().temporary(true).open()?;
    /// for d in [&db, &other] {
    ///     d.open_tree("users")?.insert("alice", "1")?;
    /// }
    /// assert_eq!(db.checksum()?, other.checksum()?);
    /// other.insert("k", "v")?;
    /// assert_ne!(db.checksum()?, other.checksum()?);
    /// # Ok::<(), bloomsled::Error>(())
    /// ```
    pub fn checksum(&self) -> Result<u32> {
        Ok(self.inner.checksum()?)
    }

    /// Bytes the database occupies on disk.
    ///
    /// # Examples
    ///
    /// ```
    /// # let dir = tempfile::tempdir()?;
    /// let db = bloomsled::Config::new().path(dir.path()).open()?;
    /// db.insert("k", vec![0u8; 4096])?;
    /// db.flush()?;
    /// assert!(db.size_on_disk()? > 4096);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn size_on_disk(&self) -> Result<u64> {
        Ok(self.inner.size_on_disk()?)
    }

    /// Space amplification reported by sled.
    ///
    /// # Examples
    ///
    /// ```
    /// # let dir = tempfile::tempdir()?;
    /// let db = bloomsled::Config::new().path(dir.path()).open()?;
    /// db.insert("k", vec![0u8; 4096])?;
    /// db.flush()?;
    /// assert!(db.space_amplification()? > 0.0);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn space_amplification(&self) -> Result<f64> {
        Ok(self.inner.space_amplification()?)
    }
}

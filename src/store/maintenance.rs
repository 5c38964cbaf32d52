//! Reading what a database's snapshots say, for tools that open databases they did not
//! create (the `bloomsled` CLI's `rebuild` and `load`).
//!
//! A `Config` is database-wide and a new filter takes its shape from it, so a tool that
//! opens someone else's database with the default settings and rebuilds a filter turns a
//! counting filter into a plain one and a 10M-item filter into a 1M-item one. The header
//! of a tree's snapshot records the mode and the shape; [`stored_filter`] reads it (only
//! the header, whose CRC is checked: it survives a damaged page) and
//! [`StoredFilter::config`] gives the settings that rebuild the same filter.

use std::fs::File;
use std::io::Read;
use std::path::Path;

use super::Config;
use crate::filter::FilterMode;
use crate::format;
use crate::persist::TreeFiles;

/// The mode and shape of a tree's filter, as its snapshot header records them.
#[derive(Debug, Clone, Copy, PartialEq)]
#[non_exhaustive]
pub struct StoredFilter {
    /// Plain or counting.
    pub mode: FilterMode,
    /// Items the filter is sized for.
    pub capacity: u64,
    /// Bits of the filter.
    pub num_bits: u64,
    /// Bits set per key.
    pub num_hashes: u32,
    /// Hash seed.
    pub seed: u64,
    /// Snapshot payload bytes per page.
    pub page_size: u32,
}

impl StoredFilter {
    /// Settings under which a new filter (at open or in a rebuild) has this one's mode,
    /// capacity, bits per key, number of hashes, seed and snapshot page size. Set the path
    /// (and anything else) on the result.
    ///
    /// ```
    /// # let dir = tempfile::tempdir()?;
    /// let db = bloomsled::Config::new()
    ///     .path(dir.path())
    ///     .counting(true)
    ///     .expected_items(5_000)
    ///     .open()?;
    /// db.insert("k", "v")?;
    /// db.close()?;
    /// let stored = bloomsled::stored_filter(dir.path(), b"__sled__default").unwrap();
    /// assert_eq!(stored.mode, bloomsled::FilterMode::Counting);
    /// assert_eq!(stored.capacity, 5_000);
    /// // Rebuilding under these settings keeps the mode and the size.
    /// let db = stored.config().path(dir.path()).open()?;
    /// let report = db.rebuild()?;
    /// assert_eq!(report.capacity, 5_000);
    /// assert_eq!(db.stats().mode, bloomsled::FilterMode::Counting);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn config(&self) -> Config {
        let capacity = self.capacity.max(1);
        Config::new()
            .counting(self.mode == FilterMode::Counting)
            .expected_items(capacity)
            .bits_per_key((self.num_bits as f64 / capacity as f64).max(1.0))
            .num_hashes(self.num_hashes)
            .hash_seed(self.seed)
            .snapshot_page_size(self.page_size)
    }
}

/// What the snapshot header of tree `tree_name` of the database at `db_dir` records, or
/// `None` if there is no snapshot or its header is damaged or of an unknown kind. Only the
/// header is read.
pub fn stored_filter(db_dir: &Path, tree_name: &[u8]) -> Option<StoredFilter> {
    let files = TreeFiles::new(db_dir, tree_name);
    let mut buf = vec![0u8; format::HEADER_LEN];
    File::open(files.snapshot_path())
        .ok()?
        .read_exact(&mut buf)
        .ok()?;
    let h = format::parse_header(&buf).ok()?;
    Some(StoredFilter {
        mode: FilterMode::of_kind(h.filter_kind.get())?,
        capacity: h.capacity.get(),
        num_bits: h.num_blocks.get().saturating_mul(512),
        num_hashes: h.num_hashes.get(),
        seed: h.seed.get(),
        page_size: h.page_size.get(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn no_snapshot_or_a_damaged_header_is_none() {
        let dir = tempfile::tempdir().unwrap();
        assert_eq!(stored_filter(dir.path(), b"t"), None);
        let db = Config::new()
            .path(dir.path())
            .expected_items(1_000)
            .open()
            .unwrap();
        let t = db.open_tree("t").unwrap();
        t.insert("k", "v").unwrap();
        let path = t.snapshot_path().unwrap().to_path_buf();
        db.close().unwrap();
        let stored = stored_filter(dir.path(), b"t").unwrap();
        assert_eq!(stored.mode, FilterMode::Plain);
        assert_eq!(stored.capacity, 1_000);
        let mut bytes = std::fs::read(&path).unwrap();
        bytes[40] ^= 1;
        std::fs::write(&path, &bytes).unwrap();
        assert_eq!(stored_filter(dir.path(), b"t"), None);
        std::fs::write(&path, &bytes[..10]).unwrap();
        assert_eq!(stored_filter(dir.path(), b"t"), None);
    }
}

//! Files whose write failed in this process, and the rewrite that makes them safe to open.
//!
//! After a failed `fsync`, Linux may have marked the pages it covered clean while the disk
//! never got them ("fsyncgate"): the page cache still shows the new bytes, the disk the
//! old ones. redb refuses every transaction on that handle (`PreviousIo`), but a handle
//! opened again in the same boot reads the page cache, takes the failed commit's state for
//! durable, and builds its next commits on it; its later fsyncs succeed, and a power cut
//! then leaves a file whose newest roots point at pages the disk never got and whose older
//! ones were overwritten: redb cannot open it at all (`tests/fault_matrix.rs` lost whole
//! files this way, the failed fsync being a clean close's, which a drop cannot report).
//!
//! So a write that failed through this crate (a commit, a clean close, redb's own close)
//! marks the file, and the next `Builder::create` or `open` of that path first rewrites it (the core's `bloomsled::persist::rewrite_after_failed_sync`, which the
//! core's own sled databases use too): the bytes as this process reads them are copied into
//! a new file in the same folder, which is fsynced and renamed over the old one, and the
//! folder fsynced. What
//! the disk holds is then what a reader sees, and redb's own recovery at open picks a
//! consistent commit from it. The cost is one copy of the file, once, after a failure. The
//! mark is kept in this process and in a file beside the database
//! (`<file>.bloomsled-rewrite-needed`, removed by the rewrite), so the next process in the
//! same boot rewrites too when the one that saw the failure was killed. A file opened
//! through a `File` or a backend has no path and cannot be marked.

use std::io;
use std::path::Path;

use redb::{DatabaseError, StorageError};

/// Marks `path`: a write to it failed in this process (the core keeps the set).
pub(crate) fn mark(path: &Path) {
    bloomsled::persist::mark_failed_sync(path);
}

/// True if `e` says a write of the file may not have reached the disk.
pub(crate) fn is_write_failure(e: &StorageError) -> bool {
    matches!(e, StorageError::Io(_) | StorageError::PreviousIo)
}

/// Before an open of `path`: rewrites it if a write to it failed (see the module docs; the core's `rewrite_after_failed_sync` does the copy). An error names the
/// step; the file is left marked and as it was.
pub(crate) fn heal(path: &Path) -> Result<(), DatabaseError> {
    bloomsled::persist::rewrite_after_failed_sync(path)
        .map(drop)
        .map_err(|e| {
            let what = format!(
                "a write to {} failed earlier in this boot; rewriting it before it is \
                 opened again: {e}",
                path.display()
            );
            DatabaseError::Storage(StorageError::Io(io::Error::other(what)))
        })
}

//! The core's mark and rewrite after a failed sync (`bloomsled::persist`), for the
//! pure-Python pending log of the Scrapy dupefilter (`bloomsled/_journal.py`): one
//! implementation for every store, never a copy in Python.

use std::path::PathBuf;

use pyo3::exceptions::PyOSError;
use pyo3::prelude::*;

/// Marks `path` (a file or a folder): a sync of it failed, so the page cache may show pages
/// the disk never got; the next `_rewrite_after_failed_sync` of it, in this process or the
/// next one of this boot, rewrites it.
#[pyfunction]
pub fn _mark_failed_sync(path: PathBuf) {
    bloomsled::persist::mark_failed_sync(&path);
}

/// If `path` is marked: copies it (every file under a folder) through memory into new files
/// that are fsynced and renamed over it, so the disk holds what a reader sees; True if it
/// rewrote. Raises `OSError` naming the file and the step.
#[pyfunction]
pub fn _rewrite_after_failed_sync(py: Python<'_>, path: PathBuf) -> PyResult<bool> {
    py.detach(|| bloomsled::persist::rewrite_after_failed_sync(&path))
        .map_err(|e| match e {
            bloomsled::Error::Io(io) => PyOSError::new_err((errno_of(&io), io.to_string())),
            other => crate::errors::to_py(other),
        })
}

/// The errno for `OSError`: the core's error names the file and the step around the OS
/// error, which keeps its kind but not its code.
fn errno_of(e: &std::io::Error) -> i32 {
    use std::io::ErrorKind as K;
    e.raw_os_error().unwrap_or(match e.kind() {
        K::StorageFull => 28,        // ENOSPC
        K::PermissionDenied => 13,   // EACCES
        K::NotFound => 2,            // ENOENT
        K::ReadOnlyFilesystem => 30, // EROFS
        _ => 5,                      // EIO
    })
}

//! `FingerprintSet`: the crate's exact, disk-backed set of fixed-width fingerprints.
//!
//! One `RwLock` around the crate's set: every call holds the read lock (the set itself is
//! `Sync`), `close` takes the write lock and closes it, so later calls raise `ClosedError`.
//! Single-fingerprint calls keep the GIL (they are a filter probe, at most a block read);
//! batch calls, `sync` and `close` detach from the interpreter first and take the lock
//! after, never the other way round: a call holding the lock while it waits for the GIL,
//! a `close` waiting for the lock, and a single call holding the GIL while it waits for
//! the lock behind that writer would deadlock.

use std::sync::{RwLock, RwLockReadGuard};

use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyDict};

use crate::errors::{closed, IntoPy};
use crate::keys::{all_bytes, bytes_of, collect};

/// An exact set of fixed-width fingerprints on disk, with a Bloom filter in memory.
#[pyclass(frozen, module = "bloomsled._bloomsled")]
pub struct FingerprintSet {
    /// Boxed: the set's counters are 128-byte aligned, more than the 16 bytes Python
    /// aligns objects to (see `filter::Filter`).
    set: RwLock<Option<Box<bloomsled_fpset::FingerprintSet>>>,
    path: String,
}

impl FingerprintSet {
    fn read(&self) -> RwLockReadGuard<'_, Option<Box<bloomsled_fpset::FingerprintSet>>> {
        self.set.read().unwrap_or_else(|p| p.into_inner())
    }

    fn with<T>(
        &self,
        f: impl FnOnce(&bloomsled_fpset::FingerprintSet) -> PyResult<T>,
    ) -> PyResult<T> {
        let guard = self.read();
        f(guard.as_deref().ok_or_else(closed)?)
    }
}

#[pymethods]
impl FingerprintSet {
    #[new]
    #[pyo3(signature = (path, *, expected_items = None, fpr = None, width = 20,
                        memtable_items = None))]
    fn new(
        py: Python<'_>,
        path: std::path::PathBuf,
        expected_items: Option<u64>,
        fpr: Option<f64>,
        width: usize,
        memtable_items: Option<usize>,
    ) -> PyResult<Self> {
        // Sizing not given: a new set gets the crate's defaults (1,000,000 items, 1%), an
        // existing one keeps its own.
        let mut config = bloomsled_fpset::FingerprintSetConfig::new(&path).width(width);
        if let Some(n) = expected_items {
            config = config.expected_items(n);
        }
        if let Some(p) = fpr {
            config = config.false_positive_rate(p);
        }
        if let Some(n) = memtable_items {
            config = config.memtable_items(n);
        }
        let set = py.detach(|| config.open()).py_err()?;
        Ok(FingerprintSet {
            set: RwLock::new(Some(Box::new(set))),
            path: path.to_string_lossy().into_owned(),
        })
    }

    /// Adds `fp`; True if it was new.
    fn add(&self, fp: &Bound<'_, PyAny>) -> PyResult<bool> {
        let fp = bytes_of(fp)?;
        self.with(|s| s.insert(&fp).py_err())
    }

    /// Adds every fingerprint of an iterable; for each, True if it was new. Without the GIL.
    fn add_many(&self, py: Python<'_>, fps: &Bound<'_, PyAny>) -> PyResult<Vec<bool>> {
        let objs = collect(fps)?;
        let fps = all_bytes(&objs)?;
        py.detach(|| self.with(|s| s.insert_many(&fps).py_err()))
    }

    fn __contains__(&self, fp: &Bound<'_, PyAny>) -> PyResult<bool> {
        let fp = bytes_of(fp)?;
        self.with(|s| s.contains(&fp).py_err())
    }

    /// Looks up every fingerprint in one call, without the GIL; exact answers.
    fn contains_many(&self, py: Python<'_>, fps: &Bound<'_, PyAny>) -> PyResult<Vec<bool>> {
        let objs = collect(fps)?;
        let fps = all_bytes(&objs)?;
        py.detach(|| self.with(|s| s.contains_many(&fps).py_err()))
    }

    /// Makes every fingerprint added so far durable (fsync of the log).
    fn sync(&self, py: Python<'_>) -> PyResult<()> {
        py.detach(|| self.with(|s| s.sync().py_err()))
    }

    /// Every member, as a list of bytes (in no particular order).
    fn members<'py>(&self, py: Python<'py>) -> PyResult<Vec<Bound<'py, PyBytes>>> {
        let all = py.detach(|| {
            self.with(|s| {
                s.iter()
                    .and_then(|it| it.collect::<Result<Vec<_>, _>>())
                    .py_err()
            })
        })?;
        Ok(all.iter().map(|m| PyBytes::new(py, m)).collect())
    }

    /// Syncs, saves the filter and marks the set clean (the next open loads the filter
    /// instead of rebuilding it), then releases the folder. Closing twice is allowed.
    fn close(&self, py: Python<'_>) -> PyResult<()> {
        py.detach(|| {
            let taken = self.set.write().unwrap_or_else(|p| p.into_inner()).take();
            match taken {
                Some(s) => s.close().py_err(),
                None => Ok(()),
            }
        })
    }

    /// True once `close` was called.
    #[getter]
    fn closed(&self) -> bool {
        self.read().is_none()
    }

    /// The set's folder.
    #[getter]
    fn path(&self) -> String {
        self.path.clone()
    }

    fn __len__(&self) -> PyResult<usize> {
        self.with(|s| Ok(s.len() as usize))
    }

    /// Counters and sizes as a dict.
    fn stats<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let st = self.with(|s| Ok(s.stats()))?;
        let d = PyDict::new(py);
        d.set_item("members", st.members)?;
        d.set_item("memtable_items", st.memtable_items)?;
        d.set_item("runs", st.runs)?;
        d.set_item("block_reads", st.block_reads)?;
        d.set_item("false_positives", st.false_positives)?;
        d.set_item("flushes", st.flushes)?;
        d.set_item("merges", st.merges)?;
        d.set_item("expected_items", st.expected_items)?;
        d.set_item("fpr", st.false_positive_rate)?;
        d.set_item("filter_bytes", st.filter_bytes)?;
        d.set_item("index_bytes", st.index_bytes)?;
        d.set_item("disk_bytes", st.disk_bytes)?;
        d.set_item("filter_rebuilt", st.filter_rebuilt)?;
        d.set_item("torn_bytes_cut", st.torn_bytes_cut)?;
        d.set_item("leftovers_removed", st.leftovers_removed)?;
        Ok(d)
    }

    fn __enter__(slf: Bound<'_, Self>) -> Bound<'_, Self> {
        slf
    }

    #[pyo3(signature = (*_exc))]
    fn __exit__(&self, py: Python<'_>, _exc: &Bound<'_, pyo3::types::PyTuple>) -> PyResult<bool> {
        self.close(py)?;
        Ok(false)
    }

    fn __repr__(&self) -> String {
        match self.read().as_ref() {
            Some(s) => format!(
                "<bloomsled.FingerprintSet {:?} width={} members={}>",
                self.path,
                s.width(),
                s.len()
            ),
            None => format!("<bloomsled.FingerprintSet {:?} (closed)>", self.path),
        }
    }
}

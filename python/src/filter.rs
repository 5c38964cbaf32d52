//! `Filter`: an in-memory Bloom filter, lock-free, shared between threads as is.

use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyDict, PyType};

use crate::errors::IntoPy;
use crate::keys::{all_bytes, bytes_of, collect};

/// A Bloom filter in memory: the crate's blocked filter, one cache line per key.
#[pyclass(frozen, module = "bloomsled._bloomsled")]
pub struct Filter {
    /// Boxed: the filter's counters are aligned to 128 bytes (one stripe per pair of cache
    /// lines), and Python allocates objects 16-byte aligned, so held inline it would sit
    /// misaligned in the Python object (undefined behaviour; a debug build aborts on it).
    f: Box<bloomsled::Filter>,
}

/// Adds `key` to `f`; true if the key was new to the filter (this add set a bit).
fn add_one(f: &bloomsled::Filter, key: &[u8]) -> bool {
    // `Filter::insert` returns true for a new key, as BF.ADD does
    // (tests/test_api.py::test_filter_add_says_new checks the meaning).
    f.insert(key)
}

#[pymethods]
impl Filter {
    #[new]
    #[pyo3(signature = (expected_items, fpr = 0.01))]
    fn new(expected_items: u64, fpr: f64) -> PyResult<Self> {
        Ok(Filter {
            f: Box::new(bloomsled::Filter::new(expected_items, fpr).py_err()?),
        })
    }

    /// Adds `key`; True if it was new to the filter (as Redis's BF.ADD), False if it was
    /// possibly there already.
    fn add(&self, key: &Bound<'_, PyAny>) -> PyResult<bool> {
        Ok(add_one(&self.f, &bytes_of(key)?))
    }

    /// Adds every key of an iterable, without the GIL.
    fn update(&self, py: Python<'_>, keys: &Bound<'_, PyAny>) -> PyResult<()> {
        let objs = collect(keys)?;
        let ks = all_bytes(&objs)?;
        py.detach(|| {
            for k in &ks {
                add_one(&self.f, k);
            }
        });
        Ok(())
    }

    /// Adds every key; for each, True if it was new. Without the GIL.
    fn add_many(&self, py: Python<'_>, keys: &Bound<'_, PyAny>) -> PyResult<Vec<bool>> {
        let objs = collect(keys)?;
        let ks = all_bytes(&objs)?;
        Ok(py.detach(|| ks.iter().map(|k| add_one(&self.f, k)).collect()))
    }

    fn __contains__(&self, key: &Bound<'_, PyAny>) -> PyResult<bool> {
        Ok(self.f.contains(&bytes_of(key)?))
    }

    /// Looks up every key in one call without the GIL: False means certainly absent.
    fn contains_many(&self, py: Python<'_>, keys: &Bound<'_, PyAny>) -> PyResult<Vec<bool>> {
        let objs = collect(keys)?;
        let ks = all_bytes(&objs)?;
        Ok(py.detach(|| ks.iter().map(|k| self.f.contains(k)).collect()))
    }

    /// The crate's own serialized form (Rust reads it with `Filter::from_bytes`).
    fn to_bytes<'py>(&self, py: Python<'py>) -> Bound<'py, PyBytes> {
        let bytes = py.detach(|| self.f.to_bytes());
        PyBytes::new(py, &bytes)
    }

    /// Parses `to_bytes` output (or Rust's); CorruptError for foreign or damaged bytes.
    #[classmethod]
    fn from_bytes(_cls: &Bound<'_, PyType>, py: Python<'_>, data: &[u8]) -> PyResult<Self> {
        let f = py.detach(|| bloomsled::Filter::from_bytes(data)).py_err()?;
        Ok(Filter { f: Box::new(f) })
    }

    /// Sizing and fill as a dict.
    fn stats<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let f = &self.f;
        let d = PyDict::new(py);
        d.set_item("items", f.items())?;
        d.set_item("capacity", f.capacity())?;
        d.set_item("num_bits", f.num_bits())?;
        d.set_item("num_hashes", f.num_hashes())?;
        d.set_item("bits_per_key", f.bits_per_key())?;
        d.set_item("fill_ratio", f.fill_ratio())?;
        d.set_item("estimated_fpr", f.estimated_fpr())?;
        d.set_item("target_fpr", f.target_fpr())?;
        d.set_item("memory_bytes", f.memory_bytes())?;
        Ok(d)
    }

    fn __repr__(&self) -> String {
        format!(
            "<bloomsled.Filter capacity={} items={} bits={} k={}>",
            self.f.capacity(),
            self.f.items(),
            self.f.num_bits(),
            self.f.num_hashes()
        )
    }
}

//! `SharedFilter`: one filter in Redis or a Redis Cluster, shared by many processes.

use bloomsled_redis::Endpoint;
use std::time::Duration;

use pyo3::exceptions::{PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyString, PyType};

use crate::errors::IntoPy;
use crate::keys::{all_bytes, bytes_of, collect};

/// A Bloom filter kept in Redis; every call releases the GIL while it talks to Redis.
#[pyclass(frozen, module = "bloomsled._bloomsled")]
pub struct SharedFilter {
    f: bloomsled_redis::SharedFilter,
}

/// An endpoint from a URL, or from a list of node URLs for a cluster, that retries for
/// `retry_seconds` while Redis is unavailable.
fn endpoint(url: &Bound<'_, PyAny>, cluster: bool, retry_seconds: f64) -> PyResult<Endpoint> {
    let retry = Duration::try_from_secs_f64(retry_seconds)
        .map_err(|_| PyValueError::new_err("retry_seconds must be a finite number >= 0"))?;
    Ok(endpoint_of(url, cluster)?.retry_for(retry))
}

fn endpoint_of(url: &Bound<'_, PyAny>, cluster: bool) -> PyResult<Endpoint> {
    let urls: Vec<String> = if url.cast::<PyString>().is_ok() {
        vec![url.extract()?]
    } else {
        url.extract()
            .map_err(|_| PyTypeError::new_err("url must be a str or a list of str"))?
    };
    if cluster {
        Ok(Endpoint::cluster(urls))
    } else if urls.len() == 1 {
        Ok(Endpoint::url(urls.into_iter().next().unwrap_or_default()))
    } else {
        Err(PyTypeError::new_err(
            "several URLs name the nodes of a cluster: pass cluster=True",
        ))
    }
}

#[pymethods]
impl SharedFilter {
    /// Creates the filter `name`, or opens it if it exists with exactly this shape (several
    /// processes may race; one creates, the others open it). Every call retries for
    /// `retry_seconds` while Redis is unavailable (see `Endpoint::retry_for`).
    #[classmethod]
    #[pyo3(signature = (name, url, *, expected_items, fpr = 0.01, cluster = false, retry_seconds = 0.0))]
    #[allow(clippy::too_many_arguments)]
    fn create(
        _cls: &Bound<'_, PyType>,
        py: Python<'_>,
        name: &str,
        url: &Bound<'_, PyAny>,
        expected_items: u64,
        fpr: f64,
        cluster: bool,
        retry_seconds: f64,
    ) -> PyResult<Self> {
        let ep = endpoint(url, cluster, retry_seconds)?;
        let config = bloomsled::FilterConfig::new(expected_items).false_positive_rate(fpr);
        let f = py
            .detach(|| bloomsled_redis::SharedFilter::create(&ep, name, &config))
            .py_err()?;
        Ok(SharedFilter { f })
    }

    /// Opens the existing filter `name`; SharedFilterNotFoundError if there is none.
    #[classmethod]
    #[pyo3(signature = (name, url, cluster = false, *, retry_seconds = 0.0))]
    fn open(
        _cls: &Bound<'_, PyType>,
        py: Python<'_>,
        name: &str,
        url: &Bound<'_, PyAny>,
        cluster: bool,
        retry_seconds: f64,
    ) -> PyResult<Self> {
        let ep = endpoint(url, cluster, retry_seconds)?;
        let f = py
            .detach(|| bloomsled_redis::SharedFilter::open(&ep, name))
            .py_err()?;
        Ok(SharedFilter { f })
    }

    /// Deletes the filter `name` and its exact record from Redis (the crate's
    /// `SharedFilter::destroy`: config record first, then the bits, then the record's
    /// buckets); False if there was no such filter. Handles still open on it, in this
    /// process or another, get SharedFilterLostError from their next call. Retries for
    /// `retry_seconds` while Redis is unavailable, then raises RedisError.
    #[classmethod]
    #[pyo3(signature = (name, url, cluster = false, *, retry_seconds = 0.0))]
    fn destroy(
        _cls: &Bound<'_, PyType>,
        py: Python<'_>,
        name: &str,
        url: &Bound<'_, PyAny>,
        cluster: bool,
        retry_seconds: f64,
    ) -> PyResult<bool> {
        let ep = endpoint(url, cluster, retry_seconds)?;
        py.detach(|| match bloomsled_redis::SharedFilter::open(&ep, name) {
            Ok(f) => f.destroy().map(|()| true),
            Err(bloomsled_redis::Error::SharedFilterNotFound { .. }) => Ok(false),
            Err(e) => Err(e),
        })
        .py_err()
    }

    /// Adds `key`; True if it was new. SharedFilterLostError if the filter was lost.
    fn add(&self, py: Python<'_>, key: &Bound<'_, PyAny>) -> PyResult<bool> {
        let k = bytes_of(key)?;
        py.detach(|| self.f.insert(&k)).py_err()
    }

    /// Adds every key (pipelined); for each, True if it was new.
    fn add_many(&self, py: Python<'_>, keys: &Bound<'_, PyAny>) -> PyResult<Vec<bool>> {
        let objs = collect(keys)?;
        let ks = all_bytes(&objs)?;
        py.detach(|| self.f.insert_many(&ks)).py_err()
    }

    /// Adds `key` to the filter and its exact record in Redis; True if it was not recorded
    /// before (exact: no false positives). Keys of at least 4 bytes, uniformly
    /// distributed (digests). RedisOutcomeUnknownError if the connection failed after the
    /// add may have run and a lookup could not tell.
    fn add_exact(&self, py: Python<'_>, key: &Bound<'_, PyAny>) -> PyResult<bool> {
        let k = bytes_of(key)?;
        py.detach(|| self.f.insert_exact(&k)).py_err()
    }

    /// `add_exact` for every key (pipelined); for each, True if it was new.
    fn add_exact_many(&self, py: Python<'_>, keys: &Bound<'_, PyAny>) -> PyResult<Vec<bool>> {
        let objs = collect(keys)?;
        let ks = all_bytes(&objs)?;
        py.detach(|| self.f.insert_exact_many(&ks)).py_err()
    }

    fn __contains__(&self, py: Python<'_>, key: &Bound<'_, PyAny>) -> PyResult<bool> {
        let k = bytes_of(key)?;
        py.detach(|| self.f.contains(&k)).py_err()
    }

    /// Looks up every key (pipelined). Never answers "absent" for a lost filter: raises
    /// SharedFilterLostError instead.
    fn contains_many(&self, py: Python<'_>, keys: &Bound<'_, PyAny>) -> PyResult<Vec<bool>> {
        let objs = collect(keys)?;
        let ks = all_bytes(&objs)?;
        py.detach(|| self.f.contains_many(&ks)).py_err()
    }

    /// The filter's name.
    #[getter]
    fn name(&self) -> String {
        self.f.name().to_owned()
    }

    /// Fill and estimates, computed in Redis, as a dict.
    fn stats<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let s = py.detach(|| self.f.stats()).py_err()?;
        let d = PyDict::new(py);
        d.set_item("name", &s.name)?;
        d.set_item("incarnation", s.incarnation)?;
        d.set_item("capacity", s.shape.capacity)?;
        d.set_item("num_hashes", s.shape.num_hashes)?;
        d.set_item("num_bits", s.num_bits)?;
        d.set_item("ones", s.ones)?;
        d.set_item("fill_ratio", s.fill_ratio)?;
        d.set_item("estimated_items", s.estimated_items)?;
        d.set_item("estimated_fpr", s.estimated_fpr)?;
        d.set_item("target_fpr", s.target_fpr)?;
        d.set_item("redis_bytes", s.redis_bytes)?;
        Ok(d)
    }

    fn __repr__(&self) -> String {
        format!("<bloomsled.SharedFilter {:?}>", self.f.name())
    }
}

//! Keys and values at the edge: `bytes` (borrowed, no copy) or `str` (its UTF-8).

use std::borrow::Cow;

use pyo3::exceptions::PyTypeError;
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyString};

/// The bytes of a `bytes` or `str` object.
pub fn bytes_of<'a>(obj: &'a Bound<'_, PyAny>) -> PyResult<Cow<'a, [u8]>> {
    if let Ok(b) = obj.cast::<PyBytes>() {
        return Ok(Cow::Borrowed(b.as_bytes()));
    }
    if let Ok(s) = obj.cast::<PyString>() {
        return Ok(Cow::Owned(s.to_cow()?.into_owned().into_bytes()));
    }
    Err(PyTypeError::new_err(format!(
        "keys and values must be bytes or str, not {}",
        obj.get_type().name()?
    )))
}

/// Every item of an iterable, kept alive so that their bytes can be borrowed.
pub fn collect<'py>(items: &Bound<'py, PyAny>) -> PyResult<Vec<Bound<'py, PyAny>>> {
    let mut out = Vec::with_capacity(items.len().unwrap_or(0));
    for item in items.try_iter()? {
        out.push(item?);
    }
    Ok(out)
}

/// The bytes of every object in `objs` (see [`bytes_of`]).
pub fn all_bytes<'a>(objs: &'a [Bound<'_, PyAny>]) -> PyResult<Vec<Cow<'a, [u8]>>> {
    objs.iter().map(bytes_of).collect()
}

//! `KeyIter`: iteration over a tree's keys (and values) in chunks, each read under one hold
//! of the store, so a Python loop never keeps the database from closing.

use std::collections::VecDeque;
use std::ops::Bound as RangeBound;
use std::sync::Mutex;

use pyo3::prelude::*;
use pyo3::types::PyBytes;

use super::Tree;
use crate::errors::IntoPy;

struct IterState {
    after: Option<Vec<u8>>,
    buffer: VecDeque<(Vec<u8>, Vec<u8>)>,
    done: bool,
}

/// Keys read in chunks of this many, each chunk under one read of the store.
const ITER_CHUNK: usize = 512;

/// An iterator over a tree's keys that holds no store handle between chunks.
#[pyclass(frozen, module = "bloomsled._bloomsled")]
pub struct KeyIter {
    tree: Py<Tree>,
    values: bool,
    pub(super) prefix: Option<Vec<u8>>,
    state: Mutex<IterState>,
}

impl KeyIter {
    pub(super) fn new(tree: Bound<'_, Tree>, values: bool) -> Self {
        KeyIter {
            tree: tree.unbind(),
            values,
            prefix: None,
            state: Mutex::new(IterState {
                after: None,
                buffer: VecDeque::new(),
                done: false,
            }),
        }
    }
}

#[pymethods]
impl KeyIter {
    fn __iter__(slf: Bound<'_, Self>) -> Bound<'_, Self> {
        slf
    }

    fn __next__<'py>(&self, py: Python<'py>) -> PyResult<Option<Bound<'py, PyAny>>> {
        let mut st = self.state.lock().unwrap_or_else(|p| p.into_inner());
        if st.buffer.is_empty() && !st.done {
            let tree = self.tree.get();
            let after = st.after.clone();
            let values = self.values;
            let prefix = self.prefix.as_deref();
            let chunk = py.detach(|| {
                tree.with(|t| {
                    let lower = match (&after, prefix) {
                        (Some(a), _) => RangeBound::Excluded(a.as_slice()),
                        (None, Some(p)) => RangeBound::Included(p),
                        (None, None) => RangeBound::Unbounded,
                    };
                    let mut out = Vec::with_capacity(ITER_CHUNK);
                    for kv in t.range::<&[u8], _>((lower, RangeBound::Unbounded)) {
                        let (k, v) = kv.py_err()?;
                        if prefix.is_some_and(|p| !k.starts_with(p)) {
                            return Ok((out, true));
                        }
                        out.push((k.to_vec(), if values { v.to_vec() } else { Vec::new() }));
                        if out.len() == ITER_CHUNK {
                            return Ok((out, false));
                        }
                    }
                    Ok((out, true))
                })
            })?;
            let (chunk, done) = chunk;
            st.done = done;
            st.after = chunk.last().map(|(k, _)| k.clone()).or(after);
            st.buffer.extend(chunk);
        }
        let Some((k, v)) = st.buffer.pop_front() else {
            return Ok(None);
        };
        let k = PyBytes::new(py, &k);
        Ok(Some(if self.values {
            (k, PyBytes::new(py, &v)).into_pyobject(py)?.into_any()
        } else {
            k.into_any()
        }))
    }
}

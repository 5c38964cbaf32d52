//! `Db` and `Tree`: a database that can be closed while Python still holds handles.
//!
//! Every handle shares one [`Core`]; closing takes its write lock and drops the crate's `Db`
//! and every tree handle, so sled's files are released at once and any later call raises
//! `ClosedError` instead of touching a closed store. Operations hold the read lock, never
//! while waiting for the GIL: batch calls detach from the interpreter first.

use std::collections::HashMap;
use std::sync::{Mutex, RwLock, RwLockReadGuard};

use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyDict, PyList};

use crate::errors::{closed, IntoPy};
use crate::keys::{all_bytes, bytes_of, collect};

mod iter;
pub use iter::KeyIter;

/// An open database and the tree handles opened through it.
struct Open {
    db: bloomsled::Db,
    trees: HashMap<Vec<u8>, bloomsled::Tree>,
}

/// Lock stripes of `Tree.add_to_set`, per database.
const SET_LOCKS: usize = 64;

/// What every handle of one database shares.
pub struct Core {
    open: RwLock<Option<Open>>,
    path: String,
    set_locks: Vec<Mutex<()>>,
}

impl Core {
    /// The lock stripe of the set stored at `key` (FNV-1a of the key).
    fn set_lock(&self, key: &[u8]) -> std::sync::MutexGuard<'_, ()> {
        let h = key.iter().fold(0xcbf2_9ce4_8422_2325_u64, |h, b| {
            (h ^ u64::from(*b)).wrapping_mul(0x0100_0000_01b3)
        });
        self.set_locks[(h % SET_LOCKS as u64) as usize]
            .lock()
            .unwrap_or_else(|p| p.into_inner())
    }

    fn read(&self) -> RwLockReadGuard<'_, Option<Open>> {
        self.open.read().unwrap_or_else(|p| p.into_inner())
    }
}

/// A tree of a database: `None` names the default tree.
#[pyclass(frozen, subclass, module = "bloomsled._bloomsled")]
pub struct Tree {
    core: std::sync::Arc<Core>,
    name: Option<Vec<u8>>,
}

impl Tree {
    /// Runs `f` on the crate's tree while the database is held open.
    fn with<T>(&self, f: impl FnOnce(&bloomsled::Tree) -> PyResult<T>) -> PyResult<T> {
        let guard = self.core.read();
        let open = guard.as_ref().ok_or_else(closed)?;
        let tree = match &self.name {
            None => &*open.db,
            Some(n) => open.trees.get(n).ok_or_else(closed)?,
        };
        f(tree)
    }
}

fn ivec_bytes<'py>(py: Python<'py>, v: Option<bloomsled::IVec>) -> Option<Bound<'py, PyBytes>> {
    v.map(|v| PyBytes::new(py, &v))
}

#[pymethods]
impl Tree {
    /// Sets `key` to `value`; returns the previous value or None.
    fn insert<'py>(
        &self,
        py: Python<'py>,
        key: &Bound<'py, PyAny>,
        value: &Bound<'py, PyAny>,
    ) -> PyResult<Option<Bound<'py, PyBytes>>> {
        let (k, v) = (bytes_of(key)?, bytes_of(value)?);
        let old = self.with(|t| t.insert(&*k, &*v).py_err())?;
        Ok(ivec_bytes(py, old))
    }

    /// Sets `key` to `value` only if `key` is absent, atomically; True if it was absent
    /// (this call stored it). Of several threads or processes racing on one key, exactly one
    /// gets True.
    #[pyo3(signature = (key, value = None))]
    fn insert_if_absent(
        &self,
        key: &Bound<'_, PyAny>,
        value: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<bool> {
        let k = bytes_of(key)?;
        let v = match value {
            Some(v) => bytes_of(v)?,
            None => std::borrow::Cow::Borrowed(&b""[..]),
        };
        self.with(|t| {
            let res = t
                .compare_and_swap(&*k, None as Option<&[u8]>, Some(&*v))
                .py_err()?;
            Ok(res.is_ok())
        })
    }

    /// Adds `member` to the set stored at `key` (a value made of members of one width,
    /// the width of `member`); True if it was absent. Atomic against other `add_to_set`
    /// calls on this database (a database is open in one process at a time).
    fn add_to_set(
        &self,
        py: Python<'_>,
        key: &Bound<'_, PyAny>,
        member: &Bound<'_, PyAny>,
    ) -> PyResult<bool> {
        let (k, m) = (bytes_of(key)?, bytes_of(member)?);
        if m.is_empty() {
            return Err(pyo3::exceptions::PyValueError::new_err("empty set member"));
        }
        // Neither a transaction nor a batch: bloomsled's transactions hang once the tree
        // has a snapshot (the dirty mark is flushed inside sled's transaction), and sled's
        // `apply_batch` costs ~1.4 KB of memory and ~90 us per call here. A lock stripe of
        // this database serializes the read-check-write of one set; the write is one insert.
        let core = self.core.clone();
        py.detach(|| {
            self.with(|t| {
                let _guard = core.set_lock(&k);
                let old = t.get(&*k).py_err()?;
                let old: &[u8] = old.as_deref().unwrap_or(&[]);
                if !old.len().is_multiple_of(m.len()) {
                    return Err(crate::errors::CorruptError::new_err(format!(
                        "the value at {:?} is not a set of {}-byte members",
                        String::from_utf8_lossy(&k),
                        m.len()
                    )));
                }
                if old.chunks_exact(m.len()).any(|c| c == &*m) {
                    return Ok(false);
                }
                let mut new = Vec::with_capacity(old.len() + m.len());
                new.extend_from_slice(old);
                new.extend_from_slice(&m);
                t.insert(&*k, new).py_err()?;
                Ok(true)
            })
        })
    }

    /// True if `member` is in the set stored at `key` (see `add_to_set`).
    fn set_contains(&self, key: &Bound<'_, PyAny>, member: &Bound<'_, PyAny>) -> PyResult<bool> {
        let (k, m) = (bytes_of(key)?, bytes_of(member)?);
        if m.is_empty() {
            return Ok(false);
        }
        self.with(|t| {
            let v = t.get(&*k).py_err()?;
            Ok(v.is_some_and(|v| {
                v.len().is_multiple_of(m.len()) && v.chunks_exact(m.len()).any(|c| c == &*m)
            }))
        })
    }

    /// The value of `key`, or None.
    fn get<'py>(
        &self,
        py: Python<'py>,
        key: &Bound<'py, PyAny>,
    ) -> PyResult<Option<Bound<'py, PyBytes>>> {
        let k = bytes_of(key)?;
        let v = self.with(|t| t.get(&*k).py_err())?;
        Ok(ivec_bytes(py, v))
    }

    /// Removes `key`; returns its value, or None if it was absent.
    fn remove<'py>(
        &self,
        py: Python<'py>,
        key: &Bound<'py, PyAny>,
    ) -> PyResult<Option<Bound<'py, PyBytes>>> {
        let k = bytes_of(key)?;
        let v = self.with(|t| t.remove(&*k).py_err())?;
        Ok(ivec_bytes(py, v))
    }

    fn __contains__(&self, key: &Bound<'_, PyAny>) -> PyResult<bool> {
        let k = bytes_of(key)?;
        self.with(|t| t.contains_key(&*k).py_err())
    }

    /// The filter's answer alone: False means certainly absent, True "maybe".
    fn may_contain(&self, key: &Bound<'_, PyAny>) -> PyResult<bool> {
        let k = bytes_of(key)?;
        self.with(|t| Ok(t.may_contain(&*k)))
    }

    /// Exact membership of every key (the filter first, the store for the "maybe"s), in one
    /// call without the GIL.
    fn contains_many(&self, py: Python<'_>, keys: &Bound<'_, PyAny>) -> PyResult<Vec<bool>> {
        let objs = collect(keys)?;
        let ks = all_bytes(&objs)?;
        py.detach(|| self.with(|t| t.contains_many(&ks).py_err()))
    }

    /// Inserts every `(key, value)` pair as one atomic batch, without the GIL.
    fn insert_many(&self, py: Python<'_>, pairs: &Bound<'_, PyAny>) -> PyResult<()> {
        let objs = collect(pairs)?;
        let mut batch = bloomsled::Batch::default();
        for pair in &objs {
            let (k, v): (Bound<'_, PyAny>, Bound<'_, PyAny>) = pair.extract()?;
            batch.insert(&*bytes_of(&k)?, &*bytes_of(&v)?);
        }
        py.detach(|| self.with(|t| t.apply_batch(batch).py_err()))
    }

    /// Number of entries (walks the tree, as sled does).
    fn __len__(&self, py: Python<'_>) -> PyResult<usize> {
        py.detach(|| self.with(|t| Ok(t.len())))
    }

    fn __bool__(&self) -> PyResult<bool> {
        self.with(|t| Ok(!t.is_empty()))
    }

    /// Iterates over the keys, in order (read in chunks; a closed database ends it with
    /// ClosedError).
    fn __iter__(slf: Bound<'_, Self>) -> KeyIter {
        KeyIter::new(slf, false)
    }

    /// Iterates over `(key, value)` pairs in key order, or over those whose keys start
    /// with `prefix`.
    #[pyo3(signature = (prefix = None))]
    fn items(slf: Bound<'_, Self>, prefix: Option<&Bound<'_, PyAny>>) -> PyResult<KeyIter> {
        let prefix = prefix
            .map(|p| bytes_of(p).map(|b| b.into_owned()))
            .transpose()?;
        let mut it = KeyIter::new(slf, true);
        it.prefix = prefix;
        Ok(it)
    }

    /// Makes every write so far durable, against a power cut too (sled's flush, then an
    /// fsync of sled's log: `Tree::flush`); returns the bytes flushed.
    fn flush(&self, py: Python<'_>) -> PyResult<usize> {
        py.detach(|| self.with(|t| t.flush().py_err()))
    }

    /// The tree's name (`b"__sled__default"` for the default tree).
    #[getter]
    fn name<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyBytes>> {
        self.with(|t| Ok(PyBytes::new(py, &t.name())))
    }

    /// The filter's statistics as a dict.
    fn stats<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let s = self.with(|t| Ok(t.stats()))?;
        let d = PyDict::new(py);
        d.set_item("items", s.items)?;
        d.set_item("capacity", s.capacity)?;
        d.set_item("num_bits", s.num_bits)?;
        d.set_item("num_hashes", s.num_hashes)?;
        d.set_item("bits_per_key", s.bits_per_key)?;
        d.set_item("fill_ratio", s.fill_ratio)?;
        d.set_item("estimated_fpr", s.estimated_fpr)?;
        d.set_item("target_fpr", s.target_fpr)?;
        d.set_item("lookups", s.lookups)?;
        d.set_item("store_lookups_skipped", s.store_lookups_skipped)?;
        d.set_item("false_positives", s.false_positives)?;
        d.set_item("stale_entries", s.stale_entries)?;
        d.set_item("mode", format!("{:?}", s.mode).to_lowercase())?;
        d.set_item("stuck_counters", s.stuck_counters)?;
        d.set_item("rebuilds", s.rebuilds)?;
        d.set_item("resizes", s.resizes)?;
        d.set_item("rebuild_in_progress", s.rebuild_in_progress)?;
        d.set_item("memory_bytes", s.memory_bytes)?;
        d.set_item("allocated_bytes", s.allocated_bytes)?;
        Ok(d)
    }

    /// How this tree's filter came to be at open, as a dict: `outcome` is "loaded",
    /// "replayed" (its snapshot and the crash journals of a process killed in this boot,
    /// with `journals` and `records`), "rebuilt" (with `reason`), "created" or "in_memory".
    fn recovery_report<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let r = self.with(|t| Ok(t.recovery_report()))?;
        report_dict(py, &r)
    }

    fn __repr__(&self) -> PyResult<String> {
        let name = self.with(|t| Ok(t.name()));
        Ok(match name {
            Ok(n) => format!("<bloomsled.Tree {:?}>", String::from_utf8_lossy(&n)),
            Err(_) => "<bloomsled.Tree (closed)>".to_owned(),
        })
    }
}

fn report_dict<'py>(
    py: Python<'py>,
    r: &bloomsled::RecoveryReport,
) -> PyResult<Bound<'py, PyDict>> {
    use bloomsled::RecoveryOutcome as O;
    let d = PyDict::new(py);
    d.set_item("tree", &r.tree)?;
    let (outcome, reason) = match &r.outcome {
        O::Loaded => ("loaded", None),
        O::Replayed { journals, records } => {
            d.set_item("journals", journals)?;
            d.set_item("records", records)?;
            ("replayed", None)
        }
        O::Rebuilt { reason } => ("rebuilt", Some(reason.to_string())),
        O::Created => ("created", None),
        O::InMemory => ("in_memory", None),
        _ => ("other", None),
    };
    d.set_item("outcome", outcome)?;
    d.set_item("reason", reason)?;
    d.set_item("keys_scanned", r.keys_scanned)?;
    d.set_item("bytes_verified", r.bytes_verified)?;
    d.set_item("sequence", r.sequence)?;
    d.set_item("duration_s", r.duration.as_secs_f64())?;
    Ok(d)
}

/// A database: a context manager, and its own default tree.
#[pyclass(frozen, extends = Tree, module = "bloomsled._bloomsled")]
pub struct Db {}

fn core_of<'a>(slf: &'a Bound<'_, Db>) -> &'a std::sync::Arc<Core> {
    &slf.as_super().get().core
}

#[pymethods]
impl Db {
    #[new]
    #[pyo3(signature = (path, *, expected_items = None, fpr = None, bits_per_key = None,
                        counting = false, cache_capacity = None, flush_every_ms = None))]
    #[allow(clippy::too_many_arguments)]
    fn new(
        py: Python<'_>,
        path: std::path::PathBuf,
        expected_items: Option<u64>,
        fpr: Option<f64>,
        bits_per_key: Option<f64>,
        counting: bool,
        cache_capacity: Option<u64>,
        flush_every_ms: Option<u64>,
    ) -> PyResult<PyClassInitializer<Self>> {
        let mut config = bloomsled::Config::new().path(&path).counting(counting);
        if let Some(n) = expected_items {
            config = config.expected_items(n);
        }
        if let Some(p) = fpr {
            config = config.false_positive_rate(p);
        }
        if let Some(b) = bits_per_key {
            config = config.bits_per_key(b);
        }
        if let Some(c) = cache_capacity {
            config = config.cache_capacity(c);
        }
        if let Some(ms) = flush_every_ms {
            config = config.flush_every_ms(if ms == 0 { None } else { Some(ms) });
        }
        let db = py.detach(|| config.open()).py_err()?;
        let core = Core {
            open: RwLock::new(Some(Open {
                db,
                trees: HashMap::new(),
            })),
            path: path.to_string_lossy().into_owned(),
            set_locks: (0..SET_LOCKS).map(|_| Mutex::new(())).collect(),
        };
        Ok(PyClassInitializer::from(Tree {
            core: std::sync::Arc::new(core),
            name: None,
        })
        .add_subclass(Db {}))
    }

    /// Opens (creating if needed) the tree `name`; a new tree's filter is sized by the
    /// arguments given, or by the database's settings.
    #[pyo3(signature = (name, *, expected_items = None, fpr = None, bits_per_key = None,
                        counting = None))]
    fn open_tree(
        slf: &Bound<'_, Self>,
        name: &Bound<'_, PyAny>,
        expected_items: Option<u64>,
        fpr: Option<f64>,
        bits_per_key: Option<f64>,
        counting: Option<bool>,
    ) -> PyResult<Py<Tree>> {
        let py = slf.py();
        let name = bytes_of(name)?.into_owned();
        let core = core_of(slf).clone();
        let custom = expected_items.is_some()
            || fpr.is_some()
            || bits_per_key.is_some()
            || counting.is_some();
        let mut tc = bloomsled::TreeConfig::new();
        if let Some(n) = expected_items {
            tc = tc.expected_items(n);
        }
        if let Some(p) = fpr {
            tc = tc.false_positive_rate(p);
        }
        if let Some(b) = bits_per_key {
            tc = tc.bits_per_key(b);
        }
        if let Some(c) = counting {
            tc = tc.counting(c);
        }
        py.detach(|| {
            let mut guard = core.open.write().unwrap_or_else(|p| p.into_inner());
            let open = guard.as_mut().ok_or_else(closed)?;
            if !open.trees.contains_key(&name) {
                let t = if custom {
                    open.db.open_tree_with(&name, tc)
                } else {
                    open.db.open_tree(&name)
                }
                .py_err()?;
                open.trees.insert(name.clone(), t);
            }
            Ok::<_, PyErr>(())
        })?;
        Py::new(
            py,
            Tree {
                core,
                name: Some(name),
            },
        )
    }

    /// Names of every tree, the default one included.
    fn tree_names<'py>(slf: &Bound<'py, Self>) -> PyResult<Bound<'py, PyList>> {
        let py = slf.py();
        let guard = core_of(slf).read();
        let open = guard.as_ref().ok_or_else(closed)?;
        let names: Vec<Bound<'py, PyBytes>> = open
            .db
            .tree_names()
            .iter()
            .map(|n| PyBytes::new(py, n))
            .collect();
        PyList::new(py, names)
    }

    /// Drops the tree `name` and its filter; False if it did not exist.
    fn drop_tree(slf: &Bound<'_, Self>, name: &Bound<'_, PyAny>) -> PyResult<bool> {
        let name = bytes_of(name)?.into_owned();
        let core = core_of(slf).clone();
        slf.py().detach(|| {
            let mut guard = core.open.write().unwrap_or_else(|p| p.into_inner());
            let open = guard.as_mut().ok_or_else(closed)?;
            open.trees.remove(&name);
            open.db.drop_tree(&name).py_err()
        })
    }

    /// The recovery report of every open tree (see `Tree.recovery_report`).
    fn recovery_reports<'py>(slf: &Bound<'py, Self>) -> PyResult<Vec<Bound<'py, PyDict>>> {
        let py = slf.py();
        let reports = {
            let guard = core_of(slf).read();
            guard.as_ref().ok_or_else(closed)?.db.recovery_reports()
        };
        reports.iter().map(|r| report_dict(py, r)).collect()
    }

    /// Snapshots every filter and flushes sled, then releases the files. Every later call
    /// on this database or its trees raises ClosedError; closing twice is allowed.
    fn close(slf: &Bound<'_, Self>) -> PyResult<()> {
        let core = core_of(slf).clone();
        slf.py().detach(|| {
            let taken = core.open.write().unwrap_or_else(|p| p.into_inner()).take();
            match taken {
                Some(open) => {
                    drop(open.trees);
                    open.db.close().py_err()
                }
                None => Ok(()),
            }
        })
    }

    /// True once `close` was called.
    #[getter]
    fn closed(slf: &Bound<'_, Self>) -> bool {
        core_of(slf).read().is_none()
    }

    /// The path the database was opened at.
    #[getter]
    fn path(slf: &Bound<'_, Self>) -> String {
        core_of(slf).path.clone()
    }

    fn __enter__(slf: Bound<'_, Self>) -> Bound<'_, Self> {
        slf
    }

    #[pyo3(signature = (*_exc))]
    fn __exit__(slf: &Bound<'_, Self>, _exc: &Bound<'_, pyo3::types::PyTuple>) -> PyResult<bool> {
        Db::close(slf)?;
        Ok(false)
    }

    fn __repr__(slf: &Bound<'_, Self>) -> String {
        let core = core_of(slf);
        let state = if core.read().is_some() {
            "open"
        } else {
            "closed"
        };
        format!("<bloomsled.Db {:?} ({state})>", core.path)
    }
}

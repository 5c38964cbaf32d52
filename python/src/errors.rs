//! The exception classes, defined once, and the one conversion from the crate's `Error`.

use pyo3::create_exception;
use pyo3::exceptions::PyException;
use pyo3::prelude::*;

create_exception!(
    _bloomsled,
    Error,
    PyException,
    "Base of every bloomsled error; the message is the Rust error's."
);
create_exception!(
    _bloomsled,
    ClosedError,
    Error,
    "The database (or the tree's database) is closed."
);
create_exception!(
    _bloomsled,
    InvalidConfig,
    Error,
    "A setting out of range (zero items, a rate outside (0, 1), a reserved tree name...) or a \
     fingerprint of another width than its set's."
);
create_exception!(
    _bloomsled,
    CorruptError,
    Error,
    "Bytes that are not a valid filter, or damaged data the crate refused to trust."
);
create_exception!(
    _bloomsled,
    InUseError,
    Error,
    "The folder is held by another open FingerprintSet (in this process or another)."
);
create_exception!(
    _bloomsled,
    ShapeMismatch,
    Error,
    "Two filters (or a filter and its Redis copy) have different shapes."
);
create_exception!(
    _bloomsled,
    SharedFilterLost,
    Error,
    "A shared filter was lost in Redis (flushed, evicted, restarted empty, recreated): \
     its answers can no longer be trusted."
);
create_exception!(
    _bloomsled,
    SharedFilterNotFound,
    Error,
    "No shared filter of that name exists in Redis."
);
create_exception!(
    _bloomsled,
    RedisError,
    Error,
    "Redis could not be reached or answered with an error."
);

create_exception!(
    _bloomsled,
    RedisOutcomeUnknownError,
    RedisError,
    "A write (an add) may or may not have reached Redis before the connection failed, and \
     no lookup could tell: its answer (new or not) is unknown and was not guessed."
);

/// The Python exception for a crate error, carrying its message.
pub fn to_py(e: bloomsled::Error) -> PyErr {
    use bloomsled::Error as E;
    let msg = e.to_string();
    match e {
        E::InvalidConfig { .. }
        | E::ReservedName { .. }
        | E::UnknownHash { .. }
        | E::KeyWidth { .. } => InvalidConfig::new_err(msg),
        E::Decode(_)
        | E::Corrupt(_)
        | E::Corruption { .. }
        | E::SnapshotRejected { .. }
        | E::FileDamaged { .. } => CorruptError::new_err(msg),
        E::ShapeMismatch { .. } | E::RedisShapeMismatch { .. } => ShapeMismatch::new_err(msg),
        E::SharedFilterLost { .. } => SharedFilterLost::new_err(msg),
        E::SharedFilterNotFound { .. } => SharedFilterNotFound::new_err(msg),
        E::Redis(_) => RedisError::new_err(msg),
        E::RedisOutcomeUnknown { .. } => RedisOutcomeUnknownError::new_err(msg),
        E::Closed(_) => ClosedError::new_err(msg),
        E::InUse { .. } => InUseError::new_err(msg),
        _ => Error::new_err(msg),
    }
}

/// `?` for crate results.
pub trait IntoPy<T> {
    /// The result with its error turned into a Python exception.
    fn py_err(self) -> PyResult<T>;
}

impl<T> IntoPy<T> for Result<T, bloomsled::Error> {
    fn py_err(self) -> PyResult<T> {
        self.map_err(to_py)
    }
}

/// The error for an operation on a closed database.
pub fn closed() -> PyErr {
    ClosedError::new_err("the database is closed")
}

/// Registers the exception classes on the module.
pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    let py = m.py();
    m.add("Error", py.get_type::<Error>())?;
    m.add("ClosedError", py.get_type::<ClosedError>())?;
    m.add("InvalidConfig", py.get_type::<InvalidConfig>())?;
    m.add("CorruptError", py.get_type::<CorruptError>())?;
    m.add("InUseError", py.get_type::<InUseError>())?;
    m.add("ShapeMismatch", py.get_type::<ShapeMismatch>())?;
    m.add("SharedFilterLost", py.get_type::<SharedFilterLost>())?;
    m.add(
        "SharedFilterNotFound",
        py.get_type::<SharedFilterNotFound>(),
    )?;
    m.add("RedisError", py.get_type::<RedisError>())?;
    m.add(
        "RedisOutcomeUnknownError",
        py.get_type::<RedisOutcomeUnknownError>(),
    )?;
    Ok(())
}

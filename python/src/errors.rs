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
    PoisonedError,
    Error,
    "A sync (fsync) of the database failed, now or earlier: no write, flush or snapshot is \
     acknowledged as durable any more (reads go on). The message names the file and the \
     step; reopen the database to recover from what is durable."
);
create_exception!(
    _bloomsled,
    InvalidConfigError,
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
    ShapeMismatchError,
    Error,
    "Two filters (or a filter and its Redis copy) have different shapes."
);
create_exception!(
    _bloomsled,
    SharedFilterLostError,
    Error,
    "A shared filter was lost in Redis (flushed, evicted, restarted empty, recreated): \
     its answers can no longer be trusted."
);
create_exception!(
    _bloomsled,
    SharedFilterNotFoundError,
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
        E::InvalidConfig { .. } | E::ReservedName { .. } | E::UnknownHash { .. } => {
            InvalidConfigError::new_err(msg)
        }
        E::Decode(_) | E::Corrupt(_) | E::Corruption { .. } | E::SnapshotRejected { .. } => {
            CorruptError::new_err(msg)
        }
        E::ShapeMismatch { .. } => ShapeMismatchError::new_err(msg),
        E::Closed(_) => ClosedError::new_err(msg),
        E::Poisoned { .. } => PoisonedError::new_err(msg),
        _ => Error::new_err(msg),
    }
}

/// The Python exception for an error of the Redis tier (`bloomsled-redis`).
pub fn redis_to_py(e: bloomsled_redis::Error) -> PyErr {
    use bloomsled_redis::Error as E;
    let msg = e.to_string();
    match e {
        E::Core(e) => to_py(e),
        E::InvalidConfig { .. } => InvalidConfigError::new_err(msg),
        E::Decode(_) | E::Corrupt(_) => CorruptError::new_err(msg),
        E::RedisShapeMismatch { .. } => ShapeMismatchError::new_err(msg),
        E::SharedFilterLost { .. } => SharedFilterLostError::new_err(msg),
        E::SharedFilterNotFound { .. } => SharedFilterNotFoundError::new_err(msg),
        E::Redis(_) | E::Timeout(_) => RedisError::new_err(msg),
        E::RedisOutcomeUnknown { .. } => RedisOutcomeUnknownError::new_err(msg),
        _ => Error::new_err(msg),
    }
}

/// The Python exception for an error of the fingerprint set (`bloomsled-fpset`).
pub fn fpset_to_py(e: bloomsled_fpset::Error) -> PyErr {
    use bloomsled_fpset::Error as E;
    let msg = e.to_string();
    match e {
        E::Core(e) => to_py(e),
        E::InvalidConfig { .. } | E::KeyWidth { .. } => InvalidConfigError::new_err(msg),
        E::FileDamaged { .. } => CorruptError::new_err(msg),
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

impl<T> IntoPy<T> for Result<T, bloomsled_redis::Error> {
    fn py_err(self) -> PyResult<T> {
        self.map_err(redis_to_py)
    }
}

impl<T> IntoPy<T> for Result<T, bloomsled_fpset::Error> {
    fn py_err(self) -> PyResult<T> {
        self.map_err(fpset_to_py)
    }
}

/// The error for an operation on a closed database.
pub fn closed() -> PyErr {
    ClosedError::new_err("the database is closed")
}

/// Old exception names and the classes they now name (`(alias, class)`).
pub const ALIASES: &[(&str, &str)] = &[
    ("InvalidConfig", "InvalidConfigError"),
    ("ShapeMismatch", "ShapeMismatchError"),
    ("SharedFilterLost", "SharedFilterLostError"),
    ("SharedFilterNotFound", "SharedFilterNotFoundError"),
];

/// Registers the exception classes (and the aliases of their old names) on the module.
pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    let py = m.py();
    m.add("Error", py.get_type::<Error>())?;
    m.add("ClosedError", py.get_type::<ClosedError>())?;
    m.add("PoisonedError", py.get_type::<PoisonedError>())?;
    m.add("InvalidConfigError", py.get_type::<InvalidConfigError>())?;
    m.add("CorruptError", py.get_type::<CorruptError>())?;
    m.add("InUseError", py.get_type::<InUseError>())?;
    m.add("ShapeMismatchError", py.get_type::<ShapeMismatchError>())?;
    m.add(
        "SharedFilterLostError",
        py.get_type::<SharedFilterLostError>(),
    )?;
    m.add(
        "SharedFilterNotFoundError",
        py.get_type::<SharedFilterNotFoundError>(),
    )?;
    m.add("RedisError", py.get_type::<RedisError>())?;
    m.add(
        "RedisOutcomeUnknownError",
        py.get_type::<RedisOutcomeUnknownError>(),
    )?;
    // The names before PEP 8's `...Error` suffix, kept as aliases of the same classes so
    // that `except bloomsled.InvalidConfig` keeps working.
    for (old, new) in ALIASES {
        m.add(*old, m.getattr(*new)?)?;
    }
    Ok(())
}

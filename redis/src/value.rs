//! Reading Redis replies into the shapes bloomsled expects; anything else is an error that
//! names the key (a wrong-type key, a foreign value), never a guess.

use redis::Value;

use crate::error::{Error, Result};

/// An error for a reply of the wrong kind at `key`.
pub(crate) fn unexpected(key: &str, what: impl std::fmt::Display) -> Error {
    Error::Corrupt(format!("Redis key {key:?}: unexpected reply: {what}"))
}

/// A bulk string's bytes (`GET`, `GETRANGE`).
pub(crate) fn bytes(v: Value, key: &str) -> Result<Vec<u8>> {
    match v {
        Value::BulkString(b) => Ok(b),
        Value::SimpleString(s) => Ok(s.into_bytes()),
        Value::ServerError(e) => Err(Error::Redis(e.into())),
        other => Err(unexpected(
            key,
            format!("{other:?} where bytes were expected"),
        )),
    }
}

/// An array of integers (`BITFIELD`).
pub(crate) fn ints(v: Value, key: &str) -> Result<Vec<i64>> {
    match v {
        Value::Array(items) => items
            .into_iter()
            .map(|i| int(i, key))
            .collect::<Result<Vec<i64>>>(),
        Value::ServerError(e) => Err(Error::Redis(e.into())),
        other => Err(unexpected(
            key,
            format!("{other:?} where integers were expected"),
        )),
    }
}

/// One integer.
pub(crate) fn int(v: Value, key: &str) -> Result<i64> {
    match v {
        Value::Int(i) => Ok(i),
        Value::ServerError(e) => Err(Error::Redis(e.into())),
        other => Err(unexpected(
            key,
            format!("{other:?} where an integer was expected"),
        )),
    }
}

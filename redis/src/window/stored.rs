//! The window record as read back from Redis, and the checks on a window's name.

use redis::Value;

use crate::error::{Error, Result};
use crate::layout;
use crate::record::{Record, SharedShape};
use crate::value;

use super::record::{parse_incarnation, StoredWindowSettings};
use super::MAX_NAME;

/// The window record as stored: incarnation, settings and filter shape.
pub(super) struct Stored {
    pub(super) incarnation: u64,
    pub(super) config: StoredWindowSettings,
    pub(super) shape: SharedShape,
}

impl Stored {
    /// Reads `[incarnation, config, filter]` (nil or empty: no record).
    pub(super) fn from_reply(name: &str, key: &str, reply: Value) -> Result<Option<Stored>> {
        let items = match reply {
            Value::Array(v) if v.len() == 3 => v,
            Value::ServerError(e) => return Err(Error::Redis(e.into())),
            other => return Err(value::unexpected(key, format!("{other:?}"))),
        };
        let mut fields = Vec::with_capacity(3);
        for v in items {
            fields.push(match v {
                Value::Nil => Vec::new(),
                v => value::bytes(v, key)?,
            });
        }
        if fields.iter().all(|f| f.is_empty()) {
            return Ok(None);
        }
        let bad = |what: &str| {
            Error::Corrupt(format!(
                "shared window {name:?}: the record at {key:?} has a bad {what} field"
            ))
        };
        let incarnation = parse_incarnation(&fields[0]).ok_or_else(|| bad("incarnation"))?;
        let config = StoredWindowSettings::decode(&fields[1])?;
        let shape = Record::decode(&fields[2])?.shape;
        if shape.counting {
            return Err(bad("filter"));
        }
        Ok(Some(Stored {
            incarnation,
            config,
            shape,
        }))
    }
}

/// A window's settings and shape, for errors.
pub(super) fn describe(c: &StoredWindowSettings, s: &SharedShape) -> String {
    format!(
        "width_ms={} generations={} {s}",
        c.ring.width_ms(),
        c.ring.generations()
    )
}

/// Checks a window name: a shared filter's name rules, and short enough for its generations' names.
pub(super) fn check_window_name(name: &str) -> Result<()> {
    layout::check_name(name)?;
    if name.len() > MAX_NAME {
        return Err(Error::config(format!(
            "a shared window name must be at most {MAX_NAME} bytes, got {}",
            name.len()
        )));
    }
    Ok(())
}

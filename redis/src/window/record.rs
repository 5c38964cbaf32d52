//! The window record: one Redis hash, `bloomsled:{NAME}:window`, that says what the window
//! is and which generations exist.
//!
//! | field     | value                                                                  |
//! |-----------|------------------------------------------------------------------------|
//! | `epoch`   | the window's random incarnation tag, hexadecimal (the stored field's name) |
//! | `config`  | `bloomsled-window v=1 width_ms=W generations=G grace_ms=X`             |
//! | `filter`  | every generation's filter record (shape), as a shared filter's config  |
//! | `g:<e>`   | generation `e` exists, and this is its filter's incarnation (hexadecimal) |
//!
//! The `g:<e>` fields are the *ring*. A field is written once (by [`RECORD_SCRIPT`], only
//! while `epoch` is the writer's) and never changed: a generation whose filter is later
//! found with another incarnation, or missing, was lost. A generation without a field was never
//! written to, which is not an error. Every lookup reads `epoch` and the live generations'
//! fields in the same pipeline as the blocks, so a window that was flushed, restarted
//! empty, deleted or recreated is an error even for a client that knows no generation.

use crate::error::{Error, Result};

use super::super::record::{Record, State};
use bloomsled::clock::Generations;

const MAGIC: &str = "bloomsled-window";
const VERSION: u32 = 1;

/// The hash field of generation `e`.
pub(crate) fn gen_field(e: u64) -> String {
    format!("g:{e}")
}

/// Creates the window record unless the key exists; returns the stored `epoch` (incarnation), `config`
/// and `filter` (the caller's own when it created the record).
/// KEYS: the window key. ARGV: incarnation, config, filter.
pub(crate) const CREATE_SCRIPT: &str = "\
if redis.call('EXISTS', KEYS[1]) == 0 then \
  redis.call('HSET', KEYS[1], 'epoch', ARGV[1], 'config', ARGV[2], 'filter', ARGV[3]) \
end \
local v = redis.call('HMGET', KEYS[1], 'epoch', 'config', 'filter') \
for i = 1, 3 do if not v[i] then v[i] = '' end end \
return v";

/// Records generation `ARGV[2]` (a `g:<e>` field) with filter incarnation `ARGV[3]`, only if the
/// window's incarnation is still `ARGV[1]` and the field is not set yet; drops the fields of
/// generations below `ARGV[4]`. Returns `{'W', incarnation-or-empty}` if the window is not the
/// writer's, `{'E', incarnation}` if the field was already set, `{'N', incarnation}` if it set it.
pub(crate) const RECORD_SCRIPT: &str = "\
local w = redis.call('HGET', KEYS[1], 'epoch') \
if w ~= ARGV[1] then return {'W', w or ''} end \
local cur = redis.call('HGET', KEYS[1], ARGV[2]) \
if cur then return {'E', cur} end \
redis.call('HSET', KEYS[1], ARGV[2], ARGV[3]) \
local floor = tonumber(ARGV[4]) \
for _, f in ipairs(redis.call('HKEYS', KEYS[1])) do \
  if string.sub(f, 1, 2) == 'g:' and tonumber(string.sub(f, 3)) < floor then \
    redis.call('HDEL', KEYS[1], f) \
  end \
end \
return {'N', ARGV[3]}";

/// What a window is: its ring and grace, and the shape of every generation's filter.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct StoredWindowSettings {
    pub ring: Generations,
    pub grace_ms: u64,
}

impl StoredWindowSettings {
    /// The `config` field.
    pub(crate) fn encode(&self) -> String {
        format!(
            "{MAGIC} v={VERSION} width_ms={} generations={} grace_ms={}",
            self.ring.width_ms(),
            self.ring.generations(),
            self.grace_ms
        )
    }

    /// Parses the `config` field: magic, version, then exactly the three fields.
    pub(crate) fn decode(text: &[u8]) -> Result<StoredWindowSettings> {
        let bad = |why: String| Error::Corrupt(format!("shared window record: {why}"));
        let text = std::str::from_utf8(text).map_err(|_| bad("not UTF-8".into()))?;
        let mut words = text.split_ascii_whitespace();
        if words.next() != Some(MAGIC) {
            return Err(bad(format!("{text:?} is not a window record")));
        }
        let mut fields = std::collections::BTreeMap::new();
        for w in words {
            let (k, v) = w
                .split_once('=')
                .ok_or_else(|| bad(format!("{w:?} is not field=value")))?;
            let v: u64 = v
                .parse()
                .map_err(|_| bad(format!("{k}={v} is not a number")))?;
            if fields.insert(k, v).is_some() {
                return Err(bad(format!("field {k} appears twice")));
            }
        }
        let mut take = |k: &str| {
            fields
                .remove(k)
                .ok_or_else(|| bad(format!("missing field {k}")))
        };
        let version = take("v")?;
        if version != u64::from(VERSION) {
            return Err(bad(format!(
                "version {version}, this build reads version {VERSION}"
            )));
        }
        let width_ms = take("width_ms")?;
        let generations = take("generations")?;
        let grace_ms = take("grace_ms")?;
        if let Some(k) = fields.keys().next() {
            return Err(bad(format!("unknown field {k}")));
        }
        // The shape a window may have is one rule, the local window's.
        let ring = u32::try_from(generations)
            .ok()
            .and_then(|g| Generations::from_parts(width_ms, g).ok())
            .ok_or_else(|| bad(format!("impossible window shape in {text:?}")))?;
        Ok(StoredWindowSettings { ring, grace_ms })
    }
}

/// The `filter` field of the window incarnation `incarnation`: a ready filter record (the
/// shape).
pub(crate) fn encode_filter(shape: super::super::SharedShape, incarnation: u64) -> String {
    Record {
        shape,
        incarnation,
        state: State::Ready,
    }
    .encode()
}

/// A hexadecimal incarnation as stored in the record; `None` if it is not one (or zero).
pub(crate) fn parse_incarnation(text: &[u8]) -> Option<u64> {
    let s = std::str::from_utf8(text).ok()?;
    u64::from_str_radix(s.strip_prefix("0x")?, 16)
        .ok()
        .filter(|&e| e != 0)
}

/// An incarnation as stored in the record.
pub(crate) fn incarnation_text(e: u64) -> String {
    format!("{e:#018x}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn config_round_trips_and_rejects_damage() {
        let c = StoredWindowSettings {
            ring: Generations::from_parts(86_400_000, 7).unwrap(),
            grace_ms: 60_000,
        };
        let text = c.encode();
        assert_eq!(
            text,
            "bloomsled-window v=1 width_ms=86400000 generations=7 grace_ms=60000"
        );
        assert_eq!(StoredWindowSettings::decode(text.as_bytes()).unwrap(), c);
        for damaged in [
            text.replace("v=1", "v=2"),
            text.replace("generations=7", "generations=0"),
            text.replace("width_ms=86400000", "width_ms=0"),
            text.replace("generations=7", "generations=257"),
            text.replace("generations=7", "generations=4294967297"),
            text.replace("width_ms=86400000", "width_ms=18446744073709551615"),
            text.replace(" grace_ms=60000", ""),
            text.replace("7", "x"),
            format!("{text} extra=1"),
            format!("{text} generations=7"),
            text.replace("bloomsled-window", "bloomsled-shared"),
            String::new(),
        ] {
            assert!(
                matches!(
                    StoredWindowSettings::decode(damaged.as_bytes()),
                    Err(Error::Corrupt(_))
                ),
                "{damaged}"
            );
        }
        assert!(StoredWindowSettings::decode(&[0xff]).is_err());
    }

    #[test]
    fn incarnations_print_and_parse() {
        for e in [1, 0xdead_beef, u64::MAX] {
            assert_eq!(parse_incarnation(incarnation_text(e).as_bytes()), Some(e));
        }
        assert_eq!(incarnation_text(1), "0x0000000000000001");
        assert_eq!(parse_incarnation(b"0x0"), None);
        assert_eq!(parse_incarnation(b"12"), None);
        assert_eq!(parse_incarnation(b"0xzz"), None);
        assert_eq!(parse_incarnation(b""), None);
    }
}

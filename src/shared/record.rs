//! The config record: what a shared filter is, stored beside it in Redis.
//!
//! One string at `bloomsled:{NAME}:config`, a single line of `field=value` words so that
//! `redis-cli GET` shows it plainly:
//!
//! ```text
//! bloomsled-shared v=1 layout=blocked512 hash=xxh3-64 seed=0x626c6f6f6d736c64 k=7
//!   blocks=1875 shards=16 shard_blocks=118 stride=72 capacity=100000 epoch=0x9f… state=ready
//! ```
//!
//! Everything but `epoch` and `state` is the filter's *shape*: two clients agree on a filter
//! only if their shapes are equal. `epoch` identifies one incarnation of the filter (it is
//! also written into every block, see [`super::layout`]); `state` is `init` while the creator
//! writes the blocks and `ready` afterwards.

use std::fmt;

use crate::error::{DecodeError, Error, Result};

use super::layout::STRIDE;

/// The record format this build writes and reads.
pub(crate) const VERSION: u32 = 1;
const MAGIC: &str = "bloomsled-shared";
/// The local filter's block layout (`filter::layout`, snapshot hash kind 2): a filter made
/// with another layout sets other bits per key, so its record is refused.
const LAYOUT: &str = "blocked512-k2";
const HASH: &str = "xxh3-64";

/// Whether the creator has finished writing the blocks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum State {
    /// Blocks are being written; operations must wait.
    Init,
    /// The filter is usable.
    Ready,
}

/// The shape of a shared filter: everything two clients must agree on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SharedShape {
    /// Hash seed.
    pub seed: u64,
    /// Bits set per key.
    pub num_hashes: u32,
    /// 512-bit blocks in the whole filter.
    pub num_blocks: u64,
    /// Number of Redis keys the blocks are spread over.
    pub shards: u64,
    /// Blocks per shard key (the last shard may hold fewer).
    pub shard_blocks: u64,
    /// Items the filter was sized for.
    pub capacity: u64,
}

impl fmt::Display for SharedShape {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "layout={LAYOUT} hash={HASH} seed={:#x} k={} blocks={} shards={} shard_blocks={} \
             stride={STRIDE} capacity={}",
            self.seed,
            self.num_hashes,
            self.num_blocks,
            self.shards,
            self.shard_blocks,
            self.capacity
        )
    }
}

/// The whole record.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Record {
    pub shape: SharedShape,
    pub epoch: u64,
    pub state: State,
}

impl Record {
    /// The stored text.
    pub(crate) fn encode(&self) -> String {
        let state = match self.state {
            State::Init => "init",
            State::Ready => "ready",
        };
        format!(
            "{MAGIC} v={VERSION} {} epoch={:#x} state={state}",
            self.shape, self.epoch
        )
    }

    /// Parses a stored record: magic, then version, then every field exactly once.
    pub(crate) fn decode(text: &[u8]) -> Result<Record> {
        let bad = |why: String| Error::Corrupt(format!("shared filter config record: {why}"));
        let text = std::str::from_utf8(text).map_err(|_| bad("not UTF-8".into()))?;
        let mut words = text.split_ascii_whitespace();
        if words.next() != Some(MAGIC) {
            return Err(Error::Decode(DecodeError::BadMagic {
                got: text.bytes().take(16).collect(),
            }));
        }
        let mut fields = std::collections::BTreeMap::new();
        for w in words {
            let (k, v) = w
                .split_once('=')
                .ok_or_else(|| bad(format!("{w:?} is not field=value")))?;
            if fields.insert(k, v).is_some() {
                return Err(bad(format!("field {k} appears twice")));
            }
        }
        let mut take = |k: &str| {
            fields
                .remove(k)
                .ok_or_else(|| bad(format!("missing field {k}")))
        };
        let version: u32 = num(take("v")?).ok_or_else(|| bad("bad version".into()))?;
        if version != VERSION {
            return Err(Error::Decode(DecodeError::UnsupportedVersion {
                expected: VERSION,
                got: version,
            }));
        }
        for (k, want) in [("layout", LAYOUT), ("hash", HASH)] {
            let got = take(k)?;
            if got != want {
                return Err(bad(format!("{k}={got}, this build knows only {want}")));
            }
        }
        let mut field = |k: &str| -> Result<u64> {
            let v = take(k)?;
            num(v).ok_or_else(|| bad(format!("{k}={v} is not a number")))
        };
        let seed = field("seed")?;
        let num_hashes = field("k")?;
        let num_blocks = field("blocks")?;
        let shards = field("shards")?;
        let shard_blocks = field("shard_blocks")?;
        let stride = field("stride")?;
        let capacity = field("capacity")?;
        let epoch = field("epoch")?;
        let state = match take("state")? {
            "init" => State::Init,
            "ready" => State::Ready,
            s => return Err(bad(format!("unknown state {s}"))),
        };
        if let Some(k) = fields.keys().next() {
            return Err(bad(format!("unknown field {k}")));
        }
        let consistent = stride == STRIDE as u64
            && (1..=32).contains(&num_hashes)
            && num_blocks > 0
            && shard_blocks > 0
            && shards == num_blocks.div_ceil(shard_blocks)
            && capacity > 0
            && epoch != 0;
        if !consistent {
            return Err(bad(format!("inconsistent fields in {text:?}")));
        }
        Ok(Record {
            shape: SharedShape {
                seed,
                num_hashes: num_hashes as u32,
                num_blocks,
                shards,
                shard_blocks,
                capacity,
            },
            epoch,
            state,
        })
    }
}

/// A decimal or `0x` hexadecimal number.
fn num<T: TryFrom<u64>>(s: &str) -> Option<T> {
    let v = match s.strip_prefix("0x") {
        Some(hex) => u64::from_str_radix(hex, 16).ok()?,
        None => s.parse().ok()?,
    };
    T::try_from(v).ok()
}

/// A random non-zero epoch: the OS-seeded keys of std's `RandomState`, mixed with the time
/// and the process id, so two creators racing in one process or across hosts differ.
pub(crate) fn new_epoch() -> u64 {
    use std::hash::{BuildHasher, Hasher};
    use std::time::{SystemTime, UNIX_EPOCH};
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or(0);
    h.write_u128(now);
    h.write_u32(std::process::id());
    h.finish().max(1)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> Record {
        Record {
            shape: SharedShape {
                seed: 42,
                num_hashes: 7,
                num_blocks: 1875,
                shards: 16,
                shard_blocks: 118,
                capacity: 100_000,
            },
            epoch: 0xdead_beef,
            state: State::Ready,
        }
    }

    #[test]
    fn round_trips() {
        let r = sample();
        assert_eq!(Record::decode(r.encode().as_bytes()).unwrap(), r);
        let init = Record {
            state: State::Init,
            ..r
        };
        assert_eq!(Record::decode(init.encode().as_bytes()).unwrap(), init);
    }

    #[test]
    fn rejects_foreign_old_new_and_damaged_records() {
        let good = sample().encode();
        assert!(matches!(
            Record::decode(b"hello"),
            Err(Error::Decode(DecodeError::BadMagic { .. }))
        ));
        assert!(matches!(
            Record::decode(good.replace("v=1", "v=2").as_bytes()),
            Err(Error::Decode(DecodeError::UnsupportedVersion {
                expected: 1,
                got: 2
            }))
        ));
        for damaged in [
            good.replace("k=7", "k=0"),
            good.replace("k=7", "k=x"),
            good.replace(" k=7", ""),
            good.replace("stride=72", "stride=64"),
            good.replace("shards=16", "shards=15"),
            good.replace("epoch=0xdeadbeef", "epoch=0x0"),
            good.replace("state=ready", "state=gone"),
            good.replace("hash=xxh3-64", "hash=md5"),
            format!("{good} extra=1"),
            format!("{good} k=7"),
            good.replace("k=7", "k"),
        ] {
            assert!(
                matches!(Record::decode(damaged.as_bytes()), Err(Error::Corrupt(_))),
                "{damaged}"
            );
        }
        assert!(Record::decode(&[0xff, 0xfe]).is_err());
        assert!(Record::decode(b"").is_err());
    }

    #[test]
    fn epochs_are_nonzero_and_differ() {
        let a: std::collections::HashSet<u64> = (0..1000).map(|_| new_epoch()).collect();
        assert_eq!(a.len(), 1000);
        assert!(!a.contains(&0));
    }
}

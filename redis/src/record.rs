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
//! only if their shapes are equal. `epoch` (the field's stored name, kept from before the
//! code called it the *incarnation*) identifies one incarnation of the filter (it is
//! also written into every block, see [`super::layout`]); `state` is `init` while the creator
//! writes the blocks and `ready` afterwards.

use std::fmt;

use bloomsled::DecodeError;

use crate::error::{Error, Result};

use super::layout::Cells;

/// The record format this build writes and reads.
pub(crate) const VERSION: u32 = 1;
const MAGIC: &str = "bloomsled-shared";
/// The local filter's block layout (`filter::layout`, snapshot hash kind 2): a filter made
/// with another layout sets other bits per key, so its record is refused.
const LAYOUT: &str = "blocked512-k2";
/// The same layout with a 4-bit counter per position (the counting variant).
const LAYOUT_COUNTING: &str = "blocked512-k2-count4";
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
    /// A 4-bit saturating counter per position instead of a bit, so that keys can be
    /// removed ([`crate::SharedFilter::remove`]).
    pub counting: bool,
}

impl SharedShape {
    /// Bits or counters.
    pub(crate) fn cells(&self) -> Cells {
        if self.counting {
            Cells::Counters
        } else {
            Cells::Bits
        }
    }

    fn layout_name(&self) -> &'static str {
        if self.counting {
            LAYOUT_COUNTING
        } else {
            LAYOUT
        }
    }
}

impl fmt::Display for SharedShape {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "layout={} hash={HASH} seed={:#x} k={} blocks={} shards={} shard_blocks={} \
             stride={} capacity={}",
            self.layout_name(),
            self.seed,
            self.num_hashes,
            self.num_blocks,
            self.shards,
            self.shard_blocks,
            self.cells().stride(),
            self.capacity
        )
    }
}

/// The whole record.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Record {
    pub shape: SharedShape,
    pub incarnation: u64,
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
            self.shape, self.incarnation
        )
    }

    /// Parses a stored record: magic, then version, then every field exactly once.
    pub(crate) fn decode(text: &[u8]) -> Result<Record> {
        let text = std::str::from_utf8(text).map_err(|_| bad("not UTF-8".into()))?;
        let mut fields = Fields::parse(text)?;
        let counting = fields.header()?;
        let seed = fields.num("seed")?;
        let num_hashes = fields.num("k")?;
        let num_blocks = fields.num("blocks")?;
        let shards = fields.num("shards")?;
        let shard_blocks = fields.num("shard_blocks")?;
        let stride = fields.num("stride")?;
        let capacity = fields.num("capacity")?;
        let incarnation = fields.num("epoch")?;
        let state = match fields.take("state")? {
            "init" => State::Init,
            "ready" => State::Ready,
            s => return Err(bad(format!("unknown state {s}"))),
        };
        if let Some(k) = fields.0.keys().next() {
            return Err(bad(format!("unknown field {k}")));
        }
        let cells = if counting {
            Cells::Counters
        } else {
            Cells::Bits
        };
        let consistent = stride == cells.stride()
            && (1..=32).contains(&num_hashes)
            && num_blocks > 0
            && shard_blocks > 0
            && shards == num_blocks.div_ceil(shard_blocks)
            && capacity > 0
            && incarnation != 0;
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
                counting,
            },
            incarnation,
            state,
        })
    }
}

/// A corrupt record, and why.
fn bad(why: String) -> Error {
    Error::Corrupt(format!("shared filter config record: {why}"))
}

/// A record's `field=value` words, each taken out once as it is read.
struct Fields<'a>(std::collections::BTreeMap<&'a str, &'a str>);

impl<'a> Fields<'a> {
    /// The fields after the magic word; a field given twice is corrupt.
    fn parse(text: &'a str) -> Result<Self> {
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
        Ok(Fields(fields))
    }

    /// Takes out the field `k`, which must be there.
    fn take(&mut self, k: &str) -> Result<&'a str> {
        self.0
            .remove(k)
            .ok_or_else(|| bad(format!("missing field {k}")))
    }

    /// Takes out the number field `k`.
    fn num(&mut self, k: &str) -> Result<u64> {
        let v = self.take(k)?;
        num(v).ok_or_else(|| bad(format!("{k}={v} is not a number")))
    }

    /// The version, layout and hash this build must know; whether the layout is counting.
    fn header(&mut self) -> Result<bool> {
        let version: u32 = num(self.take("v")?).ok_or_else(|| bad("bad version".into()))?;
        if version != VERSION {
            return Err(Error::Decode(DecodeError::UnsupportedVersion {
                expected: VERSION,
                got: version,
            }));
        }
        let counting = match self.take("layout")? {
            LAYOUT => false,
            LAYOUT_COUNTING => true,
            got => {
                return Err(bad(format!(
                    "layout={got}, this build knows only {LAYOUT} and {LAYOUT_COUNTING}"
                )))
            }
        };
        let got = self.take("hash")?;
        if got != HASH {
            return Err(bad(format!("hash={got}, this build knows only {HASH}")));
        }
        Ok(counting)
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

/// A random non-zero incarnation from the operating system's generator, so two creators racing
/// in one process or across hosts differ. Should the generator fail (it does not on the
/// platforms Redis runs on), the time and process id stand in, mixed by xxh3.
pub(crate) fn new_incarnation() -> u64 {
    let mut b = [0u8; 8];
    if getrandom::fill(&mut b).is_ok() {
        return u64::from_le_bytes(b).max(1);
    }
    use std::time::{SystemTime, UNIX_EPOCH};
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or(0);
    let mut seed = now.to_le_bytes().to_vec();
    seed.extend_from_slice(&std::process::id().to_le_bytes());
    bloomsled::hash::hash_key(&seed, 0).max(1)
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
                counting: false,
            },
            incarnation: 0xdead_beef,
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
        let mut counting = r;
        counting.shape.counting = true;
        let text = counting.encode();
        assert!(text.contains("layout=blocked512-k2-count4") && text.contains("stride=264"));
        assert_eq!(Record::decode(text.as_bytes()).unwrap(), counting);
        // The counting layout with the bits' stride (or the reverse) is inconsistent.
        assert!(Record::decode(text.replace("stride=264", "stride=72").as_bytes()).is_err());
        let bits = r.encode().replace("blocked512-k2", "blocked512-k2-count4");
        assert!(Record::decode(bits.as_bytes()).is_err());
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
            good.replace("layout=blocked512-k2", "layout=blocked512-k3"),
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
    fn incarnations_are_nonzero_and_differ() {
        let a: std::collections::HashSet<u64> = (0..1000).map(|_| new_incarnation()).collect();
        assert_eq!(a.len(), 1000);
        assert!(!a.contains(&0));
    }
}

//! Statistics of a shared filter, computed in Redis (`BITCOUNT`), without pulling it.

use crate::error::Result;
use bloomsled::blocked_fpr;

use redis::Value;

use super::filter::SharedFilter;
use super::layout::Cells;
use super::ops::Incarnation;
use super::record::SharedShape;
use super::value;

/// What a shared filter holds, like the local [`bloomsled::Stats`] for a filter.
#[derive(Debug, Clone, PartialEq)]
pub struct SharedStats {
    /// The filter's name.
    pub name: String,
    /// Its shape.
    pub shape: SharedShape,
    /// The filter's incarnation tag: random, non-zero, chosen when it was created.
    pub incarnation: u64,
    /// Filter bits (tags excluded).
    pub num_bits: u64,
    /// Bits set (tags excluded).
    pub ones: u64,
    /// `ones / num_bits`.
    pub fill_ratio: f64,
    /// Items estimated from the fill: −(m/k)·ln(1 − fill).
    pub estimated_items: u64,
    /// The blocked model's false-positive rate at the estimated items.
    pub estimated_fpr: f64,
    /// The model's rate at capacity: what the filter was sized for.
    pub target_fpr: f64,
    /// Bytes of Redis strings holding the filter (bits and incarnation tags).
    pub redis_bytes: u64,
}

/// Items a filter of `bits` bits with `ones` set most likely holds.
pub(crate) fn items_estimate(ones: u64, bits: u64, shape: SharedShape) -> u64 {
    let fill = ones as f64 / bits.max(1) as f64;
    if fill >= 1.0 {
        return u64::MAX;
    }
    (-(bits as f64) / f64::from(shape.num_hashes) * (1.0 - fill).ln()).round() as u64
}

impl SharedFilter {
    /// Fill and estimates: the set bits of every shard are counted in Redis with `BITCOUNT`
    /// (one pipeline), after checking each shard's length and the incarnation of its first and
    /// last block.
    ///
    /// On a counting filter "bits set" are the non-zero counters, counted as the shards are
    /// read through (`GETRANGE`, about 16 MiB at a time): Redis has no command that counts
    /// non-zero nibbles.
    pub fn stats(&self) -> Result<SharedStats> {
        let (ones, redis_bytes) = match self.layout.cells {
            Cells::Bits => self.count_bits()?,
            Cells::Counters => {
                let mut ones = 0u64;
                self.read_blocks(|_, cells| ones += counters_set(cells))?;
                (ones, self.wire().shard_bytes())
            }
        };
        Ok(self.wire().stats_of(ones, redis_bytes))
    }
}

/// The non-zero 4-bit counters of a counting block's cells.
pub(crate) fn counters_set(cells: &[u8]) -> u64 {
    cells
        .iter()
        .map(|&b| u64::from(b & 0xf != 0) + u64::from(b >> 4 != 0))
        .sum()
}

impl Incarnation<'_> {
    /// Bytes of all the shards (blocks and tags), as created.
    pub(crate) fn shard_bytes(&self) -> u64 {
        (0..self.layout.shards as usize)
            .map(|s| self.layout.shard_len(s))
            .sum()
    }

    /// The stats of this filter with `ones` cells set in `redis_bytes` of shards.
    pub(super) fn stats_of(&self, ones: u64, redis_bytes: u64) -> SharedStats {
        let num_bits = self.shape.num_blocks * 512;
        let estimated_items = items_estimate(ones, num_bits, self.shape);
        let per_key = |n: u64| num_bits as f64 / n.max(1) as f64;
        SharedStats {
            name: self.layout.name.clone(),
            shape: self.shape,
            incarnation: self.incarnation,
            num_bits,
            ones,
            fill_ratio: ones as f64 / num_bits as f64,
            estimated_items,
            estimated_fpr: if estimated_items == 0 {
                0.0
            } else {
                blocked_fpr(per_key(estimated_items), self.shape.num_hashes)
            },
            target_fpr: blocked_fpr(per_key(self.shape.capacity), self.shape.num_hashes),
            redis_bytes,
        }
    }

    /// The commands that count a plain filter's set bits: per shard its length, its
    /// `BITCOUNT` and the tags of its first and last block (one pipeline).
    pub(super) fn bit_count_cmds(&self) -> Vec<redis::Cmd> {
        let l = self.layout;
        let tag_range = |s: usize, j: u64| {
            let a = l.addr_in(s, j);
            redis::cmd("GETRANGE")
                .arg(l.key(s))
                .arg(a.tag_byte())
                .arg(a.last_byte())
                .clone()
        };
        (0..l.shards as usize)
            .flat_map(|s| {
                [
                    redis::cmd("STRLEN").arg(l.key(s)).clone(),
                    redis::cmd("BITCOUNT").arg(l.key(s)).clone(),
                    tag_range(s, 0),
                    tag_range(s, l.blocks_in(s) - 1),
                ]
            })
            .collect()
    }

    /// Set bits and bytes of a plain filter from the replies to
    /// [`Incarnation::bit_count_cmds`], once each shard's length and tags are checked.
    pub(super) fn read_bit_counts(&self, replies: Vec<Value>) -> Result<(u64, u64)> {
        let l = self.layout;
        let tag_ones = u64::from(self.incarnation.count_ones());
        let mut ones = 0u64;
        let mut redis_bytes = 0u64;
        for (s, r) in replies.chunks_exact(4).enumerate() {
            let key = l.key(s);
            let len = value::int(r[0].clone(), key)? as u64;
            if len != l.shard_len(s) {
                return Err(self.lost(
                    s,
                    format!("shard is {len} bytes, expected {}", l.shard_len(s)),
                ));
            }
            for (reply, j) in [(&r[2], 0), (&r[3], l.blocks_in(s) - 1)] {
                let tag = value::bytes(reply.clone(), key)?;
                self.check_tag(l.addr_in(s, j), &tag)?;
            }
            let counted = value::int(r[1].clone(), key)? as u64;
            ones += counted.saturating_sub(tag_ones * l.blocks_in(s));
            redis_bytes += len;
        }
        Ok((ones, redis_bytes))
    }
}

impl SharedFilter {
    /// Set bits and bytes of a plain filter, by `BITCOUNT` of every shard (one pipeline),
    /// after checking each shard's length and the incarnation of its first and last block.
    fn count_bits(&self) -> Result<(u64, u64)> {
        let wire = self.wire();
        let cmds = wire.bit_count_cmds();
        wire.read_bit_counts(self.session.run(|| cmds.clone())?)
    }
}

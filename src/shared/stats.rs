//! Statistics of a shared filter, computed in Redis (`BITCOUNT`), without pulling it.

use crate::error::Result;
use crate::filter::math::blocked_fpr;

use super::filter::SharedFilter;
use super::layout::{BlockAddr, BLOCK_BYTES, STRIDE};
use super::record::SharedShape;
use super::{lost, value};

/// What a shared filter holds, like the local [`crate::Stats`] for a filter.
#[derive(Debug, Clone, PartialEq)]
pub struct SharedStats {
    /// The filter's name.
    pub name: String,
    /// Its shape.
    pub shape: SharedShape,
    /// The epoch of this incarnation.
    pub epoch: u64,
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
    /// Bytes of Redis strings holding the filter (bits and epoch tags).
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
    /// Counts the set bits of every shard with `BITCOUNT` (one pipeline), after checking
    /// each shard's length and the epoch of its first and last block.
    pub fn stats(&self) -> Result<SharedStats> {
        let l = &self.layout;
        let tag_ones = u64::from(self.epoch.count_ones());
        let cmds: Vec<_> = (0..l.shards as usize)
            .flat_map(|s| {
                let last = l.shard_len(s) - STRIDE as u64;
                [
                    redis::cmd("STRLEN").arg(l.key(s)).clone(),
                    redis::cmd("BITCOUNT").arg(l.key(s)).clone(),
                    tag_range(l.key(s), 0),
                    tag_range(l.key(s), last),
                ]
            })
            .collect();
        let replies = self.session.run(|| cmds.clone())?;
        let mut ones = 0u64;
        let mut redis_bytes = 0u64;
        for (s, r) in replies.chunks_exact(4).enumerate() {
            let key = l.key(s);
            let len = value::int(r[0].clone(), key)? as u64;
            if len != l.shard_len(s) {
                return Err(lost(
                    self,
                    s,
                    format!("shard is {len} bytes, expected {}", l.shard_len(s)),
                ));
            }
            for (reply, at) in [(&r[2], 0), (&r[3], len - STRIDE as u64)] {
                let tag = value::bytes(reply.clone(), key)?;
                self.check_tag(BlockAddr { shard: s, byte: at }, &tag)?;
            }
            let counted = value::int(r[1].clone(), key)? as u64;
            ones += counted.saturating_sub(tag_ones * l.blocks_in(s));
            redis_bytes += len;
        }
        let num_bits = self.shape.num_blocks * 512;
        let estimated_items = items_estimate(ones, num_bits, self.shape);
        let per_key = |n: u64| num_bits as f64 / n.max(1) as f64;
        Ok(SharedStats {
            name: l.name.clone(),
            shape: self.shape,
            epoch: self.epoch,
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
        })
    }
}

/// `GETRANGE` of the tag of the block at byte `at`.
fn tag_range(key: &str, at: u64) -> redis::Cmd {
    let first = at + BLOCK_BYTES as u64;
    redis::cmd("GETRANGE")
        .arg(key)
        .arg(first)
        .arg(first + 7)
        .clone()
}

//! Push and pull: copying bits between a local [`Filter`] and a shared one.
//!
//! Both are byte copies: a shard holds each block's little-endian bytes as the local filter
//! does, plus the 8-byte epoch tag after each block.

use redis::Value;

use crate::error::{Error, Result};
use crate::filter::layout::BLOCK_WORDS;
use crate::filter::Filter;

use super::filter::SharedFilter;
use super::init::CHUNK_BLOCKS;
use super::layout::{BlockAddr, BLOCK_BYTES, STRIDE};
use super::{lost, value};

/// ORs the temporary copy into the shard, but only if the shard's first block still
/// carries our epoch: a lost shard is reported, never resurrected with pushed bits only.
/// The copy has zero tags, so `BITOP OR` leaves the shard's tags as they were.
const PUSH_SCRIPT: &str = "\
local t = redis.call('GETRANGE', KEYS[1], ARGV[1], ARGV[2]) \
if t ~= ARGV[3] then redis.call('DEL', KEYS[2]) return 0 end \
redis.call('BITOP', 'OR', KEYS[1], KEYS[1], KEYS[2]) \
redis.call('DEL', KEYS[2]) \
return 1";

impl SharedFilter {
    /// ORs every bit of `local` into the shared filter (never clears a bit), shard by shard:
    /// the bits go to a temporary key in the shard's slot, then one script checks the
    /// shard's epoch and ORs them in with `BITOP`, atomically with respect to concurrent
    /// adds. `local` must have the same blocks, `k` and seed
    /// ([`Error::RedisShapeMismatch`] otherwise). Returns the number of shards written.
    pub fn push(&self, local: &Filter) -> Result<u64> {
        self.check_local_shape(local)?;
        let words = local.words();
        let mut written = 0;
        for s in 0..self.layout.shards as usize {
            let first = self.layout.first_block(s) as usize * BLOCK_WORDS;
            let n = self.layout.blocks_in(s) as usize;
            let mine = &words[first..first + n * BLOCK_WORDS];
            if mine.iter().all(|&w| w == 0) {
                continue;
            }
            let shard = self.layout.key(s);
            let tmp = format!("{shard}:push:{:x}", super::record::new_epoch());
            let mut cmds = Vec::new();
            for (c, blocks) in mine.chunks(CHUNK_BLOCKS as usize * BLOCK_WORDS).enumerate() {
                let mut bytes = Vec::with_capacity(blocks.len() / BLOCK_WORDS * STRIDE);
                for block in blocks.chunks_exact(BLOCK_WORDS) {
                    for w in block {
                        bytes.extend_from_slice(&w.to_le_bytes());
                    }
                    bytes.extend_from_slice(&[0; STRIDE - BLOCK_BYTES]);
                }
                let at = c as u64 * CHUNK_BLOCKS * STRIDE as u64;
                cmds.push(redis::cmd("SETRANGE").arg(&tmp).arg(at).arg(bytes).clone());
            }
            // A push cut short leaves no garbage behind for long.
            cmds.push(redis::cmd("EXPIRE").arg(&tmp).arg(3600).clone());
            let tag = BLOCK_BYTES as u64;
            cmds.push(
                redis::cmd("EVAL")
                    .arg(PUSH_SCRIPT)
                    .arg(2)
                    .arg(shard)
                    .arg(&tmp)
                    .arg(tag)
                    .arg(tag + 7)
                    .arg(&self.epoch.to_be_bytes()[..])
                    .clone(),
            );
            let replies = self.session.run(|| cmds.clone())?;
            if replies.last() != Some(&Value::Int(1)) {
                return Err(lost(
                    self,
                    s,
                    "push found the shard gone or recreated; nothing was written to it".into(),
                ));
            }
            written += 1;
        }
        Ok(written)
    }

    /// A local [`Filter`] bit-identical to the shared one, read shard by shard with
    /// `GETRANGE`; every block's epoch is checked, so a filter lost in part is an error.
    pub fn pull(&self) -> Result<Filter> {
        let mut words = Vec::with_capacity(self.shape.num_blocks as usize * BLOCK_WORDS);
        for s in 0..self.layout.shards as usize {
            let len = self.layout.shard_len(s);
            let step = CHUNK_BLOCKS * STRIDE as u64;
            let key = self.layout.key(s);
            let cmds: Vec<_> = (0..len)
                .step_by(step as usize)
                .map(|at| {
                    redis::cmd("GETRANGE")
                        .arg(key)
                        .arg(at)
                        .arg((at + step).min(len) - 1)
                        .clone()
                })
                .collect();
            let mut bytes = Vec::with_capacity(len as usize);
            for r in self.session.run(|| cmds.clone())? {
                bytes.extend_from_slice(&value::bytes(r, key)?);
            }
            if bytes.len() as u64 != len {
                return Err(lost(
                    self,
                    s,
                    format!(
                        "shard holds {} of its {len} bytes: deleted, flushed, evicted or expired",
                        bytes.len()
                    ),
                ));
            }
            for (j, block) in bytes.chunks_exact(STRIDE).enumerate() {
                let addr = BlockAddr {
                    shard: s,
                    byte: (j * STRIDE) as u64,
                };
                self.check_tag(addr, &block[BLOCK_BYTES..])?;
                words.extend(
                    block[..BLOCK_BYTES]
                        .chunks_exact(8)
                        .map(|w| u64::from_le_bytes(w.try_into().unwrap_or([0; 8]))),
                );
            }
        }
        let ones: u64 = words.iter().map(|w| u64::from(w.count_ones())).sum();
        let items = super::stats::items_estimate(ones, words.len() as u64 * 64, self.shape);
        Filter::from_parts(
            &words,
            self.shape.num_hashes,
            self.shape.seed,
            self.shape.capacity,
            items,
        )
    }

    fn check_local_shape(&self, local: &Filter) -> Result<()> {
        let theirs = local.shape();
        if theirs.num_blocks != self.shape.num_blocks
            || theirs.num_hashes != self.shape.num_hashes
            || theirs.seed != self.shape.seed
        {
            return Err(Error::RedisShapeMismatch {
                name: self.layout.name.clone(),
                asked: format!("local filter: {theirs}"),
                found: self.shape.to_string(),
            });
        }
        Ok(())
    }
}

//! Push and pull: copying cells between a local filter and a shared one.
//!
//! Both are byte copies: a shard holds each block's little-endian bytes as the local filter
//! does, plus the 8-byte incarnation tag after each block. Both stream: at most one pipeline of
//! about 16 MiB is in memory besides the local filter.

use redis::Value;

use bloomsled::FilterShape;

use crate::error::{Error, Result};
use bloomsled::layout::BLOCK_WORDS;
use bloomsled::{CountingFilter, Filter};

use super::filter::SharedFilter;
use super::init::PIPELINE_BYTES;
use super::layout::{Cells, BLOCK_BYTES, TAG_BYTES};
use super::ops::Incarnation;
use super::{lost, value};

/// ORs the temporary copy into the shard, but only if the shard's first block still
/// carries our incarnation: a lost shard is reported, never resurrected with pushed bits only.
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
    /// shard's incarnation and ORs them in with `BITOP`, atomically with respect to concurrent
    /// adds. `local` must have the same blocks, `k` and seed
    /// ([`Error::RedisShapeMismatch`] otherwise). Returns the number of shards written.
    ///
    /// A counting shared filter cannot take bits (they carry no counts): add the keys with
    /// [`SharedFilter::insert_many`] instead ([`Error::InvalidConfig`]).
    pub fn push(&self, local: &Filter) -> Result<u64> {
        self.check_local_shape(&local.shape())?;
        if self.layout.cells == Cells::Counters {
            return Err(Error::config(format!(
                "shared filter {:?} counts: push its keys with add_many, a filter's bits \
                 carry no counts",
                self.layout.name
            )));
        }
        let mut written = 0;
        for s in 0..self.layout.shards as usize {
            if self.push_shard(local, s)? {
                written += 1;
            }
        }
        Ok(written)
    }

    /// [`Self::push`] of shard `s`: its blocks of `local` into a temporary key, pipelined,
    /// then ORed in by the script if the shard's incarnation is still this handle's. `false` if
    /// `local` has no bit in the shard (nothing sent).
    fn push_shard(&self, local: &Filter, s: usize) -> Result<bool> {
        let stride = self.layout.stride() as usize;
        let chunk_blocks = self.layout.cells.chunk_blocks();
        let first = self.layout.first_block(s) as usize;
        let n = self.layout.blocks_in(s) as usize;
        let block = |j: usize| local.block_words(first + j);
        if (0..n).all(|j| block(j) == [0; BLOCK_WORDS]) {
            return Ok(false);
        }
        let shard = self.layout.key(s);
        let tmp = format!("{shard}:push:{:x}", super::record::new_incarnation());
        let mut cmds = Vec::new();
        let mut pending = 0u64;
        let mut at = 0u64;
        for start in (0..n).step_by(chunk_blocks as usize) {
            let end = (start + chunk_blocks as usize).min(n);
            let mut bytes = Vec::with_capacity((end - start) * stride);
            for j in start..end {
                for w in block(j) {
                    bytes.extend_from_slice(&w.to_le_bytes());
                }
                bytes.extend_from_slice(&[0; TAG_BYTES]);
            }
            pending += bytes.len() as u64;
            cmds.push(redis::cmd("SETRANGE").arg(&tmp).arg(at).arg(bytes).clone());
            at += ((end - start) * stride) as u64;
            if start == 0 {
                // A push cut short leaves no garbage behind for long.
                cmds.push(redis::cmd("EXPIRE").arg(&tmp).arg(3600).clone());
            }
            if pending >= PIPELINE_BYTES {
                let batch = std::mem::take(&mut cmds);
                self.session.run(|| batch.clone())?;
                pending = 0;
            }
        }
        let tag = BLOCK_BYTES as u64;
        cmds.push(
            redis::cmd("EVAL")
                .arg(PUSH_SCRIPT)
                .arg(2)
                .arg(shard)
                .arg(&tmp)
                .arg(tag)
                .arg(tag + 7)
                .arg(&self.incarnation.to_be_bytes()[..])
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
        Ok(true)
    }

    /// A local [`Filter`] bit-identical to the shared one (for a counting shared filter:
    /// its bits, set where a counter is non-zero, as [`CountingFilter::bits`] holds them),
    /// read shard by shard with `GETRANGE`; every block's incarnation is checked, so a filter lost
    /// in part is an error.
    pub fn pull(&self) -> Result<Filter> {
        let f = Filter::with_shape(self.local_shape(), self.shape.capacity)?;
        let mut ones = 0u64;
        self.read_blocks(|b, cells| {
            let words: [u64; BLOCK_WORDS] = match self.layout.cells {
                Cells::Bits => std::array::from_fn(|j| le_word(cells, j)),
                Cells::Counters => {
                    let mut bits = [0u64; BLOCK_WORDS];
                    for j in 0..BLOCK_WORDS * 4 {
                        bits[j / 4] |=
                            bloomsled::layout::nonzero_nibbles(le_word(cells, j)) << (16 * (j % 4));
                    }
                    bits
                }
            };
            ones += words.iter().map(|w| u64::from(w.count_ones())).sum::<u64>();
            f.store_block(b as usize, &words);
        })?;
        f.set_items(super::stats::items_estimate(
            ones,
            self.shape.num_blocks * 512,
            self.shape,
        ));
        Ok(f)
    }

    /// A local [`CountingFilter`] with exactly the shared counting filter's counters (and
    /// so its bits); [`Error::InvalidConfig`] for a filter without counters.
    pub fn pull_counting(&self) -> Result<CountingFilter> {
        if self.layout.cells != Cells::Counters {
            return Err(Error::config(format!(
                "shared filter {:?} has bits, not counters: use pull",
                self.layout.name
            )));
        }
        let f = CountingFilter::with_shape(self.local_shape(), self.shape.capacity)?;
        let mut nonzero = 0u64;
        let mut words = [0u64; BLOCK_WORDS * 4];
        self.read_blocks(|b, cells| {
            for (j, w) in words.iter_mut().enumerate() {
                *w = le_word(cells, j);
                nonzero += u64::from(bloomsled::layout::nonzero_nibbles(*w).count_ones());
            }
            f.store_counter_block(b as usize, &words);
        })?;
        f.set_items(super::stats::items_estimate(
            nonzero,
            self.shape.num_blocks * 512,
            self.shape,
        ));
        Ok(f)
    }

    /// Calls `visit(global block, cells)` for every block in order, reading each shard with
    /// `GETRANGE`s of about 1 MiB in pipelines of about 16 MiB; checks every shard's
    /// length and every block's incarnation.
    pub(super) fn read_blocks(&self, mut visit: impl FnMut(u64, &[u8])) -> Result<()> {
        let wire = self.wire();
        for read in wire.block_reads() {
            let cmds = wire.block_read_cmds(&read);
            wire.visit_block_read(&read, self.session.run(|| cmds.clone())?, &mut visit)?;
        }
        Ok(())
    }

    /// The local filter shape of this shared filter.
    fn local_shape(&self) -> FilterShape {
        FilterShape {
            num_blocks: self.shape.num_blocks,
            num_hashes: self.shape.num_hashes,
            seed: self.shape.seed,
        }
    }

    fn check_local_shape(&self, theirs: &FilterShape) -> Result<()> {
        if *theirs != self.local_shape() {
            return Err(Error::RedisShapeMismatch {
                name: self.layout.name.clone(),
                asked: format!("local filter: {theirs}"),
                found: self.shape.to_string(),
            });
        }
        Ok(())
    }
}

/// Little-endian word `j` of `bytes`.
#[inline]
fn le_word(bytes: &[u8], j: usize) -> u64 {
    u64::from_le_bytes(bytes[j * 8..j * 8 + 8].try_into().unwrap_or([0; 8]))
}

/// One pipeline of a read through every block: `GETRANGE`s of one shard from these byte
/// offsets, each [`Incarnation::block_step`] bytes long (the last one shorter).
pub(super) struct BlockRead {
    shard: usize,
    starts: Vec<u64>,
}

impl Incarnation<'_> {
    /// Bytes read by one `GETRANGE` of a read through every block (about 1 MiB).
    fn block_step(&self) -> u64 {
        self.layout.cells.chunk_blocks() * self.layout.stride()
    }

    /// The pipelines (about 16 MiB each) that read every block, shard after shard: the
    /// transport-free half of [`SharedFilter::read_blocks`], for the async filter too.
    pub(super) fn block_reads(&self) -> Vec<BlockRead> {
        let step = self.block_step();
        let per_pipeline = (PIPELINE_BYTES / step).max(1) as usize;
        (0..self.layout.shards as usize)
            .flat_map(|shard| {
                let starts: Vec<u64> = (0..self.layout.shard_len(shard))
                    .step_by(step as usize)
                    .collect();
                starts
                    .chunks(per_pipeline)
                    .map(|c| BlockRead {
                        shard,
                        starts: c.to_vec(),
                    })
                    .collect::<Vec<_>>()
            })
            .collect()
    }

    /// The `GETRANGE`s of one [`BlockRead`].
    pub(super) fn block_read_cmds(&self, read: &BlockRead) -> Vec<redis::Cmd> {
        let (key, len, step) = (
            self.layout.key(read.shard),
            self.layout.shard_len(read.shard),
            self.block_step(),
        );
        read.starts
            .iter()
            .map(|&at| {
                redis::cmd("GETRANGE")
                    .arg(key)
                    .arg(at)
                    .arg((at + step).min(len) - 1)
                    .clone()
            })
            .collect()
    }

    /// Reads the replies of [`Incarnation::block_read_cmds`]: checks that the shard has all
    /// its bytes and every block its incarnation, and calls `visit(global block, cells)` for each
    /// block in order.
    pub(super) fn visit_block_read(
        &self,
        read: &BlockRead,
        replies: Vec<Value>,
        visit: &mut dyn FnMut(u64, &[u8]),
    ) -> Result<()> {
        let l = self.layout;
        let (s, stride, step) = (read.shard, l.stride(), self.block_step());
        let (key, len) = (l.key(s), l.shard_len(s));
        if replies.len() != read.starts.len() {
            return Err(Error::ReportableBug(format!(
                "{} replies to {} block reads",
                replies.len(),
                read.starts.len()
            )));
        }
        for (&at, r) in read.starts.iter().zip(replies) {
            let bytes = value::bytes(r, key)?;
            let want = (at + step).min(len) - at;
            if bytes.len() as u64 != want {
                return Err(self.lost(
                    s,
                    format!(
                        "shard holds {} of its {len} bytes: deleted, flushed, evicted or expired",
                        at + bytes.len() as u64
                    ),
                ));
            }
            for (j, block) in bytes.chunks_exact(stride as usize).enumerate() {
                let j = at / stride + j as u64;
                let (cells, tag) = block.split_at(block.len() - TAG_BYTES);
                self.check_tag(l.addr_in(s, j), tag)?;
                visit(l.first_block(s) + j, cells);
            }
        }
        Ok(())
    }
}

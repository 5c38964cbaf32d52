//! Adds, lookups and removes, in batches: what goes over the wire for each key and how the
//! replies are read.
//!
//! - **Lookup**: one `GETRANGE` of the key's block and its tag per key.
//! - **Add**: one `BITFIELD` per shard a batch touches (split past [`MAX_OPS`] cells): a
//!   `GET i64` of one block's tag, then for every key of the batch in that shard its cells,
//!   `SET u1 <bit> 1` (bits) or `INCRBY u4 <counter> 1` under `OVERFLOW SAT` (counters). The
//!   replies are the old bits or the new counts, key after key, so each key learns whether
//!   it was new. One command per shard instead of one per key: the server parses, looks up
//!   and replies once per shard (the cost that bounded batched adds when each key was its own
//!   command).
//! - **Remove** (counting filters): one script per shard a batch touches. For each key in
//!   order it reads the key's counters and, only if none is zero, lowers each one that is
//!   not stuck at 15. A replayed script (a pipeline re-sent after a dropped connection or a
//!   cluster redirection) returns its first answer and changes nothing: a remove applied
//!   twice could take a counter another key needs down to zero.
//!
//! **Why one tag per command is enough.** A command runs atomically on its shard key. The
//! only ways a shard key loses its blocks are to vanish (flush, eviction, expiry, restart,
//! failover, `DEL`) or to be replaced whole by a new `create` (a `SET` of fresh blocks).
//! A vanished key reads as zeros wherever a late writer may have recreated it, and a
//! replaced one carries the new incarnation in every block: so the tag of any one block of the
//! shard, read in the same command, tells whether all of them are this filter's.

use redis::Value;

use crate::error::{Error, Result};
use bloomsled::hash::hash_key;
use bloomsled::layout::{block_index, block_masks, BLOCK_WORDS};

use super::filter::SharedFilter;
use super::layout::{counter_at, BlockAddr, Cells, Layout, TAG_BYTES};
use super::record::SharedShape;
use super::resp::{Sink, INCRBY_U4, ONE, SET_U1};
use super::value;

mod remove;

/// Cells written by one `BITFIELD` (or script) at most: bounds how long one command holds
/// the server (a few hundred microseconds) and the size of its reply.
const MAX_OPS: usize = 4096;

/// A key's block and its cells.
pub(super) struct Probe {
    pub addr: BlockAddr,
    pub masks: [u64; BLOCK_WORDS],
}

impl Probe {
    /// The block positions the key uses, distinct, ascending.
    fn positions(&self) -> impl Iterator<Item = usize> + '_ {
        self.masks.iter().enumerate().flat_map(|(w, &m)| {
            let mut m = m;
            std::iter::from_fn(move || {
                (m != 0).then(|| {
                    let p = w * 64 + m.trailing_zeros() as usize;
                    m &= m - 1;
                    p
                })
            })
        })
    }

    fn cells(&self) -> usize {
        self.masks.iter().map(|m| m.count_ones() as usize).sum()
    }
}

/// One add pipeline's keys: their probes, and the commands (groups) they go out in.
pub(super) struct AddBatch {
    plan: Vec<Probe>,
    groups: Vec<Group>,
}

impl AddBatch {
    /// The number of commands [`SharedFilter::write_add`] writes for this batch.
    pub(super) fn commands(&self) -> usize {
        self.groups.len()
    }
}

/// One write command: keys of one shard, in batch order.
struct Group {
    shard: usize,
    keys: Vec<usize>,
    cells: usize,
}

/// The keys of `plan` by shard, each shard's run cut into commands of at most [`MAX_OPS`]
/// cells.
fn groups(plan: &[Probe], shards: usize) -> Vec<Group> {
    let mut by_shard: Vec<Vec<usize>> = vec![Vec::new(); shards];
    for (i, p) in plan.iter().enumerate() {
        by_shard[p.addr.shard].push(i);
    }
    let mut out = Vec::new();
    for (shard, keys) in by_shard.into_iter().enumerate() {
        let mut g = Group {
            shard,
            keys: Vec::new(),
            cells: 0,
        };
        for i in keys {
            let n = plan[i].cells();
            if g.cells + n > MAX_OPS && !g.keys.is_empty() {
                let next = Group {
                    shard,
                    keys: Vec::new(),
                    cells: 0,
                };
                out.push(std::mem::replace(&mut g, next));
            }
            g.keys.push(i);
            g.cells += n;
        }
        if !g.keys.is_empty() {
            out.push(g);
        }
    }
    out
}

/// One incarnation of a shared filter as the wire sees it: where its blocks live, its
/// shape, and the incarnation every block carries. What a key's commands are and what their
/// replies mean depends on nothing else, so the sync [`SharedFilter`] and the async one
/// (feature `tokio`) write and read the same bytes through it; they differ only in how
/// the commands travel.
#[derive(Clone, Copy)]
pub(crate) struct Incarnation<'a> {
    pub layout: &'a Layout,
    pub shape: SharedShape,
    pub incarnation: u64,
}

impl Incarnation<'_> {
    pub(super) fn probe(&self, key: &[u8]) -> Probe {
        let h = hash_key(key, self.shape.seed);
        let block = block_index(h, self.shape.num_blocks) as u64;
        Probe {
            addr: self.layout.addr(block),
            masks: block_masks(h, self.shape.num_hashes),
        }
    }

    pub(super) fn plan<K: AsRef<[u8]>>(&self, keys: &[K]) -> Vec<Probe> {
        keys.iter().map(|k| self.probe(k.as_ref())).collect()
    }
}

impl SharedFilter {
    /// Adds one pipeline's worth of keys: see the module documentation.
    ///
    /// An add is not replayed blindly: its replay would answer "present" for the keys a
    /// lost first attempt set. When it may have reached Redis before the connection failed,
    /// a lookup of its keys (a read, retried freely) tells whether it ran (see
    /// [`Incarnation::add_may_have_run`] and `retry::Resend`): it is sent again only if it
    /// did not, else [`Error::RedisOutcomeUnknown`]. The async filter keeps the same rule.
    pub(super) fn add_batch<K: AsRef<[u8]>>(&self, keys: &[K], out: &mut Vec<bool>) -> Result<()> {
        let wire = self.wire();
        let batch = wire.add_plan(keys);
        let mut resend = self.session.endpoint().resends();
        loop {
            match self.session.run_fast_once(|w| wire.write_add(w, &batch)) {
                Ok(replies) => return wire.read_add(&batch, replies, out),
                Err(Error::RedisOutcomeUnknown { why }) => {
                    resend.again(self.add_may_have_run(&batch)?, why)?;
                }
                Err(e) => return Err(e),
            }
        }
    }

    /// False if none of the batch's commands ran (see [`Incarnation::add_may_have_run`]).
    /// One lookup pipeline, retried like any read.
    pub(super) fn add_may_have_run(&self, batch: &AddBatch) -> Result<bool> {
        let wire = self.wire();
        let found = self.session.run_fast(|w| wire.write_add_lookup(w, batch))?;
        wire.add_may_have_run(batch, found)
    }
}

impl Incarnation<'_> {
    /// The lookup that tells whether an add batch ran: one `GETRANGE` per key, read by
    /// [`Incarnation::add_may_have_run`].
    pub(super) fn write_add_lookup(&self, w: &mut dyn Sink, batch: &AddBatch) {
        batch.plan.iter().for_each(|p| self.write_getrange(w, p));
    }

    /// Whether an add batch may have run, from the replies of
    /// [`Incarnation::write_add_lookup`]: a `BITFIELD` sets all its cells or none, so a
    /// command with a key whose cells are not all set did not run. False only if every
    /// command of the batch has such a key. A lost filter is an error, as in any lookup.
    pub(super) fn add_may_have_run(&self, batch: &AddBatch, replies: Vec<Value>) -> Result<bool> {
        let plan = &batch.plan;
        if replies.len() != plan.len() {
            return Ok(true);
        }
        let mut present = Vec::with_capacity(plan.len());
        for (p, r) in plan.iter().zip(replies) {
            present.push(self.check_block(p, r)?);
        }
        Ok(batch
            .groups
            .iter()
            .any(|g| g.keys.iter().all(|&i| present[i])))
    }
}

impl Incarnation<'_> {
    /// The keys of one add pipeline, by shard: what [`SharedFilter::write_add`] sends.
    pub(super) fn add_plan<K: AsRef<[u8]>>(&self, keys: &[K]) -> AddBatch {
        let plan = self.plan(keys);
        let groups = groups(&plan, self.layout.shards as usize);
        AddBatch { plan, groups }
    }

    /// Writes the `BITFIELD` commands of an add: one per group.
    pub(super) fn write_add(&self, w: &mut dyn Sink, batch: &AddBatch) {
        let counting = self.layout.cells == Cells::Counters;
        let plan = &batch.plan;
        for g in &batch.groups {
            let first = plan[g.keys[0]].addr;
            w.command(5 + usize::from(counting) * 2 + 4 * g.cells);
            w.arg(b"BITFIELD");
            w.arg(self.layout.key(g.shard).as_bytes());
            w.arg(b"GET");
            w.arg(b"i64");
            w.uint(first.tag_bit());
            if counting {
                w.arg(b"OVERFLOW");
                w.arg(b"SAT");
            }
            for &i in &g.keys {
                let p = &plan[i];
                for pos in p.positions() {
                    if counting {
                        w.words(&INCRBY_U4);
                        w.uint(p.addr.counter_bit(pos));
                    } else {
                        w.words(&SET_U1);
                        w.uint(p.addr.bit(pos));
                    }
                    w.words(&ONE);
                }
            }
        }
    }

    /// Reads the replies of [`SharedFilter::write_add`] (one per group, in order): checks
    /// every shard's incarnation and appends, per key, whether it was new.
    pub(super) fn read_add(
        &self,
        batch: &AddBatch,
        replies: impl IntoIterator<Item = Value>,
        out: &mut Vec<bool>,
    ) -> Result<()> {
        let counting = self.layout.cells == Cells::Counters;
        let (plan, groups) = (&batch.plan, &batch.groups);
        let base = out.len();
        out.resize(base + plan.len(), false);
        let mut replies = replies.into_iter();
        for g in groups {
            let key = self.layout.key(g.shard);
            let reply = replies
                .next()
                .ok_or_else(|| value::unexpected(key, "a missing BITFIELD reply"))?;
            let ints = value::ints(reply, key)?;
            let (&tag, mut cells) = ints
                .split_first()
                .ok_or_else(|| value::unexpected(key, "an empty BITFIELD reply"))?;
            self.check_tag(plan[g.keys[0]].addr, &tag.to_be_bytes())?;
            if cells.len() != g.cells {
                return Err(value::unexpected(
                    key,
                    format!("{} BITFIELD values for {} cells", cells.len(), g.cells),
                ));
            }
            for &i in &g.keys {
                let (mine, rest) = cells.split_at(plan[i].cells());
                cells = rest;
                // New if this add turned some cell from 0: an old bit of 0, or a count of 1.
                out[base + i] = if counting {
                    mine.contains(&1)
                } else {
                    mine.contains(&0)
                };
            }
        }
        Ok(())
    }
}

impl SharedFilter {
    /// Looks up one pipeline's worth of keys: one `GETRANGE` of block and tag per key.
    pub(super) fn contains_batch<K: AsRef<[u8]>>(
        &self,
        keys: &[K],
        out: &mut Vec<bool>,
    ) -> Result<()> {
        let plan = self.wire().plan(keys);
        let replies = self
            .session
            .run_fast(|w| plan.iter().for_each(|p| self.write_getrange(w, p)))?;
        // Every key gets its own reply or the call fails: a short reply list (a cluster
        // route that answered less) must not leave keys without an answer.
        if replies.len() != plan.len() {
            return Err(Error::ReportableBug(format!(
                "{} replies to {} lookups",
                replies.len(),
                plan.len()
            )));
        }
        for (p, r) in plan.iter().zip(replies) {
            out.push(self.check_block(p, r)?);
        }
        Ok(())
    }
}

impl Incarnation<'_> {
    /// `GETRANGE` of the key's block and its tag.
    pub(super) fn write_getrange(&self, w: &mut dyn Sink, p: &Probe) {
        w.command(4);
        w.arg(b"GETRANGE");
        w.arg(self.layout.key(p.addr.shard).as_bytes());
        w.uint(p.addr.byte);
        w.uint(p.addr.last_byte());
    }

    /// The cells of a block read by [`SharedFilter::write_getrange`], once its length and
    /// incarnation are checked.
    fn block_cells(&self, p: &Probe, reply: Value) -> Result<Vec<u8>> {
        let key = self.layout.key(p.addr.shard);
        let mut bytes = value::bytes(reply, key)?;
        let stride = self.layout.stride() as usize;
        if bytes.len() != stride {
            return Err(self.lost(
                p.addr.shard,
                format!(
                    "block at byte {} is missing ({} of {stride} bytes): the key was deleted, \
                     flushed, evicted or expired",
                    p.addr.byte,
                    bytes.len()
                ),
            ));
        }
        self.check_tag(p.addr, &bytes[stride - TAG_BYTES..])?;
        bytes.truncate(stride - TAG_BYTES);
        Ok(bytes)
    }

    /// Whether every cell of the key's pattern is set (bits) or non-zero (counters).
    pub(super) fn check_block(&self, p: &Probe, reply: Value) -> Result<bool> {
        let cells = self.block_cells(p, reply)?;
        Ok(match self.layout.cells {
            Cells::Bits => p.masks.iter().enumerate().all(|(w, &m)| {
                let word = u64::from_le_bytes(cells[w * 8..w * 8 + 8].try_into().unwrap_or([0; 8]));
                word & m == m
            }),
            Cells::Counters => p.positions().all(|pos| counter_at(&cells, pos) != 0),
        })
    }

    /// The counts of a key's cells, smallest first, from its block read by
    /// [`Incarnation::write_getrange`] (counting filters; 15 means stuck).
    pub(super) fn read_counts(&self, p: &Probe, reply: Value) -> Result<Vec<u8>> {
        let cells = self.block_cells(p, reply)?;
        let mut counts: Vec<u8> = p.positions().map(|pos| counter_at(&cells, pos)).collect();
        counts.sort_unstable();
        Ok(counts)
    }

    /// Checks a block's incarnation tag: this incarnation's, or the error that says how the
    /// filter was lost (never "absent").
    pub(super) fn check_tag(&self, addr: BlockAddr, tag: &[u8]) -> Result<()> {
        if tag == self.incarnation.to_be_bytes() {
            return Ok(());
        }
        let why = if tag.iter().all(|&b| b == 0) {
            format!(
                "block at byte {} has no incarnation: the filter's data was lost (flushed, evicted, \
                 expired, restarted or failed over empty) and is gone",
                addr.byte
            )
        } else {
            format!(
                "block at byte {} belongs to incarnation {:#x}, not {:#x}: the filter was deleted \
                 and created again; reopen it",
                addr.byte,
                u64::from_be_bytes(tag.try_into().unwrap_or([0; 8])),
                self.incarnation
            )
        };
        Err(self.lost(addr.shard, why))
    }

    /// The error for shard `shard` found lost.
    pub(super) fn lost(&self, shard: usize, why: String) -> Error {
        Error::SharedFilterLost {
            name: self.layout.name.clone(),
            key: self.layout.key(shard).to_owned(),
            why,
        }
    }
}

impl SharedFilter {
    /// The counts of `key`'s cells, smallest first (counting filters; 15 means stuck).
    pub(super) fn counts_of(&self, key: &[u8]) -> Result<Vec<u8>> {
        let wire = self.wire();
        let p = wire.probe(key);
        let reply = self
            .session
            .run_fast(|w| wire.write_getrange(w, &p))?
            .into_iter()
            .next()
            .unwrap_or(Value::Nil);
        wire.read_counts(&p, reply)
    }

    /// This filter's [`Incarnation`]: what its commands are and how replies are read.
    pub(super) fn wire(&self) -> Incarnation<'_> {
        Incarnation {
            layout: &self.layout,
            shape: self.shape,
            incarnation: self.incarnation,
        }
    }

    /// The key's block and cells ([`Incarnation::probe`]).
    pub(super) fn probe(&self, key: &[u8]) -> Probe {
        self.wire().probe(key)
    }

    /// [`Incarnation::add_plan`].
    pub(super) fn add_plan<K: AsRef<[u8]>>(&self, keys: &[K]) -> AddBatch {
        self.wire().add_plan(keys)
    }

    /// [`Incarnation::write_add`].
    pub(super) fn write_add(&self, w: &mut dyn Sink, batch: &AddBatch) {
        self.wire().write_add(w, batch)
    }

    /// [`Incarnation::read_add`].
    pub(super) fn read_add(
        &self,
        batch: &AddBatch,
        replies: impl IntoIterator<Item = Value>,
        out: &mut Vec<bool>,
    ) -> Result<()> {
        self.wire().read_add(batch, replies, out)
    }

    /// [`Incarnation::write_getrange`].
    pub(super) fn write_getrange(&self, w: &mut dyn Sink, p: &Probe) {
        self.wire().write_getrange(w, p)
    }

    /// [`Incarnation::check_block`].
    pub(super) fn check_block(&self, p: &Probe, reply: Value) -> Result<bool> {
        self.wire().check_block(p, reply)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::layout::Layout;

    fn probe(layout: &Layout, block: u64, masks: [u64; BLOCK_WORDS]) -> Probe {
        Probe {
            addr: layout.addr(block),
            masks,
        }
    }

    #[test]
    fn positions_are_the_mask_bits_in_order() {
        let l = Layout::new("t", 10, 2, Cells::Bits).unwrap();
        let mut masks = [0u64; BLOCK_WORDS];
        masks[0] = 0b1001;
        masks[7] = 1 << 63;
        let p = probe(&l, 3, masks);
        assert_eq!(p.positions().collect::<Vec<_>>(), vec![0, 3, 511]);
        assert_eq!(p.cells(), 3);
    }

    #[test]
    fn groups_keep_batch_order_per_shard_and_cap_the_cells() {
        let l = Layout::new("t", 100, 4, Cells::Bits).unwrap();
        let mut masks = [0u64; BLOCK_WORDS];
        masks[1] = 0x7f; // 7 cells per key
                         // Keys alternate between blocks 0 (shard 0) and 99 (shard 3).
        let plan: Vec<Probe> = (0..2000)
            .map(|i| probe(&l, if i % 2 == 0 { 0 } else { 99 }, masks))
            .collect();
        let gs = groups(&plan, 4);
        let mut seen: Vec<usize> = Vec::new();
        for g in &gs {
            assert!(g.cells <= MAX_OPS && !g.keys.is_empty());
            assert_eq!(g.cells, g.keys.len() * 7);
            assert!(g.keys.windows(2).all(|w| w[0] < w[1]));
            assert!(g.keys.iter().all(|&i| plan[i].addr.shard == g.shard));
            seen.extend(&g.keys);
        }
        seen.sort_unstable();
        assert_eq!(seen, (0..2000).collect::<Vec<_>>());
        // 1000 keys × 7 cells per shard, at most 4096 cells per command: 2 commands each.
        assert_eq!(gs.len(), 4);
    }
}

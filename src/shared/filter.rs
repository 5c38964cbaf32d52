//! The shared filter: create/open, add and lookup, one command per key.

use std::time::{Duration, Instant};

use redis::{Cmd, Value};

use crate::error::{Error, Result};
use crate::filter::layout::{block_index, block_masks, BLOCK_WORDS};
use crate::filter::FilterConfig;
use crate::hash::hash_key;

use super::conn::Endpoint;
use super::layout::{self, BlockAddr, Layout, BLOCK_BYTES, STRIDE};
use super::record::{new_epoch, Record, SharedShape, State};
use super::resp::Packer;
use super::session::Session;
use super::{init, lost, value};

/// Keys per pipeline in `add_many`/`contains_many`: bounds the memory of one batch while
/// keeping round trips rare (one per node per this many keys).
const PIPELINE_KEYS: usize = 8192;

/// How long `open` waits for a filter that another process is still creating.
const READY_WAIT: Duration = Duration::from_secs(30);

/// A Bloom filter kept in Redis or a Redis Cluster and shared by every process that opens
/// it, with the same hash and 512-bit block layout as the local [`crate::Filter`].
///
/// A lookup is one `GETRANGE` of the key's block, an add one `BITFIELD` that sets the
/// key's bits and returns their old values; batches are pipelined. Each block carries the
/// filter's epoch and every command reads it, so a filter that was lost or recreated is
/// an [`Error::SharedFilterLost`], never an "absent" answer.
///
/// Methods take `&self` and serialize on one connection; for parallel throughput open one
/// handle per thread (handles are cheap: one connection and the config record).
///
/// ```no_run
/// use bloomsled::shared::{Endpoint, SharedFilter};
/// use bloomsled::FilterConfig;
/// let redis = Endpoint::url("redis://127.0.0.1:6379/");
/// let seen = SharedFilter::create(&redis, "crawler:urls", &FilterConfig::new(1_000_000))?;
/// assert!(seen.add(b"https://example.com/")?); // new
/// assert!(seen.contains(b"https://example.com/")?);
/// let answers = seen.contains_many(&[&b"https://a.example/"[..], b"https://example.com/"])?;
/// assert!(answers[1]);
/// # Ok::<(), bloomsled::Error>(())
/// ```
pub struct SharedFilter {
    pub(super) session: Session,
    pub(super) layout: Layout,
    pub(super) shape: SharedShape,
    pub(super) epoch: u64,
}

impl SharedFilter {
    /// Creates the filter `name` sized by `config` (items, false-positive rate or bits per
    /// key, `k`, seed), or opens it if it already exists with exactly this shape. Several
    /// processes may call this at once: one creates, the others wait for it and open the
    /// same filter. An existing filter of another shape is [`Error::RedisShapeMismatch`].
    pub fn create(endpoint: &Endpoint, name: &str, config: &FilterConfig) -> Result<Self> {
        Self::create_sharded(endpoint, name, config, None)
    }

    /// [`SharedFilter::create`] with an explicit number of shard keys (by default one per
    /// 64 MiB and at least 16, so the filter spreads over every master of a cluster).
    pub fn create_sharded(
        endpoint: &Endpoint,
        name: &str,
        config: &FilterConfig,
        shards: Option<u64>,
    ) -> Result<Self> {
        let fshape = config.shape()?;
        let shards = shards.unwrap_or_else(|| layout::default_shards(fshape.num_blocks));
        let layout = Layout::new(name, fshape.num_blocks, shards)?;
        let shape = SharedShape {
            seed: fshape.seed,
            num_hashes: fshape.num_hashes,
            num_blocks: fshape.num_blocks,
            shards: layout.shards,
            shard_blocks: layout.shard_blocks,
            capacity: config.capacity(),
        };
        let session = Session::open(endpoint)?;
        let record = Record {
            shape,
            epoch: new_epoch(),
            state: State::Init,
        };
        let key = layout::config_key(name);
        let set = session.one(
            redis::cmd("SET")
                .arg(&key)
                .arg(record.encode())
                .arg("NX")
                .clone(),
        )?;
        if matches!(set, Value::Nil) {
            // Someone else created it (or is creating it): use theirs if it is ours.
            let f = Self::open_session(session, name)?;
            if f.shape != shape {
                return Err(Error::RedisShapeMismatch {
                    name: name.into(),
                    asked: shape.to_string(),
                    found: f.shape.to_string(),
                });
            }
            return Ok(f);
        }
        init::write_blocks(&session, &layout, record.epoch)?;
        init::mark_ready(&session, name, &record)?;
        Ok(SharedFilter {
            session,
            layout,
            shape,
            epoch: record.epoch,
        })
    }

    /// Opens the existing filter `name`, whatever its shape; [`Error::SharedFilterNotFound`]
    /// if there is none. Waits (up to 30 s) for a filter another process is still creating.
    pub fn open(endpoint: &Endpoint, name: &str) -> Result<Self> {
        layout::check_name(name)?;
        Self::open_session(Session::open(endpoint)?, name)
    }

    fn open_session(session: Session, name: &str) -> Result<Self> {
        let key = layout::config_key(name);
        let start = Instant::now();
        let record = loop {
            let text = match session.one(redis::cmd("GET").arg(&key).clone())? {
                Value::Nil => {
                    return Err(Error::SharedFilterNotFound {
                        name: name.into(),
                        why: format!("no config record at {key:?}"),
                    })
                }
                v => value::bytes(v, &key)?,
            };
            let r = Record::decode(&text)?;
            if r.state == State::Ready {
                break r;
            }
            if start.elapsed() > READY_WAIT {
                return Err(Error::SharedFilterNotFound {
                    name: name.into(),
                    why: format!(
                        "still being created after {READY_WAIT:?} (its creator may have died; \
                         delete {key:?} and create it again)"
                    ),
                });
            }
            std::thread::sleep(Duration::from_millis(20));
        };
        let layout = Layout::new(name, record.shape.num_blocks, record.shape.shards)?;
        if layout.shard_blocks != record.shape.shard_blocks {
            return Err(Error::Corrupt(format!(
                "config record of {name:?}: {} shards of {} blocks, this build lays out {}",
                record.shape.shards, record.shape.shard_blocks, layout.shard_blocks
            )));
        }
        Ok(SharedFilter {
            session,
            layout,
            shape: record.shape,
            epoch: record.epoch,
        })
    }

    /// Adds `key`; returns `true` if it was new (this add set at least one bit), `false` if
    /// it was possibly present already. One `BITFIELD`, one round trip.
    pub fn add(&self, key: &[u8]) -> Result<bool> {
        let mut v = self.add_many(&[key])?;
        Ok(v.pop().unwrap_or(false))
    }

    /// True if `key` may have been added, false if it certainly was not. One `GETRANGE`.
    pub fn contains(&self, key: &[u8]) -> Result<bool> {
        let mut v = self.contains_many(&[key])?;
        Ok(v.pop().unwrap_or(false))
    }

    /// Adds every key; returns for each whether it was new. Pipelined: one round trip per
    /// node per 8,192 keys. On error nothing is reported, and some keys may have been added.
    pub fn add_many<K: AsRef<[u8]>>(&self, keys: &[K]) -> Result<Vec<bool>> {
        let mut out = Vec::with_capacity(keys.len());
        for chunk in keys.chunks(PIPELINE_KEYS) {
            let plan: Vec<Probe> = chunk.iter().map(|k| self.probe(k.as_ref())).collect();
            let replies = self.session.run_fast(
                |w| plan.iter().for_each(|p| self.pack_bitfield(p, w)),
                || plan.iter().map(|p| self.bitfield(p)).collect(),
            )?;
            for (p, r) in plan.iter().zip(replies) {
                out.push(self.check_bitfield(p, r)?);
            }
        }
        Ok(out)
    }

    /// Looks up every key; pipelined like [`SharedFilter::add_many`]. Either every key gets
    /// an answer or the call fails: a key is never reported absent because its block could
    /// not be read.
    pub fn contains_many<K: AsRef<[u8]>>(&self, keys: &[K]) -> Result<Vec<bool>> {
        let mut out = Vec::with_capacity(keys.len());
        for chunk in keys.chunks(PIPELINE_KEYS) {
            let plan: Vec<Probe> = chunk.iter().map(|k| self.probe(k.as_ref())).collect();
            let replies = self.session.run_fast(
                |w| plan.iter().for_each(|p| self.pack_getrange(p, w)),
                || plan.iter().map(|p| self.getrange(p)).collect(),
            )?;
            for (p, r) in plan.iter().zip(replies) {
                out.push(self.check_block(p, r)?);
            }
        }
        Ok(out)
    }

    /// The filter's name.
    pub fn name(&self) -> &str {
        &self.layout.name
    }

    /// The filter's shape, as recorded in Redis.
    pub fn shape(&self) -> SharedShape {
        self.shape
    }

    /// The epoch of this incarnation of the filter (random, non-zero, set at creation).
    pub fn epoch(&self) -> u64 {
        self.epoch
    }

    /// The Redis keys holding the blocks, shard by shard.
    pub fn shard_keys(&self) -> Vec<String> {
        (0..self.layout.shards as usize)
            .map(|s| self.layout.key(s).to_owned())
            .collect()
    }

    /// The Redis key of the config record.
    pub fn config_key(&self) -> String {
        layout::config_key(&self.layout.name)
    }

    /// Deletes the filter from Redis (config record first, so no new handle opens a
    /// half-deleted filter; handles still open get [`Error::SharedFilterLost`]).
    pub fn destroy(self) -> Result<()> {
        let mut cmds = vec![redis::cmd("DEL").arg(self.config_key()).clone()];
        cmds.extend(
            self.shard_keys()
                .iter()
                .map(|k| redis::cmd("DEL").arg(k).clone()),
        );
        self.session.run(|| cmds.clone())?;
        Ok(())
    }

    fn probe(&self, key: &[u8]) -> Probe {
        let h = hash_key(key, self.shape.seed);
        let block = block_index(h, self.shape.num_blocks) as u64;
        Probe {
            addr: self.layout.addr(block),
            masks: block_masks(h, self.shape.num_hashes),
        }
    }

    /// `BITFIELD shard GET i64 <tag> SET u1 <bit> 1 …`: reads the block's epoch and sets the
    /// key's bits in one atomic command.
    fn bitfield(&self, p: &Probe) -> Cmd {
        let mut c = redis::cmd("BITFIELD");
        c.arg(self.layout.key(p.addr.shard))
            .arg("GET")
            .arg("i64")
            .arg(p.addr.tag_bit());
        for (w, &m) in p.masks.iter().enumerate() {
            let mut m = m;
            while m != 0 {
                let pos = w * 64 + m.trailing_zeros() as usize;
                m &= m - 1;
                c.arg("SET").arg("u1").arg(p.addr.bit(pos)).arg(1);
            }
        }
        c
    }

    /// [`SharedFilter::bitfield`], written as RESP.
    fn pack_bitfield(&self, p: &Probe, w: &mut Packer) {
        let bits: u32 = p.masks.iter().map(|m| m.count_ones()).sum();
        w.command(5 + 4 * bits as usize);
        w.arg(b"BITFIELD");
        w.arg(self.layout.key(p.addr.shard).as_bytes());
        w.arg(b"GET");
        w.arg(b"i64");
        w.uint(p.addr.tag_bit());
        for (i, &m) in p.masks.iter().enumerate() {
            let mut m = m;
            while m != 0 {
                let pos = i * 64 + m.trailing_zeros() as usize;
                m &= m - 1;
                w.arg(b"SET");
                w.arg(b"u1");
                w.uint(p.addr.bit(pos));
                w.arg(b"1");
            }
        }
    }

    /// [`SharedFilter::getrange`], written as RESP.
    fn pack_getrange(&self, p: &Probe, w: &mut Packer) {
        w.command(4);
        w.arg(b"GETRANGE");
        w.arg(self.layout.key(p.addr.shard).as_bytes());
        w.uint(p.addr.byte);
        w.uint(p.addr.last_byte());
    }

    fn getrange(&self, p: &Probe) -> Cmd {
        redis::cmd("GETRANGE")
            .arg(self.layout.key(p.addr.shard))
            .arg(p.addr.byte)
            .arg(p.addr.last_byte())
            .clone()
    }

    /// The epoch read by `BITFIELD`, then whether any old bit was 0.
    fn check_bitfield(&self, p: &Probe, reply: Value) -> Result<bool> {
        let key = self.layout.key(p.addr.shard);
        let ints = value::ints(reply, key)?;
        let (&tag, old) = ints
            .split_first()
            .ok_or_else(|| value::unexpected(key, "an empty BITFIELD reply"))?;
        let tag = (tag as u64).to_be_bytes();
        self.check_tag(p.addr, &tag)?;
        Ok(old.contains(&0))
    }

    /// The block's epoch, then whether every bit of the key's pattern is set.
    fn check_block(&self, p: &Probe, reply: Value) -> Result<bool> {
        let key = self.layout.key(p.addr.shard);
        let bytes = value::bytes(reply, key)?;
        if bytes.len() != STRIDE {
            return Err(lost(
                self,
                p.addr.shard,
                format!(
                    "block at byte {} is missing ({} of {STRIDE} bytes): the key was deleted, \
                     flushed, evicted or expired",
                    p.addr.byte,
                    bytes.len()
                ),
            ));
        }
        self.check_tag(p.addr, &bytes[BLOCK_BYTES..])?;
        Ok(p.masks.iter().enumerate().all(|(w, &m)| {
            let word = u64::from_le_bytes(bytes[w * 8..w * 8 + 8].try_into().unwrap_or([0; 8]));
            word & m == m
        }))
    }

    pub(super) fn check_tag(&self, addr: BlockAddr, tag: &[u8]) -> Result<()> {
        if tag == self.epoch.to_be_bytes() {
            return Ok(());
        }
        let why = if tag.iter().all(|&b| b == 0) {
            format!(
                "block at byte {} has no epoch: the filter's data was lost (flushed, evicted, \
                 expired, restarted or failed over empty) and is gone",
                addr.byte
            )
        } else {
            format!(
                "block at byte {} belongs to epoch {:#x}, not {:#x}: the filter was deleted \
                 and created again; reopen it",
                addr.byte,
                u64::from_be_bytes(tag.try_into().unwrap_or([0; 8])),
                self.epoch
            )
        };
        Err(lost(self, addr.shard, why))
    }
}

/// A key's block and bits.
struct Probe {
    addr: BlockAddr,
    masks: [u64; BLOCK_WORDS],
}

impl std::fmt::Debug for SharedFilter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SharedFilter")
            .field("name", &self.layout.name)
            .field("endpoint", &self.session.endpoint().urls())
            .field("shape", &self.shape)
            .field("epoch", &format_args!("{:#x}", self.epoch))
            .finish()
    }
}

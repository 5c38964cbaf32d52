//! The shared filter: create/open, insert and lookup, one command per key.

use std::sync::Arc;
use std::time::Instant;

use crate::error::{Error, Result};
use bloomsled::FilterConfig;

use super::conn::Endpoint;
use super::init;
use super::layout::{self, Cells, Layout};
use super::record::{new_incarnation, Record, SharedShape, State};
use super::session::Session;

/// Keys per pipeline in `add_many`/`contains_many`: bounds the memory of one batch while
/// keeping round trips rare (one per node per this many keys).
pub(super) const PIPELINE_KEYS: usize = 8192;

/// Times `create` tries again when the record it waited on vanished (its creator died and
/// the lease expired, or it was deleted).
pub(super) const CREATE_ATTEMPTS: u32 = 3;

/// Options of [`SharedFilter::create_with`].
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SharedOptions {
    /// Number of shard keys (default: one per 64 MiB, at least 16).
    pub shards: Option<u64>,
    /// A 4-bit counter per position, so that keys can be removed (see
    /// [`SharedFilter::create_counting`]).
    pub counting: bool,
}

/// A Bloom filter kept in Redis or a Redis Cluster and shared by every process that opens
/// it, with the same hash and 512-bit block layout as the local [`bloomsled::Filter`].
///
/// A lookup is one `GETRANGE` of the key's block, an add one `BITFIELD` that sets the
/// key's bits and returns their old values; batches are pipelined. Each block carries the
/// filter's incarnation and every command reads it, so a filter that was lost or recreated is
/// an [`Error::SharedFilterLost`], never an "absent" answer.
///
/// Methods take `&self` and serialize on one connection; for parallel throughput open one
/// handle per thread (handles are cheap: one connection and the config record).
///
/// ```no_run
/// use bloomsled_redis::{Endpoint, SharedFilter};
/// use bloomsled::FilterConfig;
/// let redis = Endpoint::url("redis://127.0.0.1:6379/");
/// let seen = SharedFilter::create(&redis, "crawler:urls", &FilterConfig::new(1_000_000))?;
/// assert!(seen.insert(b"https://example.com/")?); // new
/// assert!(seen.contains(b"https://example.com/")?);
/// let answers = seen.contains_many(&[&b"https://a.example/"[..], b"https://example.com/"])?;
/// assert!(answers[1]);
/// # Ok::<(), bloomsled_redis::Error>(())
/// ```
pub struct SharedFilter {
    pub(super) session: Arc<Session>,
    pub(super) layout: Layout,
    pub(super) shape: SharedShape,
    pub(super) incarnation: u64,
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
        Self::create_with(
            endpoint,
            name,
            config,
            &SharedOptions {
                shards,
                ..SharedOptions::default()
            },
        )
    }

    /// Creates (or opens, like [`SharedFilter::create`]) a **counting** shared filter: a
    /// 4-bit saturating counter per position instead of a bit, so that
    /// [`SharedFilter::remove`] can take keys out. It answers lookups exactly like the plain
    /// filter of the same shape, in four times the memory; adds cost the same one command
    /// per shard. A counter that reaches 15 stays there, so an overflow only ever costs
    /// false positives.
    ///
    /// ```no_run
    /// use bloomsled_redis::{Endpoint, SharedFilter};
    /// use bloomsled::FilterConfig;
    /// let redis = Endpoint::url("redis://127.0.0.1:6379/");
    /// let sessions = SharedFilter::create_counting(&redis, "sessions", &FilterConfig::new(100_000))?;
    /// sessions.insert(b"token-1")?;
    /// assert!(sessions.remove(b"token-1")?);
    /// assert!(!sessions.contains(b"token-1")?);
    /// # Ok::<(), bloomsled_redis::Error>(())
    /// ```
    pub fn create_counting(endpoint: &Endpoint, name: &str, config: &FilterConfig) -> Result<Self> {
        Self::create_with(
            endpoint,
            name,
            config,
            &SharedOptions {
                counting: true,
                ..SharedOptions::default()
            },
        )
    }

    /// [`SharedFilter::create`] with every option: shard count and counting.
    pub fn create_with(
        endpoint: &Endpoint,
        name: &str,
        config: &FilterConfig,
        options: &SharedOptions,
    ) -> Result<Self> {
        let (layout, shape) = Self::shaped(name, config, options)?;
        let seed_fixed = config.get_seed().is_some();
        Self::create_in(
            Arc::new(Session::open(endpoint)?),
            layout,
            shape,
            seed_fixed,
        )
    }

    /// The layout and shape of the filter `name` that `config` and `options` describe.
    pub(super) fn shaped(
        name: &str,
        config: &FilterConfig,
        options: &SharedOptions,
    ) -> Result<(Layout, SharedShape)> {
        let fshape = config.shape()?;
        let cells = if options.counting {
            Cells::Counters
        } else {
            Cells::Bits
        };
        let shards = options
            .shards
            .unwrap_or_else(|| layout::default_shards(fshape.num_blocks, cells));
        let layout = Layout::new(name, fshape.num_blocks, shards, cells)?;
        let shape = SharedShape {
            seed: fshape.seed,
            num_hashes: fshape.num_hashes,
            num_blocks: fshape.num_blocks,
            shards: layout.shards,
            shard_blocks: layout.shard_blocks,
            capacity: config.get_expected_items(),
            counting: options.counting,
        };
        Ok((layout, shape))
    }

    /// Creates the filter of `layout` and `shape` through `session` (or opens it if it
    /// exists with exactly this shape): the body of [`SharedFilter::create_with`], also
    /// used for the generations of a shared window, which share one session. Unless
    /// `seed_fixed`, `shape`'s seed is a secret one drawn for this creation: a filter that
    /// exists already keeps its own.
    pub(super) fn create_in(
        session: Arc<Session>,
        layout: Layout,
        shape: SharedShape,
        seed_fixed: bool,
    ) -> Result<Self> {
        let name = layout.name.clone();
        let name = name.as_str();
        let key = layout::config_key(name);
        let mut attempt = 0;
        loop {
            attempt += 1;
            let record = Record {
                shape,
                incarnation: new_incarnation(),
                state: State::Init,
            };
            // The init record is a lease: it expires unless its creator renews it while it
            // writes the blocks, so a creator that dies mid-way does not block the name.
            let claimed = session.one(init::lease(&key, &record))?;
            if let Some(token) = init::lease_token(&key, claimed)? {
                init::write_blocks(&session, &layout, &record, token)?;
                init::mark_ready(&session, name, &record)?;
                return Ok(SharedFilter {
                    session,
                    layout,
                    shape,
                    incarnation: record.incarnation,
                });
            }
            // Someone else created it (or is creating it): use theirs if it is ours.
            match Self::wait_ready(&session, name) {
                Ok(r) => {
                    init::check_same_shape(name, shape, r.shape, seed_fixed)?;
                    return Self::from_record(session, name, r);
                }
                // The record vanished while we waited: its creator died (the lease ran
                // out) or it was deleted. Create it ourselves.
                Err(Error::SharedFilterNotFound { .. }) if attempt < CREATE_ATTEMPTS => continue,
                Err(e) => return Err(e),
            }
        }
    }

    /// Opens the existing filter `name`, whatever its shape; [`Error::SharedFilterNotFound`]
    /// if there is none. Waits (up to 30 s) for a filter another process is still creating.
    pub fn open(endpoint: &Endpoint, name: &str) -> Result<Self> {
        layout::check_name(name)?;
        let session = Arc::new(Session::open(endpoint)?);
        let record = Self::wait_ready(&session, name)?;
        Self::from_record(session, name, record)
    }

    /// The filter's record once it is ready (waiting while another process creates it).
    fn wait_ready(session: &Session, name: &str) -> Result<Record> {
        let key = layout::config_key(name);
        let start = Instant::now();
        loop {
            let reply = session.one(redis::cmd("GET").arg(&key).clone())?;
            if let Some(r) = init::ready_record(name, &key, reply, start.elapsed())? {
                return Ok(r);
            }
            std::thread::sleep(init::READY_PAUSE);
        }
    }

    fn from_record(session: Arc<Session>, name: &str, record: Record) -> Result<Self> {
        let layout = init::layout_of(name, &record)?;
        Ok(SharedFilter {
            session,
            layout,
            shape: record.shape,
            incarnation: record.incarnation,
        })
    }

    /// Inserts `key`; returns `true` if it was new (this insert set at least one bit), `false` if
    /// it was possibly present already. One `BITFIELD`, one round trip.
    pub fn insert(&self, key: &[u8]) -> Result<bool> {
        super::one(self.insert_many(&[key])?)
    }

    /// Inserts `key` into the filter and into the filter's exact record (small Redis hashes of the
    /// keys themselves, beside the filter); returns `true` if it was not recorded before.
    /// Exact: never `false` for a key that was not added (no false positives). Keys must be
    /// at least 4 bytes, uniformly distributed (digests such as SHA-1 request
    /// fingerprints), and inserted through `insert_exact` only, since `insert` does not record them.
    /// Atomic across processes: of two inserting the same key, exactly one gets `true`. One
    /// round trip; about 22 bytes of Redis memory per 20-byte key (see the `exact` module).
    ///
    /// ```no_run
    /// use bloomsled_redis::{Endpoint, SharedFilter};
    /// use bloomsled::FilterConfig;
    /// let redis = Endpoint::url("redis://127.0.0.1:6379/");
    /// let seen = SharedFilter::create(&redis, "crawler:fps", &FilterConfig::new(1_000_000))?;
    /// let fp = [7u8; 20];
    /// assert!(seen.insert_exact(&fp)?);
    /// assert!(!seen.insert_exact(&fp)?);
    /// # Ok::<(), bloomsled_redis::Error>(())
    /// ```
    pub fn insert_exact(&self, key: &[u8]) -> Result<bool> {
        super::one(self.insert_exact_many(&[key])?)
    }

    /// [`SharedFilter::insert_exact`] for every key, in order (a key repeated in the batch is
    /// new once); pipelined like [`SharedFilter::insert_many`]. On error nothing is reported,
    /// and some keys may have been recorded.
    pub fn insert_exact_many<K: AsRef<[u8]>>(&self, keys: &[K]) -> Result<Vec<bool>> {
        let r = chunked(keys, |chunk, out| self.add_exact_batch(chunk, out));
        self.session.tally.adds(&r);
        r
    }

    /// True if `key` may have been added, false if it certainly was not. One `GETRANGE`.
    pub fn contains(&self, key: &[u8]) -> Result<bool> {
        super::one(self.contains_many(&[key])?)
    }

    /// Inserts every key; returns for each whether it was new. Pipelined: one round trip per
    /// node per 8,192 keys, one command per shard touched. On error nothing is reported, and
    /// some keys may have been inserted.
    pub fn insert_many<K: AsRef<[u8]>>(&self, keys: &[K]) -> Result<Vec<bool>> {
        let r = chunked(keys, |chunk, out| self.add_batch(chunk, out));
        self.session.tally.adds(&r);
        r
    }

    /// Looks up every key; pipelined like [`SharedFilter::insert_many`], one `GETRANGE` per
    /// key. Either every key gets an answer or the call fails: a key is never reported
    /// absent because its block could not be read.
    pub fn contains_many<K: AsRef<[u8]>>(&self, keys: &[K]) -> Result<Vec<bool>> {
        let r = chunked(keys, |chunk, out| self.contains_batch(chunk, out));
        self.session.tally.lookups(&r);
        r
    }

    /// Removes one add of `key` from a counting filter: lowers its counters (a counter stuck
    /// at 15 stays). Returns `false`, changing nothing, if the key is certainly not in the
    /// filter (one of its counters is zero). Atomic per key, and safe to retry: a replayed
    /// request is not applied twice. Only remove keys you added: removing a key that was
    /// never added but looks present (a false positive) lowers counters other keys need.
    /// [`Error::InvalidConfig`] on a filter created without counting.
    pub fn remove(&self, key: &[u8]) -> Result<bool> {
        super::one(self.remove_many(&[key])?)
    }

    /// [`SharedFilter::remove`] for every key, in order; pipelined, one script per shard
    /// touched.
    pub fn remove_many<K: AsRef<[u8]>>(&self, keys: &[K]) -> Result<Vec<bool>> {
        if !self.shape.counting {
            return Err(Error::config(format!(
                "shared filter {:?} has no counters: keys can only be removed from a filter \
                 created with counting (SharedFilter::create_counting, `redis create \
                 --counting`)",
                self.layout.name
            )));
        }
        let r = chunked(keys, |chunk, out| self.remove_batch(chunk, out));
        if let Err(e) = &r {
            self.session.tally.failed(e);
        }
        r
    }

    /// The counts of `key`'s cells in a counting filter, smallest first: the smallest bounds
    /// how many times the key was added (15 means stuck). [`Error::InvalidConfig`] on a
    /// filter created without counting.
    pub fn counts(&self, key: &[u8]) -> Result<Vec<u8>> {
        if !self.shape.counting {
            return Err(Error::config(format!(
                "shared filter {:?} has bits, not counters",
                self.layout.name
            )));
        }
        self.counts_of(key)
    }

    /// Deletes the filter from Redis (config record first, so no new handle opens a
    /// half-deleted filter; handles still open get [`Error::SharedFilterLost`]), then its
    /// exact record's buckets (see [`SharedFilter::insert_exact`]).
    pub fn destroy(self) -> Result<()> {
        let cmds = self.layout.delete_cmds();
        self.session.run(|| cmds.clone())?;
        self.destroy_exact()
    }
}

filter_getters!(SharedFilter);

/// The answers of `batch` run over `keys` one pipeline ([`PIPELINE_KEYS`]) at a time.
fn chunked<K>(
    keys: &[K],
    mut batch: impl FnMut(&[K], &mut Vec<bool>) -> Result<()>,
) -> Result<Vec<bool>> {
    let mut out = Vec::with_capacity(keys.len());
    for chunk in keys.chunks(PIPELINE_KEYS) {
        batch(chunk, &mut out)?;
    }
    Ok(out)
}

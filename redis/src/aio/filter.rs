//! The async shared filter: the sync one's commands and checks, sent without blocking.

use std::sync::Arc;
use std::time::Instant;

use redis::Value;

use crate::error::{Error, Result};
use bloomsled::FilterConfig;

use super::super::conn::Endpoint;
use super::super::filter::{SharedFilter, SharedOptions, CREATE_ATTEMPTS, PIPELINE_KEYS};
use super::super::layout::{self, Layout};
use super::super::ops::Incarnation;
use super::super::record::{new_incarnation, Record, SharedShape, State};
use super::super::resp::Cmds;
use super::super::{init, one};
use super::session::AsyncSession;

/// A [`SharedFilter`] for async code: the same filter in Redis or a Redis Cluster, read and
/// written through redis-rs's async connections, so a call awaits its round trip instead
/// of parking a runtime worker.
///
/// Everything about the filter is the sync type's: the Redis keys and layout (a sync and an
/// async client share one filter), one `GETRANGE` per lookup and one `BITFIELD` per shard
/// per add batch, the incarnation tag read by every command (a flushed, evicted, restarted or
/// recreated filter is [`Error::SharedFilterLost`], never "absent"), creation by one of
/// several racing processes, and the retries: within the endpoint's retry window
/// ([`Endpoint::retry_for`]) lookups and idempotent writes are sent again while Redis is
/// unreachable, restarting or failing over, waiting on tokio timers, and an add whose reply
/// was lost is sent again only once a lookup shows it did not run, else it fails with
/// [`Error::RedisOutcomeUnknown`] (never a guessed "present").
///
/// Methods take `&self` and may run concurrently: on one server they share one
/// multiplexed connection, which pipelines the requests of every task. Share a handle
/// between tasks behind an [`Arc`].
///
/// ```no_run
/// use bloomsled_redis::{AsyncSharedFilter, Endpoint};
/// use bloomsled::FilterConfig;
/// # async fn demo() -> bloomsled_redis::Result<()> {
/// let redis = Endpoint::url("redis://127.0.0.1:6379/");
/// let seen = AsyncSharedFilter::create(&redis, "crawler:urls", &FilterConfig::new(1_000_000)).await?;
/// assert!(seen.insert(b"https://example.com/").await?); // new
/// assert!(seen.contains(b"https://example.com/").await?);
/// let answers = seen.contains_many(&[&b"https://a.example/"[..], b"https://example.com/"]).await?;
/// assert!(answers[1]);
/// # Ok(())
/// # }
/// ```
#[cfg_attr(docsrs, doc(cfg(feature = "tokio")))]
pub struct AsyncSharedFilter {
    session: Arc<AsyncSession>,
    layout: Layout,
    shape: SharedShape,
    incarnation: u64,
}

impl AsyncSharedFilter {
    /// Creates the filter `name` sized by `config`, or opens it if it already exists with
    /// exactly this shape, as [`SharedFilter::create`] does. An existing filter of another
    /// shape is [`Error::RedisShapeMismatch`].
    ///
    /// ```no_run
    /// use bloomsled_redis::{AsyncSharedFilter, Endpoint};
    /// use bloomsled::FilterConfig;
    /// # async fn demo() -> bloomsled_redis::Result<()> {
    /// let redis = Endpoint::url("redis://127.0.0.1:6379/");
    /// let f = AsyncSharedFilter::create(&redis, "ids", &FilterConfig::new(10_000)).await?;
    /// assert_eq!(f.name(), "ids");
    /// # Ok(())
    /// # }
    /// ```
    pub async fn create(endpoint: &Endpoint, name: &str, config: &FilterConfig) -> Result<Self> {
        Self::create_with(endpoint, name, config, &SharedOptions::default()).await
    }

    /// [`AsyncSharedFilter::create`] with every option: shard count and counting (see
    /// [`SharedFilter::create_with`]).
    ///
    /// ```no_run
    /// use bloomsled_redis::{AsyncSharedFilter, Endpoint, SharedOptions};
    /// use bloomsled::FilterConfig;
    /// # async fn demo() -> bloomsled_redis::Result<()> {
    /// let redis = Endpoint::url("redis://127.0.0.1:6379/");
    /// let counting = SharedOptions { counting: true, ..SharedOptions::default() };
    /// let sessions =
    ///     AsyncSharedFilter::create_with(&redis, "sessions", &FilterConfig::new(100_000), &counting)
    ///         .await?;
    /// sessions.insert(b"token-1").await?;
    /// assert!(sessions.remove(b"token-1").await?);
    /// # Ok(())
    /// # }
    /// ```
    pub async fn create_with(
        endpoint: &Endpoint,
        name: &str,
        config: &FilterConfig,
        options: &SharedOptions,
    ) -> Result<Self> {
        let (layout, shape) = SharedFilter::shaped(name, config, options)?;
        let session = Arc::new(AsyncSession::open(endpoint).await?);
        let key = layout::config_key(name);
        let mut attempt = 0;
        loop {
            attempt += 1;
            let record = Record {
                shape,
                incarnation: new_incarnation(),
                state: State::Init,
            };
            // The init record is a lease, renewed while the blocks are written (see
            // `SharedFilter::create`).
            let claimed = session.one(init::lease(&key, &record)).await?;
            if let Some(token) = init::lease_token(&key, claimed)? {
                for batch in init::block_writes(&layout, &record, token) {
                    let replies = session.run(batch).await?;
                    init::check_written(&layout.name, &replies)?;
                }
                let done = session.one(init::ready_cmd(name, &record)).await?;
                init::check_ready(name, done)?;
                return Ok(AsyncSharedFilter {
                    session,
                    layout,
                    shape,
                    incarnation: record.incarnation,
                });
            }
            // Someone else created it (or is creating it): use theirs if it is ours.
            match Self::wait_ready(&session, name).await {
                Ok(r) => {
                    init::check_same_shape(name, shape, r.shape, config.get_seed().is_some())?;
                    return Self::from_record(session, name, r);
                }
                // The record vanished while we waited (its creator died, or it was
                // deleted): create it ourselves.
                Err(Error::SharedFilterNotFound { .. }) if attempt < CREATE_ATTEMPTS => continue,
                Err(e) => return Err(e),
            }
        }
    }

    /// Opens the existing filter `name`, whatever its shape; [`Error::SharedFilterNotFound`]
    /// if there is none. Waits for a filter another process is still creating.
    ///
    /// ```no_run
    /// use bloomsled_redis::{AsyncSharedFilter, Endpoint};
    /// # async fn demo() -> bloomsled_redis::Result<()> {
    /// let f = AsyncSharedFilter::open(&Endpoint::url("redis://127.0.0.1:6379/"), "ids").await?;
    /// println!("{} keys fit in {:?}", f.shape().capacity, f.name());
    /// # Ok(())
    /// # }
    /// ```
    pub async fn open(endpoint: &Endpoint, name: &str) -> Result<Self> {
        layout::check_name(name)?;
        let session = Arc::new(AsyncSession::open(endpoint).await?);
        let record = Self::wait_ready(&session, name).await?;
        Self::from_record(session, name, record)
    }

    /// The filter's record once it is ready (waiting while another process creates it).
    async fn wait_ready(session: &AsyncSession, name: &str) -> Result<Record> {
        let key = layout::config_key(name);
        let start = Instant::now();
        loop {
            let reply = session.one(redis::cmd("GET").arg(&key).clone()).await?;
            if let Some(r) = init::ready_record(name, &key, reply, start.elapsed())? {
                return Ok(r);
            }
            tokio::time::sleep(init::READY_PAUSE).await;
        }
    }

    fn from_record(session: Arc<AsyncSession>, name: &str, record: Record) -> Result<Self> {
        Ok(AsyncSharedFilter {
            session,
            layout: init::layout_of(name, &record)?,
            shape: record.shape,
            incarnation: record.incarnation,
        })
    }

    fn wire(&self) -> Incarnation<'_> {
        Incarnation {
            layout: &self.layout,
            shape: self.shape,
            incarnation: self.incarnation,
        }
    }

    /// Inserts `key`; returns `true` if it was new (this insert set at least one bit), `false` if
    /// it was possibly present already. One `BITFIELD`, one round trip.
    ///
    /// ```no_run
    /// # use bloomsled_redis::{AsyncSharedFilter, Endpoint};
    /// # async fn demo(f: &AsyncSharedFilter) -> bloomsled_redis::Result<()> {
    /// if f.insert(b"https://example.com/").await? {
    ///     // first time anyone added it
    /// }
    /// # Ok(())
    /// # }
    /// ```
    pub async fn insert(&self, key: &[u8]) -> Result<bool> {
        one(self.insert_many(&[key]).await?)
    }

    /// True if `key` may have been added, false if it certainly was not. One `GETRANGE`.
    ///
    /// ```no_run
    /// # use bloomsled_redis::{AsyncSharedFilter, Endpoint};
    /// # async fn demo(f: &AsyncSharedFilter) -> bloomsled_redis::Result<()> {
    /// if !f.contains(b"user:42").await? {
    ///     return Ok(()); // certainly absent: skip the database
    /// }
    /// # Ok(())
    /// # }
    /// ```
    pub async fn contains(&self, key: &[u8]) -> Result<bool> {
        one(self.contains_many(&[key]).await?)
    }

    /// Inserts every key; returns for each whether it was new. Pipelined: one round trip per
    /// node per 8,192 keys, one command per shard touched. On error nothing is reported, and
    /// some keys may have been inserted.
    ///
    /// ```no_run
    /// # use bloomsled_redis::{AsyncSharedFilter, Endpoint};
    /// # async fn demo(f: &AsyncSharedFilter) -> bloomsled_redis::Result<()> {
    /// let new = f.insert_many(&[&b"a"[..], b"b", b"a"]).await?;
    /// assert_eq!(new.len(), 3);
    /// # Ok(())
    /// # }
    /// ```
    pub async fn insert_many<K: AsRef<[u8]>>(&self, keys: &[K]) -> Result<Vec<bool>> {
        let r = async {
            let mut out = Vec::with_capacity(keys.len());
            for chunk in keys.chunks(PIPELINE_KEYS) {
                self.add_batch(chunk, &mut out).await?;
            }
            Ok(out)
        }
        .await;
        self.session.tally.adds(&r);
        r
    }

    /// Adds one pipeline's worth of keys, with the sync filter's rule for an add whose
    /// reply was lost: it is never replayed blindly (its replay would answer "present" for
    /// the keys the lost attempt set). A lookup of its keys tells whether it ran; it is sent
    /// again only if it certainly did not, else [`Error::RedisOutcomeUnknown`].
    async fn add_batch<K: AsRef<[u8]>>(&self, keys: &[K], out: &mut Vec<bool>) -> Result<()> {
        let wire = self.wire();
        let batch = wire.add_plan(keys);
        let mut resend = self.session.endpoint().resends();
        loop {
            let mut cmds = Cmds::default();
            wire.write_add(&mut cmds, &batch);
            match self.session.run_once(cmds.0).await {
                Ok(replies) => return wire.read_add(&batch, replies, out),
                Err(Error::RedisOutcomeUnknown { why }) => {
                    let mut lookup = Cmds::default();
                    wire.write_add_lookup(&mut lookup, &batch);
                    let found = self.session.run(lookup.0).await?;
                    resend.again(wire.add_may_have_run(&batch, found)?, why)?;
                }
                Err(e) => return Err(e),
            }
        }
    }

    /// Looks up every key, one `GETRANGE` per key, pipelined like
    /// [`AsyncSharedFilter::insert_many`]. Either every key gets an answer or the call fails: a
    /// key is never reported absent because its block could not be read.
    ///
    /// ```no_run
    /// # use bloomsled_redis::{AsyncSharedFilter, Endpoint};
    /// # async fn demo(f: &AsyncSharedFilter) -> bloomsled_redis::Result<()> {
    /// let maybe = f.contains_many(&[&b"a"[..], b"b"]).await?;
    /// assert_eq!(maybe.len(), 2);
    /// # Ok(())
    /// # }
    /// ```
    pub async fn contains_many<K: AsRef<[u8]>>(&self, keys: &[K]) -> Result<Vec<bool>> {
        let r = self.lookup_all(keys).await;
        self.session.tally.lookups(&r);
        r
    }

    async fn lookup_all<K: AsRef<[u8]>>(&self, keys: &[K]) -> Result<Vec<bool>> {
        let wire = self.wire();
        let mut out = Vec::with_capacity(keys.len());
        for chunk in keys.chunks(PIPELINE_KEYS) {
            let plan = wire.plan(chunk);
            let mut cmds = Cmds::default();
            plan.iter().for_each(|p| wire.write_getrange(&mut cmds, p));
            let replies = self.session.run(cmds.0).await?;
            if replies.len() != plan.len() {
                return Err(Error::ReportableBug(format!(
                    "{} replies to {} lookups",
                    replies.len(),
                    plan.len()
                )));
            }
            for (p, r) in plan.iter().zip(replies) {
                out.push(wire.check_block(p, r)?);
            }
        }
        Ok(out)
    }

    /// Removes one add of `key` from a counting filter, as [`SharedFilter::remove`] does:
    /// `false`, changing nothing, if the key is certainly not in the filter.
    /// [`Error::InvalidConfig`] on a filter created without counting.
    ///
    /// ```no_run
    /// # use bloomsled_redis::{AsyncSharedFilter, Endpoint};
    /// # async fn demo(f: &AsyncSharedFilter) -> bloomsled_redis::Result<()> {
    /// f.insert(b"token-1").await?;
    /// assert!(f.remove(b"token-1").await?);
    /// # Ok(())
    /// # }
    /// ```
    pub async fn remove(&self, key: &[u8]) -> Result<bool> {
        one(self.remove_many(&[key]).await?)
    }

    /// [`AsyncSharedFilter::remove`] for every key, in order; pipelined, one script per
    /// shard touched.
    ///
    /// ```no_run
    /// # use bloomsled_redis::{AsyncSharedFilter, Endpoint};
    /// # async fn demo(f: &AsyncSharedFilter) -> bloomsled_redis::Result<()> {
    /// let removed = f.remove_many(&[&b"a"[..], b"b"]).await?;
    /// assert_eq!(removed.len(), 2);
    /// # Ok(())
    /// # }
    /// ```
    pub async fn remove_many<K: AsRef<[u8]>>(&self, keys: &[K]) -> Result<Vec<bool>> {
        if !self.shape.counting {
            return Err(Error::config(format!(
                "shared filter {:?} has no counters: keys can only be removed from a filter \
                 created with counting",
                self.layout.name
            )));
        }
        let wire = self.wire();
        let mut out = Vec::with_capacity(keys.len());
        for chunk in keys.chunks(PIPELINE_KEYS) {
            let batch = wire.remove_plan(chunk);
            let mut cmds = Cmds::default();
            wire.write_remove(&mut cmds, &batch);
            let replies = self.session.run(cmds.0).await;
            let read = replies.and_then(|r| wire.read_remove(&batch, r, &mut out));
            if let Err(e) = read {
                self.session.tally.failed(&e);
                return Err(e);
            }
        }
        Ok(out)
    }

    /// The counts of `key`'s cells in a counting filter, smallest first (15 means stuck);
    /// [`Error::InvalidConfig`] on a filter created without counting.
    ///
    /// ```no_run
    /// # use bloomsled_redis::{AsyncSharedFilter, Endpoint};
    /// # async fn demo(f: &AsyncSharedFilter) -> bloomsled_redis::Result<()> {
    /// let added_at_most = f.counts(b"token-1").await?[0];
    /// # let _ = added_at_most;
    /// # Ok(())
    /// # }
    /// ```
    pub async fn counts(&self, key: &[u8]) -> Result<Vec<u8>> {
        if !self.shape.counting {
            return Err(Error::config(format!(
                "shared filter {:?} has bits, not counters",
                self.layout.name
            )));
        }
        let wire = self.wire();
        let p = wire.probe(key);
        let mut cmds = Cmds::default();
        wire.write_getrange(&mut cmds, &p);
        let reply = self.session.run(cmds.0).await?.into_iter().next();
        wire.read_counts(&p, reply.unwrap_or(Value::Nil))
    }

    /// Records this handle's metrics (label `filter`), as [`SharedFilter::record_metrics`]
    /// does: the counters of its calls, then the gauges of the filter's stats, from one
    /// `BITCOUNT` pipeline; on a counting filter from a read through the whole filter
    /// (`GETRANGE`s in pipelines of about 16 MiB: Redis has no command that counts non-zero
    /// nibbles), as [`SharedFilter::stats`] does. If the stats cannot be read, the counters
    /// are recorded and the error returned.
    ///
    /// ```no_run
    /// # use bloomsled_redis::AsyncSharedFilter;
    /// # async fn demo(f: &AsyncSharedFilter) -> bloomsled_redis::Result<()> {
    /// f.record_metrics().await?; // from a scrape handler
    /// # Ok(())
    /// # }
    /// ```
    #[cfg(feature = "metrics")]
    #[cfg_attr(docsrs, doc(cfg(feature = "metrics")))]
    pub async fn record_metrics(&self) -> Result<()> {
        let wire = self.wire();
        let stats = if self.shape.counting {
            self.counting_stats().await.map(Some)
        } else {
            match self.session.run(wire.bit_count_cmds()).await {
                Ok(replies) => wire
                    .read_bit_counts(replies)
                    .map(|(ones, bytes)| Some(wire.stats_of(ones, bytes))),
                Err(e) => Err(e),
            }
        };
        let tally = &self.session.tally;
        super::super::telemetry::record(
            tally,
            self.name(),
            stats.as_ref().ok().and_then(|s| s.as_ref()),
        );
        stats.map(drop)
    }

    /// The stats of a counting filter: its non-zero counters, counted as the shards are
    /// read through (every block's incarnation checked).
    #[cfg(feature = "metrics")]
    async fn counting_stats(&self) -> Result<crate::SharedStats> {
        let wire = self.wire();
        let mut ones = 0u64;
        for read in wire.block_reads() {
            let replies = self.session.run(wire.block_read_cmds(&read)).await?;
            wire.visit_block_read(&read, replies, &mut |_, cells| {
                ones += super::super::stats::counters_set(cells);
            })?;
        }
        Ok(wire.stats_of(ones, wire.shard_bytes()))
    }

    /// Deletes the filter from Redis, config record first, as [`SharedFilter::destroy`]
    /// does: handles still open get [`Error::SharedFilterLost`].
    ///
    /// ```no_run
    /// # use bloomsled_redis::{AsyncSharedFilter, Endpoint};
    /// # async fn demo(f: AsyncSharedFilter) -> bloomsled_redis::Result<()> {
    /// f.destroy().await?;
    /// # Ok(())
    /// # }
    /// ```
    pub async fn destroy(self) -> Result<()> {
        self.session.run(self.layout.delete_cmds()).await?;
        Ok(())
    }
}

filter_getters!(AsyncSharedFilter);

//! A shared window: keys that are forgotten a fixed time after they were added, kept in
//! Redis or a Redis Cluster as a ring of shared filters, one per generation.
//!
//! A window of span `S` in `G` generations cuts time into generations of width
//! `w = S / G` (the arithmetic and the limits on `S` and `G` are the local window's, from
//! [`bloomsled::clock`]): keys go to the filter of the current generation, lookups ask
//! every live generation, and a generation's Redis keys expire (by Redis TTL) a little
//! after the generation stops being live. **The guarantee**: a key added at time `t` is
//! found until at least `t + S − w` and forgotten once `t + S` has passed.
//!
//! **Loss is an error, never "absent".** Each generation is a [`SharedFilter`] with its own
//! incarnation in every block. The window's record (see `record`) holds the window's incarnation and,
//! per generation written to, the incarnation of its filter (the *ring*). Every lookup reads the
//! record's incarnation and the live generations' ring entries in the same pipeline as the
//! blocks, so:
//! - a generation deleted, evicted, expired early or lost in a restart: its blocks read as
//!   missing or untagged, or its filter has another incarnation than the ring says
//!   ([`Error::SharedFilterLost`]);
//! - the record deleted, or the whole server flushed or restarted empty: the record's
//!   incarnation is gone or new (lost, even for a handle that never saw a generation);
//! - a generation nobody wrote to has no ring entry and no filter: it holds no keys, which
//!   is not an error.
//!
//! **Rotation by many processes at once**: the first add of a generation creates its
//! filter with `SET NX` on its config record (one creator wins, the others adopt its
//! filter), gives its keys their TTL, then records it in the ring with a script that sets
//! the entry only once: every process ends with the same generation.

mod config;
mod record;
mod ring;
mod stats;
mod stored;

pub use config::SharedWindowConfig;
pub use stats::{GenerationStats, SharedWindowStats};

use std::collections::BTreeMap;
use std::sync::atomic::AtomicU64;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use redis::Value;

use crate::error::{Error, Result};
use bloomsled::clock::{Clock, Generations, SystemClock};

use super::conn::Endpoint;
use super::filter::SharedFilter;
use super::layout::{self, Cells, Layout};
use super::record::{new_incarnation, SharedShape};
use super::session::Session;
use super::value;
use config::default_grace;
use record::{encode_filter, gen_field, incarnation_text, StoredWindowSettings, CREATE_SCRIPT};
use stored::{check_window_name, describe, Stored};

/// Block reads per lookup pipeline (keys × generations read): bounds one batch's memory.
const PIPELINE_READS: usize = 8192;

/// Longest window name: a generation's filter is named `NAME:w<incarnation>:g<generation>`,
/// which must fit a shared filter's 200 bytes.
const MAX_NAME: usize = 160;

/// A window of keys kept in Redis: a ring of shared filters, one per generation, whose
/// keys expire with their generation.
///
/// With `w = span / generations`, time `t` (ms since the Unix epoch) belongs to generation
/// `floor(t / w)`; adds go to the current generation, lookups ask every live one, and
/// generation `e` expires at `(e + generations) · w` (its Redis keys a grace later). So a
/// key added at `t` is found until at least `t + span − w` and forgotten once `t + span`
/// has passed.
///
/// A generation that vanished before its time (flushed, evicted, expired early, lost in a
/// restart, deleted, recreated), or a window whose record did, is
/// [`Error::SharedFilterLost`], never "absent"; a generation nobody wrote to is no error.
/// Several processes rotating at once end with one generation each time.
///
/// Methods take `&self` and serialize on one connection; open one handle per thread for
/// parallel throughput.
///
/// ```no_run
/// use bloomsled_redis::{Endpoint, SharedWindow, SharedWindowConfig};
/// use bloomsled::FilterConfig;
/// use std::time::Duration;
/// let redis = Endpoint::url("redis://127.0.0.1:6379/");
/// // "Have I crawled this URL in the last 7 days?"
/// let week = SharedWindowConfig::new(
///     Duration::from_secs(7 * 86_400),
///     7,
///     FilterConfig::new(1_000_000),
/// );
/// let crawled = SharedWindow::create(&redis, "crawled", &week)?;
/// if !crawled.contains(b"https://example.com/")? {
///     // ... crawl it ...
///     crawled.insert(b"https://example.com/")?;
/// }
/// # Ok::<(), bloomsled_redis::Error>(())
/// ```
pub struct SharedWindow {
    session: Arc<Session>,
    name: String,
    key: String,
    incarnation: u64,
    config: StoredWindowSettings,
    shape: SharedShape,
    clock: Arc<dyn Clock>,
    /// The latest time read from the clock: a clock that steps back never expires a
    /// generation this handle already saw live.
    latest: AtomicU64,
    /// Generations known to exist (listed in the ring), with their filters.
    gens: Mutex<BTreeMap<u64, Arc<SharedFilter>>>,
}

/// The Redis key of window `name`'s record.
fn window_key(name: &str) -> String {
    format!("bloomsled:{{{name}}}:window")
}

/// The name of the filter of generation `e` of the window `name` in its incarnation
/// `incarnation`: the tag keeps a window created again after a loss from adopting a lost
/// one's leftovers.
fn gen_name(name: &str, incarnation: u64, e: u64) -> String {
    format!("{name}:w{incarnation:016x}:g{e}")
}

/// The shape of each generation's filter of the window `name`, as `config` asks.
fn generation_shape(name: &str, config: &SharedWindowConfig) -> Result<SharedShape> {
    let fshape = config.filter.shape()?;
    let shards = config
        .shards
        .unwrap_or_else(|| layout::default_shards(fshape.num_blocks, Cells::Bits));
    let probe = Layout::new(
        &gen_name(name, u64::MAX, u64::MAX),
        fshape.num_blocks,
        shards,
        Cells::Bits,
    )?;
    Ok(SharedShape {
        seed: fshape.seed,
        num_hashes: fshape.num_hashes,
        num_blocks: fshape.num_blocks,
        shards: probe.shards,
        shard_blocks: probe.shard_blocks,
        capacity: config.filter.get_expected_items(),
        counting: false,
    })
}

impl SharedWindow {
    /// Creates the window `name` (or opens it if it exists with the same generations,
    /// width and filter shape; [`Error::RedisShapeMismatch`] otherwise). Several processes
    /// may call this at once: they end with one window. No generation is created until
    /// the first add.
    ///
    /// ```no_run
    /// use bloomsled_redis::{Endpoint, SharedWindow, SharedWindowConfig};
    /// use bloomsled::FilterConfig;
    /// use std::time::Duration;
    /// let redis = Endpoint::url("redis://127.0.0.1:6379/");
    /// let hour = SharedWindowConfig::new(Duration::from_secs(3600), 6, FilterConfig::new(10_000));
    /// let revoked = SharedWindow::create(&redis, "revoked-tokens", &hour)?;
    /// revoked.insert(b"token-123")?;
    /// assert!(revoked.contains(b"token-123")?);
    /// # Ok::<(), bloomsled_redis::Error>(())
    /// ```
    pub fn create(endpoint: &Endpoint, name: &str, config: &SharedWindowConfig) -> Result<Self> {
        check_window_name(name)?;
        let ring = Generations::new(config.span, config.generations)?;
        let width_ms = ring.width_ms();
        let wc = StoredWindowSettings {
            ring,
            grace_ms: config
                .grace
                .map_or_else(|| default_grace(width_ms), |g| g.as_millis() as u64),
        };
        let mut shape = generation_shape(name, config)?;
        let session = Arc::new(Session::open(endpoint)?);
        let key = window_key(name);
        let incarnation = new_incarnation();
        let reply = session.one(
            redis::cmd("EVAL")
                .arg(CREATE_SCRIPT)
                .arg(1)
                .arg(&key)
                .arg(incarnation_text(incarnation))
                .arg(wc.encode())
                .arg(encode_filter(shape, incarnation))
                .clone(),
        )?;
        let stored =
            Stored::from_reply(name, &key, reply)?.ok_or_else(|| Error::SharedFilterNotFound {
                name: name.into(),
                why: format!("the window record at {key:?} vanished while it was created"),
            })?;
        if config.filter.get_seed().is_none() {
            // No seed asked for: the window's own secret one, whoever drew it.
            shape.seed = stored.shape.seed;
        }
        if stored.config.ring != ring || stored.shape != shape {
            return Err(Error::RedisShapeMismatch {
                name: name.into(),
                asked: describe(&wc, &shape),
                found: describe(&stored.config, &stored.shape),
            });
        }
        Ok(Self::from_stored(
            session,
            name,
            stored,
            config.clock.clone(),
        ))
    }

    /// Opens the existing window `name` with the system clock;
    /// [`Error::SharedFilterNotFound`] if there is none.
    ///
    /// ```no_run
    /// use bloomsled_redis::{Endpoint, SharedWindow};
    /// let w = SharedWindow::open(&Endpoint::url("redis://127.0.0.1:6379/"), "crawled")?;
    /// println!("{:?} in {} generations", w.span(), w.generations());
    /// # Ok::<(), bloomsled_redis::Error>(())
    /// ```
    pub fn open(endpoint: &Endpoint, name: &str) -> Result<Self> {
        Self::open_with_clock(endpoint, name, SystemClock)
    }

    /// Opens the existing window `name`, reading time from `clock`.
    ///
    /// ```no_run
    /// use bloomsled::clock::ManualClock;
    /// use bloomsled_redis::{Endpoint, SharedWindow};
    /// let clock = ManualClock::starting_now();
    /// let ep = Endpoint::url("redis://127.0.0.1:6379/");
    /// let w = SharedWindow::open_with_clock(&ep, "crawled", clock.clone())?;
    /// # let _ = w;
    /// # Ok::<(), bloomsled_redis::Error>(())
    /// ```
    pub fn open_with_clock(
        endpoint: &Endpoint,
        name: &str,
        clock: impl Clock + 'static,
    ) -> Result<Self> {
        let clock: Arc<dyn Clock> = Arc::new(clock);
        check_window_name(name)?;
        let session = Arc::new(Session::open(endpoint)?);
        let key = window_key(name);
        let reply = session.one(
            redis::cmd("HMGET")
                .arg(&key)
                .arg("epoch")
                .arg("config")
                .arg("filter")
                .clone(),
        )?;
        let stored =
            Stored::from_reply(name, &key, reply)?.ok_or_else(|| Error::SharedFilterNotFound {
                name: name.into(),
                why: format!("no window record at {key:?}"),
            })?;
        Ok(Self::from_stored(session, name, stored, clock))
    }

    /// True if a window record named `name` exists (as opposed to a plain shared filter or
    /// nothing).
    ///
    /// ```no_run
    /// use bloomsled_redis::{Endpoint, SharedWindow};
    /// let ep = Endpoint::url("redis://127.0.0.1:6379/");
    /// if SharedWindow::exists(&ep, "crawled")? { /* open it as a window */ }
    /// # Ok::<(), bloomsled_redis::Error>(())
    /// ```
    pub fn exists(endpoint: &Endpoint, name: &str) -> Result<bool> {
        layout::check_name(name)?;
        if name.len() > MAX_NAME {
            return Ok(false); // too long for a window, not for a plain filter
        }
        let session = Session::open(endpoint)?;
        let key = window_key(name);
        let n = value::int(session.one(redis::cmd("EXISTS").arg(&key).clone())?, &key)?;
        Ok(n > 0)
    }

    fn from_stored(session: Arc<Session>, name: &str, s: Stored, clock: Arc<dyn Clock>) -> Self {
        SharedWindow {
            session,
            name: name.into(),
            key: window_key(name),
            incarnation: s.incarnation,
            config: s.config,
            shape: s.shape,
            clock,
            latest: AtomicU64::new(0),
            gens: Mutex::new(BTreeMap::new()),
        }
    }

    /// Inserts `key` into the current generation; returns `true` if it was new there.
    ///
    /// ```no_run
    /// # use bloomsled_redis::{Endpoint, SharedWindow};
    /// # let w = SharedWindow::open(&Endpoint::url("redis://127.0.0.1:6379/"), "crawled")?;
    /// w.insert(b"https://example.com/")?;
    /// # Ok::<(), bloomsled_redis::Error>(())
    /// ```
    pub fn insert(&self, key: &[u8]) -> Result<bool> {
        super::one(self.insert_many(&[key])?)
    }

    /// True if `key` was added within the window (or is a false positive), false if it
    /// certainly was not. One round trip (two right after another process created a
    /// generation this handle has not seen yet).
    ///
    /// ```no_run
    /// # use bloomsled_redis::{Endpoint, SharedWindow};
    /// # let w = SharedWindow::open(&Endpoint::url("redis://127.0.0.1:6379/"), "crawled")?;
    /// if !w.contains(b"https://example.com/")? { /* not seen this week */ }
    /// # Ok::<(), bloomsled_redis::Error>(())
    /// ```
    pub fn contains(&self, key: &[u8]) -> Result<bool> {
        super::one(self.contains_many(&[key])?)
    }

    /// Inserts every key into the current generation (creating it on its first insert); returns
    /// for each whether it was new there. Pipelined: one round trip per node per 8,192
    /// keys, each also checking the window's record.
    ///
    /// ```no_run
    /// # use bloomsled_redis::{Endpoint, SharedWindow};
    /// # let w = SharedWindow::open(&Endpoint::url("redis://127.0.0.1:6379/"), "crawled")?;
    /// let new = w.insert_many(&[&b"a"[..], b"b"])?;
    /// assert_eq!(new.len(), 2);
    /// # Ok::<(), bloomsled_redis::Error>(())
    /// ```
    pub fn insert_many<K: AsRef<[u8]>>(&self, keys: &[K]) -> Result<Vec<bool>> {
        let r = self.add_all(keys);
        self.session.tally.adds(&r);
        r
    }

    /// What this handle's calls did (for its metrics).
    #[cfg(feature = "metrics")]
    pub(super) fn tally(&self) -> &super::tally::Tally {
        &self.session.tally
    }

    fn add_all<K: AsRef<[u8]>>(&self, keys: &[K]) -> Result<Vec<bool>> {
        let mut out = Vec::with_capacity(keys.len());
        if keys.is_empty() {
            return Ok(out);
        }
        let now = self.now();
        let e = self.config.ring.generation_of(now);
        let gen = self.generation_for_writes(e, now)?;
        let field = gen_field(e);
        for chunk in keys.chunks(PIPELINE_READS) {
            let batch = gen.add_plan(chunk);
            // Not replayed blindly: a replay would answer "present" for the keys a lost
            // attempt set. Sent again only once a lookup shows it did not run (see
            // `Endpoint::retry_for`).
            let mut resend = self.session.endpoint().resends();
            let replies = loop {
                match self.session.run_fast_once(|w| {
                    self.write_ring_read(w, std::slice::from_ref(&field));
                    gen.write_add(w, &batch);
                }) {
                    Err(Error::RedisOutcomeUnknown { why }) => {
                        resend.again(gen.add_may_have_run(&batch)?, why)?;
                    }
                    r => break r?,
                }
            };
            let mut replies = replies.into_iter();
            let ring = self.read_ring(replies.next().unwrap_or(Value::Nil), e..=e)?;
            self.reconcile(&ring)?;
            if let Err(err) = gen.read_add(&batch, replies, &mut out) {
                if matches!(err, Error::SharedFilterLost { .. }) {
                    // The add wrote bits into emptied keys: let them expire with the
                    // generation instead of staying forever.
                    self.expire(&gen, e, now);
                }
                return Err(err);
            }
        }
        Ok(out)
    }

    /// Looks up every key in every live generation: one pipeline per node (per 8,192
    /// block reads) carries the record check and one `GETRANGE` per key and generation.
    /// Either every key gets an answer or the call fails: a key is never reported absent
    /// because a generation could not be read.
    ///
    /// ```no_run
    /// # use bloomsled_redis::{Endpoint, SharedWindow};
    /// # let w = SharedWindow::open(&Endpoint::url("redis://127.0.0.1:6379/"), "crawled")?;
    /// let seen = w.contains_many(&[&b"a"[..], b"b"])?;
    /// assert_eq!(seen.len(), 2);
    /// # Ok::<(), bloomsled_redis::Error>(())
    /// ```
    pub fn contains_many<K: AsRef<[u8]>>(&self, keys: &[K]) -> Result<Vec<bool>> {
        let r = self.lookup_all(keys);
        self.session.tally.lookups(&r);
        r
    }

    fn lookup_all<K: AsRef<[u8]>>(&self, keys: &[K]) -> Result<Vec<bool>> {
        let mut out = vec![false; keys.len()];
        if keys.is_empty() {
            return Ok(out);
        }
        let read = self.read_range(self.now());
        let mut at = 0;
        while at < keys.len() {
            let known: Vec<_> = self.known(&read).into_iter().map(|(_, g)| g).collect();
            let n = (PIPELINE_READS / known.len().max(1))
                .max(1)
                .min(keys.len() - at);
            self.lookup(&keys[at..at + n], &read, &known, &mut out[at..at + n])?;
            at += n;
        }
        Ok(out)
    }

    /// The window's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The window's incarnation tag (random, non-zero, set at creation).
    pub fn incarnation(&self) -> u64 {
        self.incarnation
    }

    /// The span: `width × generations`.
    pub fn span(&self) -> Duration {
        Duration::from_millis(self.config.ring.span_ms())
    }

    /// The width of one generation.
    pub fn width(&self) -> Duration {
        Duration::from_millis(self.config.ring.width_ms())
    }

    /// The number of generations.
    pub fn generations(&self) -> u64 {
        u64::from(self.config.ring.generations())
    }

    /// How long a generation's Redis keys outlive it.
    pub fn grace(&self) -> Duration {
        Duration::from_millis(self.config.grace_ms)
    }

    /// The shape of every generation's filter.
    pub fn shape(&self) -> SharedShape {
        self.shape
    }

    /// The generation the window's clock is in now (where adds go).
    pub fn current_generation(&self) -> u64 {
        self.config.ring.generation_of(self.now())
    }

    /// The Redis key of the window's record.
    pub fn record_key(&self) -> String {
        self.key.clone()
    }

    /// The Redis keys of generation `e`'s filter: its config record, then its shards, then
    /// their fences (the token of the process that created each shard).
    pub fn generation_keys(&self, e: u64) -> Result<Vec<String>> {
        let l = self.gen_layout(e)?;
        let mut keys = vec![layout::config_key(&l.name)];
        keys.extend((0..l.shards as usize).map(|s| l.key(s).to_owned()));
        keys.extend(l.fence_keys());
        Ok(keys)
    }
    /// Deletes the window from Redis: its record first (so no new handle opens it and open
    /// handles get [`Error::SharedFilterLost`]), then every generation the ring lists.
    ///
    /// ```no_run
    /// # use bloomsled_redis::{Endpoint, SharedWindow};
    /// # let w = SharedWindow::open(&Endpoint::url("redis://127.0.0.1:6379/"), "crawled")?;
    /// w.destroy()?;
    /// # Ok::<(), bloomsled_redis::Error>(())
    /// ```
    pub fn destroy(self) -> Result<()> {
        let fields = self
            .session
            .one(redis::cmd("HKEYS").arg(&self.key).clone())?;
        let gens: Vec<u64> = match fields {
            Value::Array(v) => v
                .into_iter()
                .filter_map(|f| value::bytes(f, &self.key).ok())
                .filter_map(|f| {
                    std::str::from_utf8(&f)
                        .ok()?
                        .strip_prefix("g:")?
                        .parse()
                        .ok()
                })
                .collect(),
            _ => Vec::new(),
        };
        self.session.one(redis::cmd("DEL").arg(&self.key).clone())?;
        let mut cmds = Vec::new();
        for e in gens {
            for k in self.generation_keys(e)? {
                cmds.push(redis::cmd("DEL").arg(k).clone());
            }
        }
        self.session.run(|| cmds.clone())?;
        Ok(())
    }
}

impl std::fmt::Debug for SharedWindow {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SharedWindow")
            .field("name", &self.name)
            .field("endpoint", &self.session.endpoint().urls())
            .field("span", &self.span())
            .field("generations", &self.config.ring.generations())
            .field("shape", &self.shape)
            .field("incarnation", &format_args!("{:#x}", self.incarnation))
            .finish()
    }
}

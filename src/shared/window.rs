//! A shared window: keys that are forgotten a fixed time after they were added, kept in
//! Redis or a Redis Cluster as a ring of shared filters, one per generation.
//!
//! A window of span `S` in `G` generations cuts time into generations of width
//! `w = S / G` (the arithmetic and the limits on `S` and `G` are the local window's, from
//! [`crate::clock`]): keys go to the filter of the current generation, lookups ask
//! every live generation, and a generation's Redis keys expire (by Redis TTL) a little
//! after the generation stops being live. **The guarantee**: a key added at time `t` is
//! found until at least `t + S − w` and forgotten once `t + S` has passed.
//!
//! **Loss is an error, never "absent".** Each generation is a [`SharedFilter`] with its own
//! epoch in every block. The window's record (see `record`) holds the window's epoch and,
//! per generation written to, the epoch of its filter (the *ring*). Every lookup reads the
//! record's epoch and the live generations' ring entries in the same pipeline as the
//! blocks, so:
//! - a generation deleted, evicted, expired early or lost in a restart: its blocks read as
//!   missing or untagged, or its filter has another epoch than the ring says
//!   ([`Error::SharedFilterLost`]);
//! - the record deleted, or the whole server flushed or restarted empty: the record's
//!   epoch is gone or new (lost, even for a handle that never saw a generation);
//! - a generation nobody wrote to has no ring entry and no filter: it holds no keys, which
//!   is not an error.
//!
//! **Rotation by many processes at once**: the first add of a generation creates its
//! filter with `SET NX` on its config record (one creator wins, the others adopt its
//! filter), gives its keys their TTL, then records it in the ring with a script that sets
//! the entry only once: every process ends with the same generation.

mod record;

// The clocks' path of earlier releases, kept one release: their one documented path is
// `bloomsled::clock`.
#[doc(hidden)]
pub use crate::clock::{Clock, ManualClock, SystemClock};

use std::collections::BTreeMap;
use std::ops::RangeInclusive;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use redis::Value;

use crate::clock::epoch::Epochs;
use crate::error::{Error, Result};
use crate::filter::FilterConfig;

use super::conn::Endpoint;
use super::filter::SharedFilter;
use super::layout::{self, Cells, Layout};
use super::record::{new_epoch, Record, SharedShape};
use super::resp::Sink;
use super::session::Session;
use super::stats::SharedStats;
use super::value;
use record::{
    encode_filter, epoch_text, gen_field, parse_epoch, WindowConfig, CREATE_SCRIPT, RECORD_SCRIPT,
};

/// Block reads per lookup pipeline (keys × generations read): bounds one batch's memory.
const PIPELINE_READS: usize = 8192;

/// Longest window name: a generation's filter is named `NAME:w<epoch>:g<generation>`,
/// which must fit a shared filter's 200 bytes.
const MAX_NAME: usize = 160;

/// Default grace for a generation of width `w`: its Redis keys live this long after it
/// stops being live, to absorb clocks of clients that run slightly behind.
fn default_grace(width_ms: u64) -> u64 {
    width_ms.clamp(1, 60_000)
}

/// The settings of a new shared window: its span, generations, each generation's filter
/// (sized for the keys added during one generation), grace and clock.
///
/// ```
/// use bloomsled::shared::SharedWindowConfig;
/// use bloomsled::FilterConfig;
/// use std::time::Duration;
/// let week = SharedWindowConfig::new(
///     Duration::from_secs(7 * 86_400),
///     7,
///     FilterConfig::new(1_000_000).false_positive_rate(0.001),
/// );
/// assert_eq!(week.get_generations(), 7);
/// ```
#[derive(Debug, Clone)]
pub struct SharedWindowConfig {
    span: Duration,
    generations: u32,
    filter: FilterConfig,
    grace: Option<Duration>,
    shards: Option<u64>,
    clock: Arc<dyn Clock>,
}

impl SharedWindowConfig {
    /// A window of `span` cut into `generations` generations, each a shared filter sized by
    /// `filter` (its expected items are the keys added per generation). As for a local
    /// window, `generations` is 1 to 256 and `span` a whole number of milliseconds that
    /// they divide exactly; [`SharedWindow::create`] refuses anything else with
    /// [`Error::InvalidConfig`].
    ///
    /// A lookup asks every live generation, so an absent key is "maybe" at about the sum of
    /// their rates: give each generation the window's target rate divided by `generations`.
    pub fn new(span: Duration, generations: u32, filter: FilterConfig) -> Self {
        SharedWindowConfig {
            span,
            generations,
            filter,
            grace: None,
            shards: None,
            clock: Arc::new(SystemClock),
        }
    }

    /// How long a generation's Redis keys outlive it (default: one generation, at most a
    /// minute). Clients whose clocks run behind the creator's by more than this see the
    /// generation vanish before they think it expired, which they report as lost.
    ///
    /// ```
    /// use bloomsled::shared::SharedWindowConfig;
    /// use bloomsled::FilterConfig;
    /// use std::time::Duration;
    /// let c = SharedWindowConfig::new(Duration::from_secs(3600), 6, FilterConfig::new(1000))
    ///     .grace(Duration::from_secs(5));
    /// # let _ = c;
    /// ```
    pub fn grace(mut self, grace: Duration) -> Self {
        self.grace = Some(grace);
        self
    }

    /// Shard keys per generation (default as for [`SharedFilter::create`]).
    ///
    /// ```
    /// use bloomsled::shared::SharedWindowConfig;
    /// use bloomsled::FilterConfig;
    /// use std::time::Duration;
    /// let c = SharedWindowConfig::new(Duration::from_secs(60), 2, FilterConfig::new(10)).shards(1);
    /// # let _ = c;
    /// ```
    pub fn shards(mut self, shards: u64) -> Self {
        self.shards = Some(shards);
        self
    }

    /// The clock the window reads (default [`SystemClock`]).
    ///
    /// ```
    /// use bloomsled::clock::ManualClock;
    /// use bloomsled::shared::SharedWindowConfig;
    /// use bloomsled::FilterConfig;
    /// use std::sync::Arc;
    /// use std::time::Duration;
    /// let clock = ManualClock::new(0);
    /// let c = SharedWindowConfig::new(Duration::from_secs(60), 2, FilterConfig::new(10))
    ///     .clock(Arc::new(clock.clone()));
    /// # let _ = c;
    /// ```
    pub fn clock(mut self, clock: Arc<dyn Clock>) -> Self {
        self.clock = clock;
        self
    }

    /// The number of generations.
    pub fn get_generations(&self) -> u32 {
        self.generations
    }
}

/// One live generation in [`SharedWindowStats`].
#[derive(Debug, Clone, PartialEq)]
pub struct GenerationStats {
    /// The generation number: `floor(t / width)` for the times `t` it covers.
    pub generation: u64,
    /// When it began (ms since the Unix epoch).
    pub starts_at_ms: u64,
    /// When it stops being live (ms since the Unix epoch).
    pub expires_at_ms: u64,
    /// Its filter.
    pub filter: SharedStats,
}

/// What a shared window holds: its settings and each live generation that exists.
#[derive(Debug, Clone, PartialEq)]
pub struct SharedWindowStats {
    /// The window's name.
    pub name: String,
    /// The epoch of this incarnation of the window.
    pub epoch: u64,
    /// Span: `width × generations`.
    pub span: Duration,
    /// Width of one generation.
    pub width: Duration,
    /// Number of generations.
    pub generations: u64,
    /// How long a generation's Redis keys outlive it.
    pub grace: Duration,
    /// The window's time when the stats were taken (ms since the Unix epoch).
    pub now_ms: u64,
    /// The current generation.
    pub current: u64,
    /// The live generations that were written to, newest first.
    pub live: Vec<GenerationStats>,
}

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
/// use bloomsled::shared::{Endpoint, SharedWindow, SharedWindowConfig};
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
///     crawled.add(b"https://example.com/")?;
/// }
/// # Ok::<(), bloomsled::Error>(())
/// ```
pub struct SharedWindow {
    session: Arc<Session>,
    name: String,
    key: String,
    epoch: u64,
    config: WindowConfig,
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

/// The name of the filter of generation `e` of the window `name` of epoch `epoch`: the
/// epoch keeps a window created again after a loss from adopting a lost one's leftovers.
fn gen_name(name: &str, epoch: u64, e: u64) -> String {
    format!("{name}:w{epoch:016x}:g{e}")
}

impl SharedWindow {
    /// Creates the window `name` (or opens it if it exists with the same generations,
    /// width and filter shape; [`Error::RedisShapeMismatch`] otherwise). Several processes
    /// may call this at once: they end with one window. No generation is created until
    /// the first add.
    ///
    /// ```no_run
    /// use bloomsled::shared::{Endpoint, SharedWindow, SharedWindowConfig};
    /// use bloomsled::FilterConfig;
    /// use std::time::Duration;
    /// let redis = Endpoint::url("redis://127.0.0.1:6379/");
    /// let hour = SharedWindowConfig::new(Duration::from_secs(3600), 6, FilterConfig::new(10_000));
    /// let revoked = SharedWindow::create(&redis, "revoked-tokens", &hour)?;
    /// revoked.add(b"token-123")?;
    /// assert!(revoked.contains(b"token-123")?);
    /// # Ok::<(), bloomsled::Error>(())
    /// ```
    pub fn create(endpoint: &Endpoint, name: &str, config: &SharedWindowConfig) -> Result<Self> {
        check_window_name(name)?;
        let ring = Epochs::new(config.span, config.generations)?;
        let width_ms = ring.width_ms();
        let wc = WindowConfig {
            ring,
            grace_ms: config
                .grace
                .map_or_else(|| default_grace(width_ms), |g| g.as_millis() as u64),
        };
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
        let shape = SharedShape {
            seed: fshape.seed,
            num_hashes: fshape.num_hashes,
            num_blocks: fshape.num_blocks,
            shards: probe.shards,
            shard_blocks: probe.shard_blocks,
            capacity: config.filter.capacity(),
            counting: false,
        };
        let session = Arc::new(Session::open(endpoint)?);
        let key = window_key(name);
        let epoch = new_epoch();
        let reply = session.one(
            redis::cmd("EVAL")
                .arg(CREATE_SCRIPT)
                .arg(1)
                .arg(&key)
                .arg(epoch_text(epoch))
                .arg(wc.encode())
                .arg(encode_filter(shape, epoch))
                .clone(),
        )?;
        let stored =
            Stored::from_reply(name, &key, reply)?.ok_or_else(|| Error::SharedFilterNotFound {
                name: name.into(),
                why: format!("the window record at {key:?} vanished while it was created"),
            })?;
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
    /// use bloomsled::shared::{Endpoint, SharedWindow};
    /// let w = SharedWindow::open(&Endpoint::url("redis://127.0.0.1:6379/"), "crawled")?;
    /// println!("{:?} in {} generations", w.span(), w.generations());
    /// # Ok::<(), bloomsled::Error>(())
    /// ```
    pub fn open(endpoint: &Endpoint, name: &str) -> Result<Self> {
        Self::open_with_clock(endpoint, name, Arc::new(SystemClock))
    }

    /// Opens the existing window `name`, reading time from `clock`.
    ///
    /// ```no_run
    /// use bloomsled::clock::ManualClock;
    /// use bloomsled::shared::{Endpoint, SharedWindow};
    /// use std::sync::Arc;
    /// let clock = ManualClock::starting_now();
    /// let ep = Endpoint::url("redis://127.0.0.1:6379/");
    /// let w = SharedWindow::open_with_clock(&ep, "crawled", Arc::new(clock.clone()))?;
    /// # let _ = w;
    /// # Ok::<(), bloomsled::Error>(())
    /// ```
    pub fn open_with_clock(endpoint: &Endpoint, name: &str, clock: Arc<dyn Clock>) -> Result<Self> {
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
    /// use bloomsled::shared::{Endpoint, SharedWindow};
    /// let ep = Endpoint::url("redis://127.0.0.1:6379/");
    /// if SharedWindow::exists(&ep, "crawled")? { /* open it as a window */ }
    /// # Ok::<(), bloomsled::Error>(())
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
            epoch: s.epoch,
            config: s.config,
            shape: s.shape,
            clock,
            latest: AtomicU64::new(0),
            gens: Mutex::new(BTreeMap::new()),
        }
    }

    /// Adds `key` to the current generation; returns `true` if it was new there.
    ///
    /// ```no_run
    /// # use bloomsled::shared::{Endpoint, SharedWindow};
    /// # let w = SharedWindow::open(&Endpoint::url("redis://127.0.0.1:6379/"), "crawled")?;
    /// w.add(b"https://example.com/")?;
    /// # Ok::<(), bloomsled::Error>(())
    /// ```
    pub fn add(&self, key: &[u8]) -> Result<bool> {
        super::one(self.add_many(&[key])?)
    }

    /// True if `key` was added within the window (or is a false positive), false if it
    /// certainly was not. One round trip (two right after another process created a
    /// generation this handle has not seen yet).
    ///
    /// ```no_run
    /// # use bloomsled::shared::{Endpoint, SharedWindow};
    /// # let w = SharedWindow::open(&Endpoint::url("redis://127.0.0.1:6379/"), "crawled")?;
    /// if !w.contains(b"https://example.com/")? { /* not seen this week */ }
    /// # Ok::<(), bloomsled::Error>(())
    /// ```
    pub fn contains(&self, key: &[u8]) -> Result<bool> {
        super::one(self.contains_many(&[key])?)
    }

    /// Adds every key to the current generation (creating it on its first add); returns
    /// for each whether it was new there. Pipelined: one round trip per node per 8,192
    /// keys, each also checking the window's record.
    ///
    /// ```no_run
    /// # use bloomsled::shared::{Endpoint, SharedWindow};
    /// # let w = SharedWindow::open(&Endpoint::url("redis://127.0.0.1:6379/"), "crawled")?;
    /// let new = w.add_many(&[&b"a"[..], b"b"])?;
    /// assert_eq!(new.len(), 2);
    /// # Ok::<(), bloomsled::Error>(())
    /// ```
    pub fn add_many<K: AsRef<[u8]>>(&self, keys: &[K]) -> Result<Vec<bool>> {
        let mut out = Vec::with_capacity(keys.len());
        if keys.is_empty() {
            return Ok(out);
        }
        let now = self.now();
        let e = self.config.ring.epoch_of(now);
        let gen = self.generation_for_writes(e, now)?;
        let field = gen_field(e);
        for chunk in keys.chunks(PIPELINE_READS) {
            let batch = gen.add_plan(chunk);
            // Not replayed blindly: a replay would answer "present" for the keys a lost
            // attempt set. Sent again only once a lookup shows it did not run (see
            // `Endpoint::retry_for`).
            let start = std::time::Instant::now();
            let mut resent = false;
            let replies = loop {
                match self.session.run_fast_once(|w| {
                    self.write_ring_read(w, std::slice::from_ref(&field));
                    gen.write_add(w, &batch);
                }) {
                    Err(Error::RedisOutcomeUnknown { why }) => {
                        if gen.add_may_have_run(&batch)?
                            || (resent && start.elapsed() > self.session.endpoint().retry_window())
                        {
                            return Err(Error::RedisOutcomeUnknown { why });
                        }
                        resent = true;
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
    /// # use bloomsled::shared::{Endpoint, SharedWindow};
    /// # let w = SharedWindow::open(&Endpoint::url("redis://127.0.0.1:6379/"), "crawled")?;
    /// let seen = w.contains_many(&[&b"a"[..], b"b"])?;
    /// assert_eq!(seen.len(), 2);
    /// # Ok::<(), bloomsled::Error>(())
    /// ```
    pub fn contains_many<K: AsRef<[u8]>>(&self, keys: &[K]) -> Result<Vec<bool>> {
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

    /// The epoch of this incarnation of the window (random, non-zero, set at creation).
    pub fn epoch(&self) -> u64 {
        self.epoch
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
        self.config.ring.epoch_of(self.now())
    }

    /// The Redis key of the window's record.
    pub fn record_key(&self) -> String {
        self.key.clone()
    }

    /// The Redis keys of generation `e`'s filter: its config record, then its shards.
    pub fn generation_keys(&self, e: u64) -> Result<Vec<String>> {
        let l = self.gen_layout(e)?;
        let mut keys = vec![layout::config_key(&l.name)];
        keys.extend((0..l.shards as usize).map(|s| l.key(s).to_owned()));
        Ok(keys)
    }

    /// Settings and the filter statistics of every live generation that exists (one
    /// `BITCOUNT` pipeline per generation). A live generation that was lost is an error.
    ///
    /// ```no_run
    /// # use bloomsled::shared::{Endpoint, SharedWindow};
    /// # let w = SharedWindow::open(&Endpoint::url("redis://127.0.0.1:6379/"), "crawled")?;
    /// for g in w.stats()?.live {
    ///     println!("generation {}: ~{} keys", g.generation, g.filter.estimated_items);
    /// }
    /// # Ok::<(), bloomsled::Error>(())
    /// ```
    pub fn stats(&self) -> Result<SharedWindowStats> {
        let now = self.now();
        let read = self.read_range(now);
        let fields: Vec<String> = read.clone().map(gen_field).collect();
        let reply = self
            .session
            .run_fast(|w| self.write_ring_read(w, &fields))?
            .into_iter()
            .next()
            .unwrap_or(Value::Nil);
        let ring = self.read_ring(reply, read.clone())?;
        self.reconcile(&ring)?;
        let mut live = Vec::new();
        for (e, g) in self.known(&read).into_iter().rev() {
            live.push(GenerationStats {
                generation: e,
                starts_at_ms: self.config.ring.start_ms(e),
                expires_at_ms: self.config.ring.expires_at_ms(e),
                filter: g.stats()?,
            });
        }
        Ok(SharedWindowStats {
            name: self.name.clone(),
            epoch: self.epoch,
            span: self.span(),
            width: self.width(),
            generations: u64::from(self.config.ring.generations()),
            grace: self.grace(),
            now_ms: now,
            current: self.config.ring.epoch_of(now),
            live,
        })
    }

    /// Deletes the window from Redis: its record first (so no new handle opens it and open
    /// handles get [`Error::SharedFilterLost`]), then every generation the ring lists.
    ///
    /// ```no_run
    /// # use bloomsled::shared::{Endpoint, SharedWindow};
    /// # let w = SharedWindow::open(&Endpoint::url("redis://127.0.0.1:6379/"), "crawled")?;
    /// w.destroy()?;
    /// # Ok::<(), bloomsled::Error>(())
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

/// The window record as stored: epoch, settings and filter shape.
struct Stored {
    epoch: u64,
    config: WindowConfig,
    shape: SharedShape,
}

impl Stored {
    /// Reads `[epoch, config, filter]` (nil or empty: no record).
    fn from_reply(name: &str, key: &str, reply: Value) -> Result<Option<Stored>> {
        let items = match reply {
            Value::Array(v) if v.len() == 3 => v,
            Value::ServerError(e) => return Err(Error::Redis(e.into())),
            other => return Err(value::unexpected(key, format!("{other:?}"))),
        };
        let mut fields = Vec::with_capacity(3);
        for v in items {
            fields.push(match v {
                Value::Nil => Vec::new(),
                v => value::bytes(v, key)?,
            });
        }
        if fields.iter().all(|f| f.is_empty()) {
            return Ok(None);
        }
        let bad = |what: &str| {
            Error::Corrupt(format!(
                "shared window {name:?}: the record at {key:?} has a bad {what} field"
            ))
        };
        let epoch = parse_epoch(&fields[0]).ok_or_else(|| bad("epoch"))?;
        let config = WindowConfig::decode(&fields[1])?;
        let shape = Record::decode(&fields[2])?.shape;
        if shape.counting {
            return Err(bad("filter"));
        }
        Ok(Some(Stored {
            epoch,
            config,
            shape,
        }))
    }
}

/// A window's settings and shape, for errors.
fn describe(c: &WindowConfig, s: &SharedShape) -> String {
    format!(
        "width_ms={} generations={} {s}",
        c.ring.width_ms(),
        c.ring.generations()
    )
}

fn check_window_name(name: &str) -> Result<()> {
    layout::check_name(name)?;
    if name.len() > MAX_NAME {
        return Err(Error::config(format!(
            "a shared window name must be at most {MAX_NAME} bytes, got {}",
            name.len()
        )));
    }
    Ok(())
}

impl SharedWindow {
    /// The window's time: its clock, but never earlier than a time this handle already
    /// read, so a clock stepping back does not hide generations.
    fn now(&self) -> u64 {
        let t = self.clock.now_ms();
        self.latest.fetch_max(t, Ordering::SeqCst).max(t)
    }

    /// The generations a lookup at `now` reads: the live ones, and the next one, which a
    /// client whose clock runs slightly ahead may already be writing to.
    fn read_range(&self, now: u64) -> RangeInclusive<u64> {
        let ring = self.config.ring;
        let live = ring.live(ring.epoch_of(now));
        *live.start()..=live.end().saturating_add(1)
    }

    fn gen_layout(&self, e: u64) -> Result<Layout> {
        Layout::new(
            &gen_name(&self.name, self.epoch, e),
            self.shape.num_blocks,
            self.shape.shards,
            self.shape.cells(),
        )
    }

    fn gen_handle(&self, e: u64, epoch: u64) -> Result<Arc<SharedFilter>> {
        Ok(Arc::new(SharedFilter {
            session: self.session.clone(),
            layout: self.gen_layout(e)?,
            shape: self.shape,
            epoch,
        }))
    }

    fn lost(&self, key: &str, why: String) -> Error {
        Error::SharedFilterLost {
            name: self.name.clone(),
            key: key.into(),
            why,
        }
    }

    /// `HMGET record epoch <fields>`.
    fn write_ring_read(&self, w: &mut dyn Sink, fields: &[String]) {
        w.command(3 + fields.len());
        w.arg(b"HMGET");
        w.arg(self.key.as_bytes());
        w.arg(b"epoch");
        for f in fields {
            w.arg(f.as_bytes());
        }
    }

    /// Checks the record's epoch in a [`SharedWindow::write_ring_read`] reply and returns
    /// the ring entries of `gens`: each generation and its filter's epoch, if it exists.
    fn read_ring(
        &self,
        reply: Value,
        gens: RangeInclusive<u64>,
    ) -> Result<Vec<(u64, Option<u64>)>> {
        let key = &self.key;
        let items = match reply {
            Value::Array(v) => v,
            Value::ServerError(e) => return Err(Error::Redis(e.into())),
            other => return Err(value::unexpected(key, format!("{other:?} from HMGET"))),
        };
        let mut items = items.into_iter();
        match items.next() {
            Some(Value::Nil) | None => {
                return Err(self.lost(
                    key,
                    "the window record is gone: the window was deleted, or Redis was flushed, \
                     evicted the record, or restarted or failed over empty"
                        .into(),
                ))
            }
            Some(v) => {
                let text = value::bytes(v, key)?;
                if parse_epoch(&text) != Some(self.epoch) {
                    return Err(self.lost(
                        key,
                        format!(
                            "the window record has epoch {}, not {}: the window was deleted \
                             and created again; reopen it",
                            String::from_utf8_lossy(&text),
                            epoch_text(self.epoch)
                        ),
                    ));
                }
            }
        }
        let mut out = Vec::new();
        for e in gens {
            let epoch = match items.next() {
                Some(Value::Nil) => None,
                Some(v) => {
                    let text = value::bytes(v, key)?;
                    Some(parse_epoch(&text).ok_or_else(|| {
                        Error::Corrupt(format!(
                            "shared window {:?}: ring entry of generation {e} is {:?}",
                            self.name,
                            String::from_utf8_lossy(&text)
                        ))
                    })?)
                }
                None => return Err(value::unexpected(key, "a short HMGET reply")),
            };
            out.push((e, epoch));
        }
        Ok(out)
    }

    /// Brings the known generations in line with the ring: adopts the ones it lists that
    /// this handle did not know, and reports a known generation that the ring no longer
    /// lists or lists with another epoch as lost. Returns the adopted ones.
    fn reconcile(&self, ring: &[(u64, Option<u64>)]) -> Result<Vec<Arc<SharedFilter>>> {
        let mut gens = self.gens.lock().unwrap_or_else(|p| p.into_inner());
        let mut fresh = Vec::new();
        for &(e, listed) in ring {
            match (gens.get(&e), listed) {
                (Some(g), Some(x)) if g.epoch == x => {}
                (Some(g), Some(x)) => {
                    return Err(self.lost(
                        &g.config_key(),
                        format!(
                            "generation {e} was lost and created again (the ring says epoch \
                             {x:#x}, this handle wrote to {:#x})",
                            g.epoch
                        ),
                    ))
                }
                (Some(g), None) => {
                    return Err(self.lost(
                        &self.key,
                        format!(
                            "the ring no longer lists generation {e} (filter epoch {:#x}), \
                             which is still live: its entry was deleted",
                            g.epoch
                        ),
                    ))
                }
                (None, Some(x)) => {
                    let g = self.gen_handle(e, x)?;
                    gens.insert(e, g.clone());
                    fresh.push(g);
                }
                (None, None) => {}
            }
        }
        Ok(fresh)
    }

    /// The known generations in `read` and their filters, oldest first; forgets older ones.
    fn known(&self, read: &RangeInclusive<u64>) -> Vec<(u64, Arc<SharedFilter>)> {
        let mut gens = self.gens.lock().unwrap_or_else(|p| p.into_inner());
        *gens = gens.split_off(read.start());
        gens.range(read.clone())
            .map(|(&e, g)| (e, g.clone()))
            .collect()
    }

    /// One lookup pipeline: the ring check and every known generation's blocks, then, if
    /// the ring lists generations this handle did not know, a second one for those.
    fn lookup<K: AsRef<[u8]>>(
        &self,
        keys: &[K],
        read: &RangeInclusive<u64>,
        known: &[Arc<SharedFilter>],
        out: &mut [bool],
    ) -> Result<()> {
        let fields: Vec<String> = read.clone().map(gen_field).collect();
        let plans: Vec<Vec<_>> = known
            .iter()
            .map(|g| keys.iter().map(|k| g.probe(k.as_ref())).collect())
            .collect();
        let replies = self.session.run_fast(|w| {
            self.write_ring_read(w, &fields);
            for (g, plan) in known.iter().zip(&plans) {
                plan.iter().for_each(|p| g.write_getrange(w, p));
            }
        })?;
        let mut replies = replies.into_iter();
        let ring = self.read_ring(replies.next().unwrap_or(Value::Nil), read.clone())?;
        let fresh = self.reconcile(&ring)?;
        for (g, plan) in known.iter().zip(&plans) {
            for (p, o) in plan.iter().zip(out.iter_mut()) {
                if g.check_block(p, replies.next().unwrap_or(Value::Nil))? {
                    *o = true;
                }
            }
        }
        if fresh.is_empty() {
            return Ok(());
        }
        // Generations another client created since this handle last looked.
        let todo: Vec<usize> = (0..keys.len()).filter(|&i| !out[i]).collect();
        let plans: Vec<Vec<_>> = fresh
            .iter()
            .map(|g| todo.iter().map(|&i| g.probe(keys[i].as_ref())).collect())
            .collect();
        let replies = self.session.run_fast(|w| {
            for (g, plan) in fresh.iter().zip(&plans) {
                plan.iter().for_each(|p| g.write_getrange(w, p));
            }
        })?;
        let mut replies = replies.into_iter();
        for (g, plan) in fresh.iter().zip(&plans) {
            for (p, &i) in plan.iter().zip(&todo) {
                if g.check_block(p, replies.next().unwrap_or(Value::Nil))? {
                    out[i] = true;
                }
            }
        }
        Ok(())
    }

    /// The filter of generation `e`, created if nobody has written to it yet: see the
    /// module documentation ("rotation").
    fn generation_for_writes(&self, e: u64, now: u64) -> Result<Arc<SharedFilter>> {
        if let Some(g) = self.gens.lock().unwrap_or_else(|p| p.into_inner()).get(&e) {
            return Ok(g.clone());
        }
        let field = gen_field(e);
        let reply = self
            .session
            .run_fast(|w| self.write_ring_read(w, std::slice::from_ref(&field)))?
            .into_iter()
            .next()
            .unwrap_or(Value::Nil);
        let ring = self.read_ring(reply, e..=e)?;
        if ring[0].1.is_some() {
            self.reconcile(&ring)?;
        } else {
            let made =
                SharedFilter::create_in(self.session.clone(), self.gen_layout(e)?, self.shape)?;
            // The TTL before the ring entry: a recorded generation always expires.
            self.expire(&made, e, now);
            self.record(e, &made)?;
            self.gens
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .entry(e)
                .or_insert_with(|| Arc::new(made));
        }
        let gens = self.gens.lock().unwrap_or_else(|p| p.into_inner());
        gens.get(&e).cloned().ok_or_else(|| {
            Error::Corrupt(format!(
                "shared window {:?}: generation {e} not adopted",
                self.name
            ))
        })
    }

    /// Records generation `e` with `made`'s epoch in the ring (once: a generation recorded
    /// with another epoch was lost and created again, which is an error).
    fn record(&self, e: u64, made: &SharedFilter) -> Result<()> {
        let floor = e.saturating_sub(u64::from(self.config.ring.generations()));
        let reply = self.session.one(
            redis::cmd("EVAL")
                .arg(RECORD_SCRIPT)
                .arg(1)
                .arg(&self.key)
                .arg(epoch_text(self.epoch))
                .arg(gen_field(e))
                .arg(epoch_text(made.epoch))
                .arg(floor)
                .clone(),
        )?;
        let parts = match reply {
            Value::Array(v) if v.len() == 2 => v,
            other => {
                return Err(value::unexpected(
                    &self.key,
                    format!("{other:?} from the record script"),
                ))
            }
        };
        let mut parts = parts.into_iter();
        let tag = value::bytes(parts.next().unwrap_or(Value::Nil), &self.key)?;
        let text = value::bytes(parts.next().unwrap_or(Value::Nil), &self.key)?;
        match tag.as_slice() {
            b"W" => Err(self.lost(
                &self.key,
                if text.is_empty() {
                    "the window record is gone: the window was deleted, or Redis was flushed \
                     or restarted empty"
                        .into()
                } else {
                    format!(
                        "the window record has epoch {}, not {}: the window was deleted and \
                         created again; reopen it",
                        String::from_utf8_lossy(&text),
                        epoch_text(self.epoch)
                    )
                },
            )),
            b"N" | b"E" if parse_epoch(&text) == Some(made.epoch) => Ok(()),
            b"E" => Err(self.lost(
                &made.config_key(),
                format!(
                    "generation {e} was lost: the ring lists it with epoch {}, but its filter \
                     is gone and was created again with epoch {:#x}",
                    String::from_utf8_lossy(&text),
                    made.epoch
                ),
            )),
            _ => Err(value::unexpected(
                &self.key,
                format!("{:?} from the record script", String::from_utf8_lossy(&tag)),
            )),
        }
    }

    /// Gives every key of generation `e`'s filter its TTL: the generation's expiry plus
    /// grace, from the window's time `now`. Best effort: a failure leaves keys that a
    /// later add or `destroy` deals with, and never changes an answer.
    fn expire(&self, g: &SharedFilter, e: u64, now: u64) {
        let ttl = self.config.ring.ttl_ms(e, now, self.config.grace_ms);
        let mut keys = vec![g.config_key()];
        keys.extend(g.shard_keys());
        let cmds: Vec<_> = keys
            .iter()
            .map(|k| redis::cmd("PEXPIRE").arg(k).arg(ttl).clone())
            .collect();
        if let Err(err) = self.session.run(|| cmds.clone()) {
            log::warn!(
                "shared window {:?}: could not set the TTL of generation {e}: {err}",
                self.name
            );
        }
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
            .field("epoch", &format_args!("{:#x}", self.epoch))
            .finish()
    }
}

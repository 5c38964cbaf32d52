//! A new shared window's settings ([`SharedWindowConfig`]).

use std::sync::Arc;
use std::time::Duration;

use bloomsled::clock::{Clock, SystemClock};
use bloomsled::FilterConfig;

/// Default grace for a generation of width `w`: its Redis keys live this long after it
/// stops being live, to absorb clocks of clients that run slightly behind.
pub(super) fn default_grace(width_ms: u64) -> u64 {
    width_ms.clamp(1, 60_000)
}

/// The settings of a new shared window: its span, generations, each generation's filter
/// (sized for the keys added during one generation), grace and clock.
///
/// ```
/// use bloomsled_redis::SharedWindowConfig;
/// use bloomsled::FilterConfig;
/// use std::time::Duration;
/// let week = SharedWindowConfig::new(
///     Duration::from_secs(7 * 86_400),
///     7,
///     FilterConfig::new(1_000_000).false_positive_rate(0.001),
/// );
/// assert_eq!(week.generations(), 7);
/// ```
#[derive(Debug, Clone)]
pub struct SharedWindowConfig {
    pub(super) span: Duration,
    pub(super) generations: u32,
    pub(super) filter: FilterConfig,
    pub(super) grace: Option<Duration>,
    pub(super) shards: Option<u64>,
    pub(super) clock: Arc<dyn Clock>,
}

impl SharedWindowConfig {
    /// A window of `span` cut into `generations` generations, each a shared filter sized by
    /// `filter` (its expected items are the keys added per generation). As for a local
    /// window, `generations` is 1 to 256 and `span` a whole number of milliseconds that
    /// they divide exactly; [`SharedWindow::create`](super::SharedWindow::create) refuses anything else with
    /// [`Error::InvalidConfig`](crate::Error::InvalidConfig).
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
    /// use bloomsled_redis::SharedWindowConfig;
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

    /// Shard keys per generation (default as for [`SharedFilter::create`](crate::SharedFilter::create)).
    ///
    /// ```
    /// use bloomsled_redis::SharedWindowConfig;
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
    /// use bloomsled_redis::SharedWindowConfig;
    /// use bloomsled::FilterConfig;
    /// use std::time::Duration;
    /// let clock = ManualClock::new(0);
    /// let c = SharedWindowConfig::new(Duration::from_secs(60), 2, FilterConfig::new(10))
    ///     .clock(clock.clone());
    /// # let _ = c;
    /// ```
    pub fn clock(mut self, clock: impl Clock + 'static) -> Self {
        self.clock = Arc::new(clock);
        self
    }

    /// The number of generations.
    ///
    /// ```
    /// use bloomsled_redis::SharedWindowConfig;
    /// use bloomsled::FilterConfig;
    /// use std::time::Duration;
    /// let c = SharedWindowConfig::new(Duration::from_secs(60), 6, FilterConfig::new(10));
    /// assert_eq!(c.generations(), 6);
    /// ```
    pub fn generations(&self) -> u32 {
        self.generations
    }
}

//! Metrics of shared filters and windows (feature `metrics`), through the `metrics` facade
//! into whatever exporter the program installed, as the core's [`bloomsled::telemetry`]
//! records local trees and windows.
//!
//! Per shared filter (label `filter`, the filter's name), recorded by
//! `SharedFilter::record_metrics` and `AsyncSharedFilter::record_metrics` for that handle
//! (each handle counts its own calls: sum over the processes that share a filter):
//!
//! | name | kind | what |
//! |---|---|---|
//! | `bloomsled_shared_lookups_total` | counter | keys looked up (`contains`, `contains_many`) |
//! | `bloomsled_shared_absent_total` | counter | lookups answered "certainly absent" (the store reads a lookup saves) |
//! | `bloomsled_shared_adds_total` | counter | keys added (`add`, `add_many`, `add_exact`, ...) |
//! | `bloomsled_shared_new_total` | counter | adds answered "new" |
//! | `bloomsled_shared_redis_errors_total` | counter | calls that failed (Redis unreachable past the retry window, a lost filter, an unknown outcome, ...) |
//! | `bloomsled_shared_retries_total` | counter | attempts sent again after a transient failure (see `Endpoint::retry_for`) |
//! | `bloomsled_shared_outcome_unknown_total` | counter | adds that failed with `RedisOutcomeUnknown` |
//! | `bloomsled_shared_fill_ratio` | gauge | share of the filter's bits set (`BITCOUNT` at record time) |
//! | `bloomsled_shared_estimated_items` | gauge | keys estimated from the fill |
//! | `bloomsled_shared_estimated_fpr` | gauge | false-positive rate at the estimated keys |
//! | `bloomsled_shared_redis_bytes` | gauge | bytes of the Redis strings holding the filter |
//!
//! Per shared window (label `window`), recorded by `SharedWindow::record_metrics` and
//! `AsyncSharedWindow::record_metrics`: the same seven counters with the prefix
//! `bloomsled_shared_window_` (a lookup is one key, whatever the generations it reads), and
//! gauges `bloomsled_shared_window_generations` (live), `…_estimated_items` and
//! `…_redis_bytes` (sums over the live generations), `…_fill_ratio` (their mean).
//!
//! The counters cost one relaxed atomic add per call next to a Redis round trip; the gauges
//! cost one `BITCOUNT` pipeline at record time (the filter's `stats`), none per call.
//!
//! ```
//! assert_eq!(bloomsled_redis::telemetry::SHARED_SERIES.len(), 11);
//! ```

use bloomsled::telemetry::gauges;

use crate::error::Result;

use super::filter::SharedFilter;
use super::stats::SharedStats;
use super::tally::Tally;
use super::window::{SharedWindow, SharedWindowStats};

/// Every per-shared-filter series (label `filter`), the 7 counters first.
pub const SHARED_SERIES: [&str; 11] = [
    "bloomsled_shared_lookups_total",
    "bloomsled_shared_absent_total",
    "bloomsled_shared_adds_total",
    "bloomsled_shared_new_total",
    "bloomsled_shared_redis_errors_total",
    "bloomsled_shared_retries_total",
    "bloomsled_shared_outcome_unknown_total",
    "bloomsled_shared_fill_ratio",
    "bloomsled_shared_estimated_items",
    "bloomsled_shared_estimated_fpr",
    "bloomsled_shared_redis_bytes",
];

/// Every per-shared-window series (label `window`), the 7 counters first.
pub const SHARED_WINDOW_SERIES: [&str; 11] = [
    "bloomsled_shared_window_lookups_total",
    "bloomsled_shared_window_absent_total",
    "bloomsled_shared_window_adds_total",
    "bloomsled_shared_window_new_total",
    "bloomsled_shared_window_redis_errors_total",
    "bloomsled_shared_window_retries_total",
    "bloomsled_shared_window_outcome_unknown_total",
    "bloomsled_shared_window_generations",
    "bloomsled_shared_window_estimated_items",
    "bloomsled_shared_window_fill_ratio",
    "bloomsled_shared_window_redis_bytes",
];

/// Records a handle's counters, and the gauges of `stats` if it has them.
pub(super) fn record(tally: &Tally, name: &str, stats: Option<&SharedStats>) {
    let label = ("filter", name);
    tally.record(label, &SHARED_SERIES[..7]);
    if let Some(s) = stats {
        gauges(
            label,
            &[
                (SHARED_SERIES[7], s.fill_ratio),
                (SHARED_SERIES[8], s.estimated_items as f64),
                (SHARED_SERIES[9], s.estimated_fpr),
                (SHARED_SERIES[10], s.redis_bytes as f64),
            ],
        );
    }
}

#[cfg_attr(docsrs, doc(cfg(feature = "metrics")))]
impl SharedFilter {
    /// Records this handle's metrics (label `filter`, the filter's name) through the
    /// `metrics` facade: the counters of its calls since it was opened (lookups, absent
    /// answers, adds, new answers, errors, retries, unknown outcomes), then the gauges of
    /// [`SharedFilter::stats`] (fill ratio, estimated items and false-positive rate, Redis
    /// bytes), which cost one `BITCOUNT` pipeline (a read through the filter on a counting
    /// one). Call it at scrape rate, not per call. If the stats cannot be read, the
    /// counters are recorded and the error returned. See [`crate::telemetry`].
    ///
    /// ```no_run
    /// use bloomsled_redis::{Endpoint, SharedFilter};
    /// use bloomsled::FilterConfig;
    /// let seen = SharedFilter::create(&Endpoint::url("redis://127.0.0.1:6379/"), "seen", &FilterConfig::new(1000))?;
    /// seen.insert(b"a")?;
    /// seen.record_metrics()?; // with no recorder installed, the facade drops them
    /// # Ok::<(), bloomsled_redis::Error>(())
    /// ```
    pub fn record_metrics(&self) -> Result<()> {
        let stats = self.stats();
        record(&self.session.tally, self.name(), stats.as_ref().ok());
        stats.map(drop)
    }
}

/// Records a window handle's counters, and the gauges of `stats` if it has them.
pub(super) fn record_window(tally: &Tally, name: &str, stats: Option<&SharedWindowStats>) {
    let label = ("window", name);
    tally.record(label, &SHARED_WINDOW_SERIES[..7]);
    if let Some(s) = stats {
        let live = s.live.len() as f64;
        let sum = |f: fn(&SharedStats) -> f64| s.live.iter().map(|g| f(&g.filter)).sum::<f64>();
        gauges(
            label,
            &[
                (SHARED_WINDOW_SERIES[7], live),
                (SHARED_WINDOW_SERIES[8], sum(|f| f.estimated_items as f64)),
                (
                    SHARED_WINDOW_SERIES[9],
                    sum(|f| f.fill_ratio) / live.max(1.0),
                ),
                (SHARED_WINDOW_SERIES[10], sum(|f| f.redis_bytes as f64)),
            ],
        );
    }
}

#[cfg_attr(docsrs, doc(cfg(feature = "metrics")))]
impl SharedWindow {
    /// Records this handle's metrics (label `window`, the window's name) through the
    /// `metrics` facade: the counters of its calls since it was opened, then gauges over its
    /// live generations from [`SharedWindow::stats`] (one `BITCOUNT` pipeline per
    /// generation). Call it at scrape rate. If the stats cannot be read, the counters are
    /// recorded and the error returned. See [`crate::telemetry`].
    ///
    /// ```no_run
    /// use bloomsled_redis::{Endpoint, SharedWindow};
    /// let w = SharedWindow::open(&Endpoint::url("redis://127.0.0.1:6379/"), "crawled")?;
    /// w.record_metrics()?;
    /// # Ok::<(), bloomsled_redis::Error>(())
    /// ```
    pub fn record_metrics(&self) -> Result<()> {
        let stats = self.stats();
        self.record_counters_and(stats.as_ref().ok());
        stats.map(drop)
    }

    /// Records the counters, and the gauges of `stats` if given.
    pub(crate) fn record_counters_and(&self, stats: Option<&SharedWindowStats>) {
        record_window(self.tally(), self.name(), stats);
    }
}

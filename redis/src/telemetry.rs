//! Recording a shared filter's metrics (feature `metrics`; the series are listed in
//! [`crate::telemetry`]).

use crate::error::Result;
use crate::telemetry::{gauges, SHARED_SERIES, SHARED_WINDOW_SERIES};

use super::filter::SharedFilter;
use super::stats::SharedStats;
use super::tally::Tally;
use super::window::{SharedWindow, SharedWindowStats};

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
    /// use bloomsled::shared::{Endpoint, SharedFilter};
    /// use bloomsled::FilterConfig;
    /// let seen = SharedFilter::create(&Endpoint::url("redis://127.0.0.1:6379/"), "seen", &FilterConfig::new(1000))?;
    /// seen.insert(b"a")?;
    /// seen.record_metrics()?; // with no recorder installed, the facade drops them
    /// # Ok::<(), bloomsled::Error>(())
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

impl SharedWindow {
    /// Records this handle's metrics (label `window`, the window's name) through the
    /// `metrics` facade: the counters of its calls since it was opened, then gauges over its
    /// live generations from [`SharedWindow::stats`] (one `BITCOUNT` pipeline per
    /// generation). Call it at scrape rate. If the stats cannot be read, the counters are
    /// recorded and the error returned. See [`crate::telemetry`].
    ///
    /// ```no_run
    /// use bloomsled::shared::{Endpoint, SharedWindow};
    /// let w = SharedWindow::open(&Endpoint::url("redis://127.0.0.1:6379/"), "crawled")?;
    /// w.record_metrics()?;
    /// # Ok::<(), bloomsled::Error>(())
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

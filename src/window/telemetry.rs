//! Recording a window's metrics (feature `metrics`; the series are listed in
//! [`crate::telemetry`]).

use crate::telemetry::{flag, gauges};
use crate::window::Window;

/// Records every open window of the database `db_id` (registered with the store's
/// recording by [`Window`]'s open, so that `Db::record_metrics` and the background
/// recorder include windows without the store layer knowing them).
pub(super) fn record_windows_of(db_id: usize) {
    for w in Window::open_in(db_id) {
        w.record_metrics();
    }
}

#[cfg_attr(docsrs, doc(cfg(feature = "metrics")))]
impl Window {
    /// Records this window's metrics (label `window`, its name) through the `metrics`
    /// facade: its own lookup and write counters, and gauges over its live generations
    /// (see [`crate::telemetry`]). [`crate::Db::record_metrics`] records every open window.
    ///
    /// ```
    /// # use std::time::Duration;
    /// let db = bloomsled::Config::new().temporary(true).open()?;
    /// let w = db.open_window("seen", bloomsled::window::WindowConfig::new(Duration::from_secs(60), 6))?;
    /// w.insert("a", "")?;
    /// w.record_metrics();
    /// # Ok::<(), bloomsled::Error>(())
    /// ```
    pub fn record_metrics(&self) {
        let stats = self.stats();
        let name = String::from_utf8_lossy(&stats.name).into_owned();
        let label = ("window", name.as_str());
        let c = self.counters();
        let (inserts, removes, _) = c.writes();
        let (lookups, skipped) = (stats.lookups, stats.store_lookups_skipped);
        c.2.counters(
            label,
            &[
                ("bloomsled_window_lookups_total", lookups),
                ("bloomsled_window_filter_answers_total", skipped),
                ("bloomsled_window_store_lookups_total", lookups - skipped),
                (
                    "bloomsled_window_false_positives_total",
                    stats.false_positives,
                ),
                ("bloomsled_window_inserts_total", inserts),
                ("bloomsled_window_removes_total", removes),
            ],
        );
        let live = &stats.live;
        let n = live.len().max(1) as f64;
        gauges(
            label,
            &[
                ("bloomsled_window_generations", live.len() as f64),
                (
                    "bloomsled_window_items",
                    live.iter().map(|g| g.stats.items as f64).sum(),
                ),
                (
                    "bloomsled_window_filter_bytes",
                    live.iter().map(|g| g.stats.memory_bytes as f64).sum(),
                ),
                (
                    "bloomsled_window_fill_ratio",
                    live.iter().map(|g| g.stats.fill_ratio).sum::<f64>() / n,
                ),
                (
                    // A lookup asks every live generation: it passes if any says "maybe".
                    "bloomsled_window_estimated_fpr",
                    1.0 - live
                        .iter()
                        .map(|g| 1.0 - g.stats.estimated_fpr)
                        .product::<f64>(),
                ),
                (
                    "bloomsled_window_filter_in_use",
                    flag(live.iter().all(|g| g.stats.filter_in_use)),
                ),
                (
                    "bloomsled_window_rebuilding",
                    flag(live.iter().any(|g| g.stats.rebuild_in_progress)),
                ),
            ],
        );
    }
}

//! Metrics an operator can scrape (feature `metrics`), through the [`metrics`] facade
//! crate, into whatever exporter the program installed (Prometheus, StatsD,
//! OpenTelemetry, ...).
//!
//! # When they are recorded
//!
//! Never on the lookup path: a lookup bumps the same per-thread striped counter it bumps
//! without this feature (see [`crate::Stats`]), and no facade call or shared atomic is
//! added to it. The series are recorded from those counters when asked:
//!
//! - [`crate::Db::record_metrics`] records every open tree and window of a database (call
//!   it from a scrape handler, or on your own timer);
//! - [`crate::Config::metrics_interval`] starts a background thread that does the same
//!   every interval, for as long as the database is open;
//! - [`crate::Tree::record_metrics`] and [`crate::window::Window::record_metrics`] record
//!   one tree or window.
//!
//! A recording reads every filter word once (fill ratio and estimated false-positive rate
//! come from the bits): O(filter size), a few milliseconds for tens of MiB, which is why it
//! is done at scrape rate and not per lookup. Counters are recorded as the increase since
//! the previous recording of the same tree or window handle, so they only grow within one
//! process, also across a database closed and opened again.
//!
//! # The series
//!
//! Per tree (label `tree`, the tree's name; the default tree is `__sled__default`, and a
//! window's generations are trees too, with their reserved names):
//!
//! | name | kind | what |
//! |---|---|---|
//! | `bloomsled_lookups_total` | counter | lookups (`get`, `contains_key`, their batch forms; per key) |
//! | `bloomsled_filter_answers_total` | counter | lookups the filter answered "absent" alone |
//! | `bloomsled_store_lookups_total` | counter | lookups passed on to sled |
//! | `bloomsled_false_positives_total` | counter | store lookups that found nothing |
//! | `bloomsled_false_positives_remembered_total` | counter | lookups the filter passed that the false-positive memory answered "absent" without sled |
//! | `bloomsled_inserts_total` | counter | keys written (inserts, overwrites, batch and transaction writes) |
//! | `bloomsled_removes_total` | counter | keys removed |
//! | `bloomsled_rebuilds_total` | counter | filter rebuilds from the keys |
//! | `bloomsled_snapshots_total` | counter | snapshots written |
//! | `bloomsled_items` | gauge | keys in the filter |
//! | `bloomsled_filter_bytes` | gauge | memory of the filter |
//! | `bloomsled_fill_ratio` | gauge | share of filter bits set |
//! | `bloomsled_estimated_fpr` | gauge | false-positive rate from the bits as they are |
//! | `bloomsled_filter_in_use` | gauge | 1 when the filter answers, 0 while it is rebuilt after open (all lookups go to sled) |
//! | `bloomsled_rebuilding` | gauge | 1 while a rebuild runs |
//! | `bloomsled_rebuild_progress` | gauge | share of the expected keys the running rebuild has read (0 when none runs) |
//! | `bloomsled_seconds_since_snapshot` | gauge | age of the tree's last snapshot (this process's, else the file's); absent when the tree has none |
//!
//! Per window (label `window`), the same with the prefix `bloomsled_window_`: the lookup
//! counters (lookups, filter answers, store lookups, false positives) and inserts and
//! removes counted by the window; gauges `generations` (live), `items`, `filter_bytes`
//! (sums over the live generations), `fill_ratio` (their mean), `estimated_fpr` (of a
//! lookup that asks every live generation), `filter_in_use` (1 when every live
//! generation's is), `rebuilding` (1 when any rebuilds). Rebuilds, snapshots and their
//! ages are per generation, in the generation trees' own series.
//!
//! The shared filters on Redis (crate `bloomsled-redis`) record their own series with
//! [`Recorded`] and [`gauges`], listed in that crate's `telemetry` module.
//!
//! ```
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! use metrics_util::debugging::DebuggingRecorder;
//! let recorder = DebuggingRecorder::new();
//! let snapshotter = recorder.snapshotter();
//! metrics::with_local_recorder(&recorder, || -> bloomsled::Result<()> {
//!     let db = bloomsled::Config::new().temporary(true).open()?;
//!     db.insert("a", "1")?;
//!     db.get("b")?;
//!     db.record_metrics();
//!     Ok(())
//! })?;
//! let lookups = snapshotter
//!     .snapshot()
//!     .into_vec()
//!     .into_iter()
//!     .find(|(k, ..)| k.key().name() == bloomsled::telemetry::LOOKUPS)
//!     .map(|(.., v)| v);
//! assert_eq!(lookups, Some(metrics_util::debugging::DebugValue::Counter(1)));
//! # Ok(()) }
//! ```

use std::sync::Mutex;

/// Lookups (counter).
pub const LOOKUPS: &str = "bloomsled_lookups_total";
/// Lookups the filter answered "absent" alone (counter).
pub const FILTER_ANSWERS: &str = "bloomsled_filter_answers_total";
/// Lookups passed on to the store (counter).
pub const STORE_LOOKUPS: &str = "bloomsled_store_lookups_total";
/// Store lookups that found nothing: false positives (counter).
pub const FALSE_POSITIVES: &str = "bloomsled_false_positives_total";
/// Lookups the filter passed that the tree's false-positive memory answered "absent"
/// without the store (counter; see `Config::false_positive_memory`).
pub const FALSE_POSITIVES_REMEMBERED: &str = "bloomsled_false_positives_remembered_total";
/// Keys written (counter).
pub const INSERTS: &str = "bloomsled_inserts_total";
/// Keys removed (counter).
pub const REMOVES: &str = "bloomsled_removes_total";
/// Filter rebuilds (counter).
pub const REBUILDS: &str = "bloomsled_rebuilds_total";
/// Snapshots written (counter).
pub const SNAPSHOTS: &str = "bloomsled_snapshots_total";
/// Keys in the filter (gauge).
pub const ITEMS: &str = "bloomsled_items";
/// Memory of the filter in bytes (gauge).
pub const FILTER_BYTES: &str = "bloomsled_filter_bytes";
/// Share of filter bits set (gauge).
pub const FILL_RATIO: &str = "bloomsled_fill_ratio";
/// Estimated false-positive rate (gauge).
pub const ESTIMATED_FPR: &str = "bloomsled_estimated_fpr";
/// 1 when the filter answers lookups, 0 while it is rebuilt after open (gauge).
pub const FILTER_IN_USE: &str = "bloomsled_filter_in_use";
/// 1 while a rebuild runs (gauge).
pub const REBUILDING: &str = "bloomsled_rebuilding";
/// Share of the expected keys the running rebuild has read (gauge).
pub const REBUILD_PROGRESS: &str = "bloomsled_rebuild_progress";
/// Seconds since the last snapshot (gauge).
pub const SECONDS_SINCE_SNAPSHOT: &str = "bloomsled_seconds_since_snapshot";

/// Every per-tree series, counters first.
pub const TREE_SERIES: [&str; 17] = [
    LOOKUPS,
    FILTER_ANSWERS,
    STORE_LOOKUPS,
    FALSE_POSITIVES,
    FALSE_POSITIVES_REMEMBERED,
    INSERTS,
    REMOVES,
    REBUILDS,
    SNAPSHOTS,
    ITEMS,
    FILTER_BYTES,
    FILL_RATIO,
    ESTIMATED_FPR,
    FILTER_IN_USE,
    REBUILDING,
    REBUILD_PROGRESS,
    SECONDS_SINCE_SNAPSHOT,
];

/// Every per-window series, counters first.
pub const WINDOW_SERIES: [&str; 13] = [
    "bloomsled_window_lookups_total",
    "bloomsled_window_filter_answers_total",
    "bloomsled_window_store_lookups_total",
    "bloomsled_window_false_positives_total",
    "bloomsled_window_inserts_total",
    "bloomsled_window_removes_total",
    "bloomsled_window_generations",
    "bloomsled_window_items",
    "bloomsled_window_filter_bytes",
    "bloomsled_window_fill_ratio",
    "bloomsled_window_estimated_fpr",
    "bloomsled_window_filter_in_use",
    "bloomsled_window_rebuilding",
];

/// The counter values a tree, window or shared filter handed to the facade last time, so
/// that the next recording adds only the increase (a counter's own total never goes back).
/// Public for the crates that record their own series the same way (`bloomsled-redis`).
///
/// ```
/// let recorded = bloomsled::telemetry::Recorded::default();
/// // No recorder installed: the facade drops the values.
/// recorded.counters(("tree", "t"), &[(bloomsled::telemetry::LOOKUPS, 3)]);
/// ```
#[derive(Default, Debug)]
pub struct Recorded(Mutex<[u64; 12]>);

impl Recorded {
    /// Records `values` (at most 12, in the same order every time) as counters labelled
    /// `label`: each grows by what its value gained since the last call.
    ///
    /// ```
    /// let recorded = bloomsled::telemetry::Recorded::default();
    /// recorded.counters(("tree", "t"), &[(bloomsled::telemetry::INSERTS, 1)]);
    /// ```
    pub fn counters(&self, label: (&'static str, &str), values: &[(&'static str, u64)]) {
        let mut last = self.0.lock().unwrap_or_else(|p| p.into_inner());
        for (slot, &(name, v)) in last.iter_mut().zip(values) {
            // Touched even at 0, so that the series exists from the first recording.
            metrics::counter!(name, label.0 => label.1.to_owned())
                .increment(v.saturating_sub(*slot));
            *slot = (*slot).max(v);
        }
    }
}

/// Sets the gauges `values` labelled `label`.
///
/// ```
/// bloomsled::telemetry::gauges(("tree", "t"), &[(bloomsled::telemetry::ITEMS, 10.0)]);
/// ```
pub fn gauges(label: (&'static str, &str), values: &[(&'static str, f64)]) {
    for &(name, v) in values {
        metrics::gauge!(name, label.0 => label.1.to_owned()).set(v);
    }
}

/// 1.0 for true.
pub(crate) fn flag(b: bool) -> f64 {
    if b {
        1.0
    } else {
        0.0
    }
}

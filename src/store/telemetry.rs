//! Recording trees' metrics (feature `metrics`; the series are listed in
//! [`crate::telemetry`]); `Db::record_metrics` and the background recorder are in
//! `super::db`, beside the database's list of trees.

use std::sync::atomic::Ordering;
use std::sync::Mutex;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use super::{recovery, Tree};
use crate::telemetry::{self as t, flag, gauges};

#[cfg_attr(docsrs, doc(cfg(feature = "metrics")))]
impl Tree {
    /// Records this tree's metrics (label `tree`, its name) through the `metrics` facade;
    /// see [`crate::telemetry`] and [`crate::Db::record_metrics`].
    ///
    /// ```
    /// let db = bloomsled::Config::new().temporary(true).open()?;
    /// let users = db.open_tree("users")?;
    /// users.get("bob")?;
    /// users.record_metrics();
    /// # Ok::<(), bloomsled::Error>(())
    /// ```
    pub fn record_metrics(&self) {
        let s = &self.state;
        let stats = self.stats();
        let name = s.report.tree.as_str();
        let label = ("tree", name);
        let (inserts, removes, snapshots) = s.counters.writes();
        let lookups = stats.lookups;
        let skipped = stats.store_lookups_skipped;
        s.counters.2.counters(
            label,
            &[
                (t::LOOKUPS, lookups),
                (t::FILTER_ANSWERS, skipped),
                (
                    t::STORE_LOOKUPS,
                    lookups - skipped - stats.false_positives_remembered,
                ),
                (t::FALSE_POSITIVES, stats.false_positives),
                (
                    t::FALSE_POSITIVES_REMEMBERED,
                    stats.false_positives_remembered,
                ),
                (t::INSERTS, inserts),
                (t::REMOVES, removes),
                (t::REBUILDS, s.rebuild.rebuilds.load(Ordering::Relaxed)),
                (t::SNAPSHOTS, snapshots),
            ],
        );
        let progress = recovery::progress(s).map_or(0.0, |p| match p.expected_keys {
            Some(n) if n > 0 => (p.keys_scanned as f64 / n as f64).min(1.0),
            _ => 0.0,
        });
        gauges(
            label,
            &[
                (t::ITEMS, stats.items as f64),
                (t::FILTER_BYTES, stats.memory_bytes as f64),
                (t::FILL_RATIO, stats.fill_ratio),
                (t::ESTIMATED_FPR, stats.estimated_fpr),
                (t::FILTER_IN_USE, flag(stats.filter_in_use)),
                (t::REBUILDING, flag(stats.rebuild_in_progress)),
                (t::REBUILD_PROGRESS, progress),
            ],
        );
        if let Some(age) = self.snapshot_age() {
            gauges(label, &[(t::SECONDS_SINCE_SNAPSHOT, age.as_secs_f64())]);
        }
    }

    /// Time since this process last wrote the tree's snapshot, else since its snapshot file
    /// was written; `None` if it has none (a temporary database, a tree never snapshotted
    /// or empty when it was).
    fn snapshot_age(&self) -> Option<Duration> {
        let written = match self.state.counters.last_snapshot_ms() {
            Some(ms) => UNIX_EPOCH + Duration::from_millis(ms),
            None => std::fs::metadata(self.filter_snapshot_path()?)
                .ok()?
                .modified()
                .ok()?,
        };
        Some(
            SystemTime::now()
                .duration_since(written)
                .unwrap_or(Duration::ZERO),
        )
    }
}

/// What else records with a database's trees (the windows' series, from the window
/// layer above this one): called with the database's identity.
static ALSO: Mutex<Vec<fn(usize)>> = Mutex::new(Vec::new());

/// Has `f` called, with the database's identity, whenever a database's metrics are
/// recorded (once per `f`).
pub(crate) fn also_record(f: fn(usize)) {
    let mut also = ALSO.lock().unwrap_or_else(|p| p.into_inner());
    if !also.iter().any(|&g| std::ptr::fn_addr_eq(g, f)) {
        also.push(f);
    }
}

/// Records what [`also_record`] asked for, of the database `db_id`.
pub(crate) fn record_also(db_id: usize) {
    let also = ALSO.lock().unwrap_or_else(|p| p.into_inner()).clone();
    for f in also {
        f(db_id);
    }
}

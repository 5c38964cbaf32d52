//! Recording trees' metrics (feature `metrics`; the series are listed in
//! [`crate::telemetry`]): on demand, or from a background thread every interval.

use std::sync::atomic::Ordering;
use std::thread;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use super::db::DbWatch;
use super::{recovery, Db, Tree};
use crate::telemetry::{self as t, flag, gauges};
use crate::window::Window;

impl Db {
    /// Records the metrics of every open tree (label `tree`) and every open window
    /// (label `window`) of this database through the `metrics` facade (see
    /// [`crate::telemetry`] for the series). Reads counters the lookups keep anyway and
    /// every filter word once: call it at scrape rate, or let
    /// [`crate::Config::metrics_interval`] call it.
    ///
    /// ```
    /// let db = bloomsled::Config::new().temporary(true).open()?;
    /// db.open_tree("users")?.insert("alice", "1")?;
    /// db.record_metrics(); // with no recorder installed, the facade drops them
    /// # Ok::<(), bloomsled::Error>(())
    /// ```
    pub fn record_metrics(&self) {
        let trees: Vec<Tree> = self
            .lock_trees()
            .values()
            .map(|s| Tree::new(s.sled.clone(), s.clone()))
            .collect();
        for tree in &trees {
            tree.record_metrics();
        }
        for w in Window::open_in(self.identity()) {
            w.record_metrics();
        }
    }
}

impl Tree {
    /// Records this tree's metrics (label `tree`, its name) through the `metrics` facade;
    /// see [`crate::telemetry`] and [`Db::record_metrics`].
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
                (t::STORE_LOOKUPS, lookups - skipped),
                (t::FALSE_POSITIVES, stats.false_positives),
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
            None => std::fs::metadata(self.snapshot_path()?)
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

/// Records the metrics of the database `db` watches every `every`, until it is dropped.
pub(super) fn spawn_recorder(db: DbWatch, every: Duration) {
    let spawned = thread::Builder::new()
        .name("bloomsled-metrics".into())
        .spawn(move || {
            // Short sleeps, so that the thread ends soon after the database is dropped.
            let tick = every.min(Duration::from_millis(100));
            let mut waited = Duration::ZERO;
            while db.is_open() {
                thread::sleep(tick);
                waited += tick;
                if waited < every {
                    continue;
                }
                waited = Duration::ZERO;
                let Some((id, trees)) = db.trees() else {
                    return;
                };
                for (tree, _hold) in &trees {
                    tree.record_metrics();
                }
                // A window holds its database open: record those open now, let them go.
                for w in Window::open_in(id) {
                    w.record_metrics();
                }
                drop(trees);
            }
        });
    if let Err(e) = spawned {
        log::warn!("bloomsled: the metrics recorder thread could not start: {e}");
    }
}

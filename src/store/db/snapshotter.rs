//! The background thread that writes every tree's snapshot on a period, until the
//! database is dropped.

use std::sync::{Arc, Weak};
use std::thread;
use std::time::Duration;

use crate::store::state::TreeState;

/// Background snapshots every `every`, until the database `db` is dropped; `trees` lists
/// its open trees.
pub(super) fn spawn_snapshotter<D: Send + Sync + 'static>(
    db: Weak<D>,
    every: Duration,
    trees: fn(&D) -> Vec<Arc<TreeState>>,
) {
    let spawned = thread::Builder::new()
        .name("bloomsled-snapshot".into())
        .spawn(move || {
            let tick = every.min(Duration::from_millis(100));
            let mut waited = Duration::ZERO;
            loop {
                thread::sleep(tick);
                waited += tick;
                if db.strong_count() == 0 {
                    return;
                }
                if waited < every {
                    continue;
                }
                waited = Duration::ZERO;
                let Some(db) = db.upgrade() else { return };
                let trees = trees(&db);
                // Held until the trees are let go, so that a drop of the database waits
                // for this pass (claimed: a drop that runs here, below, does not).
                let holds: Vec<_> = trees.iter().map(|t| t.holds.take().claim()).collect();
                drop(db);
                for t in &trees {
                    if let Err(e) = t.snapshot_if_dirty() {
                        log::warn!(
                            "bloomsled: periodic snapshot of {:?} failed: {e}",
                            t.report.tree
                        );
                    }
                }
                drop(trees);
                drop(holds);
            }
        });
    if let Err(e) = spawned {
        log::warn!("bloomsled: cannot start the snapshot thread: {e}");
    }
}

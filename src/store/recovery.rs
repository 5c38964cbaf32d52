//! Recovery after open: a tree whose snapshot was not trusted serves at once with a
//! pass-all filter (every lookup goes to sled, so every answer is right) while its real
//! filter is rebuilt under the online-rebuild protocol ([`super::rebuild`]), in the
//! background by default; then the real filter is swapped in and snapshotted.
//!
//! Recovery at open, in order: `crate::persist`'s recovery reads the tree's record and
//! judges its snapshot and journals (`src/persist/recovery.rs`); [`open`] turns its verdict
//! into the tree's filter (`open_filter`); this file rebuilds what was not trusted;
//! [`crate::store::ready`] says whether the filter is in use yet (it lives beside
//! `TreeState`, which holds it); `report` is the `Tree` API over all of it.

pub(super) mod open;
mod report;

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::thread;

use super::rebuild::Rebuild;
use super::state::TreeState;
use crate::error::Error;
use crate::persist::{RebuildProgress, RecoveryReport};

/// Rebuilds the filter of a tree that opened with the pass-all stand-in: in a background
/// thread if `background`, else before returning. Lookups are right all along (the
/// stand-in sends them to sled); writers keep the new filter exact (the rebuild's gate).
pub(crate) fn start(state: &Arc<TreeState>, background: bool) {
    if !background {
        run(state);
        return;
    }
    let me = Arc::downgrade(state);
    // Taken here, so that a database dropped before the thread runs waits for it.
    let hold = state.holds.take();
    let spawned = thread::Builder::new()
        .name("bloomsled-recover".into())
        .spawn(move || {
            let hold = hold.claim();
            if let Some(s) = me.upgrade() {
                run(&s);
            }
            // The tree is gone (`s` above), then the hold: see `store::holds`.
            drop(hold);
        });
    if let Err(e) = spawned {
        log::warn!("bloomsled: cannot start a recovery thread ({e}); rebuilding now");
        run(state);
    }
}

/// Tries of the rebuild after open that an I/O error may end before it gives up.
const RECOVERY_TRIES: u32 = 3;

/// The rebuild after open, tried again (after 50 ms, then 200 ms) if an I/O error ended
/// it: a failed scan installs nothing, the stand-in keeps sending every lookup to sled,
/// and a disk that erred once may read the next time. Other errors end it at once.
fn recover_with_retries(s: &Arc<TreeState>) -> crate::error::Result<super::RebuildReport> {
    let mut tries = 1;
    loop {
        match Rebuild(s).recover(s.recovery.expected_keys) {
            Err(Error::Io(e)) if tries < RECOVERY_TRIES && !s.closing.load(Ordering::Relaxed) => {
                log::warn!(
                    "bloomsled: tree {:?}: rebuilding the filter after open failed ({e}); \
                     trying again",
                    s.report.tree
                );
                thread::sleep(std::time::Duration::from_millis(50 << (2 * (tries - 1))));
                tries += 1;
            }
            result => return result,
        }
    }
}

/// The rebuild after open, start to end (see [`start`]).
fn run(s: &Arc<TreeState>) {
    let result = recover_with_retries(s);
    s.rebuild.pending.store(false, Ordering::Release);
    match result {
        Ok(r) => {
            if let Some(info) = &r.snapshot {
                s.recovery.set_sequence(info.sequence);
            }
            log::info!(
                "bloomsled: tree {:?}: filter back in use, rebuilt from {} keys in {:?} ({:.0} \
                 keys/s); lookups skip sled again",
                s.report.tree,
                r.keys_scanned,
                r.duration,
                r.keys_scanned as f64 / r.duration.as_secs_f64().max(1e-9),
            );
            // The rebuild sized the filter for what it found; a resize, if due, starts now.
            Rebuild(s).check();
        }
        Err(e) => {
            if !matches!(e, Error::Closed(_)) {
                log::error!(
                    "bloomsled: tree {:?}: rebuilding the filter after open failed ({e}); \
                     lookups keep going to sled until `Tree::rebuild` succeeds",
                    s.report.tree
                );
            }
            s.recovery.set_failed(format!(
                "the filter of tree {:?} was not rebuilt: {e}",
                s.report.tree
            ));
        }
    }
}

/// The tree's recovery report as of now: the report made at open, with the rebuild's
/// progress while it runs, and once its filter is in use the keys it scanned and the time
/// from open to then.
pub(crate) fn report(s: &TreeState) -> RecoveryReport {
    let mut r = s.report.clone();
    let o = s.recovery.outcome();
    if let Some((after_open, keys)) = o.in_use {
        r.keys_scanned = keys;
        r.duration += after_open;
    } else if !s.recovery.is_ready() && o.failed.is_none() {
        r.rebuilding = progress(s);
    }
    if let Some(g) = o.sequence {
        r.sequence = g;
    }
    r
}

/// The progress of the rebuild running now, if one is.
pub(crate) fn progress(s: &TreeState) -> Option<RebuildProgress> {
    let (scanned, elapsed, expected) = s.rebuild.progress()?;
    Some(RebuildProgress::new(scanned, elapsed, expected))
}

//! Whether a tree's filter is in use yet: a tree whose snapshot was not trusted serves with
//! a pass-all stand-in until its rebuild after open swaps the real filter in (see
//! [`super::recovery`]).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Condvar, Mutex};
use std::time::{Duration, Instant};

use crate::error::{Error, Result};

/// Whether a tree's filter is in use yet, and how its rebuild after open went.
pub(crate) struct RecoveryState {
    /// False while the current filter is the pass-all stand-in.
    ready: AtomicBool,
    /// The item count of the tree's last snapshot (a hint for sizing and progress).
    pub(crate) expected_keys: Option<u64>,
    /// The rebuild after open, for a tree that needs one (`None`: ready from its open, with
    /// nothing to wait for or report, and no lock or condition variable to keep).
    after_open: Option<Box<AfterOpen>>,
}

/// How the rebuild after open went, for the report and for waiters.
struct AfterOpen {
    /// When the tree was opened.
    opened: Instant,
    outcome: Mutex<Outcome>,
    changed: Condvar,
}

/// How the rebuild after open went (all `None` while it runs, and for a tree that needed
/// none).
#[derive(Clone, Default)]
pub(crate) struct Outcome {
    /// How long after the tree's open a real filter became current, and the keys its scan
    /// read.
    pub(crate) in_use: Option<(Duration, u64)>,
    /// Sequence of the snapshot written after it.
    pub(crate) sequence: Option<u64>,
    /// Why it ended without a filter (the tree closed, or an error); the tree keeps
    /// answering from sled.
    pub(crate) failed: Option<String>,
}

impl RecoveryState {
    /// A tree whose filter is in use from the start.
    pub(crate) fn ready() -> Self {
        Self::new(true, None)
    }

    /// A tree that serves with the pass-all stand-in until its rebuild swaps its filter in.
    pub(crate) fn pending(expected_keys: Option<u64>) -> Self {
        Self::new(false, expected_keys)
    }

    fn new(ready: bool, expected_keys: Option<u64>) -> Self {
        RecoveryState {
            ready: AtomicBool::new(ready),
            expected_keys,
            after_open: (!ready).then(|| {
                Box::new(AfterOpen {
                    opened: Instant::now(),
                    outcome: Mutex::new(Outcome::default()),
                    changed: Condvar::new(),
                })
            }),
        }
    }

    /// True once the tree's real filter is current.
    pub(crate) fn is_ready(&self) -> bool {
        self.ready.load(Ordering::Acquire)
    }

    /// How the rebuild after open went so far (all `None` for a tree that needed none).
    pub(crate) fn outcome(&self) -> Outcome {
        self.after_open
            .as_ref()
            .map_or_else(Outcome::default, |a| a.outcome_mut().clone())
    }

    /// A rebuild made its filter, built from `keys` keys, current (the first one counts).
    pub(crate) fn set_ready(&self, keys: u64) {
        if self.is_ready() {
            return;
        }
        let Some(a) = &self.after_open else {
            // A tree ready from its open has no rebuild after it to report.
            self.ready.store(true, Ordering::Release);
            return;
        };
        let mut o = a.outcome_mut();
        o.in_use = Some((a.opened.elapsed(), keys));
        self.ready.store(true, Ordering::Release);
        a.changed.notify_all();
    }

    /// The snapshot after the rebuild after open has this sequence.
    pub(crate) fn set_sequence(&self, sequence: u64) {
        if let Some(a) = &self.after_open {
            a.outcome_mut().sequence = Some(sequence);
        }
    }

    /// The rebuild after open ended without a filter.
    pub(crate) fn set_failed(&self, why: String) {
        if let Some(a) = &self.after_open {
            a.outcome_mut().failed = Some(why);
            a.changed.notify_all();
        }
    }

    /// Waits until the filter is in use (`Ok(true)`), `timeout` passes (`Ok(false)`; `None`:
    /// no limit), or the rebuild ends without a filter (its error).
    pub(crate) fn wait(&self, timeout: Option<Duration>) -> Result<bool> {
        let Some(a) = &self.after_open else {
            // Ready from its open.
            return Ok(true);
        };
        let deadline = timeout.map(|t| Instant::now() + t);
        let mut o = a.outcome_mut();
        loop {
            if self.is_ready() {
                return Ok(true);
            }
            if let Some(why) = &o.failed {
                return Err(Error::Closed(why.clone()));
            }
            let left = match deadline {
                Some(d) => d.saturating_duration_since(Instant::now()),
                None => Duration::from_secs(3600),
            };
            if left.is_zero() {
                return Ok(false);
            }
            o = a
                .changed
                .wait_timeout(o, left)
                .unwrap_or_else(|p| p.into_inner())
                .0;
        }
    }
}

impl AfterOpen {
    fn outcome_mut(&self) -> std::sync::MutexGuard<'_, Outcome> {
        self.outcome.lock().unwrap_or_else(|p| p.into_inner())
    }
}

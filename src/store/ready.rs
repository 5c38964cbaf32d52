//! Whether a tree's filter is in use yet: a tree whose snapshot was not trusted serves with
//! a pass-all stand-in until its rebuild after open ends (see [`super::recovery`]).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Condvar, Mutex};
use std::time::{Duration, Instant};

use crate::error::{Error, Result};

/// Whether a tree's filter is in use yet, and how its rebuild after open went.
pub(crate) struct RecoveryState {
    /// False while the current filter is the pass-all stand-in.
    ready: AtomicBool,
    /// True if the tree opened with the stand-in (its rebuild after open then ends by
    /// setting `ended`).
    rebuilt_after_open: bool,
    /// The item count of the tree's last snapshot (a hint for sizing and progress).
    pub(crate) expected_keys: Option<u64>,
    /// How the rebuild ended (`None`: it has not), for the report and for waiters.
    ended: Mutex<Option<Ended>>,
    changed: Condvar,
}

/// How a rebuild after open ended.
#[derive(Clone)]
pub(crate) enum Ended {
    /// The filter is in use: keys scanned, time from open, generation of its snapshot.
    Done {
        keys: u64,
        duration: Duration,
        generation: Option<u64>,
    },
    /// It failed or the tree closed first; the tree keeps answering from sled.
    Failed(String),
}

impl RecoveryState {
    /// A tree whose filter is in use from the start.
    pub(crate) fn ready() -> Self {
        Self::new(true, None)
    }

    /// A tree that serves with the pass-all filter until its rebuild is done.
    pub(crate) fn pending(expected_keys: Option<u64>) -> Self {
        Self::new(false, expected_keys)
    }

    fn new(ready: bool, expected_keys: Option<u64>) -> Self {
        RecoveryState {
            ready: AtomicBool::new(ready),
            rebuilt_after_open: !ready,
            expected_keys,
            ended: Mutex::new(None),
            changed: Condvar::new(),
        }
    }

    /// True once the tree's real filter is current.
    pub(crate) fn is_ready(&self) -> bool {
        self.ready.load(Ordering::Acquire)
    }

    /// The real filter is current (any rebuild's swap says so).
    pub(crate) fn set_ready(&self) {
        if !self.ready.swap(true, Ordering::AcqRel) {
            self.changed.notify_all();
        }
    }

    /// How the rebuild after open ended, if it has.
    pub(crate) fn ended(&self) -> Option<Ended> {
        self.ended.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// The rebuild after open ended (the first call counts).
    pub(crate) fn end(&self, how: Ended) {
        let mut ended = self.ended.lock().unwrap_or_else(|p| p.into_inner());
        if ended.is_none() {
            *ended = Some(how);
        }
        self.changed.notify_all();
    }

    /// Waits until the filter is in use (`Ok(true)`), `timeout` passes (`Ok(false)`; `None`:
    /// no limit), or the rebuild ends without a filter (its error).
    pub(crate) fn wait(&self, timeout: Option<Duration>) -> Result<bool> {
        let deadline = timeout.map(|t| Instant::now() + t);
        let mut ended = self.ended.lock().unwrap_or_else(|p| p.into_inner());
        loop {
            // Ready once the rebuild after open has ended with its report written (or, if
            // it failed, once a later rebuild made a real filter current).
            match &*ended {
                _ if !self.rebuilt_after_open => return Ok(true),
                Some(Ended::Done { .. }) => return Ok(true),
                Some(Ended::Failed(_)) if self.is_ready() => return Ok(true),
                Some(Ended::Failed(why)) => return Err(Error::Closed(why.clone())),
                None => {}
            }
            // Woken by the end of the rebuild or by `set_ready`; the short period covers a
            // `set_ready` that lands between the check above and the wait.
            let step = Duration::from_millis(50);
            let step = match deadline {
                Some(d) => {
                    let left = d.saturating_duration_since(Instant::now());
                    if left.is_zero() {
                        return Ok(false);
                    }
                    left.min(step)
                }
                None => step,
            };
            ended = self
                .changed
                .wait_timeout(ended, step)
                .unwrap_or_else(|p| p.into_inner())
                .0;
        }
    }
}

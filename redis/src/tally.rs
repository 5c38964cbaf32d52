//! What a shared filter or window handle did, counted as it happens, for the `metrics`
//! feature's series (recorded by `record_metrics`, at scrape rate).
//!
//! One relaxed atomic add per call and kind (not per key), in the handle's own session:
//! next to the Redis round trip every call makes (tens of microseconds on loopback), a few
//! nanoseconds. So, unlike the local lookup path, no striping is needed to keep it off the
//! cost, and the counters are kept with or without the feature.

use std::sync::atomic::{AtomicU64, Ordering};

use crate::error::{Error, Result};

/// The counters of one handle (a filter, or a window with all its generations).
#[derive(Default)]
pub(crate) struct Tally {
    lookups: AtomicU64,
    absent: AtomicU64,
    adds: AtomicU64,
    new: AtomicU64,
    errors: AtomicU64,
    retries: AtomicU64,
    unknown: AtomicU64,
    /// What the last recording handed to the facade.
    #[cfg(feature = "metrics")]
    recorded: bloomsled::telemetry::Recorded,
}

fn bump(c: &AtomicU64, n: usize) {
    if n > 0 {
        c.fetch_add(n as u64, Ordering::Relaxed);
    }
}

impl Tally {
    /// Counts a lookup call: its keys and those answered "certainly absent", or its error.
    pub(crate) fn lookups(&self, r: &Result<Vec<bool>>) {
        match r {
            Ok(a) => {
                bump(&self.lookups, a.len());
                bump(&self.absent, a.iter().filter(|&&b| !b).count());
            }
            Err(e) => self.failed(e),
        }
    }

    /// Counts an add call: its keys and those answered "new", or its error.
    pub(crate) fn adds(&self, r: &Result<Vec<bool>>) {
        match r {
            Ok(a) => {
                bump(&self.adds, a.len());
                bump(&self.new, a.iter().filter(|&&b| b).count());
            }
            Err(e) => self.failed(e),
        }
    }

    /// Counts a call that failed with `e` (an add whose outcome is unknown too).
    pub(crate) fn failed(&self, e: &Error) {
        bump(&self.errors, 1);
        if matches!(e, Error::RedisOutcomeUnknown { .. }) {
            bump(&self.unknown, 1);
        }
    }

    /// Counts an attempt sent again after a transient failure.
    pub(crate) fn retried(&self) {
        bump(&self.retries, 1);
    }

    /// The counters, in the order of [`crate::telemetry::SHARED_SERIES`].
    #[cfg(feature = "metrics")]
    fn values(&self) -> [u64; 7] {
        [
            &self.lookups,
            &self.absent,
            &self.adds,
            &self.new,
            &self.errors,
            &self.retries,
            &self.unknown,
        ]
        .map(|c| c.load(Ordering::Relaxed))
    }

    /// Records the counters as the series named `names` (7, counters in the order of
    /// [`crate::telemetry::SHARED_SERIES`]), labelled `label`.
    #[cfg(feature = "metrics")]
    pub(crate) fn record(&self, label: (&'static str, &str), names: &[&'static str]) {
        let values: Vec<(&'static str, u64)> = names.iter().copied().zip(self.values()).collect();
        self.recorded.counters(label, &values);
    }
}

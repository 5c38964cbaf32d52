//! Where a window's time comes from: the system clock, or a clock the caller moves.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// A source of time for a window, in milliseconds since the Unix epoch.
///
/// Every client of one shared window should read (nearly) the same time: the window
/// tolerates clocks apart by less than its grace (see
/// [`crate::shared::SharedWindowConfig::grace`]).
pub trait Clock: Send + Sync + std::fmt::Debug {
    /// Milliseconds since 1970-01-01T00:00:00Z.
    fn now_ms(&self) -> u64;
}

/// The operating system's wall clock (the default).
///
/// ```
/// use bloomsled::shared::{Clock, SystemClock};
/// assert!(SystemClock.now_ms() > 1_600_000_000_000);
/// ```
#[derive(Debug, Clone, Copy, Default)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now_ms(&self) -> u64 {
        SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.as_millis() as u64)
            .unwrap_or(0)
    }
}

/// A clock that stands still until it is moved: for tests and simulations. Clones share
/// one time.
///
/// ```
/// use bloomsled::shared::{Clock, ManualClock};
/// use std::time::Duration;
/// let clock = ManualClock::new(1_000);
/// let same = clock.clone();
/// clock.advance(Duration::from_millis(500));
/// assert_eq!(same.now_ms(), 1_500);
/// clock.set_ms(10);
/// assert_eq!(same.now_ms(), 10);
/// ```
#[derive(Debug, Clone, Default)]
pub struct ManualClock(Arc<AtomicU64>);

impl ManualClock {
    /// A clock showing `ms` milliseconds since the Unix epoch.
    pub fn new(ms: u64) -> Self {
        ManualClock(Arc::new(AtomicU64::new(ms)))
    }

    /// A clock showing the system's time now (and staying there until moved).
    ///
    /// ```
    /// use bloomsled::shared::{Clock, ManualClock, SystemClock};
    /// assert!(ManualClock::starting_now().now_ms() <= SystemClock.now_ms());
    /// ```
    pub fn starting_now() -> Self {
        Self::new(SystemClock.now_ms())
    }

    /// Sets the time.
    ///
    /// ```
    /// use bloomsled::shared::{Clock, ManualClock};
    /// let c = ManualClock::new(0);
    /// c.set_ms(42);
    /// assert_eq!(c.now_ms(), 42);
    /// ```
    pub fn set_ms(&self, ms: u64) {
        self.0.store(ms, Ordering::SeqCst);
    }

    /// Moves the time forward by `d`.
    ///
    /// ```
    /// use bloomsled::shared::{Clock, ManualClock};
    /// use std::time::Duration;
    /// let c = ManualClock::new(0);
    /// c.advance(Duration::from_secs(2));
    /// assert_eq!(c.now_ms(), 2_000);
    /// ```
    pub fn advance(&self, d: Duration) {
        self.0.fetch_add(d.as_millis() as u64, Ordering::SeqCst);
    }
}

impl Clock for ManualClock {
    fn now_ms(&self) -> u64 {
        self.0.load(Ordering::SeqCst)
    }
}

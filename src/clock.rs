//! Time for windows: where it comes from, and how a window cuts it into generations.
//!
//! One [`Clock`] trait and its two clocks serve both kinds of window, the local
//! [`Window`](crate::window::Window) and the Redis-backed `SharedWindow` (crate
//! `bloomsled-redis`). Their one public path is `bloomsled::clock::{Clock, SystemClock,
//! ManualClock}`.
//!
//! The generation arithmetic both windows share (which generation a time belongs to,
//! which are live, when one expires, and the limits on a window's shape) lives in this
//! module too, in one place, so a local window and a shared one compute the same ring from
//! the same times. It is a leaf: it depends on nothing of the crate but its error type.

pub(crate) mod generations;

pub use generations::{Generations, MAX_GENERATIONS};

use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// A source of time for a window, in milliseconds since the Unix epoch.
///
/// The wall clock ([`SystemClock`]) is the default: a window's generations are recorded
/// with their times, so a restart finds them where they were. Tests and simulations use a
/// [`ManualClock`]. A clock may go backwards: a window never expires anything early because
/// of it (see [`crate::window`]).
///
/// Every client of one shared window should read (nearly) the same time: a shared window
/// tolerates clocks apart by less than its grace (`SharedWindowConfig::grace`, crate
/// `bloomsled-redis`).
pub trait Clock: Send + Sync + fmt::Debug {
    /// Milliseconds since the Unix epoch.
    fn now_ms(&self) -> u64;
}

/// The wall clock. On Linux it reads `CLOCK_REALTIME_COARSE` (a few ns, with the kernel
/// tick's resolution, 1 to 4 ms), elsewhere `SystemTime::now`: a window asks the time on
/// every operation, and the precise clock (35 ns here) would cost more than the lookup.
///
/// ```
/// use bloomsled::clock::{Clock, SystemClock};
/// assert!(SystemClock.now_ms() > 1_700_000_000_000); // after November 2023
/// ```
#[derive(Debug, Clone, Copy, Default)]
pub struct SystemClock;

impl Clock for SystemClock {
    #[cfg(target_os = "linux")]
    #[inline]
    fn now_ms(&self) -> u64 {
        let mut ts = libc::timespec {
            tv_sec: 0,
            tv_nsec: 0,
        };
        // SAFETY: `clock_gettime` writes one `timespec` through the pointer it is given,
        // which points to the live local `ts`; it reads nothing else of ours.
        #[allow(unsafe_code)]
        let rc = unsafe { libc::clock_gettime(libc::CLOCK_REALTIME_COARSE, &mut ts) };
        if rc != 0 {
            return precise_now_ms();
        }
        (ts.tv_sec.max(0) as u64) * 1000 + (ts.tv_nsec.max(0) as u64) / 1_000_000
    }

    #[cfg(not(target_os = "linux"))]
    fn now_ms(&self) -> u64 {
        precise_now_ms()
    }
}

fn precise_now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

/// A clock that only moves when told to; clones share one time.
///
/// ```
/// use std::time::Duration;
/// use bloomsled::clock::{Clock, ManualClock};
/// let clock = ManualClock::new(1_000);
/// let same = clock.clone();
/// clock.advance(Duration::from_secs(2));
/// assert_eq!(same.now_ms(), 3_000);
/// clock.set(500); // backwards is allowed
/// assert_eq!(same.now_ms(), 500);
/// ```
#[derive(Debug, Clone, Default)]
pub struct ManualClock(Arc<AtomicU64>);

impl ManualClock {
    /// A clock that reads `now_ms` until moved.
    ///
    /// ```
    /// use bloomsled::clock::{Clock, ManualClock};
    /// assert_eq!(ManualClock::new(7).now_ms(), 7);
    /// ```
    pub fn new(now_ms: u64) -> ManualClock {
        ManualClock(Arc::new(AtomicU64::new(now_ms)))
    }

    /// A clock that reads the wall clock's time now (and stays there until moved).
    ///
    /// ```
    /// use bloomsled::clock::{Clock, ManualClock, SystemClock};
    /// let before = SystemClock.now_ms();
    /// let clock = ManualClock::starting_now();
    /// assert!(before <= clock.now_ms() && clock.now_ms() <= SystemClock.now_ms());
    /// ```
    pub fn starting_now() -> ManualClock {
        ManualClock::new(SystemClock.now_ms())
    }

    /// Sets the time, forwards or backwards.
    ///
    /// ```
    /// use bloomsled::clock::{Clock, ManualClock};
    /// let clock = ManualClock::new(0);
    /// clock.set(42);
    /// assert_eq!(clock.now_ms(), 42);
    /// ```
    pub fn set(&self, now_ms: u64) {
        self.0.store(now_ms, Ordering::Release);
    }

    /// Moves the time forwards by `by` (saturating).
    ///
    /// ```
    /// use bloomsled::clock::{Clock, ManualClock};
    /// use std::time::Duration;
    /// let clock = ManualClock::new(u64::MAX - 1);
    /// clock.advance(Duration::from_secs(2));
    /// assert_eq!(clock.now_ms(), u64::MAX);
    /// ```
    pub fn advance(&self, by: Duration) {
        let ms = u64::try_from(by.as_millis()).unwrap_or(u64::MAX);
        let _ = self
            .0
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |t| {
                Some(t.saturating_add(ms))
            });
    }
}

impl Clock for ManualClock {
    #[inline]
    fn now_ms(&self) -> u64 {
        self.0.load(Ordering::Acquire)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn coarse_wall_clock_agrees_with_system_time() {
        let a = precise_now_ms();
        let c = SystemClock.now_ms();
        let b = precise_now_ms();
        // The coarse clock lags by at most a tick or two.
        assert!(c + 50 >= a && c <= b, "{a} <= {c} <= {b}");
    }
}

//! A test seam: pause every rebuild scan of this process once it has read a number of keys,
//! so that a test can check a tree *while* its filter is being rebuilt, without sleeping.

#[cfg(feature = "failpoints")]
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
#[cfg(feature = "failpoints")]
use std::time::Duration;

/// Keys a scan reads before it waits (`u64::MAX`: never).
#[cfg(feature = "failpoints")]
static PAUSE_AFTER: AtomicU64 = AtomicU64::new(u64::MAX);
/// Scans waiting at the pause now.
#[cfg(feature = "failpoints")]
static PAUSED: AtomicUsize = AtomicUsize::new(0);

/// Test seam: every filter rebuild scan of this process (the recovery at open included)
/// stops once it has read `keys` keys, and waits until this is called again with a higher
/// limit or `None`, or its tree is closed. Process-wide, so use it only in a test binary
/// whose tests do not run concurrently with others that rebuild. Feature `failpoints` only.
///
/// ```
/// bloomsled::persist::pause_rebuild_scans_after(Some(1_000));
/// bloomsled::persist::pause_rebuild_scans_after(None);
/// ```
#[cfg(feature = "failpoints")]
pub fn pause_rebuild_scans_after(keys: Option<u64>) {
    PAUSE_AFTER.store(keys.unwrap_or(u64::MAX), Ordering::SeqCst);
}

/// Test seam: how many rebuild scans are waiting at the pause of
/// [`pause_rebuild_scans_after`] now. Feature `failpoints` only.
///
/// ```
/// assert_eq!(bloomsled::persist::rebuild_scans_paused(), 0);
/// ```
#[cfg(feature = "failpoints")]
pub fn rebuild_scans_paused() -> usize {
    PAUSED.load(Ordering::SeqCst)
}

/// The key count at which scans stop for the pause (`u64::MAX`: none).
#[cfg(feature = "failpoints")]
pub(crate) fn pause_limit() -> u64 {
    PAUSE_AFTER.load(Ordering::Relaxed)
}

/// The key count at which scans stop for the pause: never, without `failpoints`.
#[cfg(not(feature = "failpoints"))]
#[inline(always)]
pub(crate) fn pause_limit() -> u64 {
    u64::MAX
}

/// Called by a scan between rounds, gate open: waits while the pause applies to a scan that
/// has read `scanned` keys, unless `closing` says the tree closed.
#[cfg(feature = "failpoints")]
pub(crate) fn wait_at_pause(scanned: u64, closing: impl Fn() -> bool) {
    if scanned < PAUSE_AFTER.load(Ordering::Relaxed) {
        return;
    }
    PAUSED.fetch_add(1, Ordering::SeqCst);
    while scanned >= PAUSE_AFTER.load(Ordering::SeqCst) && !closing() {
        std::thread::sleep(Duration::from_millis(1));
    }
    PAUSED.fetch_sub(1, Ordering::SeqCst);
}

/// Called by a scan between rounds: nothing to wait for without `failpoints`.
#[cfg(not(feature = "failpoints"))]
#[inline(always)]
pub(crate) fn wait_at_pause(_scanned: u64, _closing: impl Fn() -> bool) {}

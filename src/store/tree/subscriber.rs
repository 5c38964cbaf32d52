//! `Subscriber`: sled's stream of write events, waitable through a shared reference.

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::mpsc::RecvTimeoutError;
use std::sync::{Mutex, MutexGuard};
use std::task::{Context, Poll};
use std::time::Duration;

use sled::Event;

/// The events of writes to keys under a prefix, from [`crate::Tree::watch_prefix`]: an
/// iterator (blocking), a future (the next event), and [`Subscriber::next_timeout`].
///
/// It is `sled::Subscriber`, except that `next_timeout` also works through a shared
/// reference (sled's needs `&mut`; sled 0.34.7's own test suite calls it on an immutable
/// binding, which compiles against bloomsled but not against sled).
///
/// ```
/// # let db = bloomsled::Config::new().temporary(true).open()?;
/// let events = db.watch_prefix("user/");
/// db.insert("user/1", "alice")?;
/// let event = events.next_timeout(std::time::Duration::from_secs(5)).unwrap();
/// assert_eq!(event.key(), b"user/1");
/// # Ok::<(), bloomsled::Error>(())
/// ```
pub struct Subscriber {
    inner: Mutex<sled::Subscriber>,
}

impl Subscriber {
    pub(crate) fn new(inner: sled::Subscriber) -> Self {
        Subscriber {
            inner: Mutex::new(inner),
        }
    }

    fn lock(&self) -> MutexGuard<'_, sled::Subscriber> {
        // A panic while waiting leaves the subscriber usable: sled's keeps no invariant
        // across the wait that a panic could break.
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn get_mut(&mut self) -> &mut sled::Subscriber {
        self.inner.get_mut().unwrap_or_else(|p| p.into_inner())
    }

    /// Waits up to `timeout` for the next event; an error if none arrives in time or the
    /// database shuts down. Callers sharing one subscriber wait one after the other.
    pub fn next_timeout(&self, timeout: Duration) -> Result<Event, RecvTimeoutError> {
        self.lock().next_timeout(timeout)
    }
}

impl Iterator for Subscriber {
    type Item = Event;

    /// Blocks until the next event; `None` once the database shuts down.
    fn next(&mut self) -> Option<Event> {
        self.get_mut().next()
    }
}

impl Future for Subscriber {
    type Output = Option<Event>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Event>> {
        Pin::new(self.get_mut().get_mut()).poll(cx)
    }
}

impl fmt::Debug for Subscriber {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Subscriber").finish_non_exhaustive()
    }
}

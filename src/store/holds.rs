//! Background threads' holds on a tree, so that dropping a database waits for them.
//!
//! A background thread (a rebuild, the recovery after open, the periodic snapshotter)
//! works on an `Arc<TreeState>`, which holds sled's tree and through it sled's file lock;
//! the last `Arc` to go also takes the tree's closing snapshot. If such a thread let go of
//! its `Arc` after the last `Db` handle was dropped, the lock would outlive the drop (a
//! process opening the database right after would be refused) and a snapshot would be
//! written by nobody's handle. So each thread takes a [`Hold`] before it can reach the
//! tree and gives it back only after its last `Arc` is gone, and dropping the database
//! waits until no other thread holds any of its trees ([`Holds::wait_released`]).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::thread::{self, ThreadId};
use std::time::{Duration, Instant};

/// Longest a database's drop waits for background threads (a thread stuck in sled would
/// otherwise hang the drop; it is logged).
const WAIT_CAP: Duration = Duration::from_secs(10);

static NEXT: AtomicU64 = AtomicU64::new(0);

/// The holds on one tree: each a token, and the thread that claimed it (none yet for a
/// worker that has not started).
#[derive(Debug, Default)]
pub(crate) struct Holds {
    holders: Mutex<Vec<(u64, Option<ThreadId>)>>,
    released: Condvar,
}

/// One hold, given back when dropped. Taken by the thread that spawns a worker (so a drop
/// that starts before the worker runs waits for it too), then claimed by the worker.
#[derive(Debug)]
pub(crate) struct Hold {
    holds: Arc<Holds>,
    token: u64,
}

impl Holds {
    /// A hold, unclaimed: every thread's [`Holds::wait_released`] waits for it.
    pub(crate) fn take(self: &Arc<Self>) -> Hold {
        let token = NEXT.fetch_add(1, Ordering::Relaxed);
        self.lock().push((token, None));
        Hold {
            holds: Arc::clone(self),
            token,
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Vec<(u64, Option<ThreadId>)>> {
        self.holders.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Waits until no hold is left but the calling thread's own (at most [`WAIT_CAP`]).
    pub(crate) fn wait_released(&self) {
        let me = Some(thread::current().id());
        let deadline = Instant::now() + WAIT_CAP;
        let mut held = self.lock();
        while held.iter().any(|(_, t)| *t != me) {
            let now = Instant::now();
            if now >= deadline {
                log::warn!(
                    "bloomsled: a background thread still holds a tree after {WAIT_CAP:?}; \
                     the database's files may stay locked until it ends"
                );
                return;
            }
            held = self
                .released
                .wait_timeout(held, deadline - now)
                .unwrap_or_else(|p| p.into_inner())
                .0;
        }
    }
}

impl Hold {
    /// Claims the hold for the calling thread: a drop of the database that runs on this
    /// thread (its last handle let go here) does not wait for it.
    pub(crate) fn claim(self) -> Hold {
        let me = thread::current().id();
        if let Some(slot) = self.holds.lock().iter_mut().find(|(t, _)| *t == self.token) {
            slot.1 = Some(me);
        }
        self
    }
}

impl Drop for Hold {
    fn drop(&mut self) {
        let mut held = self.holds.lock();
        if let Some(i) = held.iter().position(|(t, _)| *t == self.token) {
            held.swap_remove(i);
        }
        drop(held);
        self.holds.released.notify_all();
    }
}

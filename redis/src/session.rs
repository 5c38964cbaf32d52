//! A connection that reconnects: shared by a filter handle's methods behind a mutex.

use std::sync::Mutex;
use std::time::Instant;

use redis::{Cmd, Value};

use crate::error::{Error, Result};

use super::conn::{Conn, Endpoint};
use super::resp::{Cmds, Sink};
use super::retry::{Failure, Next, IDLE_CHECK};
use super::tally::Tally;

/// The endpoint and its current connection (none after a dropped connection, until the
/// next call reconnects).
pub(crate) struct Session {
    endpoint: Endpoint,
    conn: Mutex<Option<Conn>>,
    /// When the session opened: its first [`CONVERGE_WAIT`](super::retry::CONVERGE_WAIT) covers the
    /// create or open that made it (later commands report a cluster that is down at once).
    opened: Instant,
    /// When the connection last answered (read and written under the `conn` lock).
    answered: Mutex<Instant>,
    /// What the handle (a filter, or a window and its generations) did, for its metrics.
    pub(crate) tally: Tally,
}

impl Session {
    /// Connects now, so a bad URL or a server that is down fails at open (after the
    /// endpoint's retry window, if it has one).
    pub(crate) fn open(endpoint: &Endpoint) -> Result<Session> {
        let opened = Instant::now();
        let mut retry = endpoint.retries(opened, true);
        let conn = loop {
            match endpoint.connect() {
                Ok(c) => break c,
                Err(e) => pause(retry.next_open(e)?),
            }
        };
        Ok(Session {
            endpoint: endpoint.clone(),
            conn: Mutex::new(Some(conn)),
            opened,
            answered: Mutex::new(Instant::now()),
            tally: Tally::default(),
        })
    }

    /// The endpoint this session talks to.
    pub(crate) fn endpoint(&self) -> &Endpoint {
        &self.endpoint
    }

    /// Runs `cmds` as one pipeline, again while the failure is transient and the
    /// endpoint's retry window ([`Endpoint::retry_for`]) lasts: after a dropped
    /// connection (a restarted server) at once, then with growing pauses. Only for
    /// batches whose replay is harmless (reads, bit sets whose answer is not read, writes
    /// of fixed content, scripts that remember their answer). `build` makes the commands
    /// (called again for each attempt).
    pub(crate) fn run(&self, build: impl Fn() -> Vec<Cmd>) -> Result<Vec<Value>> {
        self.cmds(true, build)
    }

    /// [`Session::run`] for a batch whose answer depends on the state it finds: see
    /// [`Session::run_fast_once`].
    pub(crate) fn run_once(&self, build: impl Fn() -> Vec<Cmd>) -> Result<Vec<Value>> {
        self.cmds(false, build)
    }

    fn cmds(&self, replay: bool, build: impl Fn() -> Vec<Cmd>) -> Result<Vec<Value>> {
        self.retrying(replay, |slot| {
            let conn = match slot {
                Some(c) => c,
                None => slot.insert(self.endpoint.connect().map_err(Failure::not_sent)?),
            };
            let r = conn.run(build(), replay);
            Self::after(slot, r)
        })
    }

    /// Like [`Session::run`], with the commands written by `write`: into one RESP buffer on
    /// a single server, as `Cmd`s on a cluster (see [`super::resp`]).
    pub(crate) fn run_fast(&self, write: impl Fn(&mut dyn Sink)) -> Result<Vec<Value>> {
        self.fast(true, write)
    }

    /// [`Session::run_fast`] for a batch whose answer depends on the state it finds (an
    /// add's "new"): sent again only while it certainly did not reach Redis (the connection
    /// could not be made, or the server refused every command while `LOADING`). A failure
    /// after it may have been sent is [`Error::RedisOutcomeUnknown`]: the caller finds out
    /// whether it ran, or reports it; it is never replayed blindly.
    pub(crate) fn run_fast_once(&self, write: impl Fn(&mut dyn Sink)) -> Result<Vec<Value>> {
        self.fast(false, write)
    }

    fn fast(&self, replay: bool, write: impl Fn(&mut dyn Sink)) -> Result<Vec<Value>> {
        if self.endpoint.is_cluster() {
            let mut c = Cmds::default();
            write(&mut c);
            return self.retrying(replay, |slot| {
                let conn = match slot {
                    Some(c) => c,
                    None => slot.insert(self.endpoint.connect().map_err(Failure::not_sent)?),
                };
                let r = conn.run(c.0.clone(), replay);
                Self::after(slot, r)
            });
        }
        self.retrying(replay, |slot| {
            let conn = match slot {
                Some(c) => c,
                None => slot.insert(self.endpoint.connect().map_err(Failure::not_sent)?),
            };
            let r = conn
                .run_streamed(&write)
                .unwrap_or_else(|| Ok(Vec::new()))
                .map_err(Error::from);
            let v = Self::after(slot, r)?;
            // Streamed replies keep error replies as values: one that says the server cannot
            // serve yet fails the attempt like any transient error.
            match Failure::refused(&v) {
                None => Ok(v),
                Some(f) => Err(f),
            }
        })
    }

    /// The result of one attempt on `slot`'s connection: a connection that failed is
    /// dropped (a half-read reply would desynchronize the next one), and the failure is
    /// one that may have reached the server unless the server refused it while loading.
    fn after(slot: &mut Option<Conn>, r: Result<Vec<Value>>) -> Result<Vec<Value>, Failure> {
        r.map_err(|e| {
            let (f, drop) = Failure::of(e);
            if drop {
                *slot = None;
            }
            f
        })
    }

    /// Runs `attempt` until it succeeds, fails for good, or the retry window is over (see
    /// [`Session::run`]); with `replay` false, a transient failure that may have reached the
    /// server ends it with [`Error::RedisOutcomeUnknown`].
    fn retrying(
        &self,
        replay: bool,
        mut attempt: impl FnMut(&mut Option<Conn>) -> Result<Vec<Value>, Failure>,
    ) -> Result<Vec<Value>> {
        let mut guard = self.conn.lock().unwrap_or_else(|p| p.into_inner());
        let mut answered = self.answered.lock().unwrap_or_else(|p| p.into_inner());
        if !replay && answered.elapsed() > IDLE_CHECK {
            // A connection idle for a while may have been closed by a server that went
            // away since: a batch written into it would fail with an unknown outcome. A
            // `PING` tells first; if it fails, the batch goes out on a new connection.
            if let Some(conn) = guard.as_mut() {
                if !conn.check() {
                    *guard = None;
                }
            }
        }
        let mut retry = self.endpoint.retries(self.opened, replay);
        loop {
            match attempt(&mut guard) {
                Ok(v) => {
                    *answered = Instant::now();
                    return Ok(v);
                }
                Err(f) => {
                    let next = retry.next(f)?;
                    self.tally.retried();
                    pause(next);
                }
            }
        }
    }

    /// Runs one command.
    pub(crate) fn one(&self, cmd: Cmd) -> Result<Value> {
        let mut v = self.run(|| vec![cmd.clone()])?;
        Ok(v.pop().unwrap_or(Value::Nil))
    }
}

/// Waits as `next` says, on this thread.
fn pause(next: Next) {
    if let Next::After(d) = next {
        std::thread::sleep(d);
    }
}

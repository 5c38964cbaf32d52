//! A connection that reconnects: shared by a filter handle's methods behind a mutex.

use std::sync::Mutex;
use std::time::{Duration, Instant};

use redis::{Cmd, ErrorKind, ServerErrorKind, Value};

use crate::error::{Error, Result};

use super::conn::{Conn, Endpoint};
use super::resp::{Cmds, Sink};

/// How long after a session opens its commands wait out a cluster that is still converging.
/// Right after `redis-cli --cluster create`, or while a failover settles, nodes answer
/// `CLUSTERDOWN` (the cluster is down, or a hash slot is not served yet) or `TRYAGAIN` for
/// a moment: the create or open that meets it retries, briefly, instead of failing.
pub(crate) const CONVERGE_WAIT: Duration = Duration::from_secs(5);
/// The pause between two attempts while a cluster converges.
pub(crate) const CONVERGE_PAUSE: Duration = Duration::from_millis(100);

/// The first pause between two attempts while Redis is unavailable; it doubles up to
/// [`MAX_PAUSE`].
const FIRST_PAUSE: Duration = Duration::from_millis(50);
/// The longest pause between two attempts.
const MAX_PAUSE: Duration = Duration::from_secs(1);

/// How long a connection may sit unused before a batch that cannot be replayed checks it
/// with a `PING` first.
const IDLE_CHECK: Duration = Duration::from_millis(100);

/// A failed attempt, and whether its commands may have reached the server.
struct Failure {
    error: Error,
    maybe_sent: bool,
}

impl Failure {
    /// A failure before anything was sent (the connection could not be made).
    fn not_sent(error: Error) -> Failure {
        Failure {
            error,
            maybe_sent: false,
        }
    }
}

/// True for a failure that may pass: the connection (refused, dropped, timed out) or a
/// server that cannot serve yet (`LOADING` its data after a restart, `CLUSTERDOWN`,
/// `TRYAGAIN`, `MASTERDOWN`, `READONLY` while a failover settles).
fn transient(e: &Error) -> bool {
    let Error::Redis(e) = e else { return false };
    e.is_connection_refusal()
        || e.is_connection_dropped()
        || e.is_io_error()
        || e.is_timeout()
        || matches!(
            e.kind(),
            ErrorKind::Server(
                ServerErrorKind::BusyLoading
                    | ServerErrorKind::ClusterDown
                    | ServerErrorKind::TryAgain
                    | ServerErrorKind::MasterDown
                    | ServerErrorKind::ReadOnly
            )
        )
}

/// True for a connection that dropped (not a timeout: a slow server is not asked twice at
/// once).
fn dropped(e: &Error) -> bool {
    matches!(e, Error::Redis(e) if (e.is_connection_dropped() || e.is_io_error()) && !e.is_timeout())
}

/// True for `LOADING`: the server refused the command while it loads its data, so it ran
/// nowhere.
fn loading(e: &redis::RedisError) -> bool {
    matches!(e.kind(), ErrorKind::Server(ServerErrorKind::BusyLoading))
}

/// The endpoint and its current connection (none after a dropped connection, until the
/// next call reconnects).
pub(crate) struct Session {
    endpoint: Endpoint,
    conn: Mutex<Option<Conn>>,
    /// When the session opened: its first [`CONVERGE_WAIT`] covers the create or open that
    /// made it (later commands report a cluster that is down at once).
    opened: Instant,
    /// When the connection last answered (read and written under the `conn` lock).
    answered: Mutex<Instant>,
}

/// True if `e` is a cluster still converging: `CLUSTERDOWN` or `TRYAGAIN` (the command was
/// not run, so running it again is safe).
pub(crate) fn converging(e: &Error) -> bool {
    matches!(
        e,
        Error::Redis(e) if matches!(
            e.kind(),
            ErrorKind::Server(ServerErrorKind::ClusterDown | ServerErrorKind::TryAgain)
        )
    )
}

impl Session {
    /// Connects now, so a bad URL or a server that is down fails at open (after the
    /// endpoint's retry window, if it has one).
    pub(crate) fn open(endpoint: &Endpoint) -> Result<Session> {
        let opened = Instant::now();
        let mut pause = FIRST_PAUSE;
        let conn = loop {
            match endpoint.connect() {
                Err(e) if endpoint.is_cluster() && converging(&e) => {
                    if opened.elapsed() >= CONVERGE_WAIT.max(endpoint.retry_window()) {
                        return Err(e);
                    }
                    std::thread::sleep(CONVERGE_PAUSE);
                }
                Err(e) if transient(&e) && opened.elapsed() + pause <= endpoint.retry_window() => {
                    std::thread::sleep(pause);
                    pause = (pause * 2).min(MAX_PAUSE);
                }
                r => break r?,
            }
        };
        Ok(Session {
            endpoint: endpoint.clone(),
            conn: Mutex::new(Some(conn)),
            opened,
            answered: Mutex::new(Instant::now()),
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
            // serve yet fails the attempt like any transient error (it ran nowhere if every
            // command got `LOADING`).
            let refused = |v: &Value| match v {
                Value::ServerError(e) => {
                    let e = Error::Redis(e.clone().into());
                    transient(&e).then_some(e)
                }
                _ => None,
            };
            match v.iter().find_map(refused) {
                None => Ok(v),
                Some(error) => {
                    let all_loading = v.iter().all(|r| {
                        matches!(r, Value::ServerError(e)
                            if matches!(e.kind(), Some(ServerErrorKind::BusyLoading)))
                    });
                    Err(Failure {
                        error,
                        maybe_sent: !all_loading,
                    })
                }
            }
        })
    }

    /// The result of one attempt on `slot`'s connection: a connection that failed is
    /// dropped (a half-read reply would desynchronize the next one), and the failure is
    /// one that may have reached the server unless the server refused it while loading.
    fn after(slot: &mut Option<Conn>, r: Result<Vec<Value>>) -> Result<Vec<Value>, Failure> {
        r.map_err(|e| {
            if let Error::Redis(re) = &e {
                if re.is_connection_dropped() || re.is_io_error() || re.is_timeout() {
                    *slot = None;
                }
                if loading(re) {
                    return Failure::not_sent(e);
                }
            }
            Failure {
                error: e,
                maybe_sent: true,
            }
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
                if conn.run(vec![redis::cmd("PING")], true).is_err() {
                    *guard = None;
                }
            }
        }
        let start = Instant::now();
        let mut pause = FIRST_PAUSE;
        let mut reconnected = false;
        loop {
            let f = match attempt(&mut guard) {
                Ok(v) => {
                    *answered = Instant::now();
                    return Ok(v);
                }
                Err(f) => f,
            };
            if !transient(&f.error) || matches!(f.error, Error::RedisOutcomeUnknown { .. }) {
                return Err(f.error);
            }
            if f.maybe_sent && !replay {
                return Err(Error::RedisOutcomeUnknown {
                    why: f.error.to_string(),
                });
            }
            let young = self.endpoint.is_cluster()
                && converging(&f.error)
                && self.opened.elapsed() < CONVERGE_WAIT;
            if young {
                std::thread::sleep(CONVERGE_PAUSE);
                continue;
            }
            // A dropped connection (a server restarted since the last call) is made again
            // at once, as it always was; anything more waits within the retry window.
            if !reconnected && dropped(&f.error) {
                reconnected = true;
                continue;
            }
            if start.elapsed() + pause > self.endpoint.retry_window() {
                return Err(f.error);
            }
            std::thread::sleep(pause);
            pause = (pause * 2).min(MAX_PAUSE);
        }
    }

    /// Runs one command.
    pub(crate) fn one(&self, cmd: Cmd) -> Result<Value> {
        let mut v = self.run(|| vec![cmd.clone()])?;
        Ok(v.pop().unwrap_or(Value::Nil))
    }
}

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

/// The endpoint and its current connection (none after a dropped connection, until the
/// next call reconnects).
pub(crate) struct Session {
    endpoint: Endpoint,
    conn: Mutex<Option<Conn>>,
    /// When the session opened: its first [`CONVERGE_WAIT`] covers the create or open that
    /// made it (later commands report a cluster that is down at once).
    opened: Instant,
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
    /// Connects now, so a bad URL or a server that is down fails at open.
    pub(crate) fn open(endpoint: &Endpoint) -> Result<Session> {
        let opened = Instant::now();
        let conn = loop {
            match endpoint.connect() {
                Err(e) if endpoint.is_cluster() && converging(&e) => {
                    if opened.elapsed() >= CONVERGE_WAIT {
                        return Err(e);
                    }
                    std::thread::sleep(CONVERGE_PAUSE);
                }
                r => break r?,
            }
        };
        Ok(Session {
            endpoint: endpoint.clone(),
            conn: Mutex::new(Some(conn)),
            opened,
        })
    }

    /// `attempt` again while the cluster is converging and the session is young (see
    /// [`CONVERGE_WAIT`]); on a single server, or for any other error, once.
    fn settled<T>(&self, mut attempt: impl FnMut() -> Result<T>) -> Result<T> {
        loop {
            match attempt() {
                Err(e)
                    if self.endpoint.is_cluster()
                        && converging(&e)
                        && self.opened.elapsed() < CONVERGE_WAIT =>
                {
                    std::thread::sleep(CONVERGE_PAUSE);
                }
                r => return r,
            }
        }
    }

    /// The endpoint this session talks to.
    pub(crate) fn endpoint(&self) -> &Endpoint {
        &self.endpoint
    }

    /// Runs `cmds` as one pipeline. If the connection had dropped (a restarted server), it
    /// reconnects and runs them once more: every command bloomsled sends is idempotent
    /// (reads, bit sets, and writes of fixed content).
    /// `build` makes the commands (called again for the retry). A timeout is not retried:
    /// a slow server gives its error after one timeout, not two.
    pub(crate) fn run(&self, build: impl Fn() -> Vec<Cmd>) -> Result<Vec<Value>> {
        let mut guard = self.conn.lock().unwrap_or_else(|p| p.into_inner());
        self.settled(|| match self.run_on(&mut guard, build()) {
            Err(Error::Redis(e))
                if (e.is_connection_dropped() || e.is_io_error()) && !e.is_timeout() =>
            {
                self.run_on(&mut guard, build())
            }
            r => r,
        })
    }

    /// Like [`Session::run`], with the commands written by `write`: into one RESP buffer on
    /// a single server, as `Cmd`s on a cluster (see [`super::resp`]).
    pub(crate) fn run_fast(&self, write: impl Fn(&mut dyn Sink)) -> Result<Vec<Value>> {
        if self.endpoint.is_cluster() {
            let mut c = Cmds::default();
            write(&mut c);
            return self.run(|| c.0.clone());
        }
        let mut guard = self.conn.lock().unwrap_or_else(|p| p.into_inner());
        let attempt = |slot: &mut Option<Conn>| -> Result<Vec<Value>> {
            let conn = match slot {
                Some(c) => c,
                None => slot.insert(self.endpoint.connect()?),
            };
            let r = conn.run_streamed(&write).unwrap_or_else(|| Ok(Vec::new()));
            if let Err(e) = &r {
                if e.is_connection_dropped() || e.is_io_error() || e.is_timeout() {
                    *slot = None;
                }
            }
            Ok(r?)
        };
        match attempt(&mut guard) {
            Err(Error::Redis(e))
                if (e.is_connection_dropped() || e.is_io_error()) && !e.is_timeout() =>
            {
                attempt(&mut guard)
            }
            r => r,
        }
    }

    /// Runs one command.
    pub(crate) fn one(&self, cmd: Cmd) -> Result<Value> {
        let mut v = self.run(|| vec![cmd.clone()])?;
        Ok(v.pop().unwrap_or(Value::Nil))
    }

    fn run_on(&self, slot: &mut Option<Conn>, cmds: Vec<Cmd>) -> Result<Vec<Value>> {
        let conn = match slot {
            Some(c) => c,
            None => slot.insert(self.endpoint.connect()?),
        };
        let r = conn.run(cmds);
        if let Err(Error::Redis(e)) = &r {
            if e.is_connection_dropped() || e.is_io_error() || e.is_timeout() {
                // A half-read reply would desynchronize the next one: start afresh.
                *slot = None;
            }
        }
        r
    }
}

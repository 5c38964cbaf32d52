//! The async connection to a server or a cluster, shared by every call of a handle.
//!
//! One server: a redis-rs `MultiplexedConnection`, which pipelines the requests of every
//! task on one socket, so concurrent calls on one handle overlap instead of taking turns.
//! A cluster: redis-rs's async `ClusterConnection`, which routes each command by its key
//! to the master that serves it and follows `MOVED`/`ASK` redirections; the commands of a
//! batch are sent all at once and their replies awaited together (one round trip per
//! node). Nothing here blocks a thread: waits are tokio timers.
//!
//! redis-rs's async cluster client re-sends a command after an I/O error or a timeout
//! (it reconnects and sends again, up to its `retries`): harmless for a lookup, wrong for
//! an add, whose replay answers "present" for the keys its lost first run set. So a batch
//! that must not be replayed goes on a second cluster connection made without retries
//! (`Endpoint::cluster_client_once`), which follows `MOVED`/`ASK` here (the redirecting
//! node did not run the command) and returns any other failure to the rules in `retry`.
//!
//! When a call is tried again is the sync session's rule, decided in `retry`: this module
//! only sends, and waits as told.

use std::sync::Mutex;
use std::time::Instant;

use futures_util::future::join_all;
use redis::aio::MultiplexedConnection;
use redis::cluster_async::ClusterConnection;
use redis::cluster_routing::RoutingInfo;
use redis::{AsyncConnectionConfig, Cmd, Value};

use crate::error::{Error, Result};

use super::super::conn::{redirection, Endpoint, CLUSTER_RETRIES};
use super::super::retry::{Failure, Next, IDLE_CHECK};
use super::super::tally::Tally;

/// A connection handle; clones share the connection.
#[derive(Clone)]
enum Conn {
    Single(MultiplexedConnection),
    /// A cluster connection that retries (for batches whose replay is harmless), and one
    /// that never re-sends (for the others).
    Cluster {
        any: ClusterConnection,
        once: ClusterConnection,
    },
}

/// A failed attempt, and whether its connection must be dropped.
type Failed = (Failure, bool);

impl Conn {
    /// Connects to the endpoint, within its connect timeout; every reply is awaited at most
    /// its I/O timeout.
    async fn open(endpoint: &Endpoint) -> Result<Conn> {
        endpoint.check_urls()?;
        if endpoint.is_cluster() {
            let any = endpoint.cluster_client()?.get_async_connection().await?;
            let once = endpoint
                .cluster_client_once()?
                .get_async_connection()
                .await?;
            return Ok(Conn::Cluster { any, once });
        }
        let (connect, io) = endpoint.timeouts();
        let config = AsyncConnectionConfig::new()
            .set_connection_timeout(Some(connect))
            .set_response_timeout(Some(io));
        let con = redis::Client::open(endpoint.urls()[0].as_str())?
            .get_multiplexed_async_connection_with_config(&config)
            .await?;
        Ok(Conn::Single(con))
    }

    /// Runs `cmds` and returns their replies in order: one pipeline on a server; on a
    /// cluster every command at once, each routed by its key. A reply that says the server
    /// cannot serve yet fails the attempt as a transient failure (one that ran nowhere if
    /// every command was refused while `LOADING`), any other error reply as an error.
    /// With `replay` false, on a cluster, no command is sent twice (see the module
    /// documentation).
    async fn run(&self, cmds: &[Cmd], replay: bool) -> Result<Vec<Value>, Failed> {
        if cmds.is_empty() {
            return Ok(Vec::new());
        }
        match self {
            Conn::Single(con) => run_single(con, cmds).await,
            Conn::Cluster { any, .. } if replay => run_cluster(any, cmds, false).await,
            Conn::Cluster { once, .. } => run_cluster(once, cmds, true).await,
        }
    }
}

/// [`Conn::run`] on one server: one pipeline, error replies read as values.
async fn run_single(
    con: &redis::aio::MultiplexedConnection,
    cmds: &[Cmd],
) -> Result<Vec<Value>, Failed> {
    let mut p = redis::pipe();
    for c in cmds {
        p.add_command(c.clone());
    }
    // Error replies as values, read like the sync session's streamed replies.
    let v: Vec<Value> = p
        .ignore_errors()
        .query_async(&mut con.clone())
        .await
        .map_err(|e| Failure::of(e.into()))?;
    if let Some(f) = Failure::refused(&v) {
        return Err((f, false));
    }
    match v.iter().find_map(|r| match r {
        Value::ServerError(e) => Some(Error::Redis(e.clone().into())),
        _ => None,
    }) {
        Some(error) => Err((
            Failure {
                error,
                maybe_sent: true,
            },
            false,
        )),
        None => Ok(v),
    }
}

/// [`Conn::run`] on a cluster: every command at once, each routed by its key. With
/// `follow`, on a connection without retries, each command follows its own redirections.
async fn run_cluster(
    con: &redis::cluster_async::ClusterConnection,
    cmds: &[Cmd],
    follow: bool,
) -> Result<Vec<Value>, Failed> {
    let replies = join_all(cmds.iter().map(|c| {
        let mut con = con.clone();
        async move {
            if follow {
                send_once(&mut con, c).await
            } else {
                c.query_async::<Value>(&mut con).await
            }
        }
    }))
    .await;
    if replies.iter().all(|r| r.is_ok()) {
        return Ok(replies.into_iter().flatten().collect());
    }
    // Some commands may have run while others failed: the attempt ran nowhere
    // only if none succeeded and none was refused but for `LOADING`.
    let any_ran = replies.iter().any(|r| r.is_ok());
    let failures: Vec<Failure> = replies
        .into_iter()
        .filter_map(|r| r.err())
        .map(|e| Failure::of(e.into()).0)
        .collect();
    let maybe_sent = any_ran || failures.iter().any(|f| f.maybe_sent);
    // Report a permanent error before a transient one: it is not retried.
    let first = failures
        .iter()
        .position(|f| !super::super::retry::transient(&f.error))
        .unwrap_or(0);
    let error = failures.into_iter().nth(first).map(|f| f.error);
    let error = error
        .unwrap_or_else(|| Error::ReportableBug("a failed cluster batch without an error".into()));
    // A cluster connection reconnects to its nodes by itself.
    Err((Failure { error, maybe_sent }, false))
}

/// Sends `cmd` on a cluster connection without retries: once, following `MOVED`/`ASK`
/// (the redirecting node did not run it; an `ASK` goes after an `ASKING`, in one pipeline
/// to the node) at most [`CLUSTER_RETRIES`] times. Any other failure is returned as it is:
/// the command may have run.
async fn send_once(con: &mut ClusterConnection, cmd: &Cmd) -> redis::RedisResult<Value> {
    let mut r = cmd.query_async::<Value>(con).await;
    for _ in 0..CLUSTER_RETRIES {
        let Some((to, ask)) = r.as_ref().err().and_then(redirection) else {
            break;
        };
        r = if ask {
            let mut p = redis::pipe();
            p.cmd("ASKING").add_command(cmd.clone());
            con.route_pipeline(p, 1, 1, to)
                .await
                .and_then(|mut v| v.pop().unwrap_or(Value::Nil).extract_error())
        } else {
            con.route_command(cmd.clone(), RoutingInfo::SingleNode(to))
                .await
                .and_then(Value::extract_error)
        };
    }
    r
}

/// The endpoint and its connection (none after a dropped connection to a single server,
/// until the next call connects again).
pub(crate) struct AsyncSession {
    endpoint: Endpoint,
    conn: Mutex<Option<Conn>>,
    /// When the session opened: a young cluster session waits out `CLUSTERDOWN` and
    /// `TRYAGAIN`, as the sync session does.
    opened: Instant,
    /// When the connection last answered.
    answered: Mutex<Instant>,
    /// What the handle did, for its metrics.
    pub(crate) tally: Tally,
}

/// Waits as `next` says, on a tokio timer: never parks a worker.
async fn pause(next: Next) {
    if let Next::After(d) = next {
        tokio::time::sleep(d).await;
    }
}

impl AsyncSession {
    /// Connects now, so a bad URL or a server that is down fails at open (after the
    /// endpoint's retry window, if it has one); a cluster still converging is waited for.
    pub(crate) async fn open(endpoint: &Endpoint) -> Result<AsyncSession> {
        let opened = Instant::now();
        let mut retry = endpoint.retries(opened, true);
        let conn = loop {
            match Conn::open(endpoint).await {
                Ok(c) => break c,
                Err(e) => pause(retry.next_open(e)?).await,
            }
        };
        Ok(AsyncSession {
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

    /// Runs `cmds` as one batch, again while the failure is transient and the endpoint's
    /// retry window lasts, with the sync session's rules (see `retry::Retry`). Only for
    /// batches whose replay is harmless: reads, bit sets whose answer is not read, writes of
    /// fixed content, scripts that remember their answer.
    pub(crate) async fn run(&self, cmds: Vec<Cmd>) -> Result<Vec<Value>> {
        self.retrying(&cmds, true).await
    }

    /// [`AsyncSession::run`] for a batch whose answer depends on the state it finds (an
    /// add's "new"): sent again only while it certainly did not reach Redis. A failure
    /// after it may have been sent is [`Error::RedisOutcomeUnknown`]: the caller finds out
    /// whether it ran, or reports it; it is never replayed blindly.
    pub(crate) async fn run_once(&self, cmds: Vec<Cmd>) -> Result<Vec<Value>> {
        self.retrying(&cmds, false).await
    }

    /// Runs one command.
    pub(crate) async fn one(&self, cmd: Cmd) -> Result<Value> {
        let mut v = self.run(vec![cmd]).await?;
        Ok(v.pop().unwrap_or(Value::Nil))
    }

    async fn retrying(&self, cmds: &[Cmd], replay: bool) -> Result<Vec<Value>> {
        if !replay && self.idle() {
            // A connection idle for a while may have been closed by a server that went
            // away since: a batch written into it would fail with an unknown outcome. A
            // `PING` tells first; if it fails, the batch goes out on a new connection.
            let current = self.current();
            if let Some(conn) = current {
                if conn.run(&[redis::cmd("PING")], true).await.is_err() {
                    self.forget();
                }
            }
        }
        let mut retry = self.endpoint.retries(self.opened, replay);
        loop {
            match self.attempt(cmds, replay).await {
                Ok(v) => {
                    *self.answered.lock().unwrap_or_else(|p| p.into_inner()) = Instant::now();
                    return Ok(v);
                }
                Err(f) => {
                    let next = retry.next(f)?;
                    self.tally.retried();
                    pause(next).await;
                }
            }
        }
    }

    /// One attempt on the current connection, made first if there is none.
    async fn attempt(&self, cmds: &[Cmd], replay: bool) -> Result<Vec<Value>, Failure> {
        let conn = match self.current() {
            Some(c) => c,
            None => {
                let c = Conn::open(&self.endpoint)
                    .await
                    .map_err(Failure::not_sent)?;
                *self.conn.lock().unwrap_or_else(|p| p.into_inner()) = Some(c.clone());
                c
            }
        };
        conn.run(cmds, replay).await.map_err(|(f, drop)| {
            if drop {
                self.forget();
            }
            f
        })
    }

    fn current(&self) -> Option<Conn> {
        self.conn.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }

    fn idle(&self) -> bool {
        let answered = *self.answered.lock().unwrap_or_else(|p| p.into_inner());
        answered.elapsed() > IDLE_CHECK
    }

    /// Drops a single server's connection that failed, so the next call makes a new one.
    /// A cluster connection reconnects to its nodes by itself.
    fn forget(&self) {
        let mut slot = self.conn.lock().unwrap_or_else(|p| p.into_inner());
        if matches!(*slot, Some(Conn::Single(_))) {
            *slot = None;
        }
    }
}

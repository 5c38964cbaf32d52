//! The async connection to a server or a cluster, shared by every call of a handle.
//!
//! One server: a redis-rs `MultiplexedConnection`, which pipelines the requests of every
//! task on one socket, so concurrent calls on one handle overlap instead of taking turns.
//! A cluster: redis-rs's async `ClusterConnection`, which routes each command by its key
//! to the master that serves it and follows `MOVED`/`ASK` redirections; the commands of a
//! batch are sent all at once and their replies awaited together (one round trip per
//! node). Nothing here blocks a thread: waits are tokio timers.

use std::sync::Mutex;
use std::time::Instant;

use futures_util::future::try_join_all;
use redis::aio::MultiplexedConnection;
use redis::cluster_async::ClusterConnection;
use redis::{AsyncConnectionConfig, Cmd, Value};

use crate::error::{Error, Result};

use super::super::conn::Endpoint;
use super::super::session::{converging, CONVERGE_PAUSE, CONVERGE_WAIT};

/// A connection handle; clones share the connection.
#[derive(Clone)]
enum Conn {
    Single(MultiplexedConnection),
    Cluster(ClusterConnection),
}

impl Conn {
    /// Connects to the endpoint, within its connect timeout; every reply is awaited at most
    /// its I/O timeout.
    async fn open(endpoint: &Endpoint) -> Result<Conn> {
        endpoint.check_urls()?;
        if endpoint.is_cluster() {
            let con = endpoint.cluster_client()?.get_async_connection().await?;
            return Ok(Conn::Cluster(con));
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
    /// cluster every command at once, each routed by its key. The first error fails the
    /// batch.
    async fn run(&self, cmds: &[Cmd]) -> redis::RedisResult<Vec<Value>> {
        if cmds.is_empty() {
            return Ok(Vec::new());
        }
        match self {
            Conn::Single(con) => {
                let mut p = redis::pipe();
                for c in cmds {
                    p.add_command(c.clone());
                }
                p.query_async(&mut con.clone()).await
            }
            Conn::Cluster(con) => {
                try_join_all(cmds.iter().map(|c| {
                    let mut con = con.clone();
                    async move { c.query_async::<Value>(&mut con).await }
                }))
                .await
            }
        }
    }
}

/// The endpoint and its connection (none after a dropped connection to a single server,
/// until the next call connects again).
pub(crate) struct AsyncSession {
    endpoint: Endpoint,
    conn: Mutex<Option<Conn>>,
    /// When the session opened: its first [`CONVERGE_WAIT`] covers the create or open that
    /// made it (later commands report a cluster that is down at once), as for the sync
    /// session.
    opened: Instant,
}

/// True if the connection to a single server is gone (the server restarted or closed it):
/// a timeout is not, the multiplexed connection stays in step after one.
fn dropped(e: &Error) -> bool {
    matches!(e, Error::Redis(e) if (e.is_connection_dropped() || e.is_io_error()) && !e.is_timeout())
}

impl AsyncSession {
    /// Connects now, so a bad URL or a server that is down fails at open; a cluster still
    /// converging is waited for (up to [`CONVERGE_WAIT`]).
    pub(crate) async fn open(endpoint: &Endpoint) -> Result<AsyncSession> {
        let opened = Instant::now();
        let conn = loop {
            match Conn::open(endpoint).await {
                Err(e) if endpoint.is_cluster() && converging(&e) => {
                    if opened.elapsed() >= CONVERGE_WAIT {
                        return Err(e);
                    }
                    tokio::time::sleep(CONVERGE_PAUSE).await;
                }
                r => break r?,
            }
        };
        Ok(AsyncSession {
            endpoint: endpoint.clone(),
            conn: Mutex::new(Some(conn)),
            opened,
        })
    }

    /// The endpoint this session talks to.
    pub(crate) fn endpoint(&self) -> &Endpoint {
        &self.endpoint
    }

    /// Runs `cmds` as one batch. As the sync session does: if the connection had dropped
    /// (a restarted server) it connects again and runs them once more (every command
    /// bloomsled sends is idempotent: reads, bit sets, writes of fixed content, scripts
    /// that remember their answer); while a young session's cluster converges
    /// (`CLUSTERDOWN`, `TRYAGAIN`), it waits and tries again.
    pub(crate) async fn run(&self, cmds: Vec<Cmd>) -> Result<Vec<Value>> {
        loop {
            let r = match self.run_on_current(&cmds).await {
                Err(e) if dropped(&e) => {
                    self.forget();
                    self.run_on_current(&cmds).await
                }
                r => r,
            };
            match r {
                Err(e)
                    if self.endpoint.is_cluster()
                        && converging(&e)
                        && self.opened.elapsed() < CONVERGE_WAIT =>
                {
                    tokio::time::sleep(CONVERGE_PAUSE).await;
                }
                r => return r,
            }
        }
    }

    /// Runs one command.
    pub(crate) async fn one(&self, cmd: Cmd) -> Result<Value> {
        let mut v = self.run(vec![cmd]).await?;
        Ok(v.pop().unwrap_or(Value::Nil))
    }

    async fn run_on_current(&self, cmds: &[Cmd]) -> Result<Vec<Value>> {
        let current = self.conn.lock().unwrap_or_else(|p| p.into_inner()).clone();
        let conn = match current {
            Some(c) => c,
            None => {
                let c = Conn::open(&self.endpoint).await?;
                *self.conn.lock().unwrap_or_else(|p| p.into_inner()) = Some(c.clone());
                c
            }
        };
        Ok(conn.run(cmds).await?)
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

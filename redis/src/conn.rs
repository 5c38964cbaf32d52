//! Where the filter lives: one Redis server or a Redis Cluster, and the connection to it.
//!
//! Both kinds run a batch of commands as a pipeline: to one server in one round trip; on a
//! cluster, the `redis` crate's cluster client splits it into one pipeline per master, sends
//! them all before reading any reply (one round trip per node, overlapped), and follows
//! `MOVED`/`ASK` redirections while slots migrate.
//!
//! **Nothing that must not be replayed is ever re-sent by the `redis` crate.** Its cluster
//! client re-sends a single command after an I/O error or a timeout (it reconnects and
//! sends again, up to its `retries`): harmless for a lookup, wrong for an add, whose
//! replay answers "present" for the keys its lost first run set. Its cluster pipelines are
//! never re-sent after an I/O error. So a batch that must not be replayed (an add) goes as
//! a pipeline on the usual connection, and any command of it that must go alone (one
//! redirected, or every command while a slot migrates) goes on a second connection made
//! with no retries ([`Endpoint::cluster_client_once`]), which follows `MOVED`/`ASK` itself:
//! a redirection says the node did not run the command, so following it is safe. Any
//! other failure goes to the session's rules (`retry`): a lookup tells whether the add ran.

use std::time::{Duration, Instant};

use redis::cluster::{ClusterClientBuilder, ClusterConnection};
use redis::cluster_routing::{RoutingInfo, SingleNodeRoutingInfo};
use redis::{Cmd, ErrorKind, ServerErrorKind, Value};

use crate::error::{Error, Result};

use super::resp::{Packer, Sink, Words};
use super::retry::{loading, refused_whole, Resend, Retry};

/// Default time allowed to establish a connection.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);
/// Default time allowed for one reply (or one pipeline's replies).
const IO_TIMEOUT: Duration = Duration::from_secs(10);

/// Default time a call keeps retrying while Redis is unreachable, restarting or failing over
/// (none: one reconnect, then the error).
const RETRY_FOR: Duration = Duration::ZERO;

/// How long a cluster connection sends batches that cannot be replayed one command at a
/// time after a pipeline lost replies to a redirection (see `cluster_run`).
const CAREFUL_FOR: Duration = Duration::from_secs(60);

/// Retries of one command on a cluster (redirections, refreshed slot maps, busy nodes).
pub(crate) const CLUSTER_RETRIES: u32 = 4;

/// A Redis server or Redis Cluster to keep shared filters on, with connection timeouts.
///
/// ```
/// use bloomsled_redis::Endpoint;
/// use std::time::Duration;
/// let single = Endpoint::url("redis://127.0.0.1:6379/");
/// let cluster = Endpoint::cluster(["redis://10.0.0.1:7000", "redis://10.0.0.2:7000"])
///     .io_timeout(Duration::from_secs(2));
/// assert!(!single.is_cluster() && cluster.is_cluster());
/// ```
#[derive(Debug, Clone)]
pub struct Endpoint {
    urls: Vec<String>,
    cluster: bool,
    connect_timeout: Duration,
    io_timeout: Duration,
    retry_for: Duration,
}

impl Endpoint {
    /// One Redis server, e.g. `redis://127.0.0.1:6379/0` (or `rediss://`, `redis+unix://`).
    pub fn url(url: impl Into<String>) -> Self {
        Endpoint {
            urls: vec![url.into()],
            cluster: false,
            connect_timeout: CONNECT_TIMEOUT,
            io_timeout: IO_TIMEOUT,
            retry_for: RETRY_FOR,
        }
    }

    /// A Redis Cluster, reached through any of these nodes' URLs.
    pub fn cluster<I, S>(urls: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        Endpoint {
            urls: urls.into_iter().map(Into::into).collect(),
            cluster: true,
            ..Self::url("")
        }
    }

    /// Sets how long connecting may take (default 5 s).
    pub fn connect_timeout(mut self, d: Duration) -> Self {
        self.connect_timeout = d;
        self
    }

    /// Sets how long a reply may take (default 10 s); a slower server gives an error, not a
    /// hang.
    pub fn io_timeout(mut self, d: Duration) -> Self {
        self.io_timeout = d;
        self
    }

    /// Sets how long a call keeps retrying, with growing pauses (50 ms doubling up to 1 s),
    /// while Redis cannot be reached or answers that it cannot serve yet (connection
    /// refused or dropped, a timeout, `LOADING` after a restart, `CLUSTERDOWN`, `TRYAGAIN`,
    /// `MASTERDOWN`, `READONLY` during a failover). Default zero: one reconnect, then the
    /// error. Past this time the call returns the last error.
    ///
    /// Only batches whose replay is harmless are sent again: lookups, the filter's own
    /// idempotent writes, removes (their script remembers its answer). An add reports
    /// whether each key was new, and its replay would report "present" for the keys the
    /// lost attempt set: so an add that may have reached Redis is re-sent only once a
    /// lookup shows it did not run (some key of each of its commands still absent);
    /// otherwise the call fails with [`crate::Error::RedisOutcomeUnknown`] instead of
    /// guessing.
    ///
    /// ```
    /// use bloomsled_redis::Endpoint;
    /// use std::time::Duration;
    /// let ep = Endpoint::url("redis://127.0.0.1:6379/").retry_for(Duration::from_secs(60));
    /// assert_eq!(ep.retry_window(), Duration::from_secs(60));
    /// ```
    pub fn retry_for(mut self, d: Duration) -> Self {
        self.retry_for = d;
        self
    }

    /// How long a call keeps retrying (see [`Endpoint::retry_for`]).
    pub fn retry_window(&self) -> Duration {
        self.retry_for
    }

    /// True for a Redis Cluster.
    pub fn is_cluster(&self) -> bool {
        self.cluster
    }

    /// The retries of a call on a session to this endpoint opened at `opened` (see
    /// [`Retry::new`]).
    pub(crate) fn retries(&self, opened: Instant, replay: bool) -> Retry {
        Retry::new(self.retry_for, self.cluster, opened, replay)
    }

    /// The resends of a batch sent through a session to this endpoint (see [`Resend`]).
    pub(crate) fn resends(&self) -> Resend {
        Resend::new(self.retry_for)
    }

    /// The URLs given.
    pub fn urls(&self) -> &[String] {
        &self.urls
    }

    /// Opens a connection.
    pub(crate) fn connect(&self) -> Result<Conn> {
        self.check_urls()?;
        if self.cluster {
            let con = self.cluster_client()?.get_connection()?;
            Ok(Conn::Cluster(Box::new(Cluster {
                con,
                once: None,
                client_once: self.cluster_client_once()?,
                careful: None,
            })))
        } else {
            let con = redis::Client::open(self.urls[0].as_str())?
                .get_connection_with_timeout(self.connect_timeout)?;
            con.set_read_timeout(Some(self.io_timeout))?;
            con.set_write_timeout(Some(self.io_timeout))?;
            Ok(Conn::Single(con))
        }
    }
}

impl Endpoint {
    /// A URL-less endpoint is an error, not a connection attempt to nowhere.
    pub(crate) fn check_urls(&self) -> Result<()> {
        if self.urls.is_empty() || self.urls.iter().any(|u| u.is_empty()) {
            return Err(Error::config("a Redis endpoint needs at least one URL"));
        }
        Ok(())
    }

    /// The cluster client both the sync and the async connections are made by. A few
    /// retries with short waits: enough to follow MOVED/ASK and a slot map refresh, while
    /// a dead master gives an error within seconds (the crate's default, 16 retries with
    /// exponential waits, could block for minutes).
    pub(crate) fn cluster_client(&self) -> Result<redis::cluster::ClusterClient> {
        Ok(ClusterClientBuilder::new(self.urls.clone())
            .connection_timeout(self.connect_timeout)
            .response_timeout(self.io_timeout)
            .retries(CLUSTER_RETRIES)
            .min_retry_wait(50)
            .max_retry_wait(1000)
            .build()?)
    }

    /// A cluster client that never sends a command twice: no retries, so an I/O error, a
    /// timeout or a redirection comes back as the error it is. For the commands of batches
    /// that must not be replayed; their redirections are followed by the caller
    /// ([`redirection`]).
    pub(crate) fn cluster_client_once(&self) -> Result<redis::cluster::ClusterClient> {
        Ok(ClusterClientBuilder::new(self.urls.clone())
            .connection_timeout(self.connect_timeout)
            .response_timeout(self.io_timeout)
            .retries(0)
            .build()?)
    }

    /// How long connecting may take, and one reply (the async connection's settings).
    #[cfg(feature = "tokio")]
    pub(crate) fn timeouts(&self) -> (Duration, Duration) {
        (self.connect_timeout, self.io_timeout)
    }
}

/// An open connection to a server or a cluster.
pub(crate) enum Conn {
    Single(redis::Connection),
    Cluster(Box<Cluster>),
}

/// The connections to a cluster.
pub(crate) struct Cluster {
    /// Pipelines, and the single commands of batches whose replay is harmless (the `redis`
    /// crate follows their redirections and retries them).
    con: ClusterConnection,
    /// Single commands of batches that must not be replayed: never re-sent (made when
    /// first needed; dropped after a `MOVED` or an error, so the next one reads the new
    /// slot map).
    once: Option<ClusterConnection>,
    client_once: redis::cluster::ClusterClient,
    /// Until when batches that cannot be replayed go one command at a time (set when a
    /// pipeline lost replies to a redirection: a slot is migrating).
    careful: Option<Instant>,
}

impl Conn {
    /// Runs `cmds` as one pipeline (one round trip per node) and returns their replies in
    /// order. The first error reply fails the whole batch.
    ///
    /// With `replay` false (an add, whose answer depends on the state it finds), a cluster
    /// pipeline that ran in part is not run again in full: its outcome is
    /// [`Error::RedisOutcomeUnknown`].
    pub(crate) fn run(&mut self, cmds: Vec<Cmd>, replay: bool) -> Result<Vec<Value>> {
        if cmds.is_empty() {
            return Ok(Vec::new());
        }
        let n = cmds.len();
        let r = match self {
            Conn::Single(con) => {
                let mut p = redis::pipe();
                for c in cmds {
                    p.add_command(c);
                }
                p.query(con).map_err(Error::from)
            }
            Conn::Cluster(c) => c.run(cmds, replay),
        };
        match r {
            // A pipeline error reads as its first error: `LOADING` from one master says
            // nothing of the commands other masters ran. Only a batch refused whole did not
            // run; any other is not sent again blindly.
            Err(Error::Redis(e)) if !replay && loading(&e) && !refused_whole(&e, n) => {
                Err(Error::RedisOutcomeUnknown {
                    why: format!("some commands of the batch may have run: {e}"),
                })
            }
            r => r,
        }
    }

    /// True if the connection answers a `PING`; on a cluster, if every node connection it
    /// holds does (`PING` has no key: a cluster pipeline refuses it).
    pub(crate) fn check(&mut self) -> bool {
        match self {
            Conn::Single(con) => redis::cmd("PING").query::<Value>(con).is_ok(),
            Conn::Cluster(c) => c.con.check_connection(),
        }
    }
}

impl Conn {
    /// Runs the commands `write` writes as one pipeline to a single server, sent while they
    /// are being written (every [`SEND_BYTES`], so the server works on the first commands
    /// while the client writes the next), then reads every reply; `None` on a cluster, whose
    /// commands must be routed one by one (use [`Conn::run`]).
    pub(crate) fn run_streamed(
        &mut self,
        write: &dyn Fn(&mut dyn Sink),
    ) -> Option<redis::RedisResult<Vec<Value>>> {
        let Conn::Single(con) = self else {
            return None;
        };
        let mut s = Streamer {
            p: Packer::default(),
            con,
            failed: None,
        };
        write(&mut s);
        let Streamer { p, con, failed } = s;
        if let Some(e) = failed {
            return Some(Err(e));
        }
        Some((|| {
            if !p.buf.is_empty() {
                con.send_packed_command(&p.buf)?;
            }
            (0..p.count).map(|_| con.recv_response()).collect()
        })())
    }
}

/// Bytes of commands written before they are sent.
const SEND_BYTES: usize = 32 << 10;

/// A RESP writer that sends what it has written at command boundaries.
struct Streamer<'a> {
    p: Packer,
    con: &'a mut redis::Connection,
    failed: Option<redis::RedisError>,
}

impl Sink for Streamer<'_> {
    fn command(&mut self, args: usize) {
        if self.p.buf.len() >= SEND_BYTES && self.failed.is_none() {
            if let Err(e) = self.con.send_packed_command(&self.p.buf) {
                self.failed = Some(e);
            }
            self.p.buf.clear();
        }
        self.p.command(args);
    }

    fn arg(&mut self, bytes: &[u8]) {
        self.p.arg(bytes);
    }

    fn uint(&mut self, v: u64) {
        self.p.uint(v);
    }

    fn words(&mut self, w: &Words) {
        Sink::words(&mut self.p, w);
    }
}

impl Cluster {
    /// Runs a pipeline on a cluster. The `redis` crate's sync cluster pipeline sends one
    /// pipeline per node but does not follow `ASK`/`MOVED` replies inside it (it fails the
    /// whole batch, keeping no other reply). So when every failure is a redirection (a slot
    /// migrating or just moved), the failed commands are run one by one, following their
    /// redirections, and the others are run again as a pipeline when `replay` allows it. A
    /// replayed `BITFIELD` of an add would report the keys the first run set as already
    /// present, a guess: so with `replay` false a partly run pipeline is
    /// [`Error::RedisOutcomeUnknown`] (the add then looks its keys up to tell), and the
    /// commands run one by one go on the connection that never re-sends ([`Cluster::send_once`]).
    ///
    /// After such a loss, for [`CAREFUL_FOR`], batches that cannot be replayed are sent one
    /// command at a time (each follows its own redirection and keeps its reply): a slot
    /// migration makes every pipeline over it lose replies until it ends.
    fn run(&mut self, cmds: Vec<Cmd>, replay: bool) -> Result<Vec<Value>> {
        if !replay && self.careful.is_some_and(|until| Instant::now() < until) {
            return cmds.iter().map(|c| self.send_once(c)).collect();
        }
        let mut p = redis::cluster::cluster_pipe();
        for c in &cmds {
            p.add_command(c.clone());
        }
        let err = match p.query::<Vec<Value>>(&mut self.con) {
            Ok(v) => return Ok(v),
            Err(e) => e,
        };
        let redirected = |e: &redis::ServerError| {
            matches!(
                e.kind(),
                Some(ServerErrorKind::Ask | ServerErrorKind::Moved | ServerErrorKind::TryAgain)
            )
        };
        let failed: Vec<usize> = match err.clone().into_server_errors() {
            Some(list) if list.iter().all(|(_, e)| redirected(e)) => {
                list.iter().map(|(i, _)| *i).collect()
            }
            _ => return Err(err.into()),
        };
        let mut rest = redis::cluster::cluster_pipe();
        let others: Vec<usize> = (0..cmds.len()).filter(|i| !failed.contains(i)).collect();
        if !replay && !others.is_empty() {
            self.careful = Some(Instant::now() + CAREFUL_FOR);
            return Err(Error::RedisOutcomeUnknown {
                why: format!(
                    "{} of {} commands were redirected and the others' replies were lost: {err}",
                    failed.len(),
                    cmds.len()
                ),
            });
        }
        for &i in &others {
            rest.add_command(cmds[i].clone());
        }
        let mut out = vec![Value::Nil; cmds.len()];
        if !others.is_empty() {
            for (i, v) in others.iter().zip(rest.query::<Vec<Value>>(&mut self.con)?) {
                out[*i] = v;
            }
        }
        for i in failed {
            out[i] = if replay {
                cmds[i].query(&mut self.con)?
            } else {
                self.send_once(&cmds[i])?
            };
        }
        Ok(out)
    }

    /// Runs one command of a batch that must not be replayed: sent once, on the connection
    /// without retries, following `MOVED`/`ASK` (the redirecting node did not run it) at
    /// most [`CLUSTER_RETRIES`] times. Any other failure is returned as it is.
    fn send_once(&mut self, cmd: &Cmd) -> Result<Value> {
        let con = match &mut self.once {
            Some(c) => c,
            None => self.once.insert(self.client_once.get_connection()?),
        };
        let mut r = cmd.query::<Value>(con);
        let mut moved = false;
        for _ in 0..CLUSTER_RETRIES {
            let Some((to, ask)) = r.as_ref().err().and_then(redirection) else {
                break;
            };
            moved |= !ask;
            let node = RoutingInfo::SingleNode(to);
            r = (|| {
                if ask {
                    con.route_command(&redis::cmd("ASKING"), node.clone())?
                        .extract_error()?;
                }
                con.route_command(cmd, node)?.extract_error()
            })();
        }
        if moved || r.is_err() {
            // Its slot map may be stale (a slot moved, a failover) or a node connection
            // broken: the next command connects again and reads a new one.
            self.once = None;
        }
        Ok(r?)
    }
}

/// Where a `MOVED` or `ASK` error sends its command, and whether it is an `ASK` (the
/// command goes after an `ASKING`); none for any other error.
pub(crate) fn redirection(e: &redis::RedisError) -> Option<(SingleNodeRoutingInfo, bool)> {
    let ask = match e.kind() {
        ErrorKind::Server(ServerErrorKind::Ask) => true,
        ErrorKind::Server(ServerErrorKind::Moved) => false,
        _ => return None,
    };
    let (node, _slot) = e.redirect_node()?;
    let (host, port) = node.rsplit_once(':')?;
    let to = SingleNodeRoutingInfo::ByAddress {
        host: host.to_owned(),
        port: port.parse().ok()?,
    };
    Some((to, ask))
}

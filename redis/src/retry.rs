//! When a failed Redis call is tried again, and when it is not: the decisions, without the
//! transport.
//!
//! The sync session (`session`) and the async one (`aio::session`) send their commands in
//! different ways, a blocking socket and a tokio connection, but fail the same ways, so what
//! a failure means is decided here, once, for both:
//!
//! - [`Failure::of`]: whether a failed attempt may have reached the server (only a
//!   connection never made, or a server that refused every command while `LOADING`, did
//!   not), and whether its connection must be dropped;
//! - [`Failure::refused`]: an attempt whose replies say the server cannot serve yet;
//! - [`Retry::next`]: after a failure, try again at once (one reconnect after a dropped
//!   connection), after a pause (50 ms doubling to 1 s, within the endpoint's retry window,
//!   or a young cluster converging), or stop: with the error, or with
//!   [`Error::RedisOutcomeUnknown`] for a batch that must not be replayed and may have run;
//! - [`Resend`]: an add whose outcome is unknown is sent again only once a lookup shows it
//!   did not run.
//!
//! The transports only act on the answers: the sync one sleeps its thread, the async one
//! awaits a tokio timer.

use std::time::{Duration, Instant};

use redis::{ErrorKind, ServerErrorKind, Value};

use crate::error::{Error, Result};

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
/// with a `PING` first: a connection idle for a while may have been closed by a server that
/// went away since, and a batch written into it would fail with an unknown outcome.
pub(crate) const IDLE_CHECK: Duration = Duration::from_millis(100);

/// A failed attempt, and whether its commands may have reached the server.
#[derive(Debug)]
pub(crate) struct Failure {
    pub error: Error,
    pub maybe_sent: bool,
}

impl Failure {
    /// A failure before anything was sent (the connection could not be made).
    pub(crate) fn not_sent(error: Error) -> Failure {
        Failure {
            error,
            maybe_sent: false,
        }
    }

    /// The failure of an attempt that returned `e`, and whether its connection must be
    /// dropped (a half-read reply would desynchronize the next one). It may have reached
    /// the server unless the server refused it while loading.
    pub(crate) fn of(e: Error) -> (Failure, bool) {
        let (drop, maybe_sent) = match &e {
            Error::Redis(re) | Error::Timeout(re) => (
                re.is_connection_dropped() || re.is_io_error() || re.is_timeout(),
                !loading(re),
            ),
            _ => (false, true),
        };
        (
            Failure {
                error: e,
                maybe_sent,
            },
            drop,
        )
    }

    /// The failure of an attempt whose replies (error replies kept as values) say that the
    /// server cannot serve yet; none if no reply does. It ran nowhere if every command got
    /// `LOADING`.
    pub(crate) fn refused(replies: &[Value]) -> Option<Failure> {
        let error = replies.iter().find_map(|v| match v {
            Value::ServerError(e) => {
                let e = Error::Redis(e.clone().into());
                transient(&e).then_some(e)
            }
            _ => None,
        })?;
        let all_loading = replies.iter().all(|r| {
            matches!(r, Value::ServerError(e)
                if matches!(e.kind(), Some(ServerErrorKind::BusyLoading)))
        });
        Some(Failure {
            error,
            maybe_sent: !all_loading,
        })
    }
}

/// True for a failure that may pass: the connection (refused, dropped, timed out) or a
/// server that cannot serve yet (`LOADING` its data after a restart, `CLUSTERDOWN`,
/// `TRYAGAIN`, `MASTERDOWN`, `READONLY` while a failover settles).
pub(crate) fn transient(e: &Error) -> bool {
    let (Error::Redis(e) | Error::Timeout(e)) = e else {
        return false;
    };
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
pub(crate) fn dropped(e: &Error) -> bool {
    matches!(e, Error::Redis(e) if (e.is_connection_dropped() || e.is_io_error()) && !e.is_timeout())
}

/// True for `LOADING`: the server refused the command while it loads its data, so it ran
/// nowhere. (Of a pipeline's error, this reads its first error only: see [`refused_whole`].)
pub(crate) fn loading(e: &redis::RedisError) -> bool {
    matches!(e.kind(), ErrorKind::Server(ServerErrorKind::BusyLoading))
}

/// True if `e`, the error of a pipeline of `commands` commands, says that every one of
/// them was refused with `LOADING` (so none ran). A pipeline's error keeps the error
/// replies only: on a cluster one master may answer `LOADING` while the others run their
/// commands.
pub(crate) fn refused_whole(e: &redis::RedisError, commands: usize) -> bool {
    e.clone()
        .into_server_errors()
        .is_some_and(|list| refused_all(&list, commands))
}

fn refused_all(list: &[(usize, redis::ServerError)], commands: usize) -> bool {
    list.len() == commands
        && list
            .iter()
            .all(|(_, e)| matches!(e.kind(), Some(ServerErrorKind::BusyLoading)))
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

/// What to do after a failed attempt.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Next {
    /// Try again at once.
    Now,
    /// Try again after this pause.
    After(Duration),
}

/// The retries of one call: started when the call is, asked after each failed attempt.
#[derive(Debug)]
pub(crate) struct Retry {
    start: Instant,
    pause: Duration,
    reconnected: bool,
    window: Duration,
    /// A cluster session young enough to wait out `CLUSTERDOWN`/`TRYAGAIN`.
    converging_until: Option<Instant>,
    replay: bool,
}

impl Retry {
    /// The retries of a call on a session opened at `opened` to an endpoint whose retry
    /// window is `window` (`Endpoint::retry_window`), a cluster if `cluster`. With `replay`
    /// false (a batch whose answer depends on the state it finds, an add's "new"), a
    /// failure after the batch may have reached Redis ends the call with
    /// [`Error::RedisOutcomeUnknown`].
    pub(crate) fn new(window: Duration, cluster: bool, opened: Instant, replay: bool) -> Retry {
        Retry {
            start: Instant::now(),
            pause: FIRST_PAUSE,
            reconnected: false,
            window,
            converging_until: cluster.then(|| opened + CONVERGE_WAIT),
            replay,
        }
    }

    /// After a failed attempt: when to try again, or the error that ends the call. A
    /// transient failure is tried again, a dropped connection (a server restarted since the
    /// last call) at once the first time, then with growing pauses while the retry window
    /// lasts; a young cluster's `CLUSTERDOWN`/`TRYAGAIN` every [`CONVERGE_PAUSE`].
    pub(crate) fn next(&mut self, f: Failure) -> Result<Next> {
        if !transient(&f.error) || matches!(f.error, Error::RedisOutcomeUnknown { .. }) {
            return Err(f.error);
        }
        if f.maybe_sent && !self.replay {
            return Err(Error::RedisOutcomeUnknown {
                why: f.error.to_string(),
            });
        }
        if converging(&f.error) && self.converging_until.is_some_and(|t| Instant::now() < t) {
            return Ok(Next::After(CONVERGE_PAUSE));
        }
        if !self.reconnected && dropped(&f.error) {
            self.reconnected = true;
            return Ok(Next::Now);
        }
        self.backoff(f.error)
    }

    /// After a failed connect at open: a converging cluster is waited for (up to
    /// [`CONVERGE_WAIT`] or the retry window, the longer), an unreachable server within the
    /// retry window.
    pub(crate) fn next_open(&mut self, e: Error) -> Result<Next> {
        if self.converging_until.is_some() && converging(&e) {
            if self.start.elapsed() >= CONVERGE_WAIT.max(self.window) {
                return Err(e);
            }
            return Ok(Next::After(CONVERGE_PAUSE));
        }
        if !transient(&e) {
            return Err(e);
        }
        self.backoff(e)
    }

    /// The next pause, if it ends within the retry window; else `e`.
    fn backoff(&mut self, e: Error) -> Result<Next> {
        if self.start.elapsed() + self.pause > self.window {
            return Err(e);
        }
        let pause = self.pause;
        self.pause = (self.pause * 2).min(MAX_PAUSE);
        Ok(Next::After(pause))
    }
}

/// The resends of one add batch whose outcome was unknown (see [`Retry::new`] with `replay`
/// false). A `BITFIELD` sets all its cells or none, so a lookup that finds, in every
/// command of the batch, a key whose cells are not all set proves that none of them ran:
/// then the batch is sent again, and its answer is exact. If the lookup cannot tell, or the
/// retry window has passed since the first resend, the add's outcome is unknown.
#[derive(Debug)]
pub(crate) struct Resend {
    start: Instant,
    window: Duration,
    resent: bool,
}

impl Resend {
    /// The resends of a batch sent through a session to an endpoint whose retry window is
    /// `window`.
    pub(crate) fn new(window: Duration) -> Resend {
        Resend {
            start: Instant::now(),
            window,
            resent: false,
        }
    }

    /// After an attempt whose outcome is unknown (`why`) and the lookup that followed it:
    /// `Ok` to send the batch again, or [`Error::RedisOutcomeUnknown`].
    pub(crate) fn again(&mut self, may_have_run: bool, why: String) -> Result<()> {
        if may_have_run || (self.resent && self.start.elapsed() > self.window) {
            return Err(Error::RedisOutcomeUnknown { why });
        }
        self.resent = true;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn io(kind: std::io::ErrorKind) -> Error {
        Error::Redis(std::io::Error::new(kind, "test").into())
    }

    /// An error reply as the server sends it, e.g. `LOADING ...`.
    fn reply(line: &str) -> Value {
        redis::parse_redis_value(format!("-{line}\r\n").as_bytes()).unwrap()
    }

    fn server(line: &str) -> Error {
        match reply(line) {
            Value::ServerError(e) => Error::Redis(e.into()),
            other => panic!("not an error reply: {other:?}"),
        }
    }

    fn failure(error: Error, maybe_sent: bool) -> Failure {
        Failure { error, maybe_sent }
    }

    #[test]
    fn a_replayable_batch_reconnects_once_then_backs_off_within_the_window() {
        let mut r = Retry::new(Duration::from_millis(500), false, Instant::now(), true);
        let dropped = || failure(io(std::io::ErrorKind::ConnectionReset), true);
        assert_eq!(r.next(dropped()).unwrap(), Next::Now);
        let pauses: Vec<Duration> = (0..3)
            .map(|_| match r.next(dropped()).unwrap() {
                Next::After(d) => d,
                Next::Now => panic!("reconnects at once only once"),
            })
            .collect();
        assert_eq!(pauses, [50, 100, 200].map(Duration::from_millis));
        // 350 ms of pauses asked for; the next (400 ms) would end past the window.
        std::thread::sleep(Duration::from_millis(150));
        assert!(matches!(r.next(dropped()), Err(Error::Redis(_))));
    }

    #[test]
    fn an_add_that_may_have_run_is_unknown_and_one_that_did_not_is_retried() {
        let mut r = Retry::new(Duration::from_secs(30), false, Instant::now(), false);
        let refused = io(std::io::ErrorKind::ConnectionRefused);
        // Refused: nothing was sent, so even an add is tried again.
        assert!(r.next(failure(refused, false)).is_ok());
        let loading = server("LOADING Redis is loading the dataset in memory");
        let (f, _) = Failure::of(loading);
        assert!(!f.maybe_sent);
        assert!(matches!(r.next(f), Ok(Next::After(_))));
        let (f, drop) = Failure::of(io(std::io::ErrorKind::ConnectionReset));
        assert!(f.maybe_sent && drop);
        assert!(matches!(r.next(f), Err(Error::RedisOutcomeUnknown { .. })));
    }

    #[test]
    fn no_window_means_one_reconnect_then_the_error_and_permanent_errors_stop_at_once() {
        let mut r = Retry::new(Duration::ZERO, false, Instant::now(), true);
        let reset = || failure(io(std::io::ErrorKind::ConnectionReset), true);
        assert_eq!(r.next(reset()).unwrap(), Next::Now);
        assert!(r.next(reset()).is_err());
        let mut r = Retry::new(Duration::from_secs(30), false, Instant::now(), true);
        let wrong = server("ERR wrong number of arguments");
        assert!(r.next(failure(wrong, true)).is_err());
    }

    #[test]
    fn a_young_cluster_is_waited_for_an_old_one_is_not() {
        let down = || failure(server("CLUSTERDOWN The cluster is down"), false);
        let mut r = Retry::new(Duration::ZERO, true, Instant::now(), true);
        assert_eq!(r.next(down()).unwrap(), Next::After(CONVERGE_PAUSE));
        let mut r = Retry::new(Duration::ZERO, true, Instant::now() - CONVERGE_WAIT, true);
        assert!(r.next(down()).is_err());
    }

    #[test]
    fn replies_refused_while_loading_ran_nowhere_unless_some_ran() {
        let loading = reply("LOADING Redis is loading the dataset in memory");
        let f = Failure::refused(&[loading.clone(), loading.clone()]).unwrap();
        assert!(!f.maybe_sent);
        let f = Failure::refused(&[Value::Int(1), loading]).unwrap();
        assert!(f.maybe_sent);
        assert!(Failure::refused(&[Value::Int(1)]).is_none());
    }

    #[test]
    fn a_pipeline_refused_while_loading_ran_nowhere_only_if_every_command_was() {
        let loading = || match reply("LOADING Redis is loading the dataset in memory") {
            Value::ServerError(e) => e,
            other => panic!("{other:?}"),
        };
        assert!(refused_all(&[(0, loading()), (1, loading())], 2));
        // One master loading, the other ran its command.
        assert!(!refused_all(&[(1, loading())], 2));
        let moved = match reply("MOVED 3999 127.0.0.1:6381") {
            Value::ServerError(e) => e,
            other => panic!("{other:?}"),
        };
        assert!(!refused_all(&[(0, loading()), (1, moved)], 2));
        let single: redis::RedisError = loading().into();
        assert!(refused_whole(&single, 1) && !refused_whole(&single, 3));
    }

    #[test]
    fn an_unknown_add_is_resent_only_when_the_lookup_says_it_did_not_run() {
        let mut s = Resend::new(Duration::ZERO);
        assert!(matches!(
            s.again(true, "lost".into()),
            Err(Error::RedisOutcomeUnknown { .. })
        ));
        assert!(s.again(false, "lost".into()).is_ok());
        std::thread::sleep(Duration::from_millis(2));
        assert!(matches!(
            s.again(false, "lost".into()),
            Err(Error::RedisOutcomeUnknown { .. })
        ));
    }
}

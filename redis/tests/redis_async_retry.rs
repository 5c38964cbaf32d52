//! The async shared filter and window when Redis goes away: the sync filter's retry rules
//! (tests/redis_retry.rs), kept by the async types. A Redis killed (`kill -9`, AOF on) and
//! started again with its data: calls wait within the endpoint's retry window and answer;
//! an add whose reply was lost is never answered by a blind replay (which would call a new
//! key "present"): it is new, or `RedisOutcomeUnknown`. Past the window a call is an error,
//! never an answer; a Redis restarted empty is `SharedFilterLost`.
#![cfg(all(feature = "server-tests", feature = "tokio"))]

mod redis_support;

use std::future::Future;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use bloomsled::FilterConfig;
use bloomsled_redis::Error;
use bloomsled_redis::{
    AsyncSharedFilter, AsyncSharedWindow, Endpoint, SharedFilter, SharedWindowConfig,
};
use redis_support::relay::Relay;
use redis_support::Server;
use tokio::runtime::Runtime;

fn runtime() -> Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap()
}

fn key(i: usize) -> Vec<u8> {
    format!("https://example.com/page/{i}").into_bytes()
}

/// Kills the server, runs `during` on `rt` while it is down, and starts the server again
/// with its data `after` later, from another thread.
fn while_down<T>(
    rt: &Runtime,
    s: &mut Server,
    after: Duration,
    during: impl Future<Output = T>,
) -> T {
    s.kill();
    std::thread::scope(|scope| {
        scope.spawn(|| {
            std::thread::sleep(after);
            s.start_again();
        });
        rt.block_on(during)
    })
}

/// Tasks adding distinct new keys while the server is killed and started again, five
/// times: each batch answers "new" for every key or fails with `RedisOutcomeUnknown`;
/// never "present" (what a blind replay of an add that had run answers) and never a
/// connection error (the retry window covers the outage).
#[test]
fn async_adds_in_flight_during_kills_are_new_or_unknown_never_present() {
    require_redis!();
    let mut s = Server::start_persistent();
    let rt = runtime();
    let ep = Endpoint::url(s.url()).retry_for(Duration::from_secs(30));
    let f = Arc::new(
        rt.block_on(AsyncSharedFilter::create(
            &ep,
            "inflight",
            &FilterConfig::new(1_000_000),
        ))
        .unwrap(),
    );
    let stop = Arc::new(AtomicBool::new(false));
    let tasks: Vec<_> = (0..8)
        .map(|t| {
            let (f, stop) = (f.clone(), stop.clone());
            rt.spawn(async move {
                let (mut new, mut unknown) = (0usize, 0usize);
                let mut i = 0;
                while !stop.load(Ordering::Relaxed) {
                    let batch: Vec<Vec<u8>> =
                        (0..4).map(|j| key(t * 100_000_000 + i * 4 + j)).collect();
                    i += 1;
                    let r = if i % 2 == 0 {
                        f.insert_many(&batch).await
                    } else {
                        f.insert(&batch[0]).await.map(|b| vec![b])
                    };
                    match r {
                        Ok(a) => {
                            assert!(a.iter().all(|&b| b), "a new key answered present: {a:?}");
                            new += 1;
                        }
                        Err(Error::RedisOutcomeUnknown { .. }) => unknown += 1,
                        Err(e) => panic!("within the retry window: {e}"),
                    }
                }
                (new, unknown)
            })
        })
        .collect();
    s.blink(5, Duration::from_millis(300));
    std::thread::sleep(Duration::from_millis(300));
    stop.store(true, Ordering::Relaxed);
    let (mut new, mut unknown) = (0, 0);
    for t in tasks {
        let (n, u) = rt.block_on(t).unwrap();
        new += n;
        unknown += u;
    }
    eprintln!("{new} adds answered new, {unknown} unknown");
    assert!(new > 0);
}

#[test]
fn async_calls_made_while_redis_restarts_with_its_data_wait_and_answer() {
    require_redis!();
    let mut s = Server::start_persistent();
    let rt = runtime();
    let ep = Endpoint::url(s.url()).retry_for(Duration::from_secs(30));
    // One shard: an add is one `BITFIELD`, so one key found absent proves it did not run.
    let one_shard = bloomsled_redis::SharedOptions {
        shards: Some(1),
        ..Default::default()
    };
    let f = rt
        .block_on(AsyncSharedFilter::create_with(
            &ep,
            "retry",
            &FilterConfig::new(10_000),
            &one_shard,
        ))
        .unwrap();
    let old: Vec<Vec<u8>> = (0..500).map(key).collect();
    assert!(rt.block_on(f.insert_many(&old)).unwrap().iter().all(|&b| b));

    // An add of a new key made while the server is down waits, then says "new".
    let new = key(1_000_000);
    let added = while_down(&rt, &mut s, Duration::from_secs(1), f.insert(&new));
    assert!(added.unwrap(), "a new key added across a restart is new");
    // Lookups across a restart: old keys present, not "absent", not an error.
    let found = while_down(&rt, &mut s, Duration::from_secs(1), f.contains_many(&old));
    assert!(found.unwrap().iter().all(|&b| b));
    // Right after a call the connection looks fine: this add goes into a dead connection
    // and fails after it may have been sent. A lookup finds one of its keys absent, so its
    // one command did not run: it is sent again and answers exactly.
    let fresh = key(2_000_000);
    let keys3 = [&old[7][..], &new[..], &fresh[..]];
    let again = while_down(
        &rt,
        &mut s,
        Duration::from_millis(1500),
        f.insert_many(&keys3),
    );
    assert_eq!(again.unwrap(), vec![false, false, true]);
    // The same with only known keys: the lookup cannot tell whether it ran, so the answer
    // is unknown, not a guess. That path needs the connection to have answered less than
    // the idle check's 100 ms before the add; on a loaded machine the kill can take longer,
    // and then a `PING` finds the connection dead first and the answer is exact (the path
    // tested next). So, as in the sync test: a fresh answer right before each try, and a
    // few tries; an exact answer must still be the right one.
    let keys2 = [&old[8][..], &new[..]];
    let mut unknown = false;
    for _ in 0..8 {
        assert!(rt.block_on(f.contains(&new)).unwrap());
        match while_down(&rt, &mut s, Duration::from_secs(1), f.insert_many(&keys2)) {
            Err(Error::RedisOutcomeUnknown { .. }) => {
                unknown = true;
                break;
            }
            Ok(exact) => assert_eq!(exact, vec![false, false]),
            Err(e) => panic!("{e:?}"),
        }
    }
    assert!(
        unknown,
        "no add across a restart ever read as outcome-unknown"
    );
    // After the connection sat idle, a `PING` finds it dead first: the add goes out on a
    // new connection and its answer is exact.
    std::thread::sleep(Duration::from_millis(300));
    let keys2 = [&old[9][..], &new[..]];
    let again = while_down(&rt, &mut s, Duration::from_secs(1), async {
        tokio::time::sleep(Duration::from_millis(300)).await;
        f.insert_many(&keys2).await
    });
    assert_eq!(again.unwrap(), vec![false, false]);

    // The async window runs the sync window with this endpoint: it waits too.
    let w = rt
        .block_on(AsyncSharedWindow::create(
            &ep,
            "retry-window",
            &SharedWindowConfig::new(Duration::from_secs(3600), 4, FilterConfig::new(10_000)),
        ))
        .unwrap();
    assert!(rt.block_on(w.insert(b"w1")).unwrap());
    let r = while_down(&rt, &mut s, Duration::from_secs(1), w.insert(b"w2"));
    assert!(r.unwrap());
    let r = while_down(
        &rt,
        &mut s,
        Duration::from_secs(1),
        w.contains_many(&[&b"w1"[..], b"w2", b"w3"]),
    );
    assert_eq!(r.unwrap(), vec![true, true, false]);
}

fn lost<T>(r: &bloomsled_redis::Result<T>) -> bool {
    matches!(r, Err(Error::SharedFilterLost { .. }))
}

fn is_connection_error(r: &bloomsled_redis::Result<impl std::fmt::Debug>) -> bool {
    matches!(r, Err(Error::Redis(e))
        if e.is_connection_refusal() || e.is_io_error() || e.is_connection_dropped())
}

#[test]
fn an_async_call_past_the_retry_window_is_an_error_never_an_answer() {
    require_redis!();
    let mut s = Server::start_persistent();
    let rt = runtime();
    let ep = Endpoint::url(s.url()).retry_for(Duration::from_secs(2));
    let f = rt
        .block_on(AsyncSharedFilter::create(
            &ep,
            "gone",
            &FilterConfig::new(10_000),
        ))
        .unwrap();
    rt.block_on(f.insert(b"present")).unwrap();
    let w = rt
        .block_on(AsyncSharedWindow::create(
            &ep,
            "gone-window",
            &SharedWindowConfig::new(Duration::from_secs(3600), 4, FilterConfig::new(10_000)),
        ))
        .unwrap();
    rt.block_on(w.insert(b"present")).unwrap();
    s.kill();
    let started = std::time::Instant::now();
    let answers = rt.block_on(async {
        vec![
            f.contains(b"present").await,
            f.contains(b"absent").await,
            f.insert(b"new").await,
            f.insert(b"present").await,
            w.contains(b"present").await,
            w.insert(b"new").await,
        ]
    });
    for r in &answers {
        assert!(
            is_connection_error(r),
            "Redis is down: expected a connection error, got {r:?}"
        );
    }
    // Each call waited out the window (about 2 s) before failing.
    assert!(
        started.elapsed() >= Duration::from_secs(6),
        "{:?}",
        started.elapsed()
    );
    let opened = rt.block_on(AsyncSharedFilter::open(&ep, "gone"));
    assert!(is_connection_error(&opened), "{opened:?}");
    // Back with its data: the handles answer again.
    s.start_again();
    assert!(rt.block_on(f.contains(b"present")).unwrap());
    assert!(rt.block_on(f.insert(b"new")).unwrap());
    assert!(rt.block_on(w.contains(b"present")).unwrap());
}

#[test]
fn an_async_filter_on_a_redis_restarted_empty_is_lost_even_within_the_window() {
    require_redis!();
    let mut s = Server::start();
    let rt = runtime();
    let ep = Endpoint::url(s.url()).retry_for(Duration::from_secs(30));
    let f = rt
        .block_on(AsyncSharedFilter::create(
            &ep,
            "empty",
            &FilterConfig::new(10_000),
        ))
        .unwrap();
    rt.block_on(f.insert_many(&[&b"a"[..], b"b"])).unwrap();
    // No persistence: the server comes back empty.
    s.restart();
    let r = rt.block_on(f.contains(b"a"));
    assert!(lost(&r), "{r:?}");
    let r = rt.block_on(f.insert(b"c"));
    assert!(lost(&r), "{r:?}");
    let r = rt.block_on(f.insert_many(&[&b"a"[..], b"d"]));
    assert!(lost(&r), "{r:?}");
}

/// An add that ran in Redis but whose reply was lost with its connection: a replay would
/// answer "present" for the new key it had just set. The async filter, and the sync one,
/// look the keys up instead: all set, so the outcome is unknown, and they say so. (A batch
/// that the lookup shows did not run is sent again: the restart test above.)
#[test]
fn an_add_whose_reply_was_lost_is_never_answered_present_by_a_replay() {
    require_redis!();
    let s = Server::start();
    let relay = Relay::start(&s);
    let rt = runtime();
    let ep = Endpoint::url(relay.url()).retry_for(Duration::from_secs(10));
    let one_shard = bloomsled_redis::SharedOptions {
        shards: Some(1),
        ..Default::default()
    };
    let config = FilterConfig::new(10_000);
    let f = rt
        .block_on(AsyncSharedFilter::create_with(
            &ep,
            "lost-reply",
            &config,
            &one_shard,
        ))
        .unwrap();
    let sync = SharedFilter::open(&ep, "lost-reply").unwrap();
    for (i, k) in [b"async-new".as_slice(), b"async-new-2"]
        .into_iter()
        .enumerate()
    {
        relay.lose_next_reply();
        let r = if i == 0 {
            rt.block_on(f.insert(k))
        } else {
            rt.block_on(f.insert_many(&[k])).map(|v| v[0])
        };
        assert!(
            matches!(r, Err(Error::RedisOutcomeUnknown { .. })),
            "the add ran and its reply was lost: expected RedisOutcomeUnknown, got {r:?}"
        );
        assert!(rt.block_on(f.contains(k)).unwrap(), "the add did run");
    }
    relay.lose_next_reply();
    let r = sync.insert(b"sync-new");
    assert!(matches!(r, Err(Error::RedisOutcomeUnknown { .. })), "{r:?}");
    // The handles work on after the cut, and a new key is new.
    assert!(rt.block_on(f.insert(b"after")).unwrap());
    assert!(sync.insert(b"after-sync").unwrap());
}

//! A Redis that goes away and comes back with its data: calls retry within the endpoint's
//! retry window (`Endpoint::retry_for`) and then answer correctly; past the window they
//! fail with a connection error, never an answer; and an add whose reply was lost is never
//! answered by a blind replay (which would call a new key "present").
#![cfg(feature = "server-tests")]

mod redis_support;

use std::time::Duration;

use bloomsled::FilterConfig;
use bloomsled_redis::Error;
use bloomsled_redis::{Endpoint, SharedFilter, SharedWindow, SharedWindowConfig};
use redis_support::Server;

fn key(i: usize) -> Vec<u8> {
    format!("https://example.com/page/{i}").into_bytes()
}

/// Stops the server (kill -9), calls `during` while it is down, and starts it again with
/// its data `after` later, from another thread.
fn while_down<T>(s: &mut Server, after: Duration, during: impl FnOnce() -> T) -> T {
    s.kill();
    std::thread::scope(|scope| {
        scope.spawn(|| {
            std::thread::sleep(after);
            s.start_again();
        });
        during()
    })
}

#[test]
fn calls_made_while_redis_restarts_with_its_data_wait_and_answer() {
    require_redis!();
    let mut s = Server::start_persistent();
    let ep = Endpoint::url(s.url()).retry_for(Duration::from_secs(30));
    // One shard: an add is one `BITFIELD`, so one key found absent proves it did not run.
    let f =
        SharedFilter::create_sharded(&ep, "retry", &FilterConfig::new(10_000), Some(1)).unwrap();
    let old: Vec<Vec<u8>> = (0..500).map(key).collect();
    assert!(f.insert_many(&old).unwrap().iter().all(|&b| b));

    // An add of a new key, made while the server is down: it waits, then says "new".
    let new = key(1_000_000);
    let added = while_down(&mut s, Duration::from_secs(1), || f.insert(&new));
    assert!(
        added.unwrap(),
        "a new key added across a restart must be new"
    );
    // Lookups across a restart: old keys present, not "absent".
    let found = while_down(&mut s, Duration::from_secs(1), || f.contains_many(&old));
    assert!(found.unwrap().iter().all(|&b| b));
    // Right after a call, the connection looks fine: this add is written into the dead
    // socket and fails after it may have been sent. A lookup shows one of its keys still
    // absent, so its one command did not run: it is sent again and answers exactly.
    let fresh = key(2_000_000);
    let again = while_down(&mut s, Duration::from_millis(1500), || {
        f.insert_many(&[&old[7][..], &new[..], &fresh[..]])
    });
    assert_eq!(again.unwrap(), vec![false, false, true]);
    // The same with only known keys: the lookup cannot tell whether it ran, so its answer
    // is unknown, not a guess. That path needs the connection to have answered less than
    // the idle check's 100 ms before the add; on a loaded machine the kill can take longer,
    // and then a `PING` finds the connection dead first and the answer is exact (the path
    // tested next). So: a fresh answer right before each try, and a few tries; an exact
    // answer must still be the right one.
    let mut unknown = false;
    for _ in 0..8 {
        assert!(f.contains(&new).unwrap());
        let again = while_down(&mut s, Duration::from_secs(1), || {
            f.insert_many(&[&old[8][..], &new[..]])
        });
        match again {
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
    let again = while_down(&mut s, Duration::from_secs(1), || {
        std::thread::sleep(Duration::from_millis(300));
        f.insert_many(&[&old[9][..], &new[..]])
    });
    assert_eq!(again.unwrap(), vec![false, false]);
    // A window's lookups and adds wait too.
    let w = SharedWindow::create(
        &ep,
        "retry-window",
        &SharedWindowConfig::new(Duration::from_secs(3600), 4, FilterConfig::new(10_000)),
    )
    .unwrap();
    assert!(w.insert(b"w1").unwrap());
    let r = while_down(&mut s, Duration::from_secs(1), || w.insert(b"w2"));
    assert!(r.unwrap());
    let r = while_down(&mut s, Duration::from_secs(1), || {
        w.contains_many(&[&b"w1"[..], b"w2", b"w3"])
    });
    assert_eq!(r.unwrap(), vec![true, true, false]);
}

#[test]
fn a_redis_gone_past_the_retry_window_is_an_error_never_an_answer() {
    require_redis!();
    let mut s = Server::start_persistent();
    let ep = Endpoint::url(s.url()).retry_for(Duration::from_secs(2));
    let f = SharedFilter::create(&ep, "gone", &FilterConfig::new(10_000)).unwrap();
    f.insert(b"present").unwrap();
    s.kill();
    for r in [
        f.contains(b"present"),
        f.contains(b"absent"),
        f.insert(b"new"),
        f.insert(b"present"),
    ] {
        match r {
            Err(Error::Redis(e)) => assert!(
                e.is_connection_refusal() || e.is_io_error() || e.is_connection_dropped(),
                "{e}"
            ),
            other => panic!("Redis is down: expected a connection error, got {other:?}"),
        }
    }
    // Opening fails the same way, after the window.
    assert!(matches!(
        SharedFilter::open(&ep, "gone"),
        Err(Error::Redis(_))
    ));
    // Back with its data: the handle answers again.
    s.start_again();
    assert!(f.contains(b"present").unwrap());
    assert!(f.insert(b"new").unwrap());
}

/// Adds of distinct new keys from several threads while the server is killed and restarted
/// again and again: each add answers "new" or, when its reply was lost after it may have
/// run, `RedisOutcomeUnknown`; never "present" (what a blind replay would answer) and never
/// a connection error (the window covers the outage).
#[test]
fn adds_in_flight_during_kills_are_new_or_unknown_never_present() {
    require_redis!();
    let mut s = Server::start_persistent();
    let ep = Endpoint::url(s.url()).retry_for(Duration::from_secs(30));
    let f = SharedFilter::create(&ep, "inflight", &FilterConfig::new(1_000_000)).unwrap();
    let stop = std::sync::atomic::AtomicBool::new(false);
    let (mut new, mut unknown) = (0usize, 0usize);
    std::thread::scope(|scope| {
        let workers: Vec<_> = (0..4)
            .map(|t| {
                let (f, stop) = (&f, &stop);
                scope.spawn(move || {
                    let (mut new, mut unknown) = (0usize, 0usize);
                    let mut i = 0;
                    while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                        let batch: Vec<Vec<u8>> =
                            (0..4).map(|j| key(t * 100_000_000 + i * 4 + j)).collect();
                        i += 1;
                        match f.insert_many(&batch) {
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
        stop.store(true, std::sync::atomic::Ordering::Relaxed);
        for w in workers {
            let (n, u) = w.join().unwrap();
            new += n;
            unknown += u;
        }
    });
    eprintln!("{new} batches answered new, {unknown} unknown");
    assert!(new > 0);
}

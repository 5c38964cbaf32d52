//! Shared windows against real Redis servers: no false negative inside the horizon across
//! rotations and concurrent writers, keys past the horizon forgotten, one ring when many
//! clients (threads, and separate CLI processes) rotate at once, every kind of loss an
//! error and never "absent", a 3-master cluster, and the CLI.
//!
//! Time comes from a `ManualClock` the tests move (generations of a second or less), except
//! where Redis's own TTL is under test.
#![cfg(feature = "server-tests")]

mod redis_support;

use std::sync::{Arc, Barrier};
use std::time::Duration;

use bloomsled::clock::{Clock, ManualClock};
use bloomsled::FilterConfig;
use bloomsled_redis::Error;
use bloomsled_redis::{Endpoint, SharedWindow, SharedWindowConfig};
use redis_support::{Cluster, Server};

/// Generation width of the clock-driven tests.
const W: u64 = 1_000;

fn keys(prefix: &str, n: usize) -> Vec<Vec<u8>> {
    (0..n)
        .map(|i| format!("https://{prefix}.example/{i}").into_bytes())
        .collect()
}

/// A clock at the start of a generation, near the real time (so relative TTLs are sane).
fn clock() -> ManualClock {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as u64;
    ManualClock::new(now / W * W)
}

fn config(generations: u32, items: u64, clock: &ManualClock) -> SharedWindowConfig {
    SharedWindowConfig::new(
        Duration::from_millis(W * u64::from(generations)),
        generations,
        FilterConfig::new(items),
    )
    .clock(clock.clone())
}

fn is_lost(e: &Error) -> bool {
    matches!(e, Error::SharedFilterLost { .. })
}

/// The batched lookup of `keys` errs with `SharedFilterLost`; one by one, each key errs
/// the same way or answers "maybe" (a key whose blocks are all intact), never "absent".
/// Returns how many single lookups erred.
fn never_absent(w: &SharedWindow, keys: &[Vec<u8>]) -> usize {
    match w.contains_many(keys) {
        Err(e) => assert!(is_lost(&e), "unexpected error {e}"),
        Ok(v) => panic!(
            "a lost window answered ({} absent)",
            v.iter().filter(|&&b| !b).count()
        ),
    }
    let mut lost = 0;
    for k in keys.iter().step_by(7) {
        match w.contains(k) {
            Err(e) => {
                assert!(is_lost(&e), "unexpected error {e}");
                lost += 1;
            }
            Ok(b) => assert!(b, "an added key answered absent"),
        }
    }
    assert!(lost > 0, "no single lookup saw the loss");
    lost
}

/// Every lookup errs: the loss is the window's (its record), not one shard's.
fn all_lost(w: &SharedWindow, keys: &[Vec<u8>]) {
    assert_eq!(never_absent(w, keys), keys.iter().step_by(7).count());
}

#[test]
fn keys_are_found_inside_the_horizon_and_forgotten_past_it() {
    require_redis!();
    let s = Server::start();
    let ep = Endpoint::url(s.url());
    let c = clock();
    let g = 4u32;
    let w = SharedWindow::create(&ep, "horizon", &config(g, 2_000, &c)).unwrap();
    let reader = SharedWindow::open_with_clock(&ep, "horizon", c.clone()).unwrap();
    let span = W * u64::from(g);
    // Keys added every quarter generation for three spans; after each step every key still
    // inside its horizon must be found, by the writer and by another client.
    let mut added: Vec<(u64, Vec<Vec<u8>>)> = Vec::new();
    let (mut forgotten, mut forgotten_maybe) = (0usize, 0usize);
    for step in 0..(3 * 4 * g as u64) {
        let t = c.now_ms();
        let batch = keys(&format!("t{step}"), 100);
        w.insert_many(&batch).unwrap();
        added.push((t, batch));
        // The batches of the last two spans: inside the horizon, or recently forgotten.
        for (at, batch) in added.iter().rev().take(8 * g as usize) {
            let now = c.now_ms();
            if now <= at + span - W {
                for h in [&w, &reader] {
                    let found = h.contains_many(batch).unwrap();
                    assert!(
                        found.iter().all(|&b| b),
                        "false negative: added at {at}, looked up at {now}"
                    );
                }
                assert!(reader.contains(&batch[step as usize % 100]).unwrap());
            } else if now >= at + span {
                let found = reader.contains_many(batch).unwrap();
                forgotten += found.len();
                forgotten_maybe += found.iter().filter(|&&b| b).count();
            }
        }
        c.advance(Duration::from_millis(W / 4));
    }
    // Forgotten keys answer "maybe" only as false positives of the live generations
    // (about 1% each at their load).
    assert!(forgotten > 3_000, "{forgotten}");
    let rate = forgotten_maybe as f64 / forgotten as f64;
    assert!(rate < 0.05, "forgotten keys still maybe at rate {rate}");
    // Only the live generations are listed in the ring and kept in the record.
    let r = redis_support::window_ring(&s, &w);
    let cur = w.current_generation();
    // (Each new generation's entry drops those more than G below it: here the newest
    // entry is cur − 1.)
    assert!(
        r.keys().all(|&e| e + u64::from(g) + 1 >= cur),
        "{r:?} at {cur}"
    );
    assert_eq!(r.len(), g as usize + 1, "{r:?}");
    let st = reader.stats().unwrap();
    assert_eq!(st.current, cur);
    // The clock stands at the start of a generation nobody wrote to yet.
    assert_eq!(st.live.len(), g as usize - 1);
    assert!(st.live[0].index + 1 == cur);
    assert!(st.live.windows(2).all(|p| p[0].index == p[1].index + 1));
    for gs in &st.live {
        // 4 steps of 100 keys per generation.
        let n = gs.filter.estimated_items;
        assert!((300..=500).contains(&n), "{gs:?}");
    }
}

#[test]
fn generations_nobody_wrote_to_are_not_errors_and_a_clock_stepping_back_hides_nothing() {
    require_redis!();
    let s = Server::start();
    let ep = Endpoint::url(s.url());
    let c = clock();
    let w = SharedWindow::create(&ep, "sparse", &config(5, 1_000, &c)).unwrap();
    // Nothing written yet: every generation is missing, lookups say absent.
    assert_eq!(w.contains_many(&keys("none", 50)).unwrap(), vec![false; 50]);
    let a = keys("a", 200);
    w.insert_many(&a).unwrap();
    // Three empty generations later the key is still inside the horizon.
    c.advance(Duration::from_millis(3 * W));
    assert!(w.contains_many(&a).unwrap().iter().all(|&b| b));
    let fresh = SharedWindow::open_with_clock(&ep, "sparse", c.clone()).unwrap();
    assert!(fresh.contains_many(&a).unwrap().iter().all(|&b| b));
    assert_eq!(fresh.stats().unwrap().live.len(), 1);
    // A clock stepping back does not bring the window back in time for a handle.
    c.advance(Duration::from_millis(W));
    let b = keys("b", 200);
    w.insert_many(&b).unwrap();
    c.set(c.now_ms() - 4 * W);
    assert!(w.contains_many(&b).unwrap().iter().all(|&x| x));
    assert!(w.contains_many(&a).unwrap().iter().all(|&x| x));
    // Past the horizon of `a` (5 generations after its own) it is gone, without error.
    c.set(c.now_ms() + 5 * W);
    let gone = w.contains_many(&a).unwrap();
    assert!(gone.iter().filter(|&&x| x).count() < 10, "{gone:?}");
}

#[test]
fn redis_ttl_drops_expired_generations_without_an_error() {
    require_redis!();
    let s = Server::start();
    let ep = Endpoint::url(s.url());
    // The system clock and a real 3 s window: Redis's TTL is what is under test. (With a
    // 300 ms window, a CI machine under load once took past the generation's end before the
    // PTTL check: `PTTL -2`.)
    let w = SharedWindow::create(
        &ep,
        "ttl",
        &SharedWindowConfig::new(Duration::from_millis(3_000), 3, FilterConfig::new(1_000))
            .grace(Duration::from_millis(500))
            .shards(2),
    )
    .unwrap();
    let k = keys("ttl", 100);
    // The generation the keys went into: an add that a generation's end (every second)
    // overtook is made again, in the next one, so that the keys checked are the add's.
    let e = loop {
        let e = w.current_generation();
        w.insert_many(&k).unwrap();
        if w.current_generation() == e {
            break e;
        }
    };
    let keys_of = |e: u64| w.generation_keys(e).unwrap();
    let mut c = s.client();
    for key in keys_of(e) {
        let ttl: i64 = redis::cmd("PTTL").arg(&key).query(&mut c).unwrap();
        assert!(ttl > 2_000 && ttl <= 3_500, "{key}: PTTL {ttl}");
    }
    assert!(w.contains_many(&k).unwrap().iter().all(|&b| b));
    std::thread::sleep(Duration::from_millis(4_500));
    for key in keys_of(e) {
        let n: i64 = redis::cmd("EXISTS").arg(&key).query(&mut c).unwrap();
        assert_eq!(n, 0, "{key} outlived its generation");
    }
    // Expired on time is not lost: the keys are simply forgotten.
    assert_eq!(w.contains_many(&k).unwrap(), vec![false; k.len()]);
    let n: i64 = redis::cmd("DBSIZE").query(&mut c).unwrap();
    assert_eq!(n, 1, "only the window record remains");
}

#[test]
fn concurrent_writers_across_rotations_end_with_one_ring_and_no_false_negative() {
    require_redis!();
    let s = Server::start();
    let ep = Endpoint::url(s.url());
    let c = clock();
    let g = 3u32;
    SharedWindow::create(&ep, "race", &config(g, 20_000, &c)).unwrap();
    let threads = 6;
    let rounds = 4usize;
    let barrier = Arc::new(Barrier::new(threads));
    let handles: Vec<_> = (0..threads)
        .map(|t| {
            let (ep, c, barrier) = (ep.clone(), c.clone(), barrier.clone());
            std::thread::spawn(move || {
                // Each thread has its own handle and connection.
                let w = SharedWindow::open_with_clock(&ep, "race", c.clone()).unwrap();
                let mut incarnations = Vec::new();
                for r in 0..rounds {
                    barrier.wait(); // all threads meet the new generation at once
                    let mine = keys(&format!("r{r}-t{t}"), 500);
                    w.insert_many(&mine).unwrap();
                    let st = w.stats().unwrap();
                    incarnations.push((st.current, st.live[0].filter.incarnation));
                    barrier.wait();
                    if t == 0 {
                        c.advance(Duration::from_millis(W));
                    }
                }
                incarnations
            })
        })
        .collect();
    let seen: Vec<Vec<(u64, u64)>> = handles.into_iter().map(|h| h.join().unwrap()).collect();
    // Every thread wrote each round to the same generation filter.
    for r in 0..rounds {
        let first = seen[0][r];
        assert!(seen.iter().all(|s| s[r] == first), "round {r}: {seen:?}");
    }
    let w = SharedWindow::open_with_clock(&ep, "race", c.clone()).unwrap();
    // One ring: each generation's entry is the incarnation every thread used, and only one
    // config record exists per generation.
    let r = redis_support::window_ring(&s, &w);
    for (e, incarnation) in seen[0].iter().skip(rounds - g as usize) {
        assert_eq!(
            r.get(e).map(String::as_str),
            Some(format!("{incarnation:#018x}").as_str())
        );
    }
    let configs: Vec<String> = redis::cmd("KEYS")
        .arg("bloomsled:{race:w*}:config")
        .query(&mut s.client())
        .unwrap();
    assert_eq!(configs.len(), rounds, "{configs:?}");
    // No false negative for the keys inside the horizon (the last G rounds; the clock has
    // moved one generation past the last round).
    c.set(c.now_ms() - W);
    for rd in rounds - g as usize..rounds {
        for t in 0..threads {
            let k = keys(&format!("r{rd}-t{t}"), 500);
            assert!(
                w.contains_many(&k).unwrap().iter().all(|&b| b),
                "r{rd} t{t}"
            );
        }
    }
}

// Losses.
#[path = "redis_window/loss.rs"]
mod loss;

#[test]
fn a_writer_whose_clock_runs_ahead_is_still_read() {
    require_redis!();
    let s = Server::start();
    let ep = Endpoint::url(s.url());
    let behind = clock();
    let ahead = ManualClock::new(behind.now_ms() + W + W / 4);
    let w = SharedWindow::create(&ep, "skew", &config(3, 1_000, &behind)).unwrap();
    let fast = SharedWindow::open_with_clock(&ep, "skew", ahead.clone()).unwrap();
    behind.advance(Duration::from_millis(W / 2));
    // The fast writer is already in the next generation; the slow reader is not.
    assert_eq!(fast.current_generation(), w.current_generation() + 1);
    let k = keys("ahead", 300);
    fast.insert_many(&k).unwrap();
    assert!(w.contains_many(&k).unwrap().iter().all(|&b| b));
    assert!(k.iter().step_by(29).all(|key| w.contains(key).unwrap()));
}

#[test]
fn a_creator_that_died_mid_rotation_leaves_a_usable_window() {
    require_redis!();
    let s = Server::start();
    let ep = Endpoint::url(s.url());
    let c = clock();
    let w = SharedWindow::create(&ep, "dead", &config(3, 1_000, &c)).unwrap();
    let mut cli = s.client();
    let filter_record: String = redis::cmd("HGET")
        .arg(w.record_key())
        .arg("filter")
        .query(&mut cli)
        .unwrap();
    let gen_name = |key: &str| key[key.find('{').unwrap() + 1..key.find('}').unwrap()].to_owned();

    // 1. Died after creating the generation's filter, before listing it in the ring: the
    //    next writer adopts that filter and lists it.
    let e = w.current_generation();
    let config_key = w.generation_keys(e).unwrap()[0].clone();
    let shape = w.shape();
    let orphan = bloomsled_redis::SharedFilter::create_sharded(
        &ep,
        &gen_name(&config_key),
        &FilterConfig::new(1_000).seed(shape.seed), // as the window's generations
        Some(shape.shards),
    )
    .unwrap();
    assert!(redis_support::window_ring(&s, &w).is_empty());
    let k = keys("after-orphan", 200);
    w.insert_many(&k).unwrap();
    assert_eq!(
        redis_support::window_ring(&s, &w)[&e],
        format!("{:#018x}", orphan.incarnation()),
        "the orphan was adopted"
    );
    assert!(orphan.contains_many(&k).unwrap().iter().all(|&b| b));

    // 2. Died while writing the next generation's blocks: its init record holds a short
    //    lease; the next writer waits it out and creates the generation itself.
    c.advance(Duration::from_millis(W));
    let e = w.current_generation();
    let config_key = w.generation_keys(e).unwrap()[0].clone();
    redis::cmd("SET")
        .arg(&config_key)
        .arg(filter_record.replace("state=ready", "state=init"))
        .arg("PX")
        .arg(300)
        .exec(&mut cli)
        .unwrap();
    let half_written = &w.generation_keys(e).unwrap()[1];
    redis::cmd("SET")
        .arg(half_written)
        .arg(vec![0xffu8; 100])
        .exec(&mut cli)
        .unwrap();
    let other = SharedWindow::open_with_clock(&ep, "dead", c.clone()).unwrap();
    let k2 = keys("after-crash", 200);
    other.insert_many(&k2).unwrap();
    for h in [&w, &other] {
        assert!(h.contains_many(&k).unwrap().iter().all(|&b| b));
        assert!(h.contains_many(&k2).unwrap().iter().all(|&b| b));
    }
    // The half-written shard was replaced whole and expires with its generation.
    let ttl: i64 = redis::cmd("PTTL")
        .arg(half_written)
        .query(&mut cli)
        .unwrap();
    assert!(ttl > 0, "PTTL {ttl}");
}

#[test]
fn create_checks_the_shape_and_bad_settings_are_typed_errors() {
    require_redis!();
    let s = Server::start();
    let ep = Endpoint::url(s.url());
    let c = clock();
    let a = SharedWindow::create(&ep, "shape", &config(4, 1_000, &c)).unwrap();
    let b = SharedWindow::create(&ep, "shape", &config(4, 1_000, &c)).unwrap();
    assert_eq!(a.incarnation(), b.incarnation());
    for other in [config(5, 1_000, &c), config(4, 2_000, &c)] {
        assert!(matches!(
            SharedWindow::create(&ep, "shape", &other),
            Err(Error::RedisShapeMismatch { .. })
        ));
    }
    let bad = |cfg: SharedWindowConfig, name: &str| {
        let e = SharedWindow::create(&ep, name, &cfg).unwrap_err();
        assert!(matches!(e, Error::InvalidConfig { .. }), "{e}");
    };
    bad(config(0, 1_000, &c), "zero-gens");
    bad(
        SharedWindowConfig::new(Duration::from_millis(3), 7, FilterConfig::new(10)),
        "too-short",
    );
    bad(config(4, 0, &c), "zero-items");
    bad(config(4, 10, &c), "with space");
    bad(config(4, 10, &c), &"n".repeat(161));
    // A plain shared filter is not a window, and the other way round.
    bloomsled_redis::SharedFilter::create(&ep, "plain", &FilterConfig::new(10)).unwrap();
    assert!(!SharedWindow::exists(&ep, "plain").unwrap());
    assert!(!SharedWindow::exists(&ep, &"n".repeat(200)).unwrap());
    assert!(SharedWindow::exists(&ep, "{brace}").is_err());
    assert!(SharedWindow::exists(&ep, "shape").unwrap());
    assert!(matches!(
        SharedWindow::open(&ep, "plain"),
        Err(Error::SharedFilterNotFound { .. })
    ));
    // The record survives a foreign edit only as a typed error.
    redis::cmd("HSET")
        .arg(a.record_key())
        .arg("config")
        .arg("garbage")
        .exec(&mut s.client())
        .unwrap();
    assert!(matches!(
        SharedWindow::open(&ep, "shape"),
        Err(Error::Corrupt(_))
    ));
    // destroy removes everything it created.
    let d = SharedWindow::create(&ep, "gone", &config(4, 100, &c)).unwrap();
    d.insert(b"x").unwrap();
    c.advance(Duration::from_millis(W));
    d.insert(b"y").unwrap();
    d.destroy().unwrap();
    let left: Vec<String> = redis::cmd("KEYS")
        .arg("bloomsled:{gone*")
        .query(&mut s.client())
        .unwrap();
    assert!(left.is_empty(), "{left:?}");
}

#[test]
fn a_window_on_a_three_master_cluster() {
    require_redis!();
    let c3 = Cluster::start(3);
    let ep = Endpoint::cluster(c3.urls());
    let c = clock();
    let g = 7u32;
    // One shard per generation: each generation lives on one master, so the seven are
    // spread over the cluster by their names.
    let w = SharedWindow::create(&ep, "cw", &config(g, 5_000, &c).shards(1)).unwrap();
    let mut per = Vec::new();
    for i in 0..g {
        if i > 0 {
            c.advance(Duration::from_millis(W));
        }
        let k = keys(&format!("c{i}"), 1_000);
        w.insert_many(&k).unwrap();
        per.push(k);
    }
    let all = per.concat();
    assert!(w.contains_many(&all).unwrap().iter().all(|&b| b));
    assert!(w.contains(&per[0][3]).unwrap());
    let reader = SharedWindow::open_with_clock(&ep, "cw", c.clone()).unwrap();
    assert!(reader.contains_many(&all).unwrap().iter().all(|&b| b));
    let fp = reader
        .contains_many(&keys("absent", 5_000))
        .unwrap()
        .iter()
        .filter(|&&b| b)
        .count();
    assert!(fp < 5_000 * 7 / 100 * 2, "{fp} false positives");
    // Generations on more than one master.
    let masters: std::collections::HashSet<usize> = (0..g as u64)
        .map(|i| {
            let key = &w.generation_keys(w.current_generation() - i).unwrap()[1];
            let slot: u16 = c3.nodes[0]
                .cli(&["cluster", "keyslot", key])
                .trim()
                .parse()
                .unwrap();
            c3.owner_of(slot)
        })
        .collect();
    assert!(masters.len() >= 2, "all generations on one master");
    assert_eq!(reader.stats().unwrap().live.len(), g as usize);
    // One master flushed: lookups err, never answer absent.
    let victim = *masters.iter().next().unwrap();
    c3.nodes[victim].cli(&["flushall"]);
    all_lost(&reader, &all);
}

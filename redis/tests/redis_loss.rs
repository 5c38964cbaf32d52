//! Invariant 6: a shared filter that was lost says so. Every way the data can vanish or be
//! replaced behind a handle's back must turn into `SharedFilterLost` (or a connection error)
//! from the very command that meets it, and never into an "absent" answer for a key that
//! was added.
#![cfg(feature = "server-tests")]

mod redis_support;

use std::time::Duration;

use bloomsled::FilterConfig;
use bloomsled_redis::Error;
use bloomsled_redis::{Endpoint, SharedFilter};
use redis_support::Server;

const N: usize = 3_000;

fn keys(n: usize) -> Vec<Vec<u8>> {
    (0..n).map(|i| format!("key-{i}").into_bytes()).collect()
}

fn filled(s: &Server, name: &str) -> (SharedFilter, Vec<Vec<u8>>) {
    let f =
        SharedFilter::create(&Endpoint::url(s.url()), name, &FilterConfig::new(N as u64)).unwrap();
    let k = keys(N);
    f.insert_many(&k).unwrap();
    assert!(f.contains_many(&k).unwrap().iter().all(|&b| b));
    (f, k)
}

/// Every added key answers "maybe" or an error; none answers "absent". Returns how many
/// single-key lookups erred with `SharedFilterLost`.
fn never_absent(f: &SharedFilter, keys: &[Vec<u8>]) -> usize {
    match f.contains_many(keys) {
        Ok(v) => assert!(
            v.iter().all(|&b| b),
            "batch answered absent for an added key"
        ),
        Err(e) => assert!(is_lost(&e), "unexpected error {e}"),
    }
    let mut lost = 0;
    for k in keys {
        match f.contains(k) {
            Ok(true) => {}
            Ok(false) => panic!("added key {:?} answered absent", String::from_utf8_lossy(k)),
            Err(e) => {
                assert!(is_lost(&e), "unexpected error {e}");
                lost += 1;
            }
        }
    }
    lost
}

fn is_lost(e: &Error) -> bool {
    matches!(e, Error::SharedFilterLost { .. })
}

/// Every operation of the handle errs: lookups, adds, batches, stats, pull.
fn all_lost(f: &SharedFilter, keys: &[Vec<u8>]) {
    assert_eq!(never_absent(f, keys), keys.len());
    assert!(is_lost(&f.insert(b"new key").unwrap_err()));
    assert!(is_lost(&f.insert_many(&keys[..10]).unwrap_err()));
    assert!(is_lost(&f.stats().unwrap_err()));
    assert!(is_lost(&f.pull().unwrap_err()));
    // The adds above wrote bits into emptied keys: still no answer, still lost.
    assert_eq!(never_absent(f, keys), keys.len());
}

#[test]
fn flushall_is_detected_by_every_operation() {
    require_redis!();
    let s = Server::start();
    let (f, k) = filled(&s, "flush");
    redis::cmd("FLUSHALL").exec(&mut s.client()).unwrap();
    all_lost(&f, &k);
    let local = f.pull_shape_filter();
    assert!(is_lost(&f.push(&local).unwrap_err()));
    assert!(matches!(
        SharedFilter::open(&Endpoint::url(s.url()), "flush"),
        Err(Error::SharedFilterNotFound { .. })
    ));
}

#[test]
fn restart_without_persistence_is_detected_after_reconnecting() {
    require_redis!();
    let mut s = Server::start();
    let (f, k) = filled(&s, "restart");
    s.restart(); // kill -9, start empty
    all_lost(&f, &k);
}

#[test]
fn a_deleted_shard_errs_for_its_keys_only() {
    require_redis!();
    let s = Server::start();
    let (f, k) = filled(&s, "delshard");
    let shards = f.shard_keys();
    assert!(shards.len() > 1);
    redis::cmd("DEL")
        .arg(&shards[3])
        .exec(&mut s.client())
        .unwrap();
    let lost = never_absent(&f, &k);
    assert!(lost > 0 && lost < k.len(), "{lost} of {}", k.len());
    assert!(is_lost(&f.stats().unwrap_err()));
    assert!(is_lost(&f.pull().unwrap_err()));
}

#[test]
fn expired_shards_are_detected() {
    require_redis!();
    let s = Server::start();
    let (f, k) = filled(&s, "expire");
    let mut c = s.client();
    for key in f.shard_keys() {
        redis::cmd("PEXPIRE").arg(&key).arg(1).exec(&mut c).unwrap();
    }
    std::thread::sleep(Duration::from_millis(50));
    all_lost(&f, &k);
}

#[test]
fn evicted_shards_are_detected() {
    require_redis!();
    let s = Server::start_evicting();
    let (f, k) = filled(&s, "evict");
    let mut c = s.client();
    let junk = vec![7u8; 64 << 10];
    for i in 0..2_000 {
        let _ = redis::cmd("SET")
            .arg(format!("junk:{i}"))
            .arg(&junk)
            .exec(&mut c);
    }
    let gone = f
        .shard_keys()
        .iter()
        .filter(|key| redis::cmd("EXISTS").arg(key).query::<i64>(&mut c).unwrap() == 0)
        .count();
    assert!(gone > 0, "no shard was evicted");
    assert!(never_absent(&f, &k) > 0);
}

#[test]
fn a_deleted_config_stops_new_opens_and_a_recreate_stops_old_handles() {
    require_redis!();
    let s = Server::start();
    let ep = Endpoint::url(s.url());
    let (f, k) = filled(&s, "delconf");
    redis::cmd("DEL")
        .arg(f.config_key())
        .exec(&mut s.client())
        .unwrap();
    assert!(matches!(
        SharedFilter::open(&ep, "delconf"),
        Err(Error::SharedFilterNotFound { .. })
    ));
    // The blocks are intact: the open handle still answers, correctly.
    assert_eq!(never_absent(&f, &k), 0);
    // Created again (same shape, new incarnation): the old handle's every command errs.
    let g = SharedFilter::create(&ep, "delconf", &FilterConfig::new(N as u64)).unwrap();
    assert_ne!(g.incarnation(), f.incarnation());
    all_lost(&f, &k);
    let msg = f.contains(&k[0]).unwrap_err().to_string();
    assert!(msg.contains("created again"), "{msg}");
    // The new incarnation is a fresh, working filter.
    assert!(g.insert(b"x").unwrap() && g.contains(b"x").unwrap());
}

#[test]
fn a_recreated_filter_is_detected_by_old_handles() {
    require_redis!();
    let s = Server::start();
    let ep = Endpoint::url(s.url());
    let (f, k) = filled(&s, "recreate");
    SharedFilter::open(&ep, "recreate")
        .unwrap()
        .destroy()
        .unwrap();
    all_lost(&f, &k);
    let g = SharedFilter::create(&ep, "recreate", &FilterConfig::new(N as u64)).unwrap();
    all_lost(&f, &k);
    assert!(!g.contains_many(&k).unwrap().iter().all(|&b| b));
}

#[test]
fn with_appendfsync_always_every_acknowledged_add_survives_kill_9() {
    require_redis!();
    let mut s = Server::start_persistent();
    let (f, k) = filled(&s, "aof");
    let more: Vec<Vec<u8>> = (0..500)
        .map(|i| format!("single-{i}").into_bytes())
        .collect();
    for key in &more {
        f.insert(key).unwrap();
    }
    s.restart(); // kill -9, then replay the AOF
    assert_eq!(never_absent(&f, &k), 0);
    assert_eq!(never_absent(&f, &more), 0);
    let reopened = SharedFilter::open(&Endpoint::url(s.url()), "aof").unwrap();
    assert_eq!(reopened.incarnation(), f.incarnation());
    assert!(reopened.contains_many(&more).unwrap().iter().all(|&b| b));
}

/// A local filter of the shared filter's shape, for push.
trait LocalOfShape {
    fn pull_shape_filter(&self) -> bloomsled::Filter;
}

impl LocalOfShape for SharedFilter {
    fn pull_shape_filter(&self) -> bloomsled::Filter {
        let sh = self.shape();
        let local = bloomsled::Filter::with_shape(
            bloomsled::FilterShape {
                num_blocks: sh.num_blocks,
                num_hashes: sh.num_hashes,
                seed: sh.seed,
            },
            sh.capacity,
        )
        .unwrap();
        local.insert(b"pushed");
        local
    }
}

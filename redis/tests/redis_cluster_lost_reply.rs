//! An add whose reply is lost on a real 3-master Redis Cluster: the add ran in Redis, the
//! connection is cut before its reply reaches the client. A re-send of that add (by
//! redis-rs's cluster client, which retries a command after an I/O error, or by anyone
//! else) would answer "present" for the new key it had just set: a crawler would drop a
//! page. The answer must be `RedisOutcomeUnknown` (a lookup shows the add ran), never
//! `Ok(false)`.
//!
//! Every master is reached through a loopback relay (`RelayedCluster`: the nodes announce
//! the relays' ports, so slot maps, redirections and reconnections go through them), which
//! drops the next `BITFIELD` reply when armed. Sync and async filters, plain, counting,
//! exact and window adds; and an add redirected by `MOVED` (a slot moved behind the
//! client's back) whose reply is lost at the node it was sent on to.
#![cfg(feature = "server-tests")]

mod redis_support;

use std::time::Duration;

use bloomsled::FilterConfig;
use bloomsled_redis::Error;
use bloomsled_redis::{Endpoint, SharedFilter, SharedOptions, SharedWindow, SharedWindowConfig};
use redis_support::{Cluster, RelayedCluster};

fn endpoint(c: &RelayedCluster) -> Endpoint {
    Endpoint::cluster(c.urls()).retry_for(Duration::from_secs(10))
}

fn one_shard(counting: bool) -> SharedOptions {
    SharedOptions {
        shards: Some(1),
        counting,
    }
}

/// Asserts that `r`, an add whose reply the relay cut, is `RedisOutcomeUnknown`.
fn unknown<T: std::fmt::Debug>(c: &RelayedCluster, what: &str, r: bloomsled_redis::Result<T>) {
    assert!(!c.armed(), "{what}: no reply went through a relay");
    assert!(
        matches!(r, Err(Error::RedisOutcomeUnknown { .. })),
        "{what}: the add ran and its reply was lost: expected RedisOutcomeUnknown, got {r:?}"
    );
}

/// Moves the slot of `key` from its master to the next one, behind every client's back
/// (a finished migration: `MIGRATE` and `CLUSTER SETSLOT ... NODE` on every node): a client
/// whose slot map is older gets `MOVED`.
fn move_slot_of(c: &Cluster, key: &str) {
    let slot: u16 = c.nodes[0]
        .cli(&["cluster", "keyslot", key])
        .trim()
        .parse()
        .unwrap();
    let from = c.owner_of(slot);
    let to = (from + 1) % c.nodes.len();
    let (from_id, to_id, slot_s) = (c.node_id(from), c.node_id(to), slot.to_string());
    c.nodes[to].cli(&["cluster", "setslot", &slot_s, "importing", &from_id]);
    c.nodes[from].cli(&["cluster", "setslot", &slot_s, "migrating", &to_id]);
    // MIGRATE goes node to node, straight to the real port.
    let port = c.nodes[to].port.to_string();
    let out = c.nodes[from].cli(&["migrate", "127.0.0.1", &port, "", "0", "5000", "keys", key]);
    assert_eq!(out.trim(), "OK", "MIGRATE: {out}");
    for n in &c.nodes {
        n.cli(&["cluster", "setslot", &slot_s, "node", &to_id]);
    }
    c.wait_ok();
    assert_eq!(c.owner_of(slot), to);
}

#[test]
fn a_cluster_add_whose_reply_was_lost_is_unknown_never_present() {
    require_redis!();
    let c = RelayedCluster::start(3);
    let ep = endpoint(&c);
    let config = FilterConfig::new(10_000);
    let f = SharedFilter::create(&ep, "lost", &config).unwrap();
    c.lose_next_reply();
    unknown(&c, "add", f.insert(b"new-1"));
    assert!(f.contains(b"new-1").unwrap(), "the add did run");
    let batch: Vec<Vec<u8>> = (0..40).map(|i| format!("batch-{i}").into_bytes()).collect();
    c.lose_next_reply();
    unknown(&c, "add_many", f.insert_many(&batch));
    c.lose_next_reply();
    unknown(&c, "add_exact", f.insert_exact(b"exact-1"));
    assert!(
        !f.insert_exact(b"exact-1").unwrap(),
        "recorded by the lost add"
    );
    let counting = SharedFilter::create_with(&ep, "lost-c", &config, &one_shard(true)).unwrap();
    c.lose_next_reply();
    unknown(&c, "counting add", counting.insert(b"counted"));
    assert_eq!(counting.counts(b"counted").unwrap().iter().max(), Some(&1));
    let w = SharedWindow::create(
        &ep,
        "lost-w",
        &SharedWindowConfig::new(Duration::from_secs(3600), 4, config.clone()),
    )
    .unwrap();
    // The first add makes the generation (its own round trips); the second is the add.
    assert!(w.insert(b"first").unwrap());
    c.lose_next_reply();
    unknown(&c, "window add", w.insert(b"windowed"));
    assert!(w.contains(b"windowed").unwrap());
    // The handles work on after the cuts, and a new key is new.
    assert!(f.insert(b"after").unwrap());
    assert!(counting.insert(b"after").unwrap());
    assert!(w.insert(b"after").unwrap());
}

/// Bits set in a shard key (on whichever master holds it).
fn bits(c: &Cluster, key: &str) -> u64 {
    let slot: u16 = c.nodes[0]
        .cli(&["cluster", "keyslot", key])
        .trim()
        .parse()
        .unwrap();
    c.nodes[c.owner_of(slot)]
        .cli(&["bitcount", key])
        .trim()
        .parse()
        .unwrap()
}

/// Two keys of a two-shard filter created with `config`: the first in shard 0, the second
/// in shard 1. Found by adding candidates to a probe filter of the same shape and seed (the
/// shard a key goes to depends on both: `config` must fix the seed) and seeing which
/// shard's bits change.
fn one_key_per_shard(c: &RelayedCluster, config: &FilterConfig) -> [Vec<u8>; 2] {
    let probe = SharedFilter::create_with(&endpoint(c), "probe", config, &two_shards()).unwrap();
    let shards = probe.shard_keys();
    let mut found: [Option<Vec<u8>>; 2] = [None, None];
    for i in 0.. {
        let k = format!("candidate-{i}").into_bytes();
        let before = bits(&c.cluster, &shards[0]);
        probe.insert(&k).unwrap();
        let s = usize::from(bits(&c.cluster, &shards[0]) == before);
        found[s].get_or_insert(k);
        if let [Some(a), Some(b)] = &found {
            return [a.clone(), b.clone()];
        }
        assert!(i < 100, "no key for each shard");
    }
    unreachable!()
}

fn two_shards() -> SharedOptions {
    SharedOptions {
        shards: Some(2),
        counting: false,
    }
}

/// The slot of a shard moved away since the client read its slot map: the add is
/// redirected (`MOVED`: it did not run on the old master), sent on to the new one, runs
/// there, and that reply is lost. Following the redirection is safe; re-sending after the
/// loss is not. (A lookup in the other shard just before keeps the connection in use, as
/// in a busy crawl.)
#[test]
fn a_redirected_cluster_add_whose_reply_was_lost_is_unknown_never_present() {
    require_redis!();
    let c = RelayedCluster::start(3);
    let ep = endpoint(&c);
    // A fixed seed: with a secret one per filter, the probe's keys landed in the shards
    // wanted only one run in four, and the test passed on a plain lost reply otherwise.
    let config = FilterConfig::new(10_000).seed(1);
    let [moving, staying] = one_key_per_shard(&c, &config);
    let f = SharedFilter::create_with(&ep, "moved", &config, &two_shards()).unwrap();
    assert!(f.insert(b"before").unwrap());
    let shards = f.shard_keys();
    let slot = |k: &str| c.cluster.nodes[0].cli(&["cluster", "keyslot", k]);
    assert_ne!(slot(&shards[0]), slot(&shards[1]));
    move_slot_of(&c.cluster, &shards[0]);
    assert!(!f.contains(&staying).unwrap());
    let moved_bits = bits(&c.cluster, &shards[0]);
    c.lose_next_reply();
    unknown(&c, "redirected add", f.insert(&moving));
    assert!(f.contains(&moving).unwrap(), "the add did run");
    assert_ne!(
        bits(&c.cluster, &shards[0]),
        moved_bits,
        "the add went to the shard whose slot moved"
    );
    assert!(f.insert(b"after").unwrap());
    assert!(!f.insert(b"before").unwrap());
}

#[cfg(feature = "tokio")]
mod tokio_filter {
    use super::*;
    use bloomsled_redis::{AsyncSharedFilter, AsyncSharedWindow};

    fn runtime() -> tokio::runtime::Runtime {
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .unwrap()
    }

    #[test]
    fn an_async_cluster_add_whose_reply_was_lost_is_unknown_never_present() {
        require_redis!();
        let c = RelayedCluster::start(3);
        let ep = endpoint(&c);
        let rt = runtime();
        let config = FilterConfig::new(10_000);
        let f = rt
            .block_on(AsyncSharedFilter::create(&ep, "lost-a", &config))
            .unwrap();
        c.lose_next_reply();
        unknown(&c, "async add", rt.block_on(f.insert(b"new-1")));
        assert!(
            rt.block_on(f.contains(b"new-1")).unwrap(),
            "the add did run"
        );
        let batch: Vec<Vec<u8>> = (0..40).map(|i| format!("batch-{i}").into_bytes()).collect();
        c.lose_next_reply();
        unknown(&c, "async add_many", rt.block_on(f.insert_many(&batch)));
        let counting = rt
            .block_on(AsyncSharedFilter::create_with(
                &ep,
                "lost-ac",
                &config,
                &one_shard(true),
            ))
            .unwrap();
        c.lose_next_reply();
        unknown(
            &c,
            "async counting add",
            rt.block_on(counting.insert(b"counted")),
        );
        let counts = rt.block_on(counting.counts(b"counted")).unwrap();
        assert_eq!(counts.iter().max(), Some(&1), "counted once");
        let w = rt
            .block_on(AsyncSharedWindow::create(
                &ep,
                "lost-aw",
                &SharedWindowConfig::new(Duration::from_secs(3600), 4, config.clone()),
            ))
            .unwrap();
        assert!(rt.block_on(w.insert(b"first")).unwrap());
        c.lose_next_reply();
        unknown(&c, "async window add", rt.block_on(w.insert(b"windowed")));
        assert!(rt.block_on(f.insert(b"after")).unwrap());
        assert!(rt.block_on(counting.insert(b"after")).unwrap());
        assert!(rt.block_on(w.insert(b"after")).unwrap());
    }

    #[test]
    fn a_redirected_async_cluster_add_whose_reply_was_lost_is_unknown_never_present() {
        require_redis!();
        let c = RelayedCluster::start(3);
        let ep = endpoint(&c);
        let rt = runtime();
        let f = rt
            .block_on(AsyncSharedFilter::create_with(
                &ep,
                "moved-a",
                &FilterConfig::new(10_000),
                &one_shard(false),
            ))
            .unwrap();
        assert!(rt.block_on(f.insert(b"before")).unwrap());
        move_slot_of(&c.cluster, &f.shard_keys()[0]);
        c.lose_next_reply();
        unknown(
            &c,
            "async redirected add",
            rt.block_on(f.insert(b"moved-new")),
        );
        assert!(rt.block_on(f.contains(b"moved-new")).unwrap());
        assert!(rt.block_on(f.insert(b"after")).unwrap());
        assert!(!rt.block_on(f.insert(b"before")).unwrap());
    }
}

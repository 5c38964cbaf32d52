//! The shared filter on a real 3-master Redis Cluster: shards on every master, no false
//! negatives, answers unchanged while a shard's slot migrates (ASK, then MOVED), and a
//! killed master's shards answer errors, never "absent", also when its replica takes over
//! without the data; the counting variant across masters.
#![cfg(feature = "server-tests")]

mod redis_support;

use std::time::{Duration, Instant};

use bloomsled::FilterConfig;
use bloomsled_redis::Error;
use bloomsled_redis::{Endpoint, SharedFilter};
use redis_support::Cluster;

fn keys(prefix: &str, n: usize) -> Vec<Vec<u8>> {
    (0..n)
        .map(|i| format!("https://{prefix}.example/{i}").into_bytes())
        .collect()
}

#[test]
fn a_cluster_filter_spreads_over_every_master_and_has_no_false_negatives() {
    require_redis!();
    let c = Cluster::start(3);
    let ep = Endpoint::cluster(c.urls());
    let f = SharedFilter::create(&ep, "spread", &FilterConfig::new(30_000)).unwrap();
    // Every master holds some shards.
    for (i, n) in c.nodes.iter().enumerate() {
        let held = n.cli(&["dbsize"]).trim().parse::<u64>().unwrap();
        assert!(held >= 4, "master {i} holds {held} keys");
    }
    let added = keys("in", 30_000);
    f.insert_many(&added).unwrap();
    assert!(f.contains_many(&added).unwrap().iter().all(|&b| b));
    for k in added.iter().step_by(97) {
        assert!(f.contains(k).unwrap());
    }
    let absent = keys("out", 30_000);
    let fp = f
        .contains_many(&absent)
        .unwrap()
        .iter()
        .filter(|&&b| b)
        .count();
    assert!(fp < 600, "{fp} false positives in 30,000");
    // A second handle (another client) sees every key.
    let g = SharedFilter::open(&ep, "spread").unwrap();
    assert!(g.contains_many(&added).unwrap().iter().all(|&b| b));
    // Push/pull work across nodes.
    let local = g.pull().unwrap();
    assert!(local.contains_many(&added).iter().all(|&b| b));
    let st = g.stats().unwrap();
    assert!(
        st.estimated_items > 28_000 && st.estimated_items < 32_000,
        "{st:?}"
    );
}

#[test]
fn answers_survive_a_slot_migration_through_ask_and_moved() {
    require_redis!();
    let c = Cluster::start(3);
    let ep = Endpoint::cluster(c.urls());
    // Every add's answer is checked against a model: a local filter of the same config and
    // seed, whose layout the shared one copies bit for bit. The filter is full: seed 0 makes
    // one of the 500 late keys a false positive, whose exact answer is "not new" (with a
    // random seed, about every second run).
    let config = FilterConfig::new(10_000).seed(0);
    let f = SharedFilter::create(&ep, "moving", &config).unwrap();
    let model = config.build().unwrap();
    let added = keys("m", 10_000);
    f.insert_many(&added).unwrap();
    for k in &added {
        model.insert(k);
    }
    let shard = f.shard_keys()[0].clone();
    let moving = c.begin_migration(&shard);
    // Mid-migration: the shard is on `to`, the slot still `from`'s: requests get ASK.
    assert!(f.contains_many(&added).unwrap().iter().all(|&b| b));
    let late = keys("late", 500);
    // A batch over every shard: the moving shard's command is redirected and run again,
    // while the other commands ran in the same pipeline, whose replies the `redis` crate's
    // cluster pipeline does not keep. Their answers are then unknown, an error, never the
    // "present" a blind replay would give. Adding the keys again is safe, and answers:
    // after such a loss the connection sends adds one command at a time for a while.
    let late_new: Vec<bool> = late.iter().map(|k| model.insert(k)).collect();
    match f.insert_many(&late) {
        Ok(new) => assert_eq!(new, late_new),
        Err(Error::RedisOutcomeUnknown { .. }) => {
            f.insert_many(&late).unwrap();
        }
        Err(e) => panic!("{e}"),
    }
    // A one-key add is one command: redirected, it is run once, and answers exactly.
    let one = b"one more while migrating";
    assert_eq!(f.insert(one).unwrap(), model.insert(one));
    for k in late.iter().take(50) {
        assert!(f.contains(k).unwrap());
    }
    // Slot handed over: the old route now answers MOVED.
    c.finish_migration(&moving);
    assert!(f.contains_many(&added).unwrap().iter().all(|&b| b));
    assert!(f.contains_many(&late).unwrap().iter().all(|&b| b));
    assert!(!f.insert(&late[0]).unwrap());
}

/// Connections every master has accepted so far (`total_connections_received`).
fn accepted(c: &Cluster) -> u64 {
    c.nodes
        .iter()
        .map(|n| {
            n.cli(&["info", "stats"])
                .lines()
                .find_map(|l| l.strip_prefix("total_connections_received:"))
                .and_then(|v| v.trim().parse::<u64>().ok())
                .expect("total_connections_received")
        })
        .sum()
}

/// A connection idle for a while is checked (`PING`) before an add is written into it,
/// and kept when it answers: adds after pauses open no new connection to the cluster.
/// (The check once sent its `PING` in a cluster pipeline, which the `redis` crate refuses,
/// so every add after a pause reconnected to every master.)
#[test]
fn adds_after_pauses_keep_their_cluster_connections() {
    require_redis!();
    let c = Cluster::start(3);
    let ep = Endpoint::cluster(c.urls());
    let f = SharedFilter::create(&ep, "idle", &FilterConfig::new(5_000)).unwrap();
    assert!(f.insert(b"warm").unwrap());
    let before = accepted(&c);
    for i in 0..3 {
        std::thread::sleep(Duration::from_millis(150));
        assert!(f.insert(format!("after a pause {i}").as_bytes()).unwrap());
    }
    // One connection per master: the `redis-cli` that reads the count.
    let opened = accepted(&c) - before - c.nodes.len() as u64;
    assert_eq!(opened, 0, "adds after pauses opened {opened} connections");
}

#[test]
fn a_killed_master_makes_its_shards_err_never_absent() {
    require_redis!();
    let mut c = Cluster::start(3);
    let ep = Endpoint::cluster(c.urls()).io_timeout(std::time::Duration::from_secs(2));
    let f = SharedFilter::create(&ep, "dying", &FilterConfig::new(5_000)).unwrap();
    let added = keys("d", 5_000);
    f.insert_many(&added).unwrap();
    c.nodes[1].kill();
    match f.contains_many(&added) {
        Ok(v) => panic!("a batch touching a dead master answered: {} maybe", v.len()),
        Err(e) => assert!(matches!(e, Error::Redis(_)), "{e}"),
    }
    let mut errors = 0;
    for k in added.iter().step_by(50) {
        match f.contains(k) {
            Ok(b) => assert!(b, "added key answered absent"),
            Err(e) => {
                assert!(matches!(e, Error::Redis(_)), "{e}");
                errors += 1;
            }
        }
    }
    assert!(errors > 0);
}

#[test]
fn a_failover_to_an_empty_replica_is_an_error_never_absent() {
    require_redis!();
    let mut c = Cluster::start(3);
    let ep = Endpoint::cluster(c.urls()).io_timeout(Duration::from_secs(2));
    let f = SharedFilter::create(&ep, "failover", &FilterConfig::new(5_000)).unwrap();
    let added = keys("f", 5_000);
    f.insert_many(&added).unwrap();
    // Master 1 gets a replica that never receives its data, then dies; the replica takes
    // its slots over (CLUSTER FAILOVER TAKEOVER): those slots are now served, empty.
    let r = c.add_empty_replica(1);
    let start = Instant::now();
    while !c.nodes[r]
        .cli(&["info", "replication"])
        .contains("role:slave")
    {
        assert!(start.elapsed() < Duration::from_secs(30), "never a replica");
        std::thread::sleep(Duration::from_millis(50));
    }
    assert_eq!(
        c.nodes[r].cli(&["dbsize"]).trim(),
        "0",
        "the replica got data"
    );
    c.nodes[1].kill();
    assert_eq!(
        c.nodes[r].cli(&["cluster", "failover", "takeover"]).trim(),
        "OK"
    );
    let start = Instant::now();
    while !c.nodes[r]
        .cli(&["info", "replication"])
        .contains("role:master")
    {
        assert!(start.elapsed() < Duration::from_secs(30), "takeover failed");
        std::thread::sleep(Duration::from_millis(50));
    }
    // Every answer is "maybe" or an error; once the clients follow the new slot map, the
    // keys on the empty node are SharedFilterLost, the others still found.
    let start = Instant::now();
    let (mut lost, mut found) = (0, 0);
    while start.elapsed() < Duration::from_secs(30) {
        lost = 0;
        found = 0;
        for k in added.iter().step_by(25) {
            match f.contains(k) {
                Ok(b) => {
                    assert!(b, "an added key answered absent after the failover");
                    found += 1;
                }
                Err(Error::SharedFilterLost { .. }) => lost += 1,
                Err(e) => assert!(matches!(e, Error::Redis(_)), "{e}"),
            }
        }
        if lost > 0 && found > 0 && lost + found == 200 {
            break;
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    assert!(
        lost > 0 && found > 0 && lost + found == 200,
        "after the takeover: {lost} lost, {found} found of 200"
    );
    // Batches and adds say so too, and nothing is answered absent.
    match f.contains_many(&added) {
        Ok(v) => panic!("a batch over the empty node answered {} keys", v.len()),
        Err(e) => assert!(matches!(e, Error::SharedFilterLost { .. }), "{e}"),
    }
    assert!(matches!(
        f.insert_many(&added),
        Err(Error::SharedFilterLost { .. })
    ));
}

#[test]
fn a_counting_filter_spreads_over_the_masters_and_removes_exactly() {
    require_redis!();
    let c = Cluster::start(3);
    let ep = Endpoint::cluster(c.urls());
    let f = SharedFilter::create_counting(&ep, "counts", &FilterConfig::new(20_000)).unwrap();
    for (i, n) in c.nodes.iter().enumerate() {
        let held = n.cli(&["dbsize"]).trim().parse::<u64>().unwrap();
        assert!(held >= 4, "master {i} holds {held} keys");
    }
    let added = keys("c", 20_000);
    f.insert_many(&added).unwrap();
    let (gone, kept) = added.split_at(10_000);
    assert!(f.remove_many(gone).unwrap().iter().all(|&r| r));
    assert!(f.contains_many(kept).unwrap().iter().all(|&b| b));
    let still = f
        .contains_many(gone)
        .unwrap()
        .iter()
        .filter(|&&b| b)
        .count();
    assert!(still < 500, "{still} of 10,000 removed keys answer maybe");
    let pulled = f.pull_counting().unwrap();
    assert!(kept.iter().all(|k| pulled.contains(k)));
}

//! The shared filter's exact record (`SharedFilter::insert_exact`): no false positives even
//! from a filter far too small, one "new" per key among racing clients, compact listpack
//! buckets, the filter's loss still detected, and the same on a Redis Cluster.
#![cfg(feature = "server-tests")]

mod redis_support;

use bloomsled::FilterConfig;
use bloomsled_redis::Error;
use bloomsled_redis::{Endpoint, SharedFilter};
use redis_support::{Cluster, Server};

/// `n` distinct 20-byte fingerprints, uniformly spread (a SplitMix64 stream; any digest
/// would do).
fn fingerprints(seed: u64, n: usize) -> Vec<[u8; 20]> {
    let mut x = seed;
    let mut next = move || {
        x = x.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = x;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    };
    (0..n)
        .map(|_| {
            let mut fp = [0u8; 20];
            fp[..8].copy_from_slice(&next().to_be_bytes());
            fp[8..16].copy_from_slice(&next().to_be_bytes());
            fp[16..].copy_from_slice(&next().to_be_bytes()[..4]);
            fp
        })
        .collect()
}

#[test]
fn a_tiny_filter_with_its_exact_record_has_no_false_positives() {
    require_redis!();
    let s = Server::start();
    let ep = Endpoint::url(s.url());
    // Sized for 2,000 keys at a 30% false-positive rate, fed 20,000: its Bloom answers
    // are mostly "maybe".
    let config = FilterConfig::new(2_000).false_positive_rate(0.3);
    let f = SharedFilter::create(&ep, "tiny", &config).unwrap();
    let fps = fingerprints(1, 20_000);
    let first = f.insert_exact_many(&fps).unwrap();
    assert!(first.iter().all(|&b| b), "a new key was called present");
    // The Bloom filter alone calls many of them present: the exact record is what saves
    // them.
    let others = fingerprints(2, 20_000);
    let bloom_fp = f
        .contains_many(&others)
        .unwrap()
        .iter()
        .filter(|&&b| b)
        .count();
    assert!(bloom_fp > 10_000, "only {bloom_fp} Bloom false positives");
    let new_again = f.insert_exact_many(&others).unwrap();
    assert!(new_again.iter().all(|&b| b));
    // Known keys are present, one by one and in a batch (a repeat in one batch is new once).
    assert!(!f.insert_exact(&fps[17]).unwrap());
    assert_eq!(
        f.insert_exact_many(&[&fps[3][..], &[9u8; 20], &[9u8; 20]])
            .unwrap(),
        vec![false, true, false]
    );
    assert!(f.insert_exact_many(&fps).unwrap().iter().all(|&b| !b));
    // Up to its capacity, the record is in small hashes Redis stores as listpacks.
    let sized = SharedFilter::create(&ep, "sized", &FilterConfig::new(20_000)).unwrap();
    assert!(sized.insert_exact_many(&fps).unwrap().iter().all(|&b| b));
    let mut con = s.client();
    let keys: Vec<String> = redis::cmd("KEYS")
        .arg("bloomsled:{sized:*:x*")
        .query(&mut con)
        .unwrap();
    assert!(keys.len() >= 256, "{} buckets", keys.len());
    for k in &keys {
        let enc: String = redis::cmd("OBJECT")
            .arg("ENCODING")
            .arg(k)
            .query(&mut con)
            .unwrap();
        assert_eq!(enc, "listpack", "{k}");
    }
    // Short keys cannot be placed in a bucket: an error, not a guess.
    let big = SharedFilter::create(&ep, "big", &FilterConfig::new(1_000_000)).unwrap();
    assert!(matches!(
        big.insert_exact(b"ab"),
        Err(Error::InvalidConfig { .. })
    ));
}

#[test]
fn racing_clients_get_one_new_per_key() {
    require_redis!();
    let s = Server::start();
    let ep = Endpoint::url(s.url());
    let config = FilterConfig::new(1_000).false_positive_rate(0.2);
    let fps = fingerprints(3, 5_000);
    let news: Vec<Vec<bool>> = std::thread::scope(|scope| {
        let handles: Vec<_> = (0..4)
            .map(|t| {
                let (ep, config, fps) = (&ep, &config, &fps);
                scope.spawn(move || {
                    let f = SharedFilter::create(ep, "race", config).unwrap();
                    let mut mine = fps.clone();
                    if t % 2 == 1 {
                        mine.reverse();
                    }
                    let mut out = Vec::new();
                    for chunk in mine.chunks(7) {
                        out.extend(f.insert_exact_many(chunk).unwrap());
                    }
                    if t % 2 == 1 {
                        out.reverse();
                    }
                    out
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    for i in 0..fps.len() {
        let winners = news.iter().filter(|n| n[i]).count();
        assert_eq!(winners, 1, "key {i} was new for {winners} clients");
    }
}

#[test]
fn a_restart_without_data_is_still_a_lost_filter() {
    require_redis!();
    let mut s = Server::start();
    let ep = Endpoint::url(s.url());
    let f = SharedFilter::create(&ep, "lost", &FilterConfig::new(10_000)).unwrap();
    let fps = fingerprints(4, 100);
    f.insert_exact_many(&fps).unwrap();
    s.restart(); // kill -9, start empty
    let r = f.insert_exact(&fps[0]);
    assert!(matches!(r, Err(Error::SharedFilterLost { .. })), "{r:?}");
    // A filter created again under the same name does not read the old record.
    let s2 = Server::start();
    let ep2 = Endpoint::url(s2.url());
    let a = SharedFilter::create(&ep2, "again", &FilterConfig::new(10_000)).unwrap();
    assert!(a.insert_exact(&fps[0]).unwrap());
    a.destroy().unwrap();
    // Destroyed with its record: nothing is left in Redis.
    let left: Vec<String> = redis::cmd("KEYS").arg("*").query(&mut s2.client()).unwrap();
    assert!(left.is_empty(), "{left:?}");
    let b = SharedFilter::create(&ep2, "again", &FilterConfig::new(10_000)).unwrap();
    assert!(
        b.insert_exact(&fps[0]).unwrap(),
        "the old incarnation's record was read"
    );
}

#[test]
fn the_exact_record_works_on_a_cluster() {
    require_redis!();
    let c = Cluster::start(3);
    let ep = Endpoint::cluster(c.urls());
    let config = FilterConfig::new(3_000).false_positive_rate(0.3);
    let f = SharedFilter::create(&ep, "exact", &config).unwrap();
    let fps = fingerprints(5, 9_000);
    assert!(f.insert_exact_many(&fps).unwrap().iter().all(|&b| b));
    assert!(f.insert_exact_many(&fps).unwrap().iter().all(|&b| !b));
    assert!(!f.insert_exact(&fps[5]).unwrap());
    // The buckets spread over every master.
    for (i, n) in c.nodes.iter().enumerate() {
        let held = n.cli(&["dbsize"]).trim().parse::<u64>().unwrap();
        assert!(held >= 8, "master {i} holds {held} keys");
    }
}

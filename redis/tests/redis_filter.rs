//! The shared filter against a real single `redis-server`: answers, batches, the same
//! layout as the local filter (push/pull), the config record and its races, and the errors
//! of a bad URL, a server that is down or slow, and a wrong-type key.
#![cfg(feature = "server-tests")]

mod redis_support;

use std::collections::HashSet;
use std::time::{Duration, Instant};

use bloomsled::{Filter, FilterConfig};
use bloomsled_redis::Error;
use bloomsled_redis::{Endpoint, SharedFilter};
use redis_support::Server;

fn keys(prefix: &str, n: usize) -> Vec<Vec<u8>> {
    (0..n)
        .map(|i| format!("https://{prefix}.example/{i}").into_bytes())
        .collect()
}

#[test]
fn added_keys_are_found_and_absent_ones_mostly_rejected() {
    require_redis!();
    let s = Server::start();
    let ep = Endpoint::url(s.url());
    let f = SharedFilter::create(
        &ep,
        "urls",
        &FilterConfig::new(20_000).false_positive_rate(0.01),
    )
    .unwrap();
    let added = keys("in", 20_000);
    let news = f.insert_many(&added).unwrap();
    assert!(news.iter().filter(|&&n| n).count() > 19_800);
    assert!(f.contains_many(&added).unwrap().iter().all(|&b| b));
    // Single-key paths agree.
    assert!(f.contains(&added[7]).unwrap());
    assert!(!f.insert(&added[7]).unwrap(), "re-adding a key is not new");
    // "New" means a bit was set: in a full filter (1%) an odd key may be a false positive
    // already, and then its exact answer is "not new".
    let huge = vec![0xa5u8; 1 << 20];
    for (key, what) in [(&b""[..], "empty key"), (&huge[..], "1 MiB key")] {
        let was = f.contains(key).unwrap();
        assert_eq!(f.insert(key).unwrap(), !was, "{what}");
        assert!(f.contains(key).unwrap(), "{what}");
    }
    // Measured FPR near the 1% target (blocked model: within a generous band).
    let absent = keys("out", 50_000);
    let fp = f
        .contains_many(&absent)
        .unwrap()
        .iter()
        .filter(|&&b| b)
        .count();
    let rate = fp as f64 / absent.len() as f64;
    assert!((0.004..0.02).contains(&rate), "measured FPR {rate}");
    let st = f.stats().unwrap();
    assert!(
        (st.estimated_items as f64 - 20_002.0).abs() < 1_000.0,
        "{st:?}"
    );
    assert!(st.fill_ratio > 0.1 && st.fill_ratio < 0.5);
    assert_eq!(st.redis_bytes, st.shape.num_blocks * 72);
}

#[test]
fn push_and_pull_are_byte_copies_of_the_local_filter() {
    require_redis!();
    let s = Server::start();
    let ep = Endpoint::url(s.url());
    // A fixed seed: the local filters built apart must hash as the shared one does.
    let cfg = FilterConfig::new(5_000).false_positive_rate(0.01).seed(5);
    let shared = SharedFilter::create_sharded(&ep, "pp", &cfg, Some(7)).unwrap();
    assert_eq!(shared.shard_keys().len(), 7);
    // Keys added remotely appear in the pulled filter, bit for bit as a local add sets them.
    let remote = keys("remote", 3_000);
    shared.insert_many(&remote).unwrap();
    let local = cfg.build().unwrap();
    local.insert_many(&remote);
    let pulled = shared.pull().unwrap();
    assert_eq!(pulled.shape(), local.shape());
    assert!(pulled.contains_many(&remote).iter().all(|&b| b));
    assert!(
        same_bits(&pulled, &local),
        "pull is bit-identical to local adds"
    );
    assert!(pulled.fill_ratio() > 0.0);
    // Push ORs local bits in without clearing any remote bit.
    let pushed = keys("pushed", 2_000);
    let mine = cfg.build().unwrap();
    mine.insert_many(&pushed);
    assert!(shared.push(&mine).unwrap() > 0);
    assert!(shared.contains_many(&pushed).unwrap().iter().all(|&b| b));
    assert!(shared.contains_many(&remote).unwrap().iter().all(|&b| b));
    let both = shared.pull().unwrap();
    local.insert_many(&pushed);
    assert!(same_bits(&both, &local));
    assert!(!same_bits(&both, &pulled));
    // A local filter of another shape is refused.
    let other = FilterConfig::new(5_000).seed(9).build().unwrap();
    assert!(matches!(
        shared.push(&other),
        Err(Error::RedisShapeMismatch { .. })
    ));
}

/// True if two filters of one shape have exactly the same bits: their union has as many
/// bits set as each of them (independent of the serialized form's header).
fn same_bits(a: &Filter, b: &Filter) -> bool {
    let u = a.clone();
    u.union(b).unwrap();
    u.fill_ratio() == a.fill_ratio() && u.fill_ratio() == b.fill_ratio()
}

#[test]
fn one_shape_wins_a_create_race_and_other_shapes_are_refused() {
    require_redis!();
    let s = Server::start();
    let ep = Endpoint::url(s.url());
    let cfg = FilterConfig::new(200_000);
    let incarnations: Vec<u64> = std::thread::scope(|sc| {
        let hs: Vec<_> = (0..8)
            .map(|_| {
                let ep = ep.clone();
                let cfg = cfg.clone();
                sc.spawn(move || {
                    SharedFilter::create(&ep, "race", &cfg)
                        .unwrap()
                        .incarnation()
                })
            })
            .collect();
        hs.into_iter().map(|h| h.join().unwrap()).collect()
    });
    assert_eq!(
        incarnations.iter().collect::<HashSet<_>>().len(),
        1,
        "{incarnations:x?}"
    );
    // Racing creators of different shapes: exactly one shape is recorded, the rest are
    // refused with a typed error.
    let results: Vec<_> = std::thread::scope(|sc| {
        let hs: Vec<_> = (0..6u64)
            .map(|i| {
                let ep = ep.clone();
                sc.spawn(move || {
                    SharedFilter::create(&ep, "race2", &FilterConfig::new(1_000 * (i + 1)))
                        .map(|f| f.shape())
                })
            })
            .collect();
        hs.into_iter().map(|h| h.join().unwrap()).collect()
    });
    let ok: Vec<_> = results.iter().filter_map(|r| r.as_ref().ok()).collect();
    assert_eq!(ok.len(), 1, "{results:?}");
    for r in &results {
        if let Err(e) = r {
            assert!(matches!(e, Error::RedisShapeMismatch { .. }), "{e}");
        }
    }
    let opened = SharedFilter::open(&ep, "race2").unwrap();
    assert_eq!(opened.shape(), *ok[0]);
    // Open of a filter nobody created is typed, not an empty filter.
    assert!(matches!(
        SharedFilter::open(&ep, "nobody"),
        Err(Error::SharedFilterNotFound { .. })
    ));
}

#[test]
fn bad_settings_and_names_are_typed_errors() {
    require_redis!();
    let s = Server::start();
    let ep = Endpoint::url(s.url());
    for cfg in [
        FilterConfig::new(0),
        FilterConfig::new(10).false_positive_rate(0.0),
        FilterConfig::new(10).false_positive_rate(1.0),
        FilterConfig::new(10).false_positive_rate(f64::NAN),
        FilterConfig::new(10).num_hashes(0),
    ] {
        assert!(matches!(
            SharedFilter::create(&ep, "x", &cfg),
            Err(Error::InvalidConfig { .. })
        ));
    }
    for name in ["", "a{b}", "a b"] {
        assert!(matches!(
            SharedFilter::create(&ep, name, &FilterConfig::new(10)),
            Err(Error::InvalidConfig { .. })
        ));
    }
    assert!(matches!(
        SharedFilter::create_sharded(&ep, "x", &FilterConfig::new(10), Some(0)),
        Err(Error::InvalidConfig { .. })
    ));
}

#[test]
fn a_foreign_or_wrong_type_config_key_is_an_error() {
    require_redis!();
    let s = Server::start();
    let ep = Endpoint::url(s.url());
    let mut c = s.client();
    redis::cmd("SET")
        .arg("bloomsled:{foreign}:config")
        .arg("not ours")
        .exec(&mut c)
        .unwrap();
    assert!(matches!(
        SharedFilter::open(&ep, "foreign"),
        Err(Error::Decode(bloomsled::DecodeError::BadMagic { .. }))
    ));
    redis::cmd("LPUSH")
        .arg("bloomsled:{list}:config")
        .arg("x")
        .exec(&mut c)
        .unwrap();
    assert!(matches!(
        SharedFilter::open(&ep, "list"),
        Err(Error::Redis(_))
    ));
    // A shard replaced by a list: the very command errors.
    let f = SharedFilter::create_sharded(&ep, "wt", &FilterConfig::new(100), Some(1)).unwrap();
    let shard = f.shard_keys()[0].clone();
    redis::cmd("DEL").arg(&shard).exec(&mut c).unwrap();
    redis::cmd("LPUSH")
        .arg(&shard)
        .arg("x")
        .exec(&mut c)
        .unwrap();
    assert!(matches!(f.contains(b"k"), Err(Error::Redis(_))));
    assert!(matches!(f.insert(b"k"), Err(Error::Redis(_))));
}

#[test]
fn down_slow_and_malformed_endpoints_fail_fast() {
    require_redis!();
    // Nothing listens on this port.
    let port = redis_support::free_port();
    let down = Endpoint::url(format!("redis://127.0.0.1:{port}/"));
    assert!(matches!(
        SharedFilter::open(&down, "x"),
        Err(Error::Redis(_))
    ));
    assert!(matches!(
        SharedFilter::open(&Endpoint::url("http://nope"), "x"),
        Err(Error::Redis(_))
    ));
    assert!(SharedFilter::open(&Endpoint::url(""), "x").is_err());
    // A server that accepts and never answers: an error after the timeout, not a hang.
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    listener.set_nonblocking(true).unwrap();
    let hold = std::thread::spawn(move || {
        let start = Instant::now();
        let mut conns = Vec::new();
        while start.elapsed() < Duration::from_secs(3) {
            if let Ok(c) = listener.accept() {
                conns.push(c);
            }
            std::thread::sleep(Duration::from_millis(5));
        }
        conns.len()
    });
    let slow = Endpoint::url(format!("redis://{addr}/"))
        .connect_timeout(Duration::from_millis(300))
        .io_timeout(Duration::from_millis(300));
    let t = Instant::now();
    // A server that accepts and never replies: a timeout, named as one.
    let e = SharedFilter::open(&slow, "x").unwrap_err();
    assert!(matches!(e, Error::Timeout(_)), "{e:?}");
    assert!(t.elapsed() < Duration::from_secs(3), "{:?}", t.elapsed());
    assert!(hold.join().unwrap() >= 1, "the client never connected");
}

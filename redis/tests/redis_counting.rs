//! The counting shared filter (4-bit saturating counters, `BITFIELD … OVERFLOW SAT INCRBY
//! u4`) against a real `redis-server`: removes are exact and never cost another key its
//! answer, the counters are the local `CountingFilter`'s counters bit for bit, saturation
//! sticks, concurrent adders and removers leave no false negative, and a lost filter is an
//! error for adds, lookups and removes alike.
#![cfg(feature = "server-tests")]

mod redis_support;

use std::collections::HashSet;

use bloomsled::{CountingFilter, Filter, FilterConfig};
use bloomsled_redis::Error;
use bloomsled_redis::{Endpoint, SharedFilter, SharedOptions};
use redis_support::Server;

fn keys(prefix: &str, n: usize) -> Vec<Vec<u8>> {
    (0..n)
        .map(|i| format!("https://{prefix}.example/{i}").into_bytes())
        .collect()
}

/// A local counting filter of the shared filter's shape (and its seed, secret unless `cfg`
/// fixed it).
fn local_twin(f: &SharedFilter, cfg: &FilterConfig) -> CountingFilter {
    let shape = cfg.clone().seed(f.shape().seed).shape().unwrap();
    CountingFilter::with_shape(shape, f.shape().capacity).unwrap()
}

/// `a` and `b` set the same bits: equal counts of ones, and their union adds none.
fn assert_same_bits(a: &Filter, b: &Filter) {
    let u = Filter::with_shape(a.shape(), a.capacity()).unwrap();
    u.union(a).unwrap();
    u.union(b).unwrap();
    assert!(
        a.fill_ratio() == b.fill_ratio() && u.fill_ratio() == a.fill_ratio(),
        "bits differ: fill {} / {} / union {}",
        a.fill_ratio(),
        b.fill_ratio(),
        u.fill_ratio()
    );
}

#[test]
fn removes_are_exact_and_the_counters_match_a_local_counting_filter() {
    require_redis!();
    let s = Server::start();
    let ep = Endpoint::url(s.url());
    let cfg = FilterConfig::new(10_000);
    let f = SharedFilter::create_counting(&ep, "sessions", &cfg).unwrap();
    assert!(f.shape().counting);
    let local = local_twin(&f, &cfg);

    let all = keys("k", 10_000);
    let news = f.insert_many(&all).unwrap();
    assert!(news.iter().filter(|&&n| n).count() > 9_800);
    // Some keys twice: their counters go to 2 (or more), and re-adding is not new.
    let twice = &all[..1_000];
    assert!(f.insert_many(twice).unwrap().iter().all(|&n| !n));
    for k in all.iter().chain(twice) {
        local.insert(k);
    }
    assert!(f.contains_many(&all).unwrap().iter().all(|&b| b));

    // Remove one add of the first half: the twice-added stay, the rest of the half go.
    let (gone, kept) = all.split_at(5_000);
    let removed = f.remove_many(gone).unwrap();
    assert!(removed.iter().all(|&r| r), "every removed key was present");
    for k in gone {
        assert!(local.remove(k));
    }
    let answers = f.contains_many(&all).unwrap();
    let fn_kept = kept
        .iter()
        .zip(&answers[5_000..])
        .filter(|(_, &a)| !a)
        .count();
    assert_eq!(fn_kept, 0, "a remove cost a kept key its answer");
    assert!(
        answers[..1_000].iter().all(|&a| a),
        "added twice, removed once"
    );
    let still = answers[1_000..5_000].iter().filter(|&&a| a).count();
    assert!(
        still < 400,
        "{still} of 4,000 removed keys still answer maybe"
    );

    // The same counters as the local filter, key by key and bit for bit.
    let pulled = f.pull_counting().unwrap();
    for k in &all {
        assert_eq!(pulled.count(k), local.count(k));
        assert_eq!(f.counts(k).unwrap()[0], local.count(k));
        assert_eq!(pulled.contains(k), local.contains(k));
    }
    assert_same_bits(&f.pull().unwrap(), local.bits());
    assert_same_bits(pulled.bits(), local.bits());

    let st = f.stats().unwrap();
    assert_eq!(st.redis_bytes, st.shape.num_blocks * 264);
    let nonzero = local.nonzero_counters();
    assert_eq!(st.ones, nonzero, "{st:?}");
    assert!(
        (st.estimated_items as f64 - 6_000.0).abs() < 600.0,
        "{st:?}"
    );
}

#[test]
fn removing_an_absent_key_changes_nothing_and_saturated_counters_stick() {
    require_redis!();
    let s = Server::start();
    let ep = Endpoint::url(s.url());
    let f = SharedFilter::create_counting(&ep, "c", &FilterConfig::new(1_000)).unwrap();
    f.insert_many(&keys("in", 500)).unwrap();
    let before = f.pull_counting().unwrap();
    // Keys never added: those the filter rejects are refused, and nothing moves.
    let strangers: Vec<Vec<u8>> = keys("out", 2_000)
        .into_iter()
        .filter(|k| !before.contains(k))
        .collect();
    assert!(strangers.len() > 1_900);
    assert!(f.remove_many(&strangers).unwrap().iter().all(|&r| !r));
    let after = f.pull_counting().unwrap();
    assert_same_bits(after.bits(), before.bits());
    for k in keys("in", 500) {
        assert_eq!(after.count(&k), before.count(&k));
    }

    // Twenty adds of one key: its counters stick at 15, and twenty removes keep it.
    let hot = b"hot key";
    for _ in 0..20 {
        f.insert(hot).unwrap();
    }
    assert!(f.counts(hot).unwrap().iter().all(|&c| c == 15));
    for _ in 0..20 {
        assert!(f.remove(hot).unwrap());
    }
    assert!(
        f.contains(hot).unwrap(),
        "a stuck counter never drops a key"
    );
    // Every other key is still there.
    assert!(f
        .contains_many(&keys("in", 500))
        .unwrap()
        .iter()
        .all(|&b| b));
}

#[test]
fn concurrent_adders_and_removers_leave_no_false_negative() {
    require_redis!();
    let s = Server::start();
    let ep = Endpoint::url(s.url());
    let cfg = FilterConfig::new(40_000);
    SharedFilter::create_counting(&ep, "busy", &cfg).unwrap();
    // Four threads, each with its own handle: each adds its keys, removes every third, and
    // adds some of those back.
    let handles: Vec<_> = (0..4)
        .map(|t| {
            let ep = ep.clone();
            std::thread::spawn(move || {
                let f = SharedFilter::open(&ep, "busy").unwrap();
                let mine = keys(&format!("t{t}"), 8_000);
                for chunk in mine.chunks(500) {
                    f.insert_many(chunk).unwrap();
                }
                let out: Vec<Vec<u8>> = mine.iter().step_by(3).cloned().collect();
                for chunk in out.chunks(300) {
                    assert!(f.remove_many(chunk).unwrap().iter().all(|&r| r));
                }
                let back: Vec<Vec<u8>> = out.iter().step_by(2).cloned().collect();
                f.insert_many(&back).unwrap();
                let gone: HashSet<Vec<u8>> = out.into_iter().collect();
                let back: HashSet<Vec<u8>> = back.into_iter().collect();
                mine.into_iter()
                    .filter(|k| !gone.contains(k) || back.contains(k))
                    .collect::<Vec<_>>()
            })
        })
        .collect();
    let present: Vec<Vec<u8>> = handles
        .into_iter()
        .flat_map(|h| h.join().unwrap())
        .collect();
    let f = SharedFilter::open(&ep, "busy").unwrap();
    let answers = f.contains_many(&present).unwrap();
    let misses = answers.iter().filter(|&&a| !a).count();
    assert_eq!(
        misses,
        0,
        "{misses} false negatives among {}",
        present.len()
    );
}

#[test]
fn a_lost_counting_filter_is_an_error_for_every_operation() {
    require_redis!();
    let s = Server::start();
    let ep = Endpoint::url(s.url());
    let f = SharedFilter::create_counting(&ep, "lost", &FilterConfig::new(1_000)).unwrap();
    let ks = keys("k", 200);
    f.insert_many(&ks).unwrap();
    let mut con = s.client();
    redis::cmd("FLUSHALL").query::<()>(&mut con).unwrap();
    let lost = |r: Result<Vec<bool>, Error>| {
        assert!(
            matches!(r, Err(Error::SharedFilterLost { .. })),
            "expected a lost filter, got {r:?}"
        )
    };
    lost(f.contains_many(&ks));
    lost(f.remove_many(&ks));
    lost(f.insert_many(&ks));
    // The add above recreated nothing usable: still lost, never "absent".
    lost(f.contains_many(&ks));
    assert!(f.pull_counting().is_err() && f.stats().is_err());
}

#[test]
fn counting_and_plain_are_different_shapes_and_misuse_is_a_typed_error() {
    require_redis!();
    let s = Server::start();
    let ep = Endpoint::url(s.url());
    let cfg = FilterConfig::new(1_000);
    let plain = SharedFilter::create(&ep, "plain", &cfg).unwrap();
    let counting = SharedFilter::create_counting(&ep, "counting", &cfg).unwrap();
    // Same name, other variant: the record says which it is.
    assert!(matches!(
        SharedFilter::create_counting(&ep, "plain", &cfg),
        Err(Error::RedisShapeMismatch { .. })
    ));
    assert!(matches!(
        SharedFilter::create(&ep, "counting", &cfg),
        Err(Error::RedisShapeMismatch { .. })
    ));
    let opened = SharedFilter::open(&ep, "counting").unwrap();
    assert!(opened.shape().counting);
    assert!(opened.shape().to_string().contains("blocked512-k2-count4"));
    // Removes and counts need counters; bits cannot be pushed into counters.
    assert!(matches!(
        plain.remove(b"x"),
        Err(Error::InvalidConfig { .. })
    ));
    assert!(matches!(
        plain.counts(b"x"),
        Err(Error::InvalidConfig { .. })
    ));
    assert!(matches!(
        plain.pull_counting(),
        Err(Error::InvalidConfig { .. })
    ));
    // The counting filter's own seed (each creation draws a secret one): only the variant
    // differs.
    let local = Filter::with_shape(
        cfg.clone().seed(counting.shape().seed).shape().unwrap(),
        1_000,
    )
    .unwrap();
    local.insert(b"x");
    assert!(matches!(
        counting.push(&local),
        Err(Error::InvalidConfig { .. })
    ));
    // Explicit options: a counting filter over 3 shards.
    let three = SharedFilter::create_with(
        &ep,
        "three",
        &cfg,
        &SharedOptions {
            shards: Some(3),
            counting: true,
        },
    )
    .unwrap();
    assert_eq!(three.shape().shards, 3);
    three.insert_many(&keys("a", 300)).unwrap();
    assert!(three
        .contains_many(&keys("a", 300))
        .unwrap()
        .iter()
        .all(|&b| b));
    assert_eq!(
        three
            .remove_many(&keys("a", 300))
            .unwrap()
            .iter()
            .filter(|&&r| r)
            .count(),
        300
    );
}

/// A TCP proxy in front of a server that, when armed, forwards the client's request but
/// cuts the connection when the server's reply comes back: the server has done the work,
/// the client never hears of it and sends the request again on a new connection.
struct CuttingProxy {
    port: u16,
    armed: std::sync::Arc<std::sync::atomic::AtomicBool>,
    cuts: std::sync::Arc<std::sync::atomic::AtomicUsize>,
}

impl CuttingProxy {
    fn start(upstream: String) -> CuttingProxy {
        use std::io::{Read, Write};
        use std::net::{Shutdown, TcpListener, TcpStream};
        use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
        use std::sync::Arc;
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let armed = Arc::new(AtomicBool::new(false));
        let cuts = Arc::new(AtomicUsize::new(0));
        let (a, c) = (armed.clone(), cuts.clone());
        std::thread::spawn(move || {
            for client in listener.incoming() {
                let Ok(client) = client else { return };
                let server = TcpStream::connect(&upstream).unwrap();
                let (mut c_in, mut s_out) =
                    (client.try_clone().unwrap(), server.try_clone().unwrap());
                std::thread::spawn(move || {
                    let mut buf = [0u8; 65536];
                    while let Ok(n) = c_in.read(&mut buf) {
                        if n == 0 || s_out.write_all(&buf[..n]).is_err() {
                            break;
                        }
                    }
                    let _ = s_out.shutdown(Shutdown::Both);
                });
                let (a, c) = (a.clone(), c.clone());
                std::thread::spawn(move || {
                    let (mut s_in, mut c_out) = (server, client);
                    let mut buf = [0u8; 65536];
                    while let Ok(n) = s_in.read(&mut buf) {
                        if n == 0 {
                            break;
                        }
                        if a.swap(false, Ordering::SeqCst) {
                            c.fetch_add(1, Ordering::SeqCst);
                            break; // the reply is dropped with the connection
                        }
                        if c_out.write_all(&buf[..n]).is_err() {
                            break;
                        }
                    }
                    let _ = c_out.shutdown(Shutdown::Both);
                    let _ = s_in.shutdown(Shutdown::Both);
                });
            }
        });
        CuttingProxy { port, armed, cuts }
    }
}

#[test]
fn a_remove_replayed_after_a_lost_reply_is_applied_once() {
    use std::sync::atomic::Ordering;
    require_redis!();
    let s = Server::start();
    let proxy = CuttingProxy::start(s.addr());
    let ep = Endpoint::url(format!("redis://127.0.0.1:{}/", proxy.port));
    // One shard, so a batch is one script: the whole reply is lost at once.
    let f = SharedFilter::create_with(
        &ep,
        "replay",
        &FilterConfig::new(1_000),
        &SharedOptions {
            shards: Some(1),
            counting: true,
        },
    )
    .unwrap();
    let twice = keys("twice", 100);
    f.insert_many(&twice).unwrap();
    f.insert_many(&twice).unwrap();
    let before: Vec<u8> = twice.iter().map(|k| f.counts(k).unwrap()[0]).collect();
    assert!(before.iter().all(|&c| c >= 2));

    // The server runs the remove; its reply is cut; bloomsled reconnects and sends it again.
    proxy.armed.store(true, Ordering::SeqCst);
    let removed = f.remove_many(&twice).unwrap();
    assert_eq!(
        proxy.cuts.load(Ordering::SeqCst),
        1,
        "the reply was not cut"
    );
    assert!(
        removed.iter().all(|&r| r),
        "the replay must give the first answer"
    );
    // Lowered once, not twice: every key added twice and removed once is still there.
    for (k, b) in twice.iter().zip(&before) {
        assert_eq!(f.counts(k).unwrap()[0], b - 1);
    }
    assert!(f.contains_many(&twice).unwrap().iter().all(|&m| m));
}

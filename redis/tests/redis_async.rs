//! The async shared filter (feature `tokio`) against real `redis-server` processes, under a
//! multi-threaded runtime: adds, lookups and batches; a sync and an async client on one
//! filter; a flushed or restarted-empty server is an error, never "absent"; a 3-master
//! cluster (created unsettled, so the first commands meet `CLUSTERDOWN`); and a
//! `current_thread` runtime whose timer keeps ticking while a call waits on a Redis that
//! holds its reply (`CLIENT PAUSE`), where the sync filter called in its place stops it.
#![cfg(all(feature = "server-tests", feature = "tokio"))]

mod redis_support;

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use bloomsled::clock::ManualClock;
use bloomsled::FilterConfig;
use bloomsled_redis::Error;
use bloomsled_redis::{
    AsyncSharedFilter, AsyncSharedWindow, Endpoint, SharedFilter, SharedOptions, SharedWindow,
    SharedWindowConfig,
};
use redis_support::{Cluster, Server};

fn keys(prefix: &str, n: usize) -> Vec<Vec<u8>> {
    (0..n)
        .map(|i| format!("https://{prefix}.example/{i}").into_bytes())
        .collect()
}

fn is_lost(e: &Error) -> bool {
    matches!(e, Error::SharedFilterLost { .. })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn adds_lookups_and_batches_answer_and_tasks_share_one_handle() {
    require_redis!();
    let s = Server::start();
    let ep = Endpoint::url(s.url());
    let config = FilterConfig::new(20_000).false_positive_rate(0.01);
    let f = AsyncSharedFilter::create(&ep, "urls", &config)
        .await
        .unwrap();
    let added = keys("in", 20_000);
    let news = f.insert_many(&added).await.unwrap();
    assert_eq!(news.len(), added.len());
    assert!(news.iter().filter(|&&n| n).count() > 19_800);
    assert!(f.contains_many(&added).await.unwrap().iter().all(|&b| b));
    // Single-key paths agree with the batches.
    assert!(f.contains(&added[7]).await.unwrap());
    assert!(
        !f.insert(&added[7]).await.unwrap(),
        "re-adding a key is not new"
    );
    // "New" means a bit was set: in a full filter the empty key may be a false positive.
    let was = f.contains(b"").await.unwrap();
    assert_eq!(f.insert(b"").await.unwrap(), !was, "empty key");
    assert!(f.contains(b"").await.unwrap());
    // Absent keys: mostly rejected, at about the rate the filter was sized for.
    let absent = keys("out", 20_000);
    let fp = f
        .contains_many(&absent)
        .await
        .unwrap()
        .iter()
        .filter(|&&b| b)
        .count();
    assert!(fp < 600, "{fp} false positives in 20,000 at 1%");
    assert!(f.contains_many::<&[u8]>(&[]).await.unwrap().is_empty());
    assert!(f.insert_many::<&[u8]>(&[]).await.unwrap().is_empty());

    // Eight tasks on one handle (one multiplexed connection), adding and looking up at
    // once: every key each added is found by all.
    let f = Arc::new(f);
    let mut tasks = Vec::new();
    for t in 0..8 {
        let f = f.clone();
        tasks.push(tokio::spawn(async move {
            let mine = keys(&format!("task{t}"), 2_000);
            for chunk in mine.chunks(100) {
                f.insert_many(chunk).await.unwrap();
                assert!(f.contains(&chunk[0]).await.unwrap());
            }
            mine
        }));
    }
    let mut all = Vec::new();
    for t in tasks {
        all.extend(t.await.unwrap());
    }
    assert!(f.contains_many(&all).await.unwrap().iter().all(|&b| b));

    // Open finds the same filter; create with another shape is refused.
    let again = AsyncSharedFilter::open(&ep, "urls").await.unwrap();
    assert_eq!(
        (again.incarnation(), again.shape()),
        (f.incarnation(), f.shape())
    );
    assert!(again
        .contains_many(&added)
        .await
        .unwrap()
        .iter()
        .all(|&b| b));
    let other = FilterConfig::new(50_000);
    assert!(matches!(
        AsyncSharedFilter::create(&ep, "urls", &other).await,
        Err(Error::RedisShapeMismatch { .. })
    ));
    assert!(matches!(
        AsyncSharedFilter::open(&ep, "nothing-here").await,
        Err(Error::SharedFilterNotFound { .. })
    ));
    // A plain filter has no counters to remove from.
    assert!(matches!(
        f.remove(b"x").await,
        Err(Error::InvalidConfig { .. })
    ));
    Arc::try_unwrap(f).unwrap().destroy().await.unwrap();
    assert!(matches!(
        again.contains(&added[0]).await,
        Err(e) if is_lost(&e)
    ));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sync_and_an_async_client_share_one_filter() {
    require_redis!();
    let s = Server::start();
    let ep = Endpoint::url(s.url());
    let config = FilterConfig::new(10_000);
    // Racing creators, one sync and one async: one filter.
    let sync_ep = ep.clone();
    let sync_config = config.clone();
    let sync = tokio::task::spawn_blocking(move || {
        SharedFilter::create(&sync_ep, "both", &sync_config).unwrap()
    });
    let asy = AsyncSharedFilter::create(&ep, "both", &config)
        .await
        .unwrap();
    let sync = Arc::new(sync.await.unwrap());
    assert_eq!(sync.incarnation(), asy.incarnation());
    assert_eq!(sync.shape(), asy.shape());
    assert_eq!(sync.shard_keys(), asy.shard_keys());
    assert_eq!(sync.config_key(), asy.config_key());

    let by_sync = keys("sync", 5_000);
    let by_async = keys("async", 5_000);
    let s2 = sync.clone();
    let k2 = by_sync.clone();
    tokio::task::spawn_blocking(move || s2.insert_many(&k2).unwrap())
        .await
        .unwrap();
    asy.insert_many(&by_async).await.unwrap();
    // Each finds the other's keys, and sees them as not new.
    assert!(asy
        .contains_many(&by_sync)
        .await
        .unwrap()
        .iter()
        .all(|&b| b));
    assert!(asy.insert_many(&by_sync).await.unwrap().iter().all(|&n| !n));
    let (s2, k2) = (sync.clone(), by_async.clone());
    let (found, news) = tokio::task::spawn_blocking(move || {
        (s2.contains_many(&k2).unwrap(), s2.insert_many(&k2).unwrap())
    })
    .await
    .unwrap();
    assert!(found.iter().all(|&b| b) && news.iter().all(|&n| !n));
    // The same answer for absent keys, bit for bit.
    let absent = keys("neither", 5_000);
    let (s2, k2) = (sync.clone(), absent.clone());
    let sync_answers = tokio::task::spawn_blocking(move || s2.contains_many(&k2).unwrap())
        .await
        .unwrap();
    assert_eq!(asy.contains_many(&absent).await.unwrap(), sync_answers);

    // A counting filter: an add by one is removed by the other, and the counts agree.
    let counting = SharedOptions {
        counting: true,
        ..SharedOptions::default()
    };
    let ca = AsyncSharedFilter::create_with(&ep, "counted", &config, &counting)
        .await
        .unwrap();
    let (ep2, config2) = (ep.clone(), config.clone());
    let cs = tokio::task::spawn_blocking(move || {
        let cs = SharedFilter::create_counting(&ep2, "counted", &config2).unwrap();
        cs.insert(b"token").unwrap();
        cs.insert(b"token").unwrap();
        cs
    })
    .await
    .unwrap();
    assert_eq!(cs.incarnation(), ca.incarnation());
    assert!(ca.insert(b"other").await.unwrap());
    assert_eq!(ca.counts(b"token").await.unwrap()[0], 2);
    assert!(ca.remove(b"token").await.unwrap());
    let cs = Arc::new(cs);
    let cs2 = cs.clone();
    let (counts, found) = tokio::task::spawn_blocking(move || {
        (
            cs2.counts(b"token").unwrap(),
            cs2.contains(b"other").unwrap(),
        )
    })
    .await
    .unwrap();
    assert_eq!(counts[0], 1);
    assert!(found);
    assert_eq!(
        ca.remove_many(&[&b"token"[..], b"never-added"])
            .await
            .unwrap(),
        vec![true, false]
    );
    assert!(!ca.contains(b"token").await.unwrap());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_flushed_or_restarted_empty_server_is_an_error_never_absent() {
    require_redis!();
    let mut s = Server::start();
    let ep = Endpoint::url(s.url());
    let f = AsyncSharedFilter::create(&ep, "lost", &FilterConfig::new(5_000))
        .await
        .unwrap();
    let added = keys("k", 2_000);
    f.insert_many(&added).await.unwrap();

    redis::cmd("FLUSHALL").exec(&mut s.client()).unwrap();
    // Every operation meets the loss: lookups of added keys and absent ones, adds, batches.
    for k in [&added[0][..], b"never-added"] {
        assert!(matches!(f.contains(k).await, Err(e) if is_lost(&e)));
        assert!(matches!(f.insert(k).await, Err(e) if is_lost(&e)));
    }
    assert!(matches!(f.contains_many(&added).await, Err(e) if is_lost(&e)));
    assert!(matches!(f.insert_many(&added).await, Err(e) if is_lost(&e)));
    assert!(matches!(
        AsyncSharedFilter::open(&ep, "lost").await,
        Err(Error::SharedFilterNotFound { .. })
    ));

    // Created again, then the server restarts without its data: the handle's connection
    // drops, it reconnects, and finds the filter gone.
    let f = AsyncSharedFilter::create(&ep, "lost", &FilterConfig::new(5_000))
        .await
        .unwrap();
    f.insert_many(&added).await.unwrap();
    assert!(f.contains_many(&added).await.unwrap().iter().all(|&b| b));
    s.restart();
    assert!(matches!(f.contains(&added[1]).await, Err(e) if is_lost(&e)));
    assert!(matches!(f.contains_many(&added).await, Err(e) if is_lost(&e)));

    // A server that is down is an error, not an answer.
    s.kill();
    assert!(matches!(f.contains(&added[1]).await, Err(Error::Redis(_))));
    assert!(matches!(
        AsyncSharedFilter::open(&ep, "lost").await,
        Err(Error::Redis(_))
    ));
    assert!(matches!(
        AsyncSharedFilter::open(&Endpoint::url(""), "lost").await,
        Err(Error::InvalidConfig { .. })
    ));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cluster_filter_answers_from_every_master_and_reports_a_flushed_one() {
    require_redis!();
    // Straight after `--cluster create`: the create meets CLUSTERDOWN and waits it out.
    let c = Cluster::start_unsettled(3);
    let ep = Endpoint::cluster(c.urls());
    let f = AsyncSharedFilter::create(&ep, "spread", &FilterConfig::new(30_000))
        .await
        .unwrap();
    c.wait_ok();
    for (i, n) in c.nodes.iter().enumerate() {
        let held = n.cli(&["dbsize"]).trim().parse::<u64>().unwrap();
        assert!(held >= 4, "master {i} holds {held} keys");
    }
    let added = keys("in", 30_000);
    f.insert_many(&added).await.unwrap();
    assert!(f.contains_many(&added).await.unwrap().iter().all(|&b| b));
    for k in added.iter().step_by(997) {
        assert!(f.contains(k).await.unwrap());
        assert!(!f.insert(k).await.unwrap());
    }
    let absent = keys("out", 30_000);
    let fp = f
        .contains_many(&absent)
        .await
        .unwrap()
        .iter()
        .filter(|&&b| b)
        .count();
    assert!(fp < 300, "{fp} false positives in 30,000 at 0.1%");

    // The sync client on the same cluster sees the same filter and the same answers.
    let (ep2, k2) = (ep.clone(), absent.clone());
    let (incarnation, sync_answers) = tokio::task::spawn_blocking(move || {
        let s = SharedFilter::open(&ep2, "spread").unwrap();
        (s.incarnation(), s.contains_many(&k2).unwrap())
    })
    .await
    .unwrap();
    assert_eq!(incarnation, f.incarnation());
    assert_eq!(f.contains_many(&absent).await.unwrap(), sync_answers);

    // One master flushed: the batch that reads its shards fails as lost.
    redis::cmd("FLUSHALL")
        .exec(&mut c.nodes[1].client())
        .unwrap();
    assert!(matches!(f.contains_many(&added).await, Err(e) if is_lost(&e)));
    assert!(matches!(f.insert_many(&added).await, Err(e) if is_lost(&e)));
}

/// A shard's slot migrating (`ASK`), then moved (`MOVED`), under the async filter: adds go
/// on a connection without retries that follows each redirection itself (an `ASK` after an
/// `ASKING`), and answer exactly; lookups on the retrying one; no key is lost.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn async_adds_follow_ask_and_moved_while_a_shard_migrates() {
    require_redis!();
    let c = Cluster::start(3);
    let ep = Endpoint::cluster(c.urls());
    // Every add's answer is checked against a model: a local filter of the same config and
    // seed, whose layout the shared one copies bit for bit. Seed 28 makes one of the 500
    // late keys a false positive of the keys before it, whose exact answer is "not new"
    // (with a random seed, about one run in ninety).
    let config = FilterConfig::new(10_000).seed(28);
    let f = AsyncSharedFilter::create(&ep, "moving", &config)
        .await
        .unwrap();
    let model = config.build().unwrap();
    let added = keys("m", 5_000);
    f.insert_many(&added).await.unwrap();
    for k in &added {
        model.insert(k);
    }
    let shard = f.shard_keys()[0].clone();
    let moving = c.begin_migration(&shard);
    // Mid-migration: the shard is on `to`, the slot still `from`'s: every add to it gets
    // ASK, and follows it (one pipeline of ASKING and the add). Lookups go one at a time:
    // redis-rs's own ASK handling (an ASKING sent as a request of its own on a multiplexed
    // connection) fails batches of many concurrent lookups to a migrating slot.
    let late = keys("late", 500);
    let late_new: Vec<bool> = late.iter().map(|k| model.insert(k)).collect();
    assert_eq!(f.insert_many(&late).await.unwrap(), late_new);
    let one = b"one more while migrating";
    assert_eq!(f.insert(one).await.unwrap(), model.insert(one));
    for k in added.iter().step_by(50) {
        assert!(!f.insert(k).await.unwrap(), "an added key answered new");
        assert!(f.contains(k).await.unwrap());
    }
    c.finish_migration(&moving);
    // Moved: the old route answers MOVED.
    let one = b"one more after the move";
    assert_eq!(f.insert(one).await.unwrap(), model.insert(one));
    for k in added.iter().step_by(50).chain(late.iter().step_by(10)) {
        assert!(f.contains(k).await.unwrap());
    }
    assert!(!f.insert(&late[0]).await.unwrap());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_async_window_shares_a_window_with_the_sync_one_and_reports_its_loss() {
    require_redis!();
    let s = Server::start();
    let ep = Endpoint::url(s.url());
    let clock = ManualClock::new(1_000_000_000);
    let config = SharedWindowConfig::new(Duration::from_secs(60), 3, FilterConfig::new(10_000))
        .clock(clock.clone());
    let w = AsyncSharedWindow::create(&ep, "recent", &config)
        .await
        .unwrap();
    assert_eq!((w.name(), w.generations()), ("recent", 3));
    let first = keys("first", 3_000);
    assert!(
        w.insert_many(&first)
            .await
            .unwrap()
            .iter()
            .filter(|&&n| n)
            .count()
            > 2_990
    );
    assert!(w.contains_many(&first).await.unwrap().iter().all(|&b| b));
    // One generation later, a sync handle of the same window adds; both see both.
    clock.advance(Duration::from_secs(20));
    let second = keys("second", 3_000);
    let (ep2, c2, k2) = (ep.clone(), clock.clone(), second.clone());
    let (incarnation, sees_first) = tokio::task::spawn_blocking(move || {
        let sw = SharedWindow::open_with_clock(&ep2, "recent", c2).unwrap();
        sw.insert_many(&k2).unwrap();
        let first = keys("first", 3_000);
        (sw.incarnation(), sw.contains_many(&first).unwrap())
    })
    .await
    .unwrap();
    assert_eq!(incarnation, w.incarnation());
    assert!(sees_first.iter().all(|&b| b));
    assert!(w.contains_many(&second).await.unwrap().iter().all(|&b| b));
    assert!(w.contains(&second[0]).await.unwrap() && !w.insert(&second[0]).await.unwrap());
    assert_eq!(w.stats().await.unwrap().live.len(), 2);
    // Past the span, the first keys are forgotten.
    clock.advance(Duration::from_secs(45));
    assert!(!w.contains_many(&first).await.unwrap().iter().all(|&b| b));

    // The server flushed: an error, never "absent".
    redis::cmd("FLUSHALL").exec(&mut s.client()).unwrap();
    assert!(matches!(w.contains(&second[0]).await, Err(e) if is_lost(&e)));
    assert!(matches!(w.contains_many(&second).await, Err(e) if is_lost(&e)));
    assert!(matches!(w.insert(b"k").await, Err(e) if is_lost(&e)));
}

/// The async window on a 3-master cluster (straight after `--cluster create`), under a
/// multi-threaded runtime: tasks sharing one handle add and look up across a rotation, a
/// sync handle sees the same window, the generations spread over the masters, and a
/// flushed master is an error, never "absent".
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_async_window_on_a_cluster_answers_across_rotations_and_reports_a_flushed_master() {
    require_redis!();
    let c = Cluster::start_unsettled(3);
    let ep = Endpoint::cluster(c.urls());
    let clock = ManualClock::new(1_000_000_000);
    let config = SharedWindowConfig::new(Duration::from_secs(60), 3, FilterConfig::new(20_000))
        .clock(clock.clone());
    let w = Arc::new(
        AsyncSharedWindow::create(&ep, "cluster-recent", &config)
            .await
            .unwrap(),
    );
    c.wait_ok();
    // Four tasks on one handle, each its own keys.
    let tasks: Vec<_> = (0..4)
        .map(|t| {
            let w = w.clone();
            tokio::spawn(async move {
                let mine = keys(&format!("t{t}"), 2_000);
                let new = w.insert_many(&mine).await.unwrap();
                assert!(new.iter().filter(|&&n| n).count() > 1_990);
                assert!(w.contains_many(&mine).await.unwrap().iter().all(|&b| b));
            })
        })
        .collect();
    for t in tasks {
        t.await.unwrap();
    }
    // The next generation: a sync handle adds, the async one sees both generations.
    clock.advance(Duration::from_secs(20));
    let second = keys("second", 2_000);
    let (ep2, c2, k2) = (ep.clone(), clock.clone(), second.clone());
    let incarnation = tokio::task::spawn_blocking(move || {
        let sw = SharedWindow::open_with_clock(&ep2, "cluster-recent", c2).unwrap();
        sw.insert_many(&k2).unwrap();
        sw.incarnation()
    })
    .await
    .unwrap();
    assert_eq!(incarnation, w.incarnation());
    assert!(w.contains_many(&second).await.unwrap().iter().all(|&b| b));
    let first = keys("t0", 2_000);
    assert!(w.contains_many(&first).await.unwrap().iter().all(|&b| b));
    assert_eq!(w.stats().await.unwrap().live.len(), 2);
    let absent = keys("absent", 20_000);
    let fp = w
        .contains_many(&absent)
        .await
        .unwrap()
        .iter()
        .filter(|&&b| b)
        .count();
    assert!(
        fp < 200,
        "{fp} false positives in 20,000 over two generations"
    );
    // Every master holds some of the window.
    for (i, n) in c.nodes.iter().enumerate() {
        let held = n.cli(&["dbsize"]).trim().parse::<u64>().unwrap();
        assert!(held >= 1, "master {i} holds {held} keys");
    }
    // One master flushed: lookups and adds that need it fail as lost.
    redis::cmd("FLUSHALL")
        .exec(&mut c.nodes[1].client())
        .unwrap();
    assert!(matches!(w.contains_many(&second).await, Err(e) if is_lost(&e)));
    assert!(matches!(w.insert_many(&absent).await, Err(e) if is_lost(&e)));
}

/// Counts the ticks of a 5 ms interval on the calling runtime while `call` is pending.
async fn ticks_during<F: std::future::Future>(call: F) -> (u64, F::Output) {
    let ticks = Arc::new(AtomicU64::new(0));
    let counter = ticks.clone();
    let ticker = tokio::spawn(async move {
        let mut every = tokio::time::interval(Duration::from_millis(5));
        every.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            every.tick().await;
            counter.fetch_add(1, Ordering::SeqCst);
        }
    });
    // Let the ticker start before the call.
    tokio::time::sleep(Duration::from_millis(20)).await;
    let before = ticks.load(Ordering::SeqCst);
    let out = call.await;
    // Read at once, without yielding: no tick can run between the call's end and here.
    let during = ticks.load(Ordering::SeqCst) - before;
    ticker.abort();
    eprintln!("{during} ticks of 5 ms while the call was pending");
    (during, out)
}

#[test]
fn a_round_trip_to_a_slow_redis_leaves_the_runtime_ticking() {
    require_redis!();
    let s = Server::start();
    let url = s.url();
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let ep = Endpoint::url(url);
        let f = AsyncSharedFilter::create(&ep, "slow", &FilterConfig::new(1_000))
            .await
            .unwrap();
        f.insert(b"k").await.unwrap();
        let sync = SharedFilter::open(&ep, "slow").unwrap();
        let mut admin = s.client();

        // Redis holds every other client's commands for 500 ms: the async lookup awaits
        // its reply while the one worker keeps running the ticker.
        redis::cmd("CLIENT")
            .arg("PAUSE")
            .arg(500)
            .arg("ALL")
            .exec(&mut admin)
            .unwrap();
        let (ticks, found) = ticks_during(f.contains(b"k")).await;
        assert!(found.unwrap());
        assert!(
            ticks >= 10,
            "{ticks} ticks of 5 ms while the async lookup waited ~500 ms"
        );

        // The control: the sync filter in the same place parks the only worker, and not
        // one tick runs while it waits. (This is what the async filter exists to avoid.)
        redis::cmd("CLIENT")
            .arg("PAUSE")
            .arg(500)
            .arg("ALL")
            .exec(&mut admin)
            .unwrap();
        let (ticks, found) = ticks_during(async { sync.contains(b"k") }).await;
        assert!(found.unwrap());
        assert_eq!(
            ticks, 0,
            "the sync lookup blocked the runtime's only worker"
        );

        // The async window, paused the same way: the worker keeps ticking.
        let config = SharedWindowConfig::new(Duration::from_secs(60), 2, FilterConfig::new(100));
        let w = AsyncSharedWindow::create(&ep, "slow-window", &config)
            .await
            .unwrap();
        w.insert(b"k").await.unwrap();
        redis::cmd("CLIENT")
            .arg("PAUSE")
            .arg(500)
            .arg("ALL")
            .exec(&mut admin)
            .unwrap();
        let (ticks, found) = ticks_during(w.contains(b"k")).await;
        assert!(found.unwrap());
        assert!(
            ticks >= 10,
            "{ticks} ticks while the window's lookup waited"
        );
    });
}

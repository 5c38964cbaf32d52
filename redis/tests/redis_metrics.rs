//! The shared filters' and windows' series (feature `metrics`) against a real recorder (metrics-util's
//! `DebuggingRecorder`) and real `redis-server` processes: after known calls, including a
//! Redis killed and started again (retries), a reply lost after its add ran (an unknown
//! outcome), every series is there with the label `filter` and the value the calls imply.
#![cfg(all(feature = "server-tests", feature = "metrics", feature = "tokio"))]

mod redis_support;

use std::collections::HashMap;
use std::time::Duration;

use bloomsled::FilterConfig;
use bloomsled_redis::telemetry::{SHARED_SERIES, SHARED_WINDOW_SERIES};
use bloomsled_redis::Error;
use bloomsled_redis::{
    AsyncSharedFilter, AsyncSharedWindow, Endpoint, SharedFilter, SharedStats, SharedWindow,
    SharedWindowConfig, SharedWindowStats,
};
use metrics_util::debugging::{DebugValue, DebuggingRecorder};
use redis_support::relay::Relay;
use redis_support::Server;

fn key(i: usize) -> Vec<u8> {
    format!("https://example.com/m/{i}").into_bytes()
}

fn count(answers: &[bool], value: bool) -> u64 {
    answers.iter().filter(|&&b| b == value).count() as u64
}

/// Runs `record` under a fresh recorder; every series labelled `filter = name`, by name.
fn recorded(name: &str, record: impl FnOnce()) -> HashMap<String, DebugValue> {
    recorded_as("filter", name, record)
}

/// Every series labelled `window = name`, by name.
fn recorded_window(name: &str, record: impl FnOnce()) -> HashMap<String, DebugValue> {
    recorded_as("window", name, record)
}

fn recorded_as(label: &str, name: &str, record: impl FnOnce()) -> HashMap<String, DebugValue> {
    let recorder = DebuggingRecorder::new();
    let snapshotter = recorder.snapshotter();
    metrics::with_local_recorder(&recorder, record);
    snapshotter
        .snapshot()
        .into_vec()
        .into_iter()
        .filter(|(k, ..)| {
            k.key()
                .labels()
                .any(|l| l.key() == label && l.value() == name)
        })
        .map(|(k, _, _, v)| (k.key().name().to_owned(), v))
        .collect()
}

fn counter(m: &HashMap<String, DebugValue>, name: &str) -> u64 {
    match m.get(name) {
        Some(DebugValue::Counter(c)) => *c,
        other => panic!("{name}: {other:?}"),
    }
}

fn gauge(m: &HashMap<String, DebugValue>, name: &str) -> f64 {
    match m.get(name) {
        Some(DebugValue::Gauge(g)) => g.into_inner(),
        other => panic!("{name}: {other:?}"),
    }
}

/// The gauges are the filter's stats at record time.
fn check_gauges(m: &HashMap<String, DebugValue>, s: &SharedStats) {
    assert_eq!(gauge(m, "bloomsled_shared_fill_ratio"), s.fill_ratio);
    assert_eq!(
        gauge(m, "bloomsled_shared_estimated_items"),
        s.estimated_items as f64
    );
    assert_eq!(gauge(m, "bloomsled_shared_estimated_fpr"), s.estimated_fpr);
    assert_eq!(
        gauge(m, "bloomsled_shared_redis_bytes"),
        s.redis_bytes as f64
    );
    assert!(s.estimated_items > 0 && s.fill_ratio > 0.0);
}

#[test]
fn a_shared_filter_records_what_its_calls_did() {
    require_redis!();
    let mut s = Server::start_persistent();
    let relay = Relay::start(&s);
    let ep = Endpoint::url(relay.url()).retry_for(Duration::from_secs(20));
    let f =
        SharedFilter::create_sharded(&ep, "m-sync", &FilterConfig::new(10_000), Some(1)).unwrap();
    let keys: Vec<Vec<u8>> = (0..200).map(key).collect();
    let first = f.insert_many(&keys[..100]).unwrap();
    let again = f.insert_many(&keys[..10]).unwrap();
    let looked = f.contains_many(&keys[50..150]).unwrap();
    // A reply lost after the add ran: an unknown outcome, an error.
    relay.lose_next_reply();
    let lost = f.insert(b"lost-reply");
    assert!(
        matches!(lost, Err(Error::RedisOutcomeUnknown { .. })),
        "{lost:?}"
    );
    // Redis killed and started again with its data: the lookup retries, then answers.
    s.kill();
    let looked2 = std::thread::scope(|scope| {
        scope.spawn(|| {
            std::thread::sleep(Duration::from_millis(500));
            s.start_again();
        });
        f.contains_many(&keys[190..]).unwrap()
    });
    let m = recorded("m-sync", || f.record_metrics().unwrap());
    assert_eq!(
        SHARED_SERIES.iter().filter(|n| m.contains_key(**n)).count(),
        SHARED_SERIES.len(),
        "every series: {m:?}"
    );
    assert_eq!(counter(&m, "bloomsled_shared_adds_total"), 110);
    assert_eq!(
        counter(&m, "bloomsled_shared_new_total"),
        count(&first, true) + count(&again, true)
    );
    assert_eq!(counter(&m, "bloomsled_shared_lookups_total"), 110);
    assert_eq!(
        counter(&m, "bloomsled_shared_absent_total"),
        count(&looked, false) + count(&looked2, false)
    );
    assert!(count(&looked, false) >= 45, "{looked:?}");
    assert_eq!(counter(&m, "bloomsled_shared_redis_errors_total"), 1);
    assert_eq!(counter(&m, "bloomsled_shared_outcome_unknown_total"), 1);
    assert!(counter(&m, "bloomsled_shared_retries_total") >= 1);
    check_gauges(&m, &f.stats().unwrap());

    // A second recording adds only what happened since the first.
    f.contains(b"one more").unwrap();
    let m = recorded("m-sync", || f.record_metrics().unwrap());
    assert_eq!(counter(&m, "bloomsled_shared_lookups_total"), 1);
    assert_eq!(counter(&m, "bloomsled_shared_adds_total"), 0);
}

#[test]
fn an_async_shared_filter_records_what_its_calls_did() {
    require_redis!();
    let s = Server::start();
    let relay = Relay::start(&s);
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let ep = Endpoint::url(relay.url()).retry_for(Duration::from_secs(10));
    let config = FilterConfig::new(10_000);
    let f = rt
        .block_on(AsyncSharedFilter::create(&ep, "m-async", &config))
        .unwrap();
    let keys: Vec<Vec<u8>> = (0..200).map(key).collect();
    let first = rt.block_on(f.insert_many(&keys[..100])).unwrap();
    let looked = rt.block_on(f.contains_many(&keys[50..150])).unwrap();
    relay.lose_next_reply();
    let lost = rt.block_on(f.insert(b"lost-reply"));
    assert!(
        matches!(lost, Err(Error::RedisOutcomeUnknown { .. })),
        "{lost:?}"
    );
    let m = recorded("m-async", || rt.block_on(f.record_metrics()).unwrap());
    assert_eq!(counter(&m, "bloomsled_shared_adds_total"), 100);
    assert_eq!(
        counter(&m, "bloomsled_shared_new_total"),
        count(&first, true)
    );
    assert_eq!(counter(&m, "bloomsled_shared_lookups_total"), 100);
    assert_eq!(
        counter(&m, "bloomsled_shared_absent_total"),
        count(&looked, false)
    );
    assert_eq!(counter(&m, "bloomsled_shared_redis_errors_total"), 1);
    assert_eq!(counter(&m, "bloomsled_shared_outcome_unknown_total"), 1);
    assert_eq!(counter(&m, "bloomsled_shared_retries_total"), 0);
    let sync = SharedFilter::open(&ep, "m-async").unwrap();
    check_gauges(&m, &sync.stats().unwrap());
}

/// A counting filter's gauges, async as sync: its non-zero counters, read through the
/// filter (no Redis command counts nibbles), agree with the sync filter's stats, and follow
/// a remove. (Once the async counting filter recorded counters only.)
#[test]
fn an_async_counting_filter_records_its_gauges() {
    require_redis!();
    let s = Server::start();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let ep = Endpoint::url(s.url());
    let options = bloomsled_redis::SharedOptions {
        shards: Some(3),
        counting: true,
    };
    let f = rt
        .block_on(AsyncSharedFilter::create_with(
            &ep,
            "m-counting",
            &FilterConfig::new(5_000),
            &options,
        ))
        .unwrap();
    let keys: Vec<Vec<u8>> = (0..300).map(key).collect();
    rt.block_on(f.insert_many(&keys)).unwrap();
    let sync = SharedFilter::open(&ep, "m-counting").unwrap();
    let m = recorded("m-counting", || rt.block_on(f.record_metrics()).unwrap());
    let before = sync.stats().unwrap();
    check_gauges(&m, &before);
    assert!(
        before.estimated_items.abs_diff(300) < 30,
        "{} items estimated for 300",
        before.estimated_items
    );
    for k in &keys[..100] {
        assert!(rt.block_on(f.remove(k)).unwrap());
    }
    let m = recorded("m-counting", || rt.block_on(f.record_metrics()).unwrap());
    let after = sync.stats().unwrap();
    check_gauges(&m, &after);
    assert!(after.fill_ratio < before.fill_ratio);
}

/// The window gauges are sums (a mean for the fill) over the live generations' stats.
fn check_window_gauges(m: &HashMap<String, DebugValue>, s: &SharedWindowStats) {
    let p = "bloomsled_shared_window_";
    assert_eq!(gauge(m, &format!("{p}generations")), s.live.len() as f64);
    let items: u64 = s.live.iter().map(|g| g.filter.estimated_items).sum();
    assert_eq!(gauge(m, &format!("{p}estimated_items")), items as f64);
    let bytes: u64 = s.live.iter().map(|g| g.filter.redis_bytes).sum();
    assert_eq!(gauge(m, &format!("{p}redis_bytes")), bytes as f64);
    let fill: f64 = s.live.iter().map(|g| g.filter.fill_ratio).sum::<f64>() / s.live.len() as f64;
    assert!((gauge(m, &format!("{p}fill_ratio")) - fill).abs() < 1e-12);
    assert!(items > 0);
}

#[test]
fn shared_windows_sync_and_async_record_what_their_calls_did() {
    require_redis!();
    let s = Server::start();
    let relay = Relay::start(&s);
    let ep = Endpoint::url(relay.url()).retry_for(Duration::from_secs(10));
    let config = SharedWindowConfig::new(Duration::from_secs(3600), 4, FilterConfig::new(10_000));
    let w = SharedWindow::create(&ep, "m-window", &config).unwrap();
    let keys: Vec<Vec<u8>> = (0..200).map(key).collect();
    let first = w.insert_many(&keys[..100]).unwrap();
    let again = w.insert_many(&keys[..10]).unwrap();
    let looked = w.contains_many(&keys[50..150]).unwrap();
    relay.lose_next_reply();
    let lost = w.insert(b"lost-reply");
    assert!(
        matches!(lost, Err(Error::RedisOutcomeUnknown { .. })),
        "{lost:?}"
    );
    let m = recorded_window("m-window", || w.record_metrics().unwrap());
    assert_eq!(
        SHARED_WINDOW_SERIES
            .iter()
            .filter(|n| m.contains_key(**n))
            .count(),
        SHARED_WINDOW_SERIES.len(),
        "every series: {m:?}"
    );
    let p = "bloomsled_shared_window_";
    assert_eq!(counter(&m, &format!("{p}adds_total")), 110);
    assert_eq!(
        counter(&m, &format!("{p}new_total")),
        count(&first, true) + count(&again, true)
    );
    assert_eq!(counter(&m, &format!("{p}lookups_total")), 100);
    assert_eq!(
        counter(&m, &format!("{p}absent_total")),
        count(&looked, false)
    );
    assert_eq!(counter(&m, &format!("{p}redis_errors_total")), 1);
    assert_eq!(counter(&m, &format!("{p}outcome_unknown_total")), 1);
    check_window_gauges(&m, &w.stats().unwrap());

    // The async window: its own handle, its own counters.
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let aw = rt
        .block_on(AsyncSharedWindow::open(&ep, "m-window"))
        .unwrap();
    let looked = rt.block_on(aw.contains_many(&keys[150..])).unwrap();
    let added = rt.block_on(aw.insert_many(&keys[150..160])).unwrap();
    let m = recorded_window("m-window", || rt.block_on(aw.record_metrics()).unwrap());
    assert_eq!(counter(&m, &format!("{p}lookups_total")), 50);
    assert_eq!(
        counter(&m, &format!("{p}absent_total")),
        count(&looked, false)
    );
    assert_eq!(counter(&m, &format!("{p}adds_total")), 10);
    assert_eq!(counter(&m, &format!("{p}new_total")), count(&added, true));
    assert_eq!(counter(&m, &format!("{p}redis_errors_total")), 0);
    check_window_gauges(&m, &w.stats().unwrap());
}

//! The `metrics` feature against a real recorder (metrics-util's `DebuggingRecorder`,
//! installed globally once): after known operations every series is there, with its label
//! and the value the operations imply.

use std::collections::HashMap;
use std::sync::{Mutex, OnceLock};
use std::time::{Duration, Instant};

use bloomsled::telemetry::{self, TREE_SERIES, WINDOW_SERIES};
use bloomsled::window::WindowConfig;
use bloomsled::Config;
use metrics_util::debugging::{DebugValue, DebuggingRecorder, Snapshotter};

/// The process's recorder, installed by the first test that asks.
fn snapshotter() -> &'static Snapshotter {
    static S: OnceLock<Snapshotter> = OnceLock::new();
    S.get_or_init(|| {
        let r = DebuggingRecorder::new();
        let s = r.snapshotter();
        r.install().expect("no other recorder is installed");
        s
    })
}

/// The tests share one recorder and the process-wide rebuild hold: one at a time.
fn serial() -> std::sync::MutexGuard<'static, ()> {
    static M: Mutex<()> = Mutex::new(());
    let g = M.lock().unwrap_or_else(|p| p.into_inner());
    // Installed before anything is recorded: a recording before it would be lost.
    snapshotter();
    g
}

/// Every series labelled `label = value`, by name. The debugging recorder's snapshot
/// drains what it reports (counters and gauges back to 0), so counters are summed over
/// every snapshot taken so far; a gauge is as the latest snapshot saw it.
fn series(label: &str, value: &str) -> HashMap<String, DebugValue> {
    type Seen = HashMap<(String, Vec<(String, String)>), DebugValue>;
    static SEEN: Mutex<Option<Seen>> = Mutex::new(None);
    let mut seen = SEEN.lock().unwrap_or_else(|p| p.into_inner());
    let seen = seen.get_or_insert_with(HashMap::new);
    for (k, _, _, v) in snapshotter().snapshot().into_vec() {
        let labels = k
            .key()
            .labels()
            .map(|l| (l.key().to_owned(), l.value().to_owned()))
            .collect();
        let e = seen
            .entry((k.key().name().to_owned(), labels))
            .or_insert(DebugValue::Counter(0));
        *e = match (&*e, v) {
            (DebugValue::Counter(a), DebugValue::Counter(b)) => DebugValue::Counter(a + b),
            (_, v) => v,
        };
    }
    seen.iter()
        .filter(|((_, labels), _)| labels.iter().any(|(k, v)| k == label && v == value))
        .map(|((name, _), v)| {
            let v = match v {
                DebugValue::Counter(c) => DebugValue::Counter(*c),
                DebugValue::Gauge(g) => DebugValue::Gauge(*g),
                DebugValue::Histogram(h) => DebugValue::Histogram(h.clone()),
            };
            (name.clone(), v)
        })
        .collect()
}

fn counter(s: &HashMap<String, DebugValue>, name: &str) -> u64 {
    match s.get(name) {
        Some(DebugValue::Counter(v)) => *v,
        other => panic!("{name}: expected a counter, got {other:?}"),
    }
}

fn gauge(s: &HashMap<String, DebugValue>, name: &str) -> f64 {
    match s.get(name) {
        Some(DebugValue::Gauge(v)) => v.into_inner(),
        other => panic!("{name}: expected a gauge, got {other:?}"),
    }
}

fn key(i: u64) -> String {
    format!("https://example.com/item/{i}")
}

#[test]
fn every_tree_series_with_the_values_its_operations_imply() {
    let _one = serial();
    let dir = tempfile::tempdir().unwrap();
    let db = Config::new().path(dir.path()).open().unwrap();
    let t = db.open_tree("orders").unwrap();
    for i in 0..100 {
        t.insert(key(i), "v").unwrap();
    }
    for i in 0..10 {
        t.remove(key(i)).unwrap();
    }
    for i in 10..100 {
        assert!(t.get(key(i)).unwrap().is_some());
    }
    for i in 1_000..3_000 {
        assert!(t.get(key(i)).unwrap().is_none());
    }
    t.snapshot().unwrap();
    t.rebuild().unwrap();
    db.record_metrics();

    let s = series("tree", "orders");
    for name in TREE_SERIES {
        assert!(s.contains_key(name), "{name} missing: {s:?}");
    }
    let stats = t.stats();
    assert_eq!(counter(&s, telemetry::LOOKUPS), 2_090);
    assert_eq!(
        counter(&s, telemetry::FILTER_ANSWERS),
        stats.store_lookups_skipped
    );
    // The 90 present keys, and the absent ones the filter let through.
    assert_eq!(
        counter(&s, telemetry::STORE_LOOKUPS),
        90 + stats.false_positives
    );
    assert_eq!(
        counter(&s, telemetry::FALSE_POSITIVES),
        stats.false_positives
    );
    assert_eq!(counter(&s, telemetry::FALSE_POSITIVES_REMEMBERED), 0);
    assert!(stats.store_lookups_skipped >= 1_990, "{stats:?}");
    assert_eq!(counter(&s, telemetry::INSERTS), 100);
    assert_eq!(counter(&s, telemetry::REMOVES), 10);
    assert_eq!(counter(&s, telemetry::REBUILDS), 1);
    assert_eq!(counter(&s, telemetry::SNAPSHOTS), stats_snapshots(&s));
    assert_eq!(gauge(&s, telemetry::ITEMS), stats.items as f64);
    assert_eq!(
        gauge(&s, telemetry::FILTER_BYTES),
        stats.memory_bytes as f64
    );
    assert_eq!(gauge(&s, telemetry::FILL_RATIO), stats.fill_ratio);
    assert_eq!(gauge(&s, telemetry::ESTIMATED_FPR), stats.estimated_fpr);
    assert_eq!(gauge(&s, telemetry::FILTER_IN_USE), 1.0);
    assert_eq!(gauge(&s, telemetry::REBUILDING), 0.0);
    assert_eq!(gauge(&s, telemetry::REBUILD_PROGRESS), 0.0);
    let age = gauge(&s, telemetry::SECONDS_SINCE_SNAPSHOT);
    assert!((0.0..60.0).contains(&age), "{age}");
    // The default tree has its own series.
    assert_eq!(
        counter(&series("tree", "__sled__default"), telemetry::INSERTS),
        0
    );
}

/// The snapshot counter: one explicit snapshot, plus the one a rebuild takes of its new
/// filter (a persistent tree's rebuild snapshots what it built).
fn stats_snapshots(s: &HashMap<String, DebugValue>) -> u64 {
    let n = counter(s, telemetry::SNAPSHOTS);
    assert!((1..=2).contains(&n), "snapshots {n}");
    n
}

#[test]
fn counters_grow_by_what_happened_between_recordings_and_across_a_reopen() {
    let _one = serial();
    let dir = tempfile::tempdir().unwrap();
    {
        let db = Config::new().path(dir.path()).open().unwrap();
        let t = db.open_tree("grow").unwrap();
        t.insert("a", "1").unwrap();
        t.get("b").unwrap();
        t.record_metrics();
        t.record_metrics();
        assert_eq!(counter(&series("tree", "grow"), telemetry::LOOKUPS), 1);
        t.get("c").unwrap();
        t.get("a").unwrap();
        t.record_metrics();
        let s = series("tree", "grow");
        assert_eq!(counter(&s, telemetry::LOOKUPS), 3);
        assert_eq!(counter(&s, telemetry::INSERTS), 1);
        db.close().unwrap();
    }
    // A database opened again counts from zero; the facade's counter keeps growing.
    let db = Config::new().path(dir.path()).open().unwrap();
    let t = db.open_tree("grow").unwrap();
    t.get("d").unwrap();
    db.record_metrics();
    assert_eq!(counter(&series("tree", "grow"), telemetry::LOOKUPS), 4);
}

#[test]
fn every_window_series_and_its_generation_trees() {
    let _one = serial();
    let db = Config::new().temporary(true).open().unwrap();
    let w = db
        .open_window("recent", WindowConfig::new(Duration::from_secs(3600), 4))
        .unwrap();
    for i in 0..5 {
        w.insert(key(i), "").unwrap();
    }
    w.remove(key(0)).unwrap();
    for i in 1..5 {
        assert!(w.get(key(i)).unwrap().is_some());
    }
    for i in 100..120 {
        assert!(w.get(key(i)).unwrap().is_none());
    }
    db.record_metrics();
    let s = series("window", "recent");
    for name in WINDOW_SERIES {
        assert!(s.contains_key(name), "{name} missing: {s:?}");
    }
    let stats = w.stats();
    assert_eq!(counter(&s, "bloomsled_window_lookups_total"), 24);
    assert_eq!(
        counter(&s, "bloomsled_window_filter_answers_total"),
        stats.store_lookups_skipped
    );
    assert_eq!(
        counter(&s, "bloomsled_window_store_lookups_total"),
        24 - stats.store_lookups_skipped
    );
    assert_eq!(
        counter(&s, "bloomsled_window_false_positives_total"),
        stats.false_positives
    );
    assert_eq!(counter(&s, "bloomsled_window_inserts_total"), 5);
    assert_eq!(counter(&s, "bloomsled_window_removes_total"), 1);
    assert_eq!(
        gauge(&s, "bloomsled_window_generations"),
        stats.live.len() as f64
    );
    let items: u64 = stats.live.iter().map(|g| g.stats.items).sum();
    assert_eq!(gauge(&s, "bloomsled_window_items"), items as f64);
    assert_eq!(items, 5);
    assert_eq!(gauge(&s, "bloomsled_window_filter_in_use"), 1.0);
    assert_eq!(gauge(&s, "bloomsled_window_rebuilding"), 0.0);
    let fpr = 1.0
        - stats
            .live
            .iter()
            .map(|g| 1.0 - g.stats.estimated_fpr)
            .product::<f64>();
    assert_eq!(gauge(&s, "bloomsled_window_estimated_fpr"), fpr);
    assert!(fpr < 0.01, "{fpr}");
    // The newest generation is a tree of the database, with the tree series.
    let newest = String::from_utf8_lossy(&stats.live[0].tree).into_owned();
    assert_eq!(counter(&series("tree", &newest), telemetry::INSERTS), 5);
}

#[test]
fn a_tree_rebuilt_after_open_shows_its_filter_out_of_use_then_back() {
    let _one = serial();
    let dir = tempfile::tempdir().unwrap();
    let snap = {
        let db = Config::new().path(dir.path()).open().unwrap();
        // Sized: a tree grown from nothing by batches of 10,000 may close while a growth
        // rebuild runs, with an overfull filter whose item count (the rebuild's hint of
        // its key count) is far under its keys; this test reads the progress against it.
        let t = db
            .open_tree_with(
                "restored",
                bloomsled::TreeConfig::new().expected_items(100_000),
            )
            .unwrap();
        for start in (0..50_000).step_by(10_000) {
            let mut b = bloomsled::Batch::default();
            for i in start..start + 10_000 {
                b.insert(key(i).as_bytes(), &b"v"[..]);
            }
            t.apply_batch(b).unwrap();
        }
        let path = t.filter_snapshot_path().unwrap().to_owned();
        db.close().unwrap();
        path
    };
    // A page of the snapshot is damaged (its header, with the item count the rebuild
    // expects, is not): the filter is rebuilt from the keys after open, held part-way.
    let mut bytes = std::fs::read(&snap).unwrap();
    let last = bytes.len() - 1;
    bytes[last] ^= 0xff;
    std::fs::write(&snap, bytes).unwrap();
    bloomsled::persist::pause_rebuild_scans_after(Some(20_000));
    let db = Config::new().path(dir.path()).open().unwrap();
    let t = db.open_tree("restored").unwrap();
    let start = Instant::now();
    while bloomsled::persist::rebuild_scans_paused() == 0 {
        assert!(
            start.elapsed() < Duration::from_secs(30),
            "the scan never held"
        );
        std::thread::sleep(Duration::from_millis(5));
    }
    db.record_metrics();
    let s = series("tree", "restored");
    assert!(
        s.contains_key(telemetry::FILTER_IN_USE),
        "{s:?} {:?}",
        db.tree_names()
    );
    assert_eq!(gauge(&s, telemetry::FILTER_IN_USE), 0.0);
    assert_eq!(gauge(&s, telemetry::REBUILDING), 1.0);
    let progress = gauge(&s, telemetry::REBUILD_PROGRESS);
    let p = t.stats().rebuild_progress.expect("a rebuild runs");
    assert_eq!(
        progress,
        p.keys_scanned as f64 / p.expected_keys.unwrap() as f64
    );
    assert!((0.4..1.0).contains(&progress), "{progress}");
    bloomsled::persist::pause_rebuild_scans_after(None);
    assert!(t.wait_for_filter(Duration::from_secs(60)).unwrap());
    // In use once swapped in; the rebuild ends after its snapshot is written.
    t.wait_for_rebuild();
    db.record_metrics();
    let s = series("tree", "restored");
    assert_eq!(gauge(&s, telemetry::FILTER_IN_USE), 1.0);
    assert_eq!(gauge(&s, telemetry::REBUILDING), 0.0);
    // Items are inserts that set a new bit: with a secret seed, a key or two of 50,000 may
    // find all its bits set already (the CI rehearsal saw 49,999).
    let items = gauge(&s, telemetry::ITEMS);
    assert!((49_900.0..=50_000.0).contains(&items), "{items}");
    assert_eq!(items, t.stats().items as f64);
}

#[test]
fn the_background_recorder_records_without_being_asked() {
    let _one = serial();
    let db = Config::new()
        .temporary(true)
        .metrics_interval(Duration::from_millis(20))
        .open()
        .unwrap();
    let t = db.open_tree("background").unwrap();
    t.insert("a", "1").unwrap();
    for i in 0..7 {
        t.get(key(i)).unwrap();
    }
    let start = Instant::now();
    loop {
        let s = series("tree", "background");
        if matches!(s.get(telemetry::LOOKUPS), Some(DebugValue::Counter(7))) {
            assert_eq!(counter(&s, telemetry::INSERTS), 1);
            break;
        }
        assert!(
            start.elapsed() < Duration::from_secs(30),
            "never recorded: {s:?}"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
}

#[test]
fn a_zero_metrics_interval_is_a_clear_error() {
    let e = Config::new()
        .temporary(true)
        .metrics_interval(Duration::ZERO)
        .open()
        .unwrap_err();
    assert!(e.to_string().contains("metrics_interval"), "{e}");
}

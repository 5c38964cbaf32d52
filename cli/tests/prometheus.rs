//! `bloomsled stats --prometheus`: its output parses with a real Prometheus text-format
//! parser (prometheus-parse) and carries every tree and window series, labelled, with the
//! gauges' values as the library reports them.

use std::collections::HashMap;
use std::process::Command;
use std::time::Duration;

use bloomsled::telemetry::{TREE_SERIES, WINDOW_SERIES};
use bloomsled::window::WindowConfig;
use prometheus_parse::{Scrape, Value};

/// The samples of `name` by the value of `label`.
fn by_label(scrape: &Scrape, name: &str, label: &str) -> HashMap<String, f64> {
    scrape
        .samples
        .iter()
        .filter(|s| s.metric == name)
        .filter_map(|s| {
            let v = match s.value {
                Value::Counter(v) | Value::Gauge(v) | Value::Untyped(v) => v,
                _ => return None,
            };
            Some((s.labels.get(label)?.to_owned(), v))
        })
        .collect()
}

#[test]
fn stats_prometheus_parses_and_carries_every_series() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("db");
    let (items, fpr) = {
        // Sized: a tree that grows from the default size may be rebuilt larger by the
        // reopen of `bloomsled stats`, whose item count (inserts that set a new bit) then
        // differs from the one read here; this test is about the export, not the growth.
        let db = bloomsled::Config::new()
            .path(&path)
            .expected_items(10_000)
            .open()
            .unwrap();
        let t = db.open_tree("orders").unwrap();
        for i in 0..1_000 {
            t.insert(format!("order-{i}"), "v").unwrap();
        }
        let w = db
            .open_window("recent", WindowConfig::new(Duration::from_secs(3600), 4))
            .unwrap();
        w.insert("token-1", "").unwrap();
        let s = t.stats();
        drop(w);
        db.close().unwrap();
        (s.items, s.estimated_fpr)
    };
    let out = Command::new(env!("CARGO_BIN_EXE_bloomsled"))
        .args(["stats", "--prometheus", path.to_str().unwrap()])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8(out.stdout).unwrap();
    let scrape = Scrape::parse(text.lines().map(|l| Ok(l.to_owned()))).unwrap();
    for name in TREE_SERIES {
        let trees = by_label(&scrape, name, "tree");
        assert!(
            trees.contains_key("orders"),
            "{name}{{tree=\"orders\"}} missing:\n{text}"
        );
        // The default tree was never written, so it has no snapshot to be old.
        if name != bloomsled::telemetry::SECONDS_SINCE_SNAPSHOT {
            assert!(
                trees.contains_key("__sled__default"),
                "{name} missing:\n{text}"
            );
        }
    }
    for name in WINDOW_SERIES {
        assert!(
            by_label(&scrape, name, "window").contains_key("recent"),
            "{name}{{window=\"recent\"}} missing:\n{text}"
        );
    }
    // Counters are typed as counters, gauges as gauges.
    let lookups = scrape
        .samples
        .iter()
        .find(|s| s.metric == bloomsled::telemetry::LOOKUPS)
        .unwrap();
    assert!(
        matches!(lookups.value, Value::Counter(v) if v == 0.0),
        "{lookups:?}"
    );
    let tree = |name| by_label(&scrape, name, "tree")["orders"];
    assert_eq!(tree(bloomsled::telemetry::ITEMS), items as f64);
    assert_eq!(items, 1_000);
    assert!((tree(bloomsled::telemetry::ESTIMATED_FPR) - fpr).abs() <= fpr * 1e-9);
    assert_eq!(tree(bloomsled::telemetry::FILTER_IN_USE), 1.0);
    assert_eq!(
        by_label(&scrape, "bloomsled_window_items", "window")["recent"],
        1.0
    );
    // Loaded from the snapshot the close wrote, seconds ago.
    let age = tree(bloomsled::telemetry::SECONDS_SINCE_SNAPSHOT);
    assert!((0.0..600.0).contains(&age), "{age}");
}

#[test]
fn stats_prometheus_and_json_are_refused_together() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("db");
    bloomsled::Config::new()
        .path(&path)
        .open()
        .unwrap()
        .close()
        .unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_bloomsled"))
        .args(["--json", "stats", "--prometheus", path.to_str().unwrap()])
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("--prometheus"));
}

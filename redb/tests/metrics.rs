//! The `metrics` feature against a real recorder (metrics-util's `DebuggingRecorder`,
//! installed globally): after known writes, `record_metrics` reports every series of each
//! table, labelled with its name, with the values the writes imply.

use std::collections::HashMap;

use bloomsled_redb::{
    Database, MultimapTableDefinition, ReadableDatabase, TABLE_SERIES, TableDefinition,
};
use metrics_util::debugging::{DebugValue, DebuggingRecorder};

const T: TableDefinition<u64, u64> = TableDefinition::new("t");
const M: MultimapTableDefinition<u64, u64> = MultimapTableDefinition::new("m");

/// A recorded series: its name, its labels, its value.
type Series = (String, Vec<(String, String)>, DebugValue);

/// Every series labelled `label = value` in `snapshot`, by name.
fn series<'a>(snapshot: &'a [Series], label: &str, value: &str) -> HashMap<String, &'a DebugValue> {
    snapshot
        .iter()
        .filter(|(_, labels, _)| labels.iter().any(|(k, v)| k == label && v == value))
        .map(|(name, _, v)| (name.clone(), v))
        .collect()
}

fn gauge(s: &HashMap<String, &DebugValue>, name: &str) -> f64 {
    match s.get(name) {
        Some(DebugValue::Gauge(v)) => v.into_inner(),
        other => panic!("{name}: {other:?}"),
    }
}

#[test]
fn record_metrics_reports_each_tables_filter() {
    let recorder = DebuggingRecorder::new();
    let snapshotter = recorder.snapshotter();
    recorder
        .install()
        .expect("no other recorder in this test binary");
    let dir = tempfile::tempdir().unwrap();
    let db = Database::create(dir.path().join("a.redb")).unwrap();
    let w = db.begin_write().unwrap();
    {
        let mut t = w.open_table(T).unwrap();
        for i in 0..1_000 {
            t.insert(i, i).unwrap();
        }
        let mut m = w.open_multimap_table(M).unwrap();
        m.insert(1, 1).unwrap();
        m.insert(1, 2).unwrap();
    }
    w.commit().unwrap();
    db.wait_for_filters();
    let r = db.begin_read().unwrap();
    let rt = r.open_table(T).unwrap();
    for i in 0..1_100 {
        assert_eq!(rt.get(i).unwrap().is_some(), i < 1_000);
    }
    db.record_metrics();
    let snapshot: Vec<_> = snapshotter
        .snapshot()
        .into_vec()
        .into_iter()
        .map(|(k, _, _, v)| {
            let labels = k
                .key()
                .labels()
                .map(|l| (l.key().to_owned(), l.value().to_owned()))
                .collect();
            (k.key().name().to_owned(), labels, v)
        })
        .collect();
    let t = series(&snapshot, "table", "t");
    for name in TABLE_SERIES {
        assert!(t.contains_key(name), "{name} missing: {t:?}");
    }
    let stats = db.table_filter_stats(T).unwrap();
    assert_eq!(gauge(&t, "bloomsled_redb_items"), stats.items as f64);
    assert!(stats.items > 990 && stats.items <= 1_000, "{stats:?}");
    assert_eq!(gauge(&t, "bloomsled_redb_capacity"), stats.capacity as f64);
    assert_eq!(gauge(&t, "bloomsled_redb_filter_in_use"), 1.0);
    assert_eq!(gauge(&t, "bloomsled_redb_building"), 0.0);
    assert!(gauge(&t, "bloomsled_redb_fill_ratio") > 0.0);
    assert!(gauge(&t, "bloomsled_redb_estimated_fpr") < 0.003);
    assert_eq!(
        t.get("bloomsled_redb_builds_total"),
        Some(&&DebugValue::Counter(stats.builds))
    );
    // The lookup counters: as `TableFilterStats` has them.
    assert_eq!(stats.lookups, 1_100);
    // The 1,000 present keys in a row: from the 65th the handle skips the filter, until
    // the first absent key (redb's answer) ends the bypass.
    assert_eq!(stats.bypassed, 1_000 - 64 + 1);
    for (name, v) in [
        ("bloomsled_redb_lookups_total", stats.lookups),
        ("bloomsled_redb_ruled_out_total", stats.ruled_out),
        ("bloomsled_redb_store_lookups_total", stats.store_lookups),
        (
            "bloomsled_redb_false_positives_total",
            stats.false_positives,
        ),
        ("bloomsled_redb_bypassed_total", stats.bypassed),
    ] {
        assert_eq!(t.get(name), Some(&&DebugValue::Counter(v)), "{name}");
    }
    // The multimap table by its keys: one key, under its own label.
    let m = series(&snapshot, "multimap_table", "m");
    assert_eq!(gauge(&m, "bloomsled_redb_items"), 1.0);
}

//! `stats`: each tree's filter and how it was restored.

use std::path::Path;
use std::process::ExitCode;
use std::time::Duration;

use bloomsled::{Config, RecoveryPolicy, Tree};
use serde::Serialize;

use crate::error::CliResult;
use crate::open;
use crate::output::{emit, lines, RecoveryRow};

/// One tree's statistics.
#[derive(Serialize)]
struct StatsRow {
    tree: String,
    mode: &'static str,
    items: u64,
    stale: u64,
    capacity: u64,
    bits: u64,
    k: u32,
    bits_per_key: f64,
    fill_ratio: f64,
    estimated_fpr: f64,
    target_fpr: f64,
    memory_bytes: usize,
    recovery: RecoveryRow,
}

impl From<&Tree> for StatsRow {
    fn from(t: &Tree) -> Self {
        let s = t.stats();
        let r = t.recovery_report();
        StatsRow {
            tree: r.tree.clone(),
            mode: s.mode.name(),
            items: s.items,
            stale: s.stale_entries,
            capacity: s.capacity,
            bits: s.num_bits,
            k: s.num_hashes,
            bits_per_key: s.bits_per_key,
            fill_ratio: s.fill_ratio,
            estimated_fpr: s.estimated_fpr,
            target_fpr: s.target_fpr,
            memory_bytes: s.memory_bytes,
            recovery: RecoveryRow::from(&r),
        }
    }
}

/// Prints every tree's and window's metrics in the Prometheus text exposition format: the
/// library records them (`Db::record_metrics`) into metrics-exporter-prometheus' recorder,
/// local to this call, which renders them.
pub fn prometheus(path: &Path, wait: bool) -> CliResult<ExitCode> {
    let config = Config::new()
        .recovery(RecoveryPolicy::Repair)
        .background_recovery(!wait);
    let db = open::open_existing_with(&open::resolve(path), config)?;
    // Open, so that they are recorded.
    let _trees = open::all_trees(&db)?;
    let _windows = open::all_windows(&db)?;
    let recorder = metrics_exporter_prometheus::PrometheusBuilder::new().build_recorder();
    let handle = recorder.handle();
    metrics::with_local_recorder(&recorder, || db.record_metrics());
    print!("{}", handle.render());
    Ok(ExitCode::SUCCESS)
}

/// One window: its partition and its live generations' trees.
struct WindowLine {
    name: String,
    span_ms: u128,
    generations: u32,
    newest: u64,
    live: Vec<(u64, String)>,
}

/// Prints every tree's statistics. With `wait`, filters being rebuilt after a crash are
/// waited for; without, their progress is shown instead.
pub fn run(path: &Path, wait: bool, json: bool) -> CliResult<ExitCode> {
    let config = Config::new()
        .recovery(RecoveryPolicy::Repair)
        .background_recovery(!wait);
    let db = open::open_existing_with(&open::resolve(path), config)?;
    let trees = open::all_trees(&db)?;
    if !wait {
        // Give the rebuilds just started a moment, so the first rate means something.
        for t in &trees {
            t.wait_for_filter(Duration::from_millis(200))?;
        }
    }
    let rows: Vec<StatsRow> = trees.iter().map(StatsRow::from).collect();
    let windows: Vec<WindowLine> = open::all_windows(&db)?.iter().map(window_line).collect();
    emit(json, &rows, |rows| stats_text(rows, &windows))?;
    Ok(ExitCode::SUCCESS)
}

/// A window's line of the report: its span, generations and live trees.
fn window_line(w: &bloomsled::window::Window) -> WindowLine {
    let s = w.stats();
    WindowLine {
        name: String::from_utf8_lossy(&s.name).into_owned(),
        span_ms: s.span.as_millis(),
        generations: s.generations,
        newest: s.newest_index,
        live: s
            .live
            .iter()
            .map(|g| (g.index, String::from_utf8_lossy(&g.tree).into_owned()))
            .collect(),
    }
}

/// The report for a person: a line per tree, then one per window.
fn stats_text(rows: &[StatsRow], windows: &[WindowLine]) -> String {
    let mut text = lines(rows, |r| {
        format!(
            "tree {:?} ({}): {} items (capacity {}), {} bits, k={}, {:.2} bits/key, \
             fill {:.1}%, FPR now {:.4}% (target {:.4}%), {} KiB; {}",
            r.tree,
            r.mode,
            r.items,
            r.capacity,
            r.bits,
            r.k,
            r.bits_per_key,
            100.0 * r.fill_ratio,
            100.0 * r.estimated_fpr,
            100.0 * r.target_fpr,
            r.memory_bytes / 1024,
            match &r.recovery.rebuilding {
                Some(p) => format!("{}, {}", r.recovery.outcome, p.text()),
                None => r.recovery.outcome.clone(),
            },
        )
    });
    for w in windows {
        text.push_str(&format!(
            "\nwindow {:?}: span {} ms in {} generations, newest generation {}, live: {}",
            w.name,
            w.span_ms,
            w.generations,
            w.newest,
            w.live
                .iter()
                .map(|(e, tree)| format!("{e} (tree {tree:?})"))
                .collect::<Vec<_>>()
                .join(", ")
        ));
    }
    text
}

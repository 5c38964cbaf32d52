//! `rebuild`: every tree's filter rebuilt from its keys, keeping its mode and size.
//!
//! Each tree's trust record stores its mode and sizing, and the library's online rebuild
//! uses them, so the database is opened once with the mode unset and every tree rebuilt.
//! With `--mode`, trees of the other mode are converted (rebuilt in that mode at open).
//! Nothing is deleted: the rebuild writes a fresh snapshot that its record then names.

use std::path::Path;
use std::process::ExitCode;

use bloomsled::{Config, FilterMode, RecoveryPolicy, RecoveryReport, Tree};
use serde::Serialize;

use crate::error::{CliError, CliResult};
use crate::open;
use crate::output::{emit, lines, outcome_text};

/// What was done to one tree.
#[derive(Serialize)]
struct RebuildRow {
    tree: String,
    mode: &'static str,
    /// `rebuilt from keys`, or how the open that preceded it restored the filter when
    /// that open already rebuilt it.
    outcome: String,
    keys_scanned: u64,
    /// Items the filter was sized for before (`None` if the open rebuilt it).
    old_capacity: Option<u64>,
    capacity: u64,
    /// Sequence of the snapshot written (`None` if writing it failed; the next
    /// snapshot retries).
    sequence: Option<u64>,
    millis: f64,
}

pub fn run(path: &Path, mode: Option<FilterMode>, json: bool) -> CliResult<ExitCode> {
    let path = open::resolve(path);
    if !open::is_database(&path) {
        return Err(CliError::NotADatabase(path));
    }
    let mut config = Config::new()
        .recovery(RecoveryPolicy::Repair)
        .background_recovery(false);
    if let Some(m) = mode {
        config = config.counting(m == FilterMode::Counting);
    }
    let db = open::open_with(&path, config)?;
    let mut rows = Vec::new();
    for tree in open::all_trees(&db)? {
        rows.push(rebuild_tree(&tree)?);
    }
    db.close()?;
    emit(json, &rows, |rows| {
        lines(rows, |r| {
            format!(
                "tree {:?} ({}): {}, {} keys scanned in {:.1} ms, capacity {}",
                r.tree, r.mode, r.outcome, r.keys_scanned, r.millis, r.capacity
            )
        })
    })?;
    Ok(ExitCode::SUCCESS)
}

/// Rebuilds one tree, unless opening it just did (a snapshot it could not trust).
fn rebuild_tree(tree: &Tree) -> CliResult<RebuildRow> {
    let report: RecoveryReport = tree.recovery_report();
    let mode = tree.stats().mode.name();
    if !report.loaded() {
        return Ok(RebuildRow {
            tree: report.tree.clone(),
            mode,
            outcome: outcome_text(&report.outcome),
            keys_scanned: report.keys_scanned,
            old_capacity: None,
            capacity: tree.stats().capacity,
            sequence: Some(report.sequence),
            millis: report.duration.as_secs_f64() * 1e3,
        });
    }
    let r = tree.rebuild()?;
    Ok(RebuildRow {
        tree: report.tree,
        mode,
        outcome: "rebuilt from keys".into(),
        keys_scanned: r.keys_scanned,
        old_capacity: Some(r.old_capacity),
        capacity: r.capacity,
        sequence: r.snapshot.map(|s| s.sequence),
        millis: r.duration.as_secs_f64() * 1e3,
    })
}

//! `snapshot`: a fresh snapshot of every tree's filter.

use std::path::Path;
use std::process::ExitCode;

use bloomsled::RecoveryPolicy;
use serde::Serialize;

use crate::error::CliResult;
use crate::open;
use crate::output::{emit, lines};

/// What one tree's snapshot wrote.
#[derive(Serialize)]
struct SnapshotRow {
    tree: String,
    sequence: u64,
    bytes: u64,
    pages: u32,
    millis: f64,
}

pub fn run(path: &Path, json: bool) -> CliResult<ExitCode> {
    let db = open::open_existing(&open::resolve(path), RecoveryPolicy::Repair)?;
    let mut rows = Vec::new();
    for t in open::all_trees(&db)? {
        let info = t.snapshot()?;
        rows.push(SnapshotRow {
            tree: t.recovery_report().tree,
            sequence: info.sequence,
            bytes: info.bytes,
            pages: info.pages,
            millis: info.duration.as_secs_f64() * 1e3,
        });
    }
    emit(json, &rows, |rows| {
        lines(rows, |r| {
            format!(
                "tree {:?}: sequence {}, {} bytes",
                r.tree, r.sequence, r.bytes
            )
        })
    })?;
    Ok(ExitCode::SUCCESS)
}

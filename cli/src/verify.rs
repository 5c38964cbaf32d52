//! `verify`: every snapshot CRC and every stored key against its filter; exit 1 on a
//! problem.

use std::path::Path;
use std::process::ExitCode;

use bloomsled::RecoveryPolicy;
use serde::Serialize;

use crate::error::{CliError, CliResult};
use crate::open;
use crate::output::{emit, lines};

/// The snapshot file of one tree, as verified.
#[derive(Serialize)]
#[serde(rename_all = "snake_case")]
enum SnapshotCheck {
    /// Every CRC passed; the snapshot's sequence.
    Sequence(u64),
    /// Why the file failed.
    Fault(String),
}

/// One tree's verification.
#[derive(Serialize)]
struct TreeRow {
    tree: String,
    ok: bool,
    keys_checked: u64,
    false_negatives: u64,
    /// `None` for a database without snapshot files.
    snapshot: Option<SnapshotCheck>,
}

/// The whole report.
#[derive(Serialize)]
struct VerifyRow {
    ok: bool,
    trees: Vec<TreeRow>,
}

/// A snapshot the strict open rejected.
#[derive(Serialize)]
struct RejectedRow {
    ok: bool,
    error: String,
}

pub fn run(path: &Path, json: bool) -> CliResult<ExitCode> {
    let path = open::resolve(path);
    // Strict: a snapshot that cannot be trusted is a finding, not something to repair here.
    let db = match open::open_existing(&path, RecoveryPolicy::Strict) {
        Ok(db) => db,
        Err(
            e @ CliError::Open {
                source: bloomsled::Error::SnapshotRejected { .. },
                ..
            },
        ) => return rejected(&path, &e, json),
        Err(e) => return Err(e),
    };
    let trees = match open::all_trees(&db) {
        Ok(trees) => trees,
        Err(
            e @ CliError::Tree {
                source: bloomsled::Error::SnapshotRejected { .. },
                ..
            },
        ) => return rejected(&path, &e, json),
        Err(e) => return Err(e),
    };
    let mut rows = Vec::new();
    for t in trees {
        let r = t.verify()?;
        rows.push(TreeRow {
            tree: t.recovery_report().tree,
            ok: r.is_ok(),
            keys_checked: r.keys_checked,
            false_negatives: r.false_negatives,
            snapshot: r.snapshot.map(|s| match s {
                Ok(g) => SnapshotCheck::Sequence(g),
                Err(f) => SnapshotCheck::Fault(f.to_string()),
            }),
        });
    }
    let ok = rows.iter().all(|r| r.ok);
    emit(json, &VerifyRow { ok, trees: rows }, |v| {
        let mut text = lines(&v.trees, |r| {
            let snapshot = match &r.snapshot {
                Some(SnapshotCheck::Sequence(g)) => format!("snapshot sequence {g} verified"),
                Some(SnapshotCheck::Fault(f)) => format!("snapshot FAULT: {f}"),
                None => "no snapshot".into(),
            };
            format!(
                "tree {:?}: {} keys checked, {} false negatives, {snapshot}",
                r.tree, r.keys_checked, r.false_negatives
            )
        });
        text.push_str(if v.ok { "\nOK" } else { "\nFAILED" });
        text
    })?;
    Ok(if ok {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}

/// Reports a rejected snapshot as the finding it is, and how to repair it.
fn rejected(path: &Path, e: &CliError, json: bool) -> CliResult<ExitCode> {
    let row = RejectedRow {
        ok: false,
        error: e.to_string(),
    };
    emit(json, &row, |r| {
        format!(
            "FAILED: {}\n(run `bloomsled rebuild {}` to repair)",
            r.error,
            crate::output::shell_word(&path.to_string_lossy())
        )
    })?;
    Ok(ExitCode::FAILURE)
}

//! `rebuild`: every tree's filter rebuilt from its keys, keeping its mode and size.
//!
//! A database's `Config` is database-wide and a rebuilt filter takes its mode and shape from
//! it, so each tree is rebuilt under the settings its own snapshot header records
//! ([`bloomsled::stored_filter`]): trees are grouped by those settings and the database is
//! opened once per group. The default tree is opened by every open, so its group comes
//! last, where it ends up in its own settings whatever an earlier open did to it. Nothing
//! is deleted: the library's rebuild writes a fresh snapshot that supersedes the old one.

use std::fs;
use std::path::Path;
use std::process::ExitCode;

use bloomsled::{Config, FilterMode, Recovery, RecoveryReport, StoredFilter, Tree};
use serde::Serialize;

use crate::error::{CliError, CliResult};
use crate::open;
use crate::output::{emit, lines, outcome_text};

/// The settings one tree is rebuilt under.
#[derive(Clone, Copy, PartialEq)]
struct Settings {
    mode: FilterMode,
    /// The shape to keep (the tree's own, or another tree's when its header is unreadable).
    shape: Option<StoredFilter>,
}

impl Settings {
    fn config(&self) -> Config {
        let config = match self.shape {
            Some(mut s) => {
                s.mode = self.mode;
                s.config()
            }
            None => open::base_config(self.mode),
        };
        config.recovery(Recovery::Repair)
    }
}

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
    /// Generation of the snapshot written (`None` if writing it failed; the next
    /// snapshot retries).
    generation: Option<u64>,
    millis: f64,
}

pub fn run(path: &Path, mode: Option<FilterMode>, json: bool) -> CliResult<ExitCode> {
    let path = open::resolve(path);
    if !open::is_database(&path) {
        return Err(CliError::NotADatabase(path));
    }
    // Reading the names with sled alone also tells a locked database before any change.
    let names = open::sled_tree_names(&path)?;
    let stored: Vec<Option<StoredFilter>> = names
        .iter()
        .map(|n| bloomsled::stored_filter(&path, n))
        .collect();
    let template = stored.iter().flatten().next().copied();
    let fallback_mode = match (mode, template) {
        (Some(m), _) => m,
        (None, Some(t)) => t.mode,
        (None, None) if has_snapshots(&path) => return Err(CliError::ModeUnknown(path)),
        (None, None) => FilterMode::Plain,
    };
    let plans: Vec<Settings> = stored
        .iter()
        .map(|s| match s {
            Some(s) => Settings {
                mode: s.mode,
                shape: Some(*s),
            },
            None => Settings {
                mode: fallback_mode,
                shape: template,
            },
        })
        .collect();

    let mut rows: Vec<Option<RebuildRow>> = names.iter().map(|_| None).collect();
    for (settings, members) in groups(&plans) {
        let db = open::open_with(&path, settings.config())?;
        for i in members {
            let tree = open::tree_by_name(&db, &names[i])?;
            rows[i] = Some(rebuild_tree(&tree)?);
        }
        db.close()?;
    }
    let rows: Vec<RebuildRow> = rows.into_iter().flatten().collect();
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

/// Indices of the trees that share settings, one group per settings; the default tree's
/// (index 0) group last.
fn groups(plans: &[Settings]) -> Vec<(Settings, Vec<usize>)> {
    let mut groups: Vec<(Settings, Vec<usize>)> = Vec::new();
    for (i, plan) in plans.iter().enumerate() {
        match groups.iter_mut().find(|(s, _)| s == plan) {
            Some((_, members)) => members.push(i),
            None => groups.push((*plan, vec![i])),
        }
    }
    // Tree 0 opened the first group: move that group to the end.
    if !groups.is_empty() {
        let first = groups.remove(0);
        groups.push(first);
    }
    groups
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
            generation: Some(report.generation),
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
        generation: r.snapshot.map(|s| s.generation),
        millis: r.duration.as_secs_f64() * 1e3,
    })
}

/// True if the database's bloomsled folder holds any snapshot file.
fn has_snapshots(path: &Path) -> bool {
    fs::read_dir(path.join(bloomsled::persist::DIR_NAME)).is_ok_and(|entries| {
        entries
            .flatten()
            .any(|e| e.path().extension().is_some_and(|x| x == "snap"))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_default_trees_group_comes_last_and_order_is_kept() {
        let plain = Settings {
            mode: FilterMode::Plain,
            shape: None,
        };
        let counting = Settings {
            mode: FilterMode::Counting,
            shape: None,
        };
        let g = groups(&[plain, counting, plain, counting, counting]);
        let members: Vec<Vec<usize>> = g.iter().map(|(_, m)| m.clone()).collect();
        assert_eq!(members, vec![vec![1, 3, 4], vec![0, 2]]);
        let g = groups(&[plain, counting, plain]);
        let members: Vec<Vec<usize>> = g.iter().map(|(_, m)| m.clone()).collect();
        assert_eq!(members, vec![vec![1], vec![0, 2]]);
        let g = groups(&[counting]);
        assert_eq!(g.len(), 1);
        assert_eq!(g[0].1, vec![0]);
        assert!(groups(&[]).is_empty());
    }
}

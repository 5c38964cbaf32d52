//! A tree's filter at open: its snapshot if it can be trusted, else a rebuild from the
//! keys, and the rebuild policy a configuration gives it.

use std::sync::Arc;
use std::time::Instant;

use crate::error::Result;
use crate::filter::any::AnyFilter;
use crate::persist::{self, Meta, Opening, RecoveryOutcome, RecoveryReport, Start};
use crate::store::config::sizing::TreeConfig;
use crate::store::policy::{Growth, RebuildPolicy};
use crate::store::ready::RecoveryState;
use crate::store::rebuild::Rebuild;
use crate::store::recovery;
use crate::store::scan::build_filter;
use crate::store::state::TreeState;
use crate::store::Config;

/// The rebuild policy of a configuration, for a tree of sizing `base`.
pub(in crate::store) fn policy(
    config: &Config,
    base: crate::filter::FilterConfig,
) -> RebuildPolicy {
    RebuildPolicy {
        auto: config.auto_rebuild,
        bound: config.rebuild_fpr,
        growth: config
            .growth_factor
            .map_or(Growth::DEFAULT, Growth::uniform),
        base,
    }
}

/// Gives a tree its filter at open: its snapshot if it can be trusted, else a rebuild from
/// the keys (then a fresh snapshot), or an error in strict mode (see [`crate::persist`]).
pub(in crate::store) fn open_filter(
    tree: &sled::Tree,
    config: &Config,
    meta: Option<&Arc<Meta>>,
    name: &[u8],
    tree_config: Option<&TreeConfig>,
    new_seed: Option<u64>,
) -> Result<Arc<TreeState>> {
    let every = config.snapshot_every_writes;
    let mode = tree_config
        .and_then(|c| c.filter_mode)
        .or(config.filter_mode);
    let sizing = tree_config.map_or(&config.filter, |c| &c.filter);
    let Some(meta) = meta else {
        // A new filter: its secret seed, unless the configuration fixes one (or the tree
        // is a window's generation, whose seed is its window's).
        let seed = match new_seed {
            Some(s) => s,
            None => crate::hash::secret_seed()?,
        };
        let sizing = sizing.clone().seed_or(seed);
        return open_in_memory(tree, config, mode.unwrap_or_default(), &sizing, name);
    };
    let at = Opening {
        name,
        tree,
        mode,
        sizing,
        override_sizing: tree_config.is_some(),
        new_seed,
        recovery: config.recovery,
        db_dir: &config.path,
        page_size: config.page_size,
        journal: config.crash_journal,
    };
    let recovered = persist::recover(meta, &at)?;
    let policy = policy(config, recovered.sizing);
    let (filter, recovery) = match recovered.start {
        Start::Ready(filter) => (*filter, RecoveryState::ready()),
        Start::Rebuild { expected_keys } => {
            // Until the rebuild is done, every lookup goes to sled.
            let shape = policy.base.shape()?;
            let stand_in = AnyFilter::pass_all(recovered.mode, shape.num_hashes, shape.seed)?;
            (stand_in, RecoveryState::pending(expected_keys))
        }
    };
    let rebuild = !recovery.is_ready();
    let state = TreeState::new(
        filter,
        tree.clone(),
        Some(recovered.persistence),
        recovered.report,
        every,
        policy,
        recovery,
        config.false_positive_memory,
    );
    if rebuild {
        log_rebuild(&state, config.background_recovery);
        recovery::start(&state, config.background_recovery);
    } else {
        // A filter loaded past its capacity (a bulk load closed before its resize finished)
        // starts the resize now rather than serving a high false-positive rate for good.
        Rebuild(&state).check();
    }
    Ok(state)
}

/// A temporary database's tree: its filter built from a scan, never persisted.
fn open_in_memory(
    tree: &sled::Tree,
    config: &Config,
    mode: crate::filter::any::FilterMode,
    sizing: &crate::filter::FilterConfig,
    name: &[u8],
) -> Result<Arc<TreeState>> {
    let start = Instant::now();
    let policy = policy(config, sizing.clone());
    let (filter, scanned) = build_filter(tree, mode, &policy)?;
    let report = RecoveryReport {
        tree: String::from_utf8_lossy(name).into_owned(),
        outcome: RecoveryOutcome::InMemory,
        keys_scanned: scanned,
        bytes_verified: 0,
        sequence: 0,
        duration: start.elapsed(),
        rebuilding: None,
    };
    Ok(TreeState::new(
        filter,
        tree.clone(),
        None,
        report,
        config.snapshot_every_writes,
        policy,
        RecoveryState::ready(),
        config.false_positive_memory,
    ))
}

/// Says at open why a tree's snapshot was not trusted and how its filter comes back.
fn log_rebuild(state: &TreeState, background: bool) {
    if let RecoveryOutcome::Rebuilt { reason } = &state.report.outcome {
        log::info!(
            "bloomsled: tree {:?}: snapshot not trusted ({reason}); {}, every lookup \
             goes to sled until then (about {} keys to scan)",
            state.report.tree,
            if background {
                "serving now and rebuilding the filter in the background"
            } else {
                "rebuilding the filter before open returns"
            },
            state
                .recovery
                .expected_keys
                .map_or("an unknown number of".into(), |n| n.to_string()),
        );
    }
}

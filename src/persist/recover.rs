//! Recovery at open: a tree's filter from its trusted snapshot, or rebuilt from its keys.

use std::path::Path;
use std::sync::Arc;
use std::time::Instant;

use zerocopy::little_endian::U64;

use super::live::{record_for, settings_of, Persistence};
use super::meta::{random_id, Meta};
use super::trust::{judge, Identity, Trusted};
use super::{Recovery, RecoveryOutcome, RecoveryReport};
use crate::error::{DecodeError, Distrust, Error, Result};
use crate::filter::any::AnyFilter;
use crate::filter::{FilterConfig, FilterMode};
use crate::format::{self, TreeRecord};

/// What opening one tree needs to know.
pub(crate) struct Opening<'a> {
    /// The tree's full name.
    pub(crate) name: &'a [u8],
    /// The sled tree (to tell an empty tree from one with keys).
    pub(crate) tree: &'a sled::Tree,
    /// The mode the tree is opened in; `None`: the mode its record stores (plain for a new
    /// tree).
    pub(crate) mode: Option<FilterMode>,
    /// The sizing: used for a new tree, or for every tree if `override_sizing`.
    pub(crate) sizing: &'a FilterConfig,
    /// True if `sizing` replaces the sizing the tree's record stores.
    pub(crate) override_sizing: bool,
    /// `Strict` turns a reason to rebuild into an error.
    pub(crate) recovery: Recovery,
    /// The database directory.
    pub(crate) db_dir: &'a Path,
    /// Snapshot page size.
    pub(crate) page_size: u32,
}

/// A tree's filter at open and how it came to be.
pub(crate) struct Recovered {
    pub(crate) filter: AnyFilter,
    pub(crate) persistence: Persistence,
    pub(crate) report: RecoveryReport,
    /// The sizing rebuilds of this tree use.
    pub(crate) sizing: FilterConfig,
}

/// Gives a tree its filter: its snapshot if [`judge`] trusts it, else a rebuild by `build`
/// (which scans the keys, with the sizing given) followed by a fresh snapshot, or an error
/// under [`Recovery::Strict`]. No handle to the tree exists yet, so nothing writes.
pub(crate) fn recover(
    meta: &Arc<Meta>,
    at: &Opening<'_>,
    build: impl FnOnce(&FilterConfig, FilterMode) -> Result<(AnyFilter, u64)>,
) -> Result<Recovered> {
    let start = Instant::now();
    let tree_name = String::from_utf8_lossy(at.name).into_owned();
    let report = |outcome, keys_scanned, bytes_verified, generation| RecoveryReport {
        tree: tree_name.clone(),
        outcome,
        keys_scanned,
        bytes_verified,
        generation,
        duration: start.elapsed(),
    };
    let record = meta.read(at.name)?;
    let mode = at.mode.unwrap_or_else(|| match &record {
        Some(Ok(r)) => format::mode_of_kind(r.filter_kind.get()).unwrap_or_default(),
        _ => FilterMode::Plain,
    });
    let identity = Identity {
        db_id: meta.db_id(),
        mode,
    };
    let sizing_of = |r: &TreeRecord| {
        if at.override_sizing {
            at.sizing.clone()
        } else {
            settings_of(r)
        }
    };
    let new_persistence = |record: TreeRecord| {
        Persistence::new(meta.clone(), at.name, at.db_dir, at.page_size, record)
    };
    // The record, and why the snapshot cannot be used if it cannot.
    let (fault, old) = match record {
        None if at.tree.first()?.is_none() => {
            // A new (or never written) tree: the empty filter. Its record (generation 0,
            // no snapshot yet: stale by construction, so a crash before the first snapshot
            // rebuilds with the tree's sizing) needs no flush, and its first writes need no
            // dirty mark; the first snapshot makes it trusted.
            let mut record = record_for(random_id()?, mode, at.sizing);
            meta.write(at.name, &mut record, false)?;
            let filter = empty_filter(mode, at.sizing)?;
            return Ok(Recovered {
                filter,
                persistence: new_persistence(record),
                report: report(RecoveryOutcome::Created, 0, 0, 0),
                sizing: at.sizing.clone(),
            });
        }
        None => (Distrust::NoRecord, None),
        Some(Err(e)) => (Distrust::RecordUnreadable(e), None),
        Some(Ok(record)) => {
            let sizing = sizing_of(&record);
            let persistence = new_persistence(record);
            // An allocation failure is not a reason to distrust: it is carried out as the
            // error it is.
            let mut failed = None;
            let read = || -> std::result::Result<(format::Header, Vec<u64>, u64), Distrust> {
                let bytes = persistence.file_bytes().map_err(|e| {
                    let d = Distrust::Io(e.to_string());
                    failed = Some(e);
                    d
                })??;
                let (h, words) = format::decode(&bytes)?;
                Ok((h, words, bytes.len() as u64))
            };
            let verdict = judge(&record, &identity, read, |(h, _, _)| h);
            if let Some(e) = failed {
                return Err(e);
            }
            if let Err(Distrust::Decode(DecodeError::TooLarge { bytes })) = verdict {
                return Err(Error::OutOfMemory {
                    what: "loading a snapshot",
                    bytes,
                });
            }
            // A file that passes every check yet describes an impossible filter (made by
            // hand, CRCs and ids copied) is one more reason to rebuild, not a failed open.
            let loaded = match verdict {
                Ok(Trusted::Empty) => Ok((empty_filter(mode, &settings_of(&record))?, 0)),
                Ok(Trusted::Snapshot((h, words, bytes))) => match AnyFilter::from_words(
                    mode,
                    &words,
                    h.num_hashes.get(),
                    h.seed.get(),
                    h.capacity.get(),
                    h.items.get(),
                ) {
                    Ok(filter) => Ok((filter, bytes)),
                    Err(e @ Error::OutOfMemory { .. }) => return Err(e),
                    Err(e) => Err(Distrust::Decode(DecodeError::Inconsistent(e.to_string()))),
                },
                Err(fault) => Err(fault),
            };
            match loaded {
                Ok((filter, bytes)) => {
                    if at.override_sizing {
                        persistence.set_settings(mode, at.sizing)?;
                    }
                    let generation = record.snapshot_generation.get();
                    let r = report(RecoveryOutcome::Loaded, 0, bytes, generation);
                    log::info!(
                        "bloomsled: tree {:?}: filter loaded from snapshot generation {} ({} \
                         bytes verified) in {:?}",
                        r.tree,
                        r.generation,
                        r.bytes_verified,
                        r.duration
                    );
                    return Ok(Recovered {
                        filter,
                        persistence,
                        report: r,
                        sizing,
                    });
                }
                Err(fault) => {
                    let file_generation = persistence.own_file_generation().unwrap_or(0);
                    (fault, Some((record, sizing, file_generation)))
                }
            }
        }
    };
    if at.recovery == Recovery::Strict {
        return Err(Error::SnapshotRejected {
            tree: tree_name,
            fault,
        });
    }
    // Rebuild. A new record (same tree id if the old one was readable: its file is then
    // overwritten, not orphaned) is made durable first, marked dirty at a generation past
    // every one seen, so nothing older is trusted should the snapshot below not complete.
    let (mut record, sizing) = match old {
        Some((record, sizing, file_generation)) => {
            let mut fresh = record_for(record.tree_id, mode, &sizing);
            // Past every generation seen; a corrupt record's huge generation would only
            // make every later snapshot stale (rebuilds), never trusted.
            let base = record
                .snapshot_generation
                .get()
                .max(record.dirty_generation.get())
                .max(file_generation)
                .min(u64::MAX / 2);
            fresh.snapshot_generation = U64::new(base);
            fresh.dirty_generation = U64::new(base);
            (fresh, sizing)
        }
        None => (record_for(random_id()?, mode, at.sizing), at.sizing.clone()),
    };
    if record.tree_id == [0; 16] {
        record.tree_id = random_id()?;
    }
    meta.write(at.name, &mut record, true)?;
    let (filter, scanned) = build(&sizing, mode)?;
    let persistence = new_persistence(record);
    // The copy is exact (nothing writes yet) and holds sled's recovered keys.
    let generation = match persistence.snapshot(|| filter_image(&filter), true) {
        Ok(info) => info.generation,
        Err(e) => {
            // The filter in memory is complete; only the next open's fast path is lost.
            log::warn!("bloomsled: tree {tree_name:?}: snapshot after rebuild failed: {e}");
            record.snapshot_generation.get()
        }
    };
    let r = report(
        RecoveryOutcome::Rebuilt { reason: fault },
        scanned,
        0,
        generation,
    );
    if let RecoveryOutcome::Rebuilt { reason } = &r.outcome {
        log::info!(
            "bloomsled: tree {:?}: filter rebuilt from {} keys in {:?} ({reason})",
            r.tree,
            r.keys_scanned,
            r.duration
        );
    }
    Ok(Recovered {
        filter,
        persistence,
        report: r,
        sizing,
    })
}

/// What a snapshot of `f` stores: its parameters and a copy of its words.
pub(crate) fn filter_image(f: &AnyFilter) -> Result<super::live::FilterImage> {
    let meta = format::SnapshotMeta::of(f.bits(), format::filter_kind(f.mode()), f.items());
    Ok((meta, f.image_words()?))
}

/// The empty filter of a sizing.
fn empty_filter(mode: FilterMode, sizing: &FilterConfig) -> Result<AnyFilter> {
    AnyFilter::new(mode, sizing.shape()?, sizing.get_expected_items())
}

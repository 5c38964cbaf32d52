//! RecoveryPolicy at open, in three steps, each readable alone: [`decide`] whether a tree's
//! snapshot can be trusted (the rule itself is [`judge`]'s), then either [`load`] it or
//! [`restart`] the tree's record so that nothing older is trusted again; the rebuild itself
//! is the store's (in the background, or before open returns). Nothing here scans keys.

use std::path::Path;
use std::sync::Arc;
use std::time::Instant;

use zerocopy::little_endian::U64;

use super::live::{record_for, settings_of, Persistence};
use super::meta::{random_id, Meta};
use super::trust::{judge, Identity, Trusted};
use super::{RecoveryOutcome, RecoveryPolicy, RecoveryReport};
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
    pub(crate) recovery: RecoveryPolicy,
    /// The database directory.
    pub(crate) db_dir: &'a Path,
    /// Snapshot page size.
    pub(crate) page_size: u32,
}

/// How a tree's filter starts.
pub(crate) enum Start {
    /// Ready to serve: loaded from a trusted snapshot, or the empty filter of a new tree.
    Ready(Box<AnyFilter>),
    /// Not trusted: to be rebuilt from the keys. `expected_keys` is the item count of the
    /// tree's own last snapshot file, if its header reads: a hint for sizing and progress,
    /// never trusted for what the filter holds.
    Rebuild { expected_keys: Option<u64> },
}

/// A tree's filter at open and how it came to be.
pub(crate) struct Recovered {
    pub(crate) start: Start,
    /// The tree's mode.
    pub(crate) mode: FilterMode,
    pub(crate) persistence: Persistence,
    pub(crate) report: RecoveryReport,
    /// The sizing rebuilds of this tree use.
    pub(crate) sizing: FilterConfig,
}

/// What [`decide`] found (one per tree open, moved once: its size does not matter).
#[allow(clippy::large_enum_variant)]
enum Decision {
    /// No record and no keys: a new tree.
    New,
    /// The snapshot is trusted: the filter it holds, and the bytes verified.
    Trusted {
        filter: Box<AnyFilter>,
        bytes: u64,
        record: TreeRecord,
        persistence: Persistence,
    },
    /// Not trusted, and why; the tree's record if it was readable.
    Distrusted {
        fault: Distrust,
        old: Option<TreeRecord>,
    },
}

/// Gives a tree its start at open: its snapshot if [`judge`] trusts it, else a fresh
/// record and [`Start::Rebuild`], or an error under [`RecoveryPolicy::Strict`]. No handle to the
/// tree exists yet, so nothing writes.
pub(crate) fn recover(meta: &Arc<Meta>, at: &Opening<'_>) -> Result<Recovered> {
    let start = Instant::now();
    let record = meta.read(at.name)?;
    let mode = at.mode.unwrap_or_else(|| match &record {
        Some(Ok(r)) => format::mode_of_kind(r.filter_kind.get()).unwrap_or_default(),
        _ => FilterMode::Plain,
    });
    match decide(meta, at, mode, record)? {
        Decision::New => create(meta, at, mode, start),
        Decision::Trusted {
            filter,
            bytes,
            record,
            persistence,
        } => load(at, mode, filter, bytes, &record, persistence, start),
        Decision::Distrusted { fault, .. } if at.recovery == RecoveryPolicy::Strict => {
            Err(Error::SnapshotRejected {
                tree: String::from_utf8_lossy(at.name).into_owned(),
                fault,
            })
        }
        Decision::Distrusted { fault, old } => restart(meta, at, mode, fault, old, start),
    }
}

/// Decides whether the tree's snapshot can stand for its keys. Only errors that are not
/// about trust (sled failing, memory) are errors.
fn decide(
    meta: &Arc<Meta>,
    at: &Opening<'_>,
    mode: FilterMode,
    record: Option<std::result::Result<TreeRecord, DecodeError>>,
) -> Result<Decision> {
    let distrusted = |fault, old| Ok(Decision::Distrusted { fault, old });
    if record.is_none() && at.tree.first()?.is_none() {
        return Ok(Decision::New);
    }
    if let Some(fault) = meta.reset() {
        // The database record was replaced: nothing bloomsled stored before is vouched for.
        let old = record.and_then(|r| r.ok());
        return distrusted(Distrust::DatabaseRecord(fault.clone()), old);
    }
    let record = match record {
        None => return distrusted(Distrust::NoRecord, None),
        Some(Err(e)) => return distrusted(Distrust::RecordUnreadable(e), None),
        Some(Ok(record)) => record,
    };
    let persistence = Persistence::new(meta.clone(), at.name, at.db_dir, at.page_size, record);
    let identity = Identity {
        db_id: meta.db_id(),
        mode,
    };
    // An I/O or allocation failure is not a reason to distrust: it is carried out as the
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
    let (filter, bytes) = match verdict {
        Err(Distrust::Decode(DecodeError::TooLarge { bytes })) => {
            return Err(Error::OutOfMemory {
                what: "loading a snapshot",
                bytes,
            })
        }
        Err(fault) => return distrusted(fault, Some(record)),
        Ok(Trusted::Empty) => (empty_filter(mode, &settings_of(&record))?, 0),
        Ok(Trusted::Snapshot((h, words, bytes))) => match AnyFilter::from_words(
            mode,
            &words,
            h.num_hashes.get(),
            h.seed.get(),
            h.capacity.get(),
            h.items.get(),
        ) {
            Ok(filter) => (filter, bytes),
            Err(e @ Error::OutOfMemory { .. }) => return Err(e),
            // A file that passes every check yet describes an impossible filter (made by
            // hand, CRCs and ids copied) is one more reason to rebuild, not a failed open.
            Err(e) => {
                let fault = Distrust::Decode(DecodeError::Inconsistent(e.to_string()));
                return distrusted(fault, Some(record));
            }
        },
    };
    Ok(Decision::Trusted {
        filter: Box::new(filter),
        bytes,
        record,
        persistence,
    })
}

/// A new (or never written) tree: the empty filter. Its record (generation 0, no snapshot
/// yet: stale by construction, so a crash before the first snapshot rebuilds with the
/// tree's sizing) needs no flush, and its first writes need no dirty mark; the first
/// snapshot makes it trusted.
fn create(
    meta: &Arc<Meta>,
    at: &Opening<'_>,
    mode: FilterMode,
    start: Instant,
) -> Result<Recovered> {
    let mut record = record_for(random_id()?, mode, at.sizing);
    meta.write(at.name, &mut record, false)?;
    Ok(Recovered {
        start: Start::Ready(Box::new(empty_filter(mode, at.sizing)?)),
        mode,
        persistence: Persistence::new(meta.clone(), at.name, at.db_dir, at.page_size, record),
        report: report(at, RecoveryOutcome::Created, 0, 0, start),
        sizing: at.sizing.clone(),
    })
}

/// A trusted snapshot: the filter it holds serves at once.
fn load(
    at: &Opening<'_>,
    mode: FilterMode,
    filter: Box<AnyFilter>,
    bytes: u64,
    record: &TreeRecord,
    persistence: Persistence,
    start: Instant,
) -> Result<Recovered> {
    if at.override_sizing {
        persistence.set_settings(mode, at.sizing)?;
    }
    let generation = record.snapshot_generation.get();
    let r = report(at, RecoveryOutcome::Loaded, bytes, generation, start);
    log::info!(
        "bloomsled: tree {:?}: filter loaded from snapshot generation {} ({} bytes verified) \
         in {:?}",
        r.tree,
        r.generation,
        r.bytes_verified,
        r.duration
    );
    Ok(Recovered {
        start: Start::Ready(filter),
        mode,
        persistence,
        report: r,
        sizing: sizing_of(at, record),
    })
}

/// Starts the tree over: a new record (same tree id if the old one was readable: its file
/// is then overwritten, not orphaned), marked dirty at a generation past every one seen and
/// made durable before anything else happens, so nothing older is ever trusted again, and
/// the rebuild's own snapshot is the next one trusted.
fn restart(
    meta: &Arc<Meta>,
    at: &Opening<'_>,
    mode: FilterMode,
    fault: Distrust,
    old: Option<TreeRecord>,
    start: Instant,
) -> Result<Recovered> {
    let new_persistence =
        |record| Persistence::new(meta.clone(), at.name, at.db_dir, at.page_size, record);
    let (mut record, sizing, expected_keys) = match old {
        Some(old) => {
            let sizing = sizing_of(at, &old);
            let own = new_persistence(old).own_file_header();
            let file_generation = own.map_or(0, |h| h.generation.get());
            let mut fresh = record_for(old.tree_id, mode, &sizing);
            // Past every generation seen; a corrupt record's huge generation would only
            // make every later snapshot stale (rebuilds), never trusted.
            let base = old
                .snapshot_generation
                .get()
                .max(old.dirty_generation.get())
                .max(file_generation)
                .min(u64::MAX / 2);
            fresh.snapshot_generation = U64::new(base);
            fresh.dirty_generation = U64::new(base);
            (fresh, sizing, own.map(|h| h.items.get()))
        }
        None => (
            record_for(random_id()?, mode, at.sizing),
            at.sizing.clone(),
            None,
        ),
    };
    if record.tree_id == [0; 16] {
        record.tree_id = random_id()?;
    }
    meta.write(at.name, &mut record, true)?;
    let generation = record.snapshot_generation.get();
    Ok(Recovered {
        start: Start::Rebuild { expected_keys },
        mode,
        persistence: new_persistence(record),
        report: report(
            at,
            RecoveryOutcome::Rebuilt { reason: fault },
            0,
            generation,
            start,
        ),
        sizing,
    })
}

/// The sizing of a tree with `record`: the record's, unless the caller overrides it.
fn sizing_of(at: &Opening<'_>, record: &TreeRecord) -> FilterConfig {
    if at.override_sizing {
        at.sizing.clone()
    } else {
        settings_of(record)
    }
}

fn report(
    at: &Opening<'_>,
    outcome: RecoveryOutcome,
    bytes_verified: u64,
    generation: u64,
    start: Instant,
) -> RecoveryReport {
    RecoveryReport {
        tree: String::from_utf8_lossy(at.name).into_owned(),
        outcome,
        keys_scanned: 0,
        bytes_verified,
        generation,
        duration: start.elapsed(),
        rebuilding: None,
    }
}

/// What a snapshot of `f` stores: its parameters and a copy of its words.
pub(crate) fn filter_image(f: &AnyFilter) -> Result<super::live::FilterImage> {
    let meta = format::SnapshotMeta::of(f.bits(), format::filter_kind(f.mode()), f.items());
    Ok((meta, f.image_words()?))
}

/// The empty filter of a sizing.
fn empty_filter(mode: FilterMode, sizing: &FilterConfig) -> Result<AnyFilter> {
    AnyFilter::new(mode, sizing.shape()?, sizing.capacity())
}

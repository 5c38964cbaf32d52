//! Recovery at open, top-down in this file: [`recover`] reads the tree's record, then
//! [`decide`]s from the record and the tree's files alone ([`TreeFiles`]: the snapshot and
//! the crash journals; the rules are [`judge`]'s and [`judge_journals`]'s) whether its
//! snapshot can stand for its keys; then it either [`create`]s a new tree, [`load`]s the
//! snapshot (replaying the journals over it), or [`restart`]s the tree's record so that
//! nothing older is trusted again. Only then is the tree's live state ([`Persistence`],
//! `live.rs`) made from the record and files; what recovery asks of it (start a journal,
//! retire old ones, store new settings) is what it does for a live tree anyway. The
//! rebuild itself is the store's (in the background, or before open returns). Nothing
//! here scans keys.
use std::path::Path;
use std::sync::Arc;
use std::time::Instant;

use zerocopy::little_endian::U64;

use super::files::SnapshotFile;
use super::journal::OP_REMOVE;
use super::live::Persistence;
use super::meta::{random_id, Meta};
use super::records::TreeKeys;
use super::settings::{record_for, settings_of};
use super::tree_files::{TreeFiles, TreeJournals};
use super::trust::{judge, judge_journals, Identity, JournalIdentity, Records, Trusted};
use super::{RecoveryOutcome, RecoveryPolicy, RecoveryReport};
use crate::error::{DecodeError, Distrust, Error, JournalFault, Result};
use crate::filter::any::AnyFilter;
use crate::filter::{FilterConfig, FilterMode};
use crate::format::{self, TreeRecord};

/// What opening one tree needs to know.
pub(crate) struct Opening<'a> {
    /// The tree's full name.
    pub(crate) name: &'a [u8],
    /// The tree's keys (to tell an empty tree from one with keys).
    pub(crate) tree: &'a dyn TreeKeys,
    /// The mode the tree is opened in; `None`: the mode its record stores (plain for a new
    /// tree).
    pub(crate) mode: Option<FilterMode>,
    /// The sizing: used for a new tree, or for every tree if `override_sizing`.
    pub(crate) sizing: &'a FilterConfig,
    /// True if `sizing` replaces the sizing the tree's record stores (its seed only if it
    /// fixes one: a tree keeps its seed otherwise).
    pub(crate) override_sizing: bool,
    /// The seed of a new tree's filter when `sizing` fixes none (a window's generations
    /// share their window's); `None`: a secret one, drawn from the operating system when a
    /// new filter needs it (a tree that opens from its snapshot draws none).
    pub(crate) new_seed: Option<u64>,
    /// `Strict` turns a reason to rebuild into an error.
    pub(crate) recovery: RecoveryPolicy,
    /// The database directory.
    pub(crate) db_dir: &'a Path,
    /// Snapshot page size.
    pub(crate) page_size: u32,
    /// Keep crash journals (see `Config::crash_journal`).
    pub(crate) journal: bool,
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
    /// The snapshot is trusted (alone, or with its crash journals).
    Trusted(Loadable),
    /// Not trusted, and why; the tree's record if it was readable.
    Distrusted {
        fault: Distrust,
        old: Option<TreeRecord>,
    },
}

/// A snapshot [`decide`] trusts: the filter it holds and the bytes verified, the tree's
/// record and files; with the records of the crash journals to replay over it if the tree
/// was written since.
struct Loadable {
    filter: Box<AnyFilter>,
    bytes: u64,
    record: TreeRecord,
    files: TreeFiles,
    replay: Option<Vec<Records>>,
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
        Decision::Trusted(loadable) => load(meta, at, mode, loadable, start),
        Decision::Distrusted { fault, .. } if at.recovery == RecoveryPolicy::Strict => {
            Err(Error::SnapshotRejected {
                tree: String::from_utf8_lossy(at.name).into_owned(),
                fault,
            })
        }
        Decision::Distrusted { fault, old } => restart(meta, at, mode, fault, old, start),
    }
}

/// Decides whether the tree's snapshot can stand for its keys, alone or with its crash
/// journals replayed over it. Only errors that are not about trust (sled failing,
/// memory) are errors.
fn decide(
    meta: &Arc<Meta>,
    at: &Opening<'_>,
    mode: FilterMode,
    record: Option<std::result::Result<TreeRecord, DecodeError>>,
) -> Result<Decision> {
    let distrusted = |fault, old| Ok(Decision::Distrusted { fault, old });
    if let Some(fault) = meta.reset() {
        // The database record was replaced: nothing bloomsled stored before is vouched for,
        // and every tree says so, an empty one too (a store sled lost shows as empty trees).
        let old = record.and_then(|r| r.ok());
        return distrusted(Distrust::DatabaseRecord(fault.clone()), old);
    }
    if record.is_none() && at.tree.is_empty()? {
        return Ok(Decision::New);
    }
    let record = match record {
        None => return distrusted(Distrust::NoRecord, None),
        Some(Err(e)) => return distrusted(Distrust::RecordUnreadable(e), None),
        Some(Ok(record)) => record,
    };
    let files = TreeFiles::new(at.db_dir, meta, &record.tree_id, at.journal);
    let identity = Identity {
        db_id: meta.db_id(),
        mode,
    };
    let ((filter, bytes), stale) = match trusted_filter(&files.snapshot, &record, &identity, mode)?
    {
        Ok(found) => (found, None),
        Err(stale @ Distrust::Stale { .. }) if files.journals.is_some() => {
            let mut clean = record; // written since: the snapshot alone, then its journals
            clean.dirty_sequence = U64::new(0);
            match trusted_filter(&files.snapshot, &clean, &identity, mode)? {
                Ok(found) => (found, Some(stale)),
                Err(_) => return distrusted(stale, Some(record)),
            }
        }
        Err(fault) => return distrusted(fault, Some(record)),
    };
    let replay = match (stale, &files.journals) {
        (None, _) | (_, None) => None,
        (Some(_), Some(journals)) => {
            match journals_for(journals, meta, &record, filter.bits().seed()) {
                Ok(records) => Some(records),
                Err(fault) => {
                    let fault = Distrust::Journal {
                        snapshot_sequence: record.snapshot_sequence.get(),
                        dirty_sequence: record.dirty_sequence.get(),
                        fault,
                    };
                    return distrusted(fault, Some(record));
                }
            }
        }
    };
    Ok(Decision::Trusted(Loadable {
        filter: Box::new(filter),
        bytes,
        record,
        files,
        replay,
    }))
}

/// The journals of every sequence the tree was written in since its snapshot, if
/// [`judge_journals`] trusts them.
fn journals_for(
    tree: &TreeJournals,
    meta: &Meta,
    record: &TreeRecord,
    seed: u64,
) -> std::result::Result<Vec<Records>, JournalFault> {
    let identity = JournalIdentity {
        db_id: meta.db_id(),
        boot_id: tree.boot_id,
        seed,
    };
    judge_journals(record, &identity, |g| tree.journals.read(g))
}

/// The filter of the snapshot `record` names, with the bytes verified, if [`judge`]
/// trusts it; `Err` for an I/O or allocation failure, which is not a reason to distrust.
fn trusted_filter(
    file: &SnapshotFile,
    record: &TreeRecord,
    identity: &Identity,
    mode: FilterMode,
) -> Result<std::result::Result<(AnyFilter, u64), Distrust>> {
    let mut failed = None;
    let read = || -> std::result::Result<(format::Header, Vec<u64>, u64), Distrust> {
        let bytes = file.read().map_err(|e| {
            let d = Distrust::Io(e.to_string());
            failed = Some(e);
            d
        })??;
        let (h, words) = format::decode(&bytes)?;
        Ok((h, words, bytes.len() as u64))
    };
    let verdict = judge(record, identity, read, |(h, _, _)| h);
    if let Some(e) = failed {
        return Err(e);
    }
    match verdict {
        Err(Distrust::Decode(DecodeError::TooLarge { bytes })) => Err(Error::OutOfMemory {
            what: "loading a snapshot",
            bytes,
        }),
        Err(fault) => Ok(Err(fault)),
        Ok(Trusted::Empty) => Ok(Ok((empty_filter(mode, &settings_of(record))?, 0))),
        Ok(Trusted::Snapshot((h, words, bytes))) => match AnyFilter::from_words(
            mode,
            &words,
            h.num_hashes.get(),
            h.seed.get(),
            h.capacity.get(),
            h.items.get(),
        ) {
            Ok(filter) => Ok(Ok((filter, bytes))),
            Err(e @ Error::OutOfMemory { .. }) => Err(e),
            // A file that passes every check yet describes an impossible filter (made by
            // hand, CRCs and ids copied) is one more reason to rebuild, not a failed open.
            Err(e) => Ok(Err(Distrust::Decode(DecodeError::Inconsistent(
                e.to_string(),
            )))),
        },
    }
}

impl Opening<'_> {
    /// The sizing of a new filter of this tree: `sizing`, with the new seed unless it fixes
    /// one.
    fn new_sizing(&self) -> Result<FilterConfig> {
        let sizing = self.sizing.clone();
        if sizing.get_seed().is_some() {
            return Ok(sizing);
        }
        let seed = match self.new_seed {
            Some(seed) => seed,
            None => crate::hash::secret_seed()?,
        };
        Ok(sizing.seed_or(seed))
    }
}

/// A new (or never written) tree: the empty filter. Its record (sequence 0, no snapshot
/// yet: stale by construction, so a crash before the first snapshot rebuilds with the
/// tree's sizing) needs no flush, and its first writes need no dirty mark; the first
/// snapshot makes it trusted. A tree of the database's own sizing stores even that record
/// only with its first snapshot (or settings): until then a crash finds its keys with no
/// record, which rebuilds them the same way, and creating thousands of trees writes
/// nothing of bloomsled's into sled (each write into the meta tree grows sled's memory).
fn create(
    meta: &Arc<Meta>,
    at: &Opening<'_>,
    mode: FilterMode,
    start: Instant,
) -> Result<Recovered> {
    let sizing = at.new_sizing()?;
    let mut record = record_for(random_id()?, mode, &sizing);
    if at.override_sizing {
        meta.write(at.name, &mut record, false)?;
    }
    Ok(Recovered {
        start: Start::Ready(Box::new(empty_filter(mode, &sizing)?)),
        mode,
        persistence: live_state(meta, at, record),
        report: report(at, RecoveryOutcome::Created, 0, 0, start),
        sizing,
    })
}

/// A trusted snapshot: the filter it holds serves at once, with the crash journals of the
/// writes since replayed over it. Writers then start a fresh journal: of the snapshot's
/// sequence if there was nothing to replay, else of the sequence past every one
/// replayed (whose journals stay until the next durable snapshot).
fn load(
    meta: &Arc<Meta>,
    at: &Opening<'_>,
    mode: FilterMode,
    Loadable {
        filter,
        bytes,
        record,
        files,
        replay,
    }: Loadable,
    start: Instant,
) -> Result<Recovered> {
    let persistence = Persistence::new(meta.clone(), at.name, at.page_size, record, files);
    if at.override_sizing {
        persistence.set_settings(mode, at.sizing)?;
    }
    let seed = filter.bits().seed();
    let sequence = record.snapshot_sequence.get();
    let outcome = match replay {
        None => {
            persistence.start_journal(sequence, record.snapshot_id, seed);
            RecoveryOutcome::Loaded
        }
        Some(journals) => {
            let mut records = 0;
            for (op, h) in journals.iter().flatten() {
                if *op == OP_REMOVE {
                    filter.release_hash(*h);
                } else {
                    filter.admit_hash(*h);
                }
                records += 1;
            }
            let next = record.dirty_sequence.get() + 1;
            persistence.resume_after_replay(next, seed)?;
            RecoveryOutcome::Replayed {
                journals: journals.len() as u64,
                records,
            }
        }
    };
    persistence.retire_journals_outside(sequence..=persistence.current_sequence());
    let r = report(at, outcome, bytes, sequence, start);
    log::info!(
        "bloomsled: tree {:?}: filter {:?} from snapshot sequence {} ({} bytes verified) \
         in {:?}",
        r.tree,
        r.outcome,
        r.sequence,
        r.bytes_verified,
        r.duration
    );
    Ok(Recovered {
        start: Start::Ready(filter),
        mode,
        persistence,
        report: r,
        sizing: sizing_of(at, &record),
    })
}

/// Starts the tree over: a new record (same tree id if the old one was readable: its file
/// is then overwritten, not orphaned), marked dirty at a sequence past every one seen and
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
    let (mut record, sizing, expected_keys) = match old {
        Some(old) => {
            let sizing = sizing_of(at, &old);
            let own = own_file_header(&SnapshotFile::in_db(at.db_dir, &old.tree_id), meta, &old);
            let file_sequence = own.map_or(0, |h| h.sequence.get());
            let mut fresh = record_for(old.tree_id, mode, &sizing);
            // Past every sequence seen; a corrupt record's huge sequence would only
            // make every later snapshot stale (rebuilds), never trusted.
            let base = old
                .snapshot_sequence
                .get()
                .max(old.dirty_sequence.get())
                .max(file_sequence)
                .min(u64::MAX / 2);
            fresh.snapshot_sequence = U64::new(base);
            fresh.dirty_sequence = U64::new(base);
            (fresh, sizing, own.map(|h| h.items.get()))
        }
        None => {
            let sizing = at.new_sizing()?;
            (record_for(random_id()?, mode, &sizing), sizing, None)
        }
    };
    if record.tree_id == [0; 16] {
        record.tree_id = random_id()?;
    }
    meta.write(at.name, &mut record, true)?;
    let sequence = record.snapshot_sequence.get();
    let persistence = live_state(meta, at, record);
    // Nothing is trusted until the rebuild's snapshot, which starts the next journal.
    #[allow(clippy::reversed_empty_ranges)]
    persistence.retire_journals_outside(1..=0);
    Ok(Recovered {
        start: Start::Rebuild { expected_keys },
        mode,
        persistence,
        report: report(
            at,
            RecoveryOutcome::Rebuilt { reason: fault },
            0,
            sequence,
            start,
        ),
        sizing,
    })
}

/// The live state of a tree whose record (durable or not) is `record`, with its files.
fn live_state(meta: &Arc<Meta>, at: &Opening<'_>, record: TreeRecord) -> Persistence {
    let files = TreeFiles::new(at.db_dir, meta, &record.tree_id, at.journal);
    Persistence::new(meta.clone(), at.name, at.page_size, record, files)
}

/// The header of the snapshot file, if it is intact and was written for the tree of
/// `record` in this database (a foreign file's fields mean nothing here). Its sequence
/// and item count are hints only: it is not trusted for what it holds.
fn own_file_header(
    file: &SnapshotFile,
    meta: &Meta,
    record: &TreeRecord,
) -> Option<format::Header> {
    let h = file.peek_header()?;
    (h.db_id == meta.db_id() && h.tree_id == record.tree_id).then_some(h)
}

/// The sizing of a tree with `record`: the record's, unless the caller overrides it (the
/// record's seed unless the caller fixes one).
fn sizing_of(at: &Opening<'_>, record: &TreeRecord) -> FilterConfig {
    if at.override_sizing {
        at.sizing.clone().seed_or(record.seed.get())
    } else {
        settings_of(record)
    }
}

fn report(
    at: &Opening<'_>,
    outcome: RecoveryOutcome,
    bytes_verified: u64,
    sequence: u64,
    start: Instant,
) -> RecoveryReport {
    RecoveryReport {
        tree: String::from_utf8_lossy(at.name).into_owned(),
        outcome,
        keys_scanned: 0,
        bytes_verified,
        sequence,
        duration: start.elapsed(),
        rebuilding: None,
    }
}

/// The empty filter of a sizing.
fn empty_filter(mode: FilterMode, sizing: &FilterConfig) -> Result<AnyFilter> {
    AnyFilter::new(mode, sizing.shape()?, sizing.get_expected_items())
}

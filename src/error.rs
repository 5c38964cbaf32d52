//! The crate's one error type, and the two reasons a snapshot is not used: its bytes do not
//! decode ([`DecodeError`]), or they decode but do not provably belong to this tree's current
//! data ([`Distrust`]). This module imports nothing else of the crate.

use std::fmt;

use sled::{DiskPtr, IVec};

mod convert;

/// Everything that can go wrong in bloomsled.
///
/// The first five variants are `sled::Error`'s, with sled's payloads, so code written for
/// sled keeps matching after switching the import: an error from sled arrives as the
/// same-named variant (sled's `Io` as [`Error::Io`], like bloomsled's own I/O errors). The
/// other variants say which setting or which bytes were wrong and what was expected
/// instead. Conversions into sled's transaction errors and `std::io::Error` keep the
/// original error (see `From<Error>` below).
///
/// ```
/// # let db = bloomsled::Config::new().temporary(true).open()?;
/// let t = db.open_tree("t")?;
/// db.drop_tree("t")?;
/// match t.get("k") {
///     Err(bloomsled::Error::CollectionNotFound(name)) => assert_eq!(name, "t"),
///     other => panic!("{other:?}"),
/// }
/// # Ok::<(), bloomsled::Error>(())
/// ```
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// sled: the tree no longer exists (it was dropped).
    #[error("Collection {0:?} does not exist")]
    CollectionNotFound(IVec),

    /// sled: the system has been used in an unsupported way (e.g. a sled setting out of
    /// range, or `use_compression` without the `compression` feature).
    #[error("Unsupported: {0}")]
    Unsupported(String),

    /// sled: an unexpected bug in sled.
    #[error("Unexpected bug has happened: {0}. PLEASE REPORT THIS BUG!")]
    ReportableBug(String),

    /// A read or write error with the file system, from sled or from bloomsled's own files.
    #[error("I/O: {0}")]
    Io(#[source] std::io::Error),

    /// sled: corruption was detected in sled's storage file.
    #[error("Read corrupted data at file offset {at:?} backtrace {bt:?}")]
    Corruption {
        /// The file location that corrupted data was found at.
        at: Option<DiskPtr>,
        /// A backtrace for where the corruption was encountered (empty: sled keeps one
        /// only with its `testing` feature).
        bt: (),
    },

    /// A configuration value is out of its valid range; `what` names the setting and why.
    #[error("invalid configuration: {what}")]
    InvalidConfig {
        /// The setting and the constraint it broke.
        what: String,
    },

    /// Two filters were combined (`union`) but differ in shape or seed. Filters built apart
    /// each draw a secret seed unless `FilterConfig::seed` fixes one for both.
    #[error(
        "filters have different shapes: {ours} vs {theirs} (filters built apart share a seed \
         only if FilterConfig::seed fixed the same one for both)"
    )]
    ShapeMismatch {
        /// Shape of the filter being modified.
        ours: FilterShape,
        /// Shape of the other filter.
        theirs: FilterShape,
    },

    /// Serialized filter bytes ([`crate::Filter::from_bytes`]) do not decode.
    #[error("not a valid serialized filter: {0}")]
    Decode(#[from] DecodeError),

    /// A tree's snapshot could not be trusted and the database was opened with
    /// `RecoveryPolicy::Strict`, which forbids rebuilding silently.
    #[error("snapshot of tree {tree:?} rejected: {fault}")]
    SnapshotRejected {
        /// Tree name (lossy UTF-8).
        tree: String,
        /// Why it was not trusted.
        fault: Distrust,
    },

    /// The name is bloomsled's own meta tree, which users cannot open or drop; nothing was
    /// changed.
    #[error("tree name {name:?} is reserved for bloomsled: {why}")]
    ReservedName {
        /// The reserved name (lossy UTF-8).
        name: String,
        /// What was found or attempted.
        why: String,
    },

    /// The database record in bloomsled's meta tree is missing or damaged and the database
    /// was opened with `RecoveryPolicy::Strict`, which forbids rebuilding silently. (Under
    /// `RecoveryPolicy::Repair` the database gets a new id and every tree's filter is rebuilt.)
    /// Nothing was changed.
    #[error("bloomsled's database record rejected: {fault}")]
    DatabaseRecordRejected {
        /// What is wrong with the record.
        fault: DbRecordFault,
    },

    /// [`crate::Db::try_import`] was given an export it cannot import: nothing after the
    /// failing entry was imported.
    #[error("cannot import: {what}")]
    Import {
        /// What was wrong with the export.
        what: String,
    },

    /// Memory for a filter or a snapshot copy could not be reserved: nothing was changed.
    #[error("cannot reserve {bytes} bytes for {what}")]
    OutOfMemory {
        /// What needed the memory.
        what: &'static str,
        /// Bytes asked for.
        bytes: u64,
    },

    /// The tree or database was closed or dropped while the operation (a rebuild) ran; the
    /// filter in use is unchanged.
    #[error("closed during the operation: {0}")]
    Closed(String),

    /// Serialized bytes are well-framed but describe an impossible filter.
    #[error("corrupt filter data: {0}")]
    Corrupt(String),

    /// A sync that bloomsled issued or relied on failed (the fsync of sled's log after
    /// its flush, sled's flush itself, a snapshot's file or folder, a crash journal's),
    /// this time or earlier: the kernel may have dropped the data it could not write and
    /// reports that only once, so the database acknowledges no write, flush or snapshot
    /// as durable any more (reads go on). Every later write, flush and snapshot of the
    /// database returns this error, naming the first failure; reopen the database to
    /// recover from what is durable (see `docs/persistence.md`, "A failed fsync").
    ///
    /// ```
    /// let e = bloomsled::Error::Poisoned {
    ///     file: "/srv/db/db".into(),
    ///     step: "fsync",
    ///     error: "Input/output error (os error 5)".into(),
    /// };
    /// assert!(e.to_string().contains("fsync of /srv/db/db failed"));
    /// assert!(e.to_string().contains("reopen the database to recover"));
    /// ```
    #[error(
        "{step} of {} failed ({error}): the database acknowledges no write, flush or \
         snapshot as durable any more; reopen the database to recover",
        .file.display()
    )]
    Poisoned {
        /// The file (or folder) whose sync failed first.
        file: std::path::PathBuf,
        /// The step that failed: `fsync`, `fsync of the folder` or `sled's flush`.
        step: &'static str,
        /// The operating system's error, as text.
        error: String,
    },

    /// A classic (PHP) hash name that is none of the eight `hash::classic::ClassicHash`es.
    #[error(
        "unknown classic hash {name:?}: expected one of BKDR, SDBM, JS, PJW, ELF, DJB, DEK, \
         FNV (optionally with the suffix Hash, any case)"
    )]
    UnknownHash {
        /// The name given.
        name: String,
    },
}

impl Error {
    pub(crate) fn config(what: impl Into<String>) -> Self {
        Error::InvalidConfig { what: what.into() }
    }
}

/// Equality in the manner of `sled::Error`'s, so that sled-style assertions such as
/// `assert_eq!(tree.get(k), Ok(None))` keep compiling after switching to bloomsled: sled's
/// variants compare by sled's rule (by name, message, or corrupt location), I/O errors by
/// kind, the others by variant and message.
impl PartialEq for Error {
    fn eq(&self, other: &Self) -> bool {
        match (self, other) {
            (Error::CollectionNotFound(a), Error::CollectionNotFound(b)) => a == b,
            (Error::Unsupported(a), Error::Unsupported(b)) => a == b,
            (Error::ReportableBug(a), Error::ReportableBug(b)) => a == b,
            (Error::Corruption { at: a, .. }, Error::Corruption { at: b, .. }) => a == b,
            (Error::Io(a), Error::Io(b)) => a.kind() == b.kind(),
            (a, b) => {
                std::mem::discriminant(a) == std::mem::discriminant(b)
                    && a.to_string() == b.to_string()
            }
        }
    }
}

/// The shape of a filter: what must agree for two filters to be combined.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FilterShape {
    /// Number of 512-bit blocks.
    pub num_blocks: u64,
    /// Number of bits set per key.
    pub num_hashes: u32,
    /// Hash seed.
    pub seed: u64,
}

impl fmt::Display for FilterShape {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} blocks, k={}, seed={:#x}",
            self.num_blocks, self.num_hashes, self.seed
        )
    }
}

/// Result alias used throughout bloomsled.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Why snapshot bytes (or a trust record) do not decode: byte-level faults, found by
/// `src/format` in the documented order (magic, version, lengths, checksums, fields).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum DecodeError {
    /// The bytes do not start with the expected magic: not a bloomsled snapshot or record.
    #[error("not a bloomsled snapshot (magic {got:02x?})")]
    BadMagic {
        /// The bytes found.
        got: Vec<u8>,
    },
    /// Written by a format version this build does not read.
    #[error("format version {got}, this build reads {expected}")]
    UnsupportedVersion {
        /// The version this build reads.
        expected: u32,
        /// The version found.
        got: u32,
    },
    /// The bytes end before what the header describes.
    #[error("truncated: {got} bytes of {needed}")]
    Truncated {
        /// Bytes needed.
        needed: u64,
        /// Bytes present.
        got: u64,
    },
    /// The header's CRC32 does not match its bytes.
    #[error("header checksum mismatch (stored {expected:#010x}, computed {got:#010x})")]
    HeaderChecksum {
        /// Stored.
        expected: u32,
        /// Computed.
        got: u32,
    },
    /// A page's CRC32 does not match its bytes.
    #[error("page {page} checksum mismatch (stored {expected:#010x}, computed {got:#010x})")]
    PageChecksum {
        /// Page number.
        page: u32,
        /// Stored.
        expected: u32,
        /// Computed.
        got: u32,
    },
    /// The header's whole-payload CRC32 does not match the pages.
    #[error("payload checksum mismatch (stored {expected:#010x}, computed {got:#010x})")]
    PayloadChecksum {
        /// Stored.
        expected: u32,
        /// Computed.
        got: u32,
    },
    /// Well-framed, but a field is impossible or inconsistent (named in the message).
    #[error("inconsistent: {0}")]
    Inconsistent(String),
    /// Written with another hash kind (e.g. the retired distinct-bits layout, whose keys
    /// set other bits): probing it would give false negatives, so it is never loaded.
    #[error("hash kind {got}, this build uses {expected}")]
    HashKind {
        /// The hash kind this build uses.
        expected: u32,
        /// The hash kind found.
        got: u32,
    },
    /// The payload the header announces cannot be allocated in this process.
    #[error("cannot reserve {bytes} bytes for the payload")]
    TooLarge {
        /// Bytes asked for.
        bytes: u64,
    },
}

/// Why a tree's snapshot was not used at open: the filter was rebuilt from the keys instead
/// (or, under [`crate::RecoveryPolicy::Strict`], the open failed with this reason).
///
/// The rule that produces these lives in one function, `persist::trust::judge`; see
/// [`crate::persist`] for the argument that a snapshot passing it holds every stored key.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum Distrust {
    /// The tree's record names a snapshot, but there is no snapshot file.
    #[error("no snapshot")]
    Missing,
    /// The snapshot file does not decode.
    #[error("snapshot unreadable: {0}")]
    Decode(#[from] DecodeError),
    /// The snapshot was written by another database (its database id differs).
    #[error("snapshot belongs to another database")]
    ForeignDatabase,
    /// The snapshot was written for another tree (its tree id differs from the tree's record).
    #[error("snapshot belongs to another tree")]
    OtherTree,
    /// The snapshot is not the one the tree's record names: an older or newer copy (a
    /// restored backup, a rolled-back file) or one whose completion never became durable.
    #[error(
        "snapshot is not the current one (file sequence {snapshot_sequence}, \
         record names sequence {recorded_sequence})"
    )]
    NotCurrent {
        /// Sequence in the file.
        snapshot_sequence: u64,
        /// Sequence the tree's record names.
        recorded_sequence: u64,
    },
    /// The tree was written after the snapshot was taken (or a crash left it marked so).
    #[error(
        "stale snapshot: sequence {snapshot_sequence}, tree written after sequence \
         {dirty_sequence}"
    )]
    Stale {
        /// Sequence of the snapshot.
        snapshot_sequence: u64,
        /// Highest sequence marked dirty.
        dirty_sequence: u64,
    },
    /// The snapshot holds a filter of another mode than the tree is opened with.
    #[error("snapshot holds a {snapshot} filter, the tree is opened in {configured} mode")]
    ModeChanged {
        /// Mode of the snapshot ("plain" or "counting").
        snapshot: &'static str,
        /// Mode asked for.
        configured: &'static str,
    },
    /// The tree holds keys but has no trust record (a database written by plain sled or by
    /// an older bloomsled, or a lost record): nothing proves a snapshot current.
    #[error("no trust record for a tree that holds keys")]
    NoRecord,
    /// The tree's trust record does not decode.
    #[error("trust record unreadable: {0}")]
    RecordUnreadable(DecodeError),
    /// Reading the snapshot failed.
    #[error("snapshot unreadable: {0}")]
    Io(String),
    /// The database record (the database id every snapshot must carry) was missing or
    /// damaged at open: the database got a new id and nothing bloomsled stored before is
    /// trusted.
    #[error("the database record was {0}: nothing stored before is trusted")]
    DatabaseRecord(DbRecordFault),
    /// The tree was written after its snapshot (as [`Distrust::Stale`]) and the crash
    /// journal of those writes could not stand for them (see [`crate::persist`]).
    #[error(
        "stale snapshot (sequence {snapshot_sequence}, written after sequence \
         {dirty_sequence}) and its crash journal not usable: {fault}"
    )]
    Journal {
        /// Sequence of the snapshot.
        snapshot_sequence: u64,
        /// Highest sequence marked dirty.
        dirty_sequence: u64,
        /// Why the journal was not replayed.
        fault: JournalFault,
    },
}

/// Why a tree's crash journal (the key hashes written since its snapshot) was not replayed
/// at open; the filter is then rebuilt from a scan. The rule is `persist::trust::judge_journals`.
///
/// ```
/// let f = bloomsled::JournalFault::OtherBoot;
/// assert!(f.to_string().contains("boot"));
/// ```
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum JournalFault {
    /// The journal of a sequence the tree was written in is not there.
    #[error("no journal for sequence {sequence}")]
    Missing {
        /// The sequence whose journal is missing.
        sequence: u64,
    },
    /// More sequences were written since the snapshot than journals are kept for.
    #[error("{sequences} sequences written since the snapshot")]
    TooMany {
        /// Sequences the journals would have to cover.
        sequences: u64,
    },
    /// The header or a record does not decode (a flipped byte, an overwrite).
    #[error("damaged journal of sequence {sequence}: {what}")]
    Damaged {
        /// The journal's sequence.
        sequence: u64,
        /// What failed.
        what: String,
    },
    /// The file is not as long as its header says (truncated or extended).
    #[error("journal of sequence {sequence} is {got} bytes, its header says {expected}")]
    Truncated {
        /// The journal's sequence.
        sequence: u64,
        /// Bytes the header announces.
        expected: u64,
        /// Bytes found.
        got: u64,
    },
    /// Written before the machine last booted: a power loss may have dropped its pages
    /// while sled kept keys written after them.
    #[error("journal written before the last boot")]
    OtherBoot,
    /// Written by another database.
    #[error("journal belongs to another database")]
    ForeignDatabase,
    /// Written for another tree.
    #[error("journal belongs to another tree")]
    OtherTree,
    /// Not a journal of the snapshot the tree's record names (another history, or a file
    /// renamed to another sequence).
    #[error("journal of sequence {sequence} does not follow the recorded snapshot")]
    NotCurrent {
        /// The sequence it was read for.
        sequence: u64,
    },
    /// Its hashes were taken with another seed than the snapshot's filter uses.
    #[error("journal hashes use seed {journal}, the filter {filter}")]
    Seed {
        /// The journal's seed.
        journal: u64,
        /// The filter's seed.
        filter: u64,
    },
    /// More writes than it has room for: the later ones were not journaled.
    #[error("journal of sequence {sequence} overflowed")]
    Overflowed {
        /// The journal's sequence.
        sequence: u64,
    },
    /// The file system had no room to grow the journal (a full disk): the writes from then
    /// on were not journaled (each still reached sled; the process was not stopped).
    ///
    /// ```
    /// let f = bloomsled::JournalFault::NoSpace { sequence: 3 };
    /// assert!(f.to_string().contains("no room"));
    /// ```
    #[error("journal of sequence {sequence}: the file system had no room to grow it")]
    NoSpace {
        /// The journal's sequence.
        sequence: u64,
    },
    /// The journal's counter file (outside the database folder) is not there: a reboot
    /// cleared it, or it was deleted, or the journal is a copy from elsewhere.
    #[error("journal of sequence {sequence}: its counter file is gone")]
    CountersMissing {
        /// The journal's sequence.
        sequence: u64,
    },
    /// The journal is not the one its counter file counts for: an earlier incarnation of
    /// the same tree's journal of that sequence (a copy put back).
    #[error("journal of sequence {sequence} is an earlier copy (another nonce)")]
    OtherIncarnation {
        /// The journal's sequence.
        sequence: u64,
    },
    /// Fewer intact records than writers finished: records were erased (or the journal
    /// is an earlier copy of itself).
    #[error("journal of sequence {sequence}: {finished} records finished, {found} found")]
    RecordsLost {
        /// The journal's sequence.
        sequence: u64,
        /// Records writers finished.
        finished: u64,
        /// Intact records found.
        found: u64,
    },
}

/// What is wrong with the database record in bloomsled's meta tree (the record holding the
/// database id that every snapshot must carry).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum DbRecordFault {
    /// The meta tree holds tree records but no database record.
    #[error("missing")]
    Missing,
    /// The record does not decode (bit flip, truncation, overwrite).
    #[error("damaged ({0})")]
    Damaged(DecodeError),
    /// The meta tree is empty, as in a new database, but bloomsled's snapshot and journal
    /// files of an earlier open remain in `<db>/bloomsled`: sled lost what its log held
    /// (cut short, overwritten, replaced by another store's, or lost to a power cut), or
    /// the meta tree was dropped through plain sled. The files are left where they are.
    #[error(
        "missing, with {files} snapshot or journal files of an earlier open beside an empty \
         store: sled's log lost what it held (cut short, overwritten or replaced)"
    )]
    StoreEmptied {
        /// How many of bloomsled's snapshot and journal files were found.
        files: usize,
    },
}

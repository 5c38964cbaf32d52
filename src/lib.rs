//! # bloomsled
//!
//! A Bloom filter in front of a [sled](https://docs.rs/sled/0.34.7) database: lookups of keys
//! that are certainly absent return from memory in nanoseconds and never touch the store.
//!
//! [`Db`], [`Tree`] and [`Config`] have the public API of sled 0.34, with the same argument
//! and return types, so switching is a change of import:
//!
//! ```
//! # fn main() -> Result<(), bloomsled::Error> {
//! let db = bloomsled::Config::new()
//!     .temporary(true)
//!     .expected_items(10_000)
//!     .false_positive_rate(0.01)
//!     .open()?;
//! db.insert(b"https://example.com/", b"seen".to_vec())?;
//! assert!(db.contains_key(b"https://example.com/")?);
//! assert_eq!(db.get(b"https://example.org/")?, None); // the filter answered
//! let stats = db.stats();
//! assert_eq!(stats.lookups, 2);
//! # Ok(()) }
//! ```
//!
//! The one invariant: **no false negatives**. Every path that can create a key (insert,
//! batch, compare-and-swap, update, merge, transaction, import) sets the key's filter bits
//! before sled stores it, so a key that is in the store is always "maybe" in the filter.
//!
//! ## Layers
//! - [`hash`]: stable xxh3-64 with a seed; the classic string hashes of PHP filters.
//! - the filter: the cache-line-blocked, lock-free [`Filter`], [`CountingFilter`] and their
//!   sizing math ([`FilterConfig`], [`optimal_k`], ...); no I/O. Its block layout (which
//!   block and bits a hash selects, and their byte encoding) is one module every layer calls,
//!   public as [`layout`] for the crates that keep a filter elsewhere.
//! - the on-disk format (`src/format/`): snapshot header, CRC-checked pages, trust records;
//!   bytes in, bytes out (public only to the fuzz targets, through the `fuzzing` feature).
//! - [`persist`]: what makes a snapshot trustworthy, recovery at open ([`RecoveryReport`],
//!   [`RecoveryPolicy::Strict`], [`Distrust`]).
//! - the store: [`Db`], [`Tree`], [`Config`], [`TreeConfig`], [`Batch`], [`transaction`].
//! - [`clock`]: the clocks windows read and the generation arithmetic both kinds of
//!   window share.
//! - [`window`]: windows, rings of generation trees whose keys and filters expire together
//!   ("have I seen this URL in the last 7 days?").
//!
//! Two crates of the same workspace build on this one: `bloomsled-redis`, the same filter
//! kept in Redis / Redis Cluster, shared by many processes and hosts, that reports a lost
//! filter instead of answering "absent" (and the classic PHP layout); and
//! `bloomsled-fpset`, the fingerprint set (an exact, disk-backed set of fixed-width
//! fingerprints whose memory is a bloomsled filter and a small index: a crawler's "seen"
//! set).
//!
//! A clean restart loads each tree's filter from its snapshot without reading a key; after a
//! crash, or with a damaged snapshot, the filter is rebuilt from the keys (see
//! [`persist`] for the protocol and why it never loses a key).
#![deny(missing_docs)]
#![deny(unsafe_code)]
#![warn(unreachable_pub)]
#![cfg_attr(docsrs, feature(doc_cfg))]

#[cfg(feature = "tokio")]
#[cfg_attr(docsrs, doc(cfg(feature = "tokio")))]
pub mod blocking;
pub mod clock;
mod counters;
mod error;
mod filter;
#[cfg(feature = "fuzzing")]
#[doc(hidden)]
pub mod format;
// Without `fuzzing`, parts of the layout API (constants, standalone encoders) serve only
// the fuzz targets and the format's own tests.
#[cfg(not(feature = "fuzzing"))]
#[allow(unreachable_pub, unused_imports, dead_code)]
mod format;
pub mod hash;
pub mod persist;
mod stats;
mod store;
mod sync;
#[cfg(feature = "metrics")]
#[cfg_attr(docsrs, doc(cfg(feature = "metrics")))]
pub mod telemetry;
pub mod window;

pub use error::{DbRecordFault, DecodeError, Distrust, Error, FilterShape, JournalFault, Result};
pub use filter::layout;
pub use filter::math::{bits_for, blocked_fpr, optimal_k, standard_fpr};
pub use filter::{
    probe_kernel, CountingFilter, Filter, FilterConfig, FilterMode, Sizing, COUNTER_MAX,
    DEFAULT_FALSE_POSITIVE_RATE,
};
pub use persist::{
    RebuildProgress, RecoveryOutcome, RecoveryPolicy, RecoveryReport, SnapshotInfo, VerifyReport,
};
/// sled's hidden testing re-exports, which sled's own test suite uses (an epoch guard and
/// the space-amplification bound), so those tests compile against bloomsled unchanged.
#[doc(hidden)]
pub use sled::{pin, MAX_SPACE_AMPLIFICATION};
pub use sled::{Event, IVec, MergeOperator, Mode};
pub use stats::Stats;
pub use store::transaction::{self, Transactional};
pub use store::{
    open, Batch, CompareAndSwapError, CompareAndSwapResult, Config, Db, Iter, RebuildReport,
    Subscriber, Tree, TreeConfig, DEFAULT_FALSE_POSITIVE_MEMORY, DEFAULT_GROWTH_FACTOR,
    DEFAULT_LARGE_GROWTH_FACTOR,
};

/// Internals the workspace's other crates reuse rather than copy (`bloomsled-redb`'s
/// per-table lookup counts and false-positive memory): the core's striped counters and its
/// false-positive memory, with the record/forget protocol its module docs state. Not a
/// stable API: hidden from the docs and free to change with the workspace.
///
/// ```
/// use std::cell::RefCell;
/// use bloomsled::reuse::{Counters, FpMemory, Pending, Recall};
///
/// let c = Counters::<2>::default();
/// c.add(0, 3);
/// assert_eq!(c.sum(0), 3);
///
/// let m = FpMemory::new(64, 7);
/// let Recall::Unknown(ticket) = m.recall(b"k") else { unreachable!() };
/// m.record(ticket, b"k"); // the store did not hold it
/// assert!(matches!(m.recall(b"k"), Recall::Absent));
/// let pending = RefCell::new(Pending::default());
/// m.forget(bloomsled::hash::hash_key(b"k", m.seed()), &pending); // before the store write
/// m.end(&mut pending.borrow_mut()); // after it
/// assert!(matches!(m.recall(b"k"), Recall::Unknown(_)));
///
/// // A write of keys not known one by one (another store's restore): every key forgotten.
/// let Recall::Unknown(ticket) = m.recall(b"j") else { unreachable!() };
/// m.record(ticket, b"j");
/// assert!(matches!(m.recall(b"j"), Recall::Absent));
/// let pending = RefCell::new(Pending::default());
/// m.forget_all(&pending);
/// m.end(&mut pending.borrow_mut());
/// assert!(matches!(m.recall(b"j"), Recall::Unknown(_)));
/// ```
#[doc(hidden)]
pub mod reuse {
    pub use crate::counters::Counters;
    pub use crate::store::fp_memory::{FpMemory, Hashed, Pending, Recall, Ticket};
}

/// The examples of `docs/windows.md`, compiled as doc tests.
#[doc = include_str!("../docs/windows.md")]
#[cfg(doctest)]
pub struct WindowsDoctests;

/// The README's examples, compiled and run as doc tests.
#[doc = include_str!("../README.md")]
#[cfg(doctest)]
pub struct ReadmeDoctests;

/// The guide's examples, compiled and run as doc tests.
#[doc = include_str!("../docs/guide.md")]
#[cfg(doctest)]
pub struct GuideDoctests;

/// The persistence document's examples, compiled and run as doc tests.
#[doc = include_str!("../docs/persistence.md")]
#[cfg(doctest)]
pub struct PersistenceDoctests;

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
//! - [`hash`]: stable xxh3-64 with a seed; one hash → block and bit positions.
//! - [`filter`]: the cache-line-blocked, lock-free [`Filter`] and its sizing math (no I/O).
//! - [`codec`]: the filter's stable serialized form.
//! - [`format`](mod@format): the on-disk snapshot (zerocopy header, CRC-checked pages); bytes only.
//! - [`persist`]: snapshot files, the dirty marker, trust-or-rebuild at open
//!   ([`RecoveryReport`], [`Recovery::Strict`]).
//! - the store: [`Db`], [`Tree`], [`Config`], [`Batch`], [`transaction`].
//! - `shared` (feature `redis`): the same filter kept in Redis / Redis Cluster, shared by
//!   many processes and hosts, that reports a lost filter instead of answering "absent".
//!
//! A clean restart loads each tree's filter from its snapshot without reading a key; after a
//! crash, or with a damaged snapshot, the filter is rebuilt from the keys (see
//! [`persist`] for the protocol and why it never loses a key).
#![deny(missing_docs)]
#![deny(unsafe_code)]

pub mod codec;
mod error;
pub mod filter;
pub mod format;
pub mod hash;
pub mod persist;
#[cfg(feature = "redis")]
pub mod shared;
mod stats;
mod store;

pub use error::{Error, FilterShape, Result};
pub use filter::math::{bits_for, blocked_fpr, optimal_k, standard_fpr};
pub use filter::{CountingFilter, Filter, FilterConfig, FilterMode, Sizing, COUNTER_MAX};
pub use format::SnapshotFault;
pub use persist::{Recovery, RecoveryOutcome, RecoveryReport, SnapshotInfo, VerifyReport};
pub use sled::{Event, IVec, Iter, MergeOperator, Mode, Subscriber};
pub use stats::Stats;
pub use store::transaction::{self, Transactional};
pub use store::{
    open, Batch, CompareAndSwapError, CompareAndSwapResult, Config, Db, RebuildReport, Tree,
    RESERVED_PREFIX,
};

/// The README's examples, compiled and run as doc tests.
#[doc = include_str!("../README.md")]
#[cfg(doctest)]
pub struct ReadmeDoctests;

//! The atomics and locks of the filter's lock-free paths (the filter's words in
//! `filter::bits`, the seqlock and gate in `store::filters`), from std, or from loom when
//! built with `--cfg loom` so that loom's model checker explores their interleavings
//! (`RUSTFLAGS="--cfg loom" cargo test --release --lib loom`; see `store::filters`).

#[cfg(loom)]
pub(crate) use loom::sync::atomic::{fence, AtomicPtr, AtomicU64, AtomicUsize, Ordering};
#[cfg(loom)]
pub(crate) use loom::sync::{RwLock, RwLockReadGuard, RwLockWriteGuard};

#[cfg(not(loom))]
pub(crate) use std::sync::atomic::{fence, AtomicPtr, AtomicU64, AtomicUsize, Ordering};
#[cfg(not(loom))]
pub(crate) use std::sync::{RwLock, RwLockReadGuard, RwLockWriteGuard};

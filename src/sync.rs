//! The atomics and locks of the filter's lock-free paths (the filter's words in
//! `filter::bits`, the seqlock and gate in `store::filters`), from std, or from loom when
//! built with `--cfg bloomsled_loom` so that loom's model checker explores their interleavings
//! (`RUSTFLAGS="--cfg bloomsled_loom" cargo test --release --lib loom`; see `store::filters`).

#[cfg(bloomsled_loom)]
pub(crate) use loom::sync::atomic::{fence, AtomicPtr, AtomicU64, AtomicUsize, Ordering};
#[cfg(bloomsled_loom)]
pub(crate) use loom::sync::{RwLock, RwLockReadGuard, RwLockWriteGuard};
#[cfg(bloomsled_loom)]
pub(crate) use loom::thread::yield_now;

#[cfg(not(bloomsled_loom))]
pub(crate) use std::sync::atomic::{fence, AtomicPtr, AtomicU64, AtomicUsize, Ordering};
#[cfg(not(bloomsled_loom))]
pub(crate) use std::sync::{RwLock, RwLockReadGuard, RwLockWriteGuard};
#[cfg(not(bloomsled_loom))]
pub(crate) use std::thread::yield_now;

//! The locks and atomics of the filters' protocol (`filters.rs`, rules 1-4), from std, or
//! from loom when built with `--cfg bloomsled_loom`, so that loom's model checker explores
//! their interleavings on the real code (`filters/loom_model.rs`; run with
//! `RUSTFLAGS="--cfg bloomsled_loom" cargo test --release -p bloomsled-redb --lib loom`, see
//! `.ci/run`). `Arc` and `Weak` stay std's: methods take `self: &Arc<Self>`, which only
//! std's `Arc` allows, and loom's has no `Weak`; no rule of the protocol rests on a
//! reference count.

#[cfg(bloomsled_loom)]
pub(crate) use loom::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, fence};
#[cfg(bloomsled_loom)]
pub(crate) use loom::sync::{Mutex, MutexGuard, RwLock, RwLockReadGuard};

#[cfg(not(bloomsled_loom))]
pub(crate) use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, fence};
#[cfg(not(bloomsled_loom))]
pub(crate) use std::sync::{Mutex, MutexGuard, RwLock, RwLockReadGuard};

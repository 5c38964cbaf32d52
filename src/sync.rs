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

/// Runs `body` under loom with a preemption bound of 3 unless `LOOM_MAX_PREEMPTIONS`
/// says otherwise (loom's docs: 2 or 3 find most bugs; with 3 these models take seconds
/// in a release build); prints how many interleavings ran. Shared by the loom models of
/// `store::filters` and `store::fp_memory`.
#[cfg(all(test, bloomsled_loom))]
pub(crate) fn loom_model(what: &str, body: impl Fn() + Sync + Send + 'static) {
    use std::sync::atomic::{AtomicUsize as Count, Ordering::Relaxed};
    let runs = std::sync::Arc::new(Count::new(0));
    let counted = runs.clone();
    let mut builder = loom::model::Builder::new();
    if builder.preemption_bound.is_none() {
        builder.preemption_bound = Some(3);
    }
    builder.check(move || {
        counted.fetch_add(1, Relaxed);
        body();
    });
    println!(
        "loom: {} interleavings of {what}, no false negative",
        runs.load(Relaxed)
    );
}

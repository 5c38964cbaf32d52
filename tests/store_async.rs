//! The async forms of what blocks on a local database (feature `tokio`): open, close, open
//! a tree, flush, snapshot, rebuild and wait for a filter, awaited on tokio runtimes; a
//! rebuild paused mid-scan (the `failpoints` pause) leaves a `current_thread` runtime's only
//! worker ticking; and a call outside any runtime is an error, not a panic.
#![cfg(feature = "tokio")]

use std::future::Future;
use std::panic::{catch_unwind, resume_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bloomsled::persist::{pause_rebuild_scans_after, rebuild_scans_paused};
use bloomsled::{Config, Error};

/// The rebuild-scan pause is process-wide: tests that rebuild take turns.
static REBUILDS: Mutex<()> = Mutex::new(());

/// How long a test may run before it fails instead of hanging.
const LIMIT: Duration = Duration::from_secs(120);

/// A multi-threaded runtime of two workers.
fn multi_thread() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap()
}

/// Runs `test` on `rt` for at most [`LIMIT`]. A test that panics or runs out of time fails
/// with its message, and its runtime is shut down without waiting on a blocking task that
/// never ends (dropping a runtime would wait for it: a hang, not a failure).
fn run<F: Future>(rt: tokio::runtime::Runtime, test: F) -> F::Output {
    let out = catch_unwind(AssertUnwindSafe(|| {
        rt.block_on(async { tokio::time::timeout(LIMIT, test).await })
    }));
    rt.shutdown_timeout(Duration::from_secs(5));
    match out {
        Ok(Ok(v)) => v,
        Ok(Err(_)) => panic!("the test ran past {LIMIT:?}"),
        Err(panic) => resume_unwind(panic),
    }
}

/// Lifts the rebuild-scan pause when dropped, also when a test panics mid-pause.
struct Unpause;

impl Drop for Unpause {
    fn drop(&mut self) {
        pause_rebuild_scans_after(None);
    }
}

#[test]
fn open_write_snapshot_close_and_reopen_without_a_scan() {
    let _turn = REBUILDS.lock().unwrap_or_else(|p| p.into_inner());
    run(multi_thread(), async {
        let dir = tempfile::tempdir().unwrap();
        let config = Config::new().path(dir.path()).expected_items(10_000);
        let db = config.open_async().await.unwrap();
        assert!(db
            .wait_for_filter_async(Duration::from_secs(60))
            .await
            .unwrap());
        let users = db.open_tree_async("users").await.unwrap();
        for i in 0..5_000u32 {
            db.insert(i.to_be_bytes(), "v").unwrap();
            users.insert(i.to_le_bytes(), "u").unwrap();
        }
        assert!(db.flush_async().await.unwrap() > 0);
        let info = users.snapshot_async().await.unwrap();
        assert!(info.bytes > 0);
        db.close_async().await.unwrap();
        drop(users);

        // Both trees come back from their snapshots, no key scanned, every key found.
        let db = config.open_async().await.unwrap();
        let users = db.open_tree_async("users").await.unwrap();
        assert!(db.recovery_report().loaded() && users.recovery_report().loaded());
        assert!((0..5_000u32).all(|i| db.may_contain(i.to_be_bytes())));
        assert!((0..5_000u32).all(|i| users.contains_key(i.to_le_bytes()).unwrap()));
        assert_eq!(users.get(u32::MAX.to_le_bytes()).unwrap(), None);
    });
}

#[test]
fn rebuild_async_resizes_a_filter_past_its_capacity() {
    let _turn = REBUILDS.lock().unwrap_or_else(|p| p.into_inner());
    run(multi_thread(), async {
        let db = Config::new()
            .temporary(true)
            .expected_items(100)
            .auto_rebuild(false)
            .open_async()
            .await
            .unwrap();
        for i in 0..20_000u32 {
            db.insert(i.to_be_bytes(), "").unwrap();
        }
        let r = db.rebuild_async().await.unwrap();
        assert_eq!(r.keys_scanned, 20_000);
        assert!(r.capacity >= 20_000);
        assert!((0..20_000u32).all(|i| db.may_contain(i.to_be_bytes())));
    });
}

#[test]
fn a_paused_rebuild_leaves_the_only_worker_ticking() {
    let _turn = REBUILDS.lock().unwrap_or_else(|p| p.into_inner());
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    run(rt, async {
        let db = Config::new()
            .temporary(true)
            .expected_items(100)
            .auto_rebuild(false)
            .open_async()
            .await
            .unwrap();
        for i in 0..10_000u32 {
            db.insert(i.to_be_bytes(), "").unwrap();
        }
        let ticks = Arc::new(AtomicU64::new(0));
        let counter = ticks.clone();
        let ticker = tokio::spawn(async move {
            let mut every = tokio::time::interval(Duration::from_millis(5));
            loop {
                every.tick().await;
                counter.fetch_add(1, Ordering::SeqCst);
            }
        });
        // The scan stops after 1,000 keys until released.
        pause_rebuild_scans_after(Some(1_000));
        let _unpause = Unpause;
        let tree = (*db).clone();
        let mut rebuild = tokio::spawn(async move { tree.rebuild_async().await });
        while rebuild_scans_paused() == 0 {
            if rebuild.is_finished() {
                let r = (&mut rebuild).await;
                panic!("the rebuild ended without reaching the pause: {r:?}");
            }
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
        // The rebuild is in flight and paused: the worker keeps running other tasks,
        // and lookups are answered meanwhile.
        let before = ticks.load(Ordering::SeqCst);
        let since = Instant::now();
        while ticks.load(Ordering::SeqCst) < before + 10 {
            assert!(db.may_contain(5u32.to_be_bytes()));
            assert!(
                since.elapsed() < Duration::from_secs(30),
                "the ticker ticked {} times in 30 s beside the paused rebuild",
                ticks.load(Ordering::SeqCst) - before
            );
            tokio::task::yield_now().await;
        }
        assert!(!rebuild.is_finished());
        pause_rebuild_scans_after(None);
        let r = rebuild.await.unwrap().unwrap();
        assert_eq!(r.keys_scanned, 10_000);
        ticker.abort();
    });
}

#[test]
fn awaited_outside_a_runtime_is_an_error_not_a_panic() {
    // A future polled by a plain executor, not tokio: the blocking pool is not there.
    let config = Config::new().temporary(true);
    let r = poll_to_end(config.open_async());
    assert!(matches!(r, Err(Error::Unsupported(_))), "{r:?}");
}

/// Polls a future to completion on this thread with a no-op waker (the futures here
/// complete without waiting on anything outside).
fn poll_to_end<F: std::future::Future>(fut: F) -> F::Output {
    use std::task::{Context, Poll, Waker};
    let mut fut = std::pin::pin!(fut);
    let mut cx = Context::from_waker(Waker::noop());
    loop {
        if let Poll::Ready(v) = fut.as_mut().poll(&mut cx) {
            return v;
        }
        std::thread::yield_now();
    }
}

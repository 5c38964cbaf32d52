//! The false-positive memory's record/forget protocol under loom: a writer of a key (forget,
//! the store write, end) against readers that look the key up, read the store and record a
//! miss, on the real `FpMemory` (its atomics are loom's under `--cfg bloomsled_loom`). The
//! store is one `AtomicBool` written with release and read with acquire, as sled's own
//! synchronization gives at least. Run with
//! `RUSTFLAGS="--cfg bloomsled_loom" cargo test --release --lib loom` (see `.ci/run`).

use super::*;
use crate::sync::loom_model as model;
use loom::sync::atomic::AtomicBool;
use loom::sync::Arc;

const KEY: &[u8] = b"a key written while it is looked up";
const SEED: u64 = 7;

/// A reader's lookup of `KEY` that the filter passed: memory, then the store, then the
/// record of a miss. Returns what it answered.
fn lookup(m: &FpMemory, stored: &AtomicBool) -> bool {
    match m.recall(KEY) {
        Recall::Absent => false,
        Recall::Unknown(t) => {
            if stored.load(Ordering::Acquire) {
                true
            } else {
                m.record(t, KEY);
                false
            }
        }
    }
}

/// A key remembered as a false positive is then written while two readers look it up (and
/// record their misses): once the write has ended, no lookup answers "absent", neither a
/// reader that saw the write end nor any lookup after every thread is done. Without the
/// writer's version bump (a record racing the write would land after the forget) or without
/// the in-flight count (a reader reading the store between the forget and the store write
/// would record after it), loom finds the false negative.
#[test]
fn loom_fp_memory_a_write_racing_lookups_leaves_no_false_negative() {
    model("a write racing two recording lookups", || {
        let m = Arc::new(FpMemory::new(1, SEED));
        let stored = Arc::new(AtomicBool::new(false));
        let done = Arc::new(AtomicBool::new(false));
        // Found absent once before: remembered.
        assert!(!lookup(&m, &stored));
        assert!(matches!(m.recall(KEY), Recall::Absent));
        let writer = {
            let (m, stored, done) = (m.clone(), stored.clone(), done.clone());
            loom::thread::spawn(move || {
                let pending = RefCell::new(Pending::default());
                m.forget(hash_key(KEY, SEED), &pending);
                stored.store(true, Ordering::Release);
                m.end(&mut pending.borrow_mut());
                done.store(true, Ordering::Release);
            })
        };
        let reader = {
            let (m, stored, done) = (m.clone(), stored.clone(), done.clone());
            loom::thread::spawn(move || {
                let after = done.load(Ordering::Acquire);
                let found = lookup(&m, &stored);
                assert!(
                    found || !after,
                    "a lookup after the write ended missed the key"
                );
            })
        };
        // The main thread is the second reader, racing the write (either answer is right).
        lookup(&m, &stored);
        writer.join().unwrap();
        reader.join().unwrap();
        assert!(lookup(&m, &stored), "false negative after the write");
        assert!(!matches!(m.recall(KEY), Recall::Absent));
    });
}

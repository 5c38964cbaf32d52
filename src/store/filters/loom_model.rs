//! The seqlock under loom's model checker: every interleaving of a lookup with a rebuild's
//! publish (the swap to a new filter) and retire (the swap away from a filter, then its
//! zeroing and refilling for reuse), up to a preemption bound, and every value each relaxed
//! load may return under the memory model, on the real `Filters` and `Filter` (their atomics
//! and locks come from `crate::sync`, which is loom's under `--cfg bloomsled_loom`). Run it with
//! `RUSTFLAGS="--cfg bloomsled_loom" cargo test --release --lib loom` (see `.ci/run`).

use super::read_any::read_any;
use super::*;
use crate::filter::any::FilterMode;
use crate::filter::FilterConfig;
use crate::sync::loom_model as model;
use loom::sync::Arc;

const KEY: &[u8] = b"a stored key";

/// One block and one bit per key: the fewest atomics and loads, so the model stays
/// small (every relaxed load multiplies the values loom must try). The protocol does
/// not depend on `k`: a probe reads its words between the same two loads of `state`.
fn tiny() -> Result<AnyFilter> {
    AnyFilter::new(
        FilterMode::Plain,
        // One fixed seed: the trees and rebuilt filters of a model share it, as a tree's
        // filters and a window's generations do.
        FilterConfig::new(1).num_hashes(1).seed(1).shape()?,
        1,
    )
}

fn fill(f: &Filters, i: usize) {
    let slot = f.get(i).expect("a filled slot");
    slot.admit_hash(slot.bits().hash(KEY));
}

/// `f` (holding `KEY` in slot 0, slot 1 built and filled) gets a rebuild thread that
/// publishes slot 1, then retires slot 0: reused (zeroed) by the next rebuild,
/// refilled, published.
fn rebuild_racing(f: &Arc<Filters>) -> loom::thread::JoinHandle<()> {
    let built = f.prepare(|_| false, tiny).unwrap();
    assert_eq!(built, 1);
    fill(f, built);
    let w = f.clone();
    loom::thread::spawn(move || {
        w.swap(&mut w.close_gate(), 1);
        let reused = w.prepare(|_| true, tiny).unwrap();
        assert_eq!(reused, 0, "the retired slot is reused");
        fill(&w, reused);
        w.swap(&mut w.close_gate(), reused);
    })
}

/// A lookup of a stored key races a rebuild that publishes slot 1, then retires slot 0,
/// zeroes it for reuse, refills it and publishes it again. The lookup may read either
/// filter, before, during or after its zeroing: it must never answer "absent".
#[test]
fn loom_a_lookup_racing_publish_and_retire_never_misses_a_key() {
    // With the release fence before a retired filter is zeroed left out, this model finds
    // a false negative.
    model("a lookup against publish and retire", || {
        let f = Arc::new(Filters::new(tiny().unwrap()));
        f.enter().admit(KEY);
        let rebuild = rebuild_racing(&f);
        assert!(f.contains(KEY), "false negative during the rebuild");
        rebuild.join().unwrap();
        assert!(f.contains(KEY), "false negative after the rebuild");
    });
}

/// The same race for a lookup of several trees at once (`read_any`, a window's lookup):
/// the key lives in the second of two trees, whose filter is published, retired, zeroed,
/// refilled and published again while the lookup reads both trees' states, tests both
/// blocks and compares the states' sum. It must never answer "absent".
#[test]
fn loom_a_lookup_of_two_trees_racing_publish_and_retire_never_misses_a_key() {
    model("a two-tree lookup against publish and retire", || {
        let other = Filters::new(tiny().unwrap());
        let f = Arc::new(Filters::new(tiny().unwrap()));
        f.enter().admit(KEY);
        let (seed, h) = {
            let b = f.get(0).unwrap().bits();
            (b.seed(), b.hash(KEY))
        };
        let rebuild = rebuild_racing(&f);
        let both = [&other, &*f];
        assert_eq!(
            read_any(both.iter().copied(), seed, h),
            Some(true),
            "false negative during the rebuild"
        );
        rebuild.join().unwrap();
        assert_eq!(read_any(both.iter().copied(), seed, h), Some(true));
    });
}

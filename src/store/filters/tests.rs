//! Unit tests of the slots, the seqlock read and `read_any`, with real threads.

use super::read_any::read_any;
use super::*;
use crate::filter::any::FilterMode;
use crate::filter::FilterConfig;

fn small() -> Result<AnyFilter> {
    // One fixed seed: the trees of one test share it, as a window's generations do.
    let c = FilterConfig::new(1_000).seed(crate::hash::DEFAULT_SEED);
    AnyFilter::new(FilterMode::Plain, c.shape()?, 1_000)
}

/// Single lookups find the current filter through the pointer `swap` publishes, batched
/// ones (and writers) by its slot index modulo the slot count: at the last slot both read
/// that slot and no other, and a tree that has used every slot is told so instead of
/// wrapping onto slot 0.
#[test]
fn the_last_slot_is_read_as_itself_and_a_65th_filter_is_refused() {
    let f = Filters::new(small().unwrap());
    f.enter().admit(b"in slot 0");
    assert!(f.contains(b"in slot 0"));
    for i in 1..MAX_SLOTS {
        assert_eq!(f.prepare(|_| false, small).unwrap(), i);
    }
    let err = f.prepare(|_| false, small).unwrap_err();
    assert!(err.to_string().contains("no room"), "{err}");
    assert!(f.get(MAX_SLOTS).is_none());

    f.swap(&mut f.close_gate(), MAX_SLOTS - 1);
    f.enter().admit(b"in the last slot");
    assert!(f.contains(b"in the last slot"));
    assert!(f
        .get(MAX_SLOTS - 1)
        .unwrap()
        .bits()
        .contains(b"in the last slot"));
    assert!(
        !f.contains(b"in slot 0"),
        "a lookup read a slot other than the current one"
    );
    assert_eq!(
        f.contains_many(&[&b"in the last slot"[..], &b"in slot 0"[..]]),
        vec![true, false],
        "a batched lookup read a slot other than the current one"
    );
}

/// Two readers run `check` (it returns how many keys it checked) over and over while
/// `f`'s retired slot is taken 3,000 times, zeroed (by `prepare`), refilled by `fill`
/// and made current; the number of keys checked.
fn readers_while_refilled(
    f: &Filters,
    fill: &(dyn Fn(&AnyFilter) + Sync),
    check: impl Fn() -> u64 + Sync,
) -> u64 {
    let done = std::sync::atomic::AtomicBool::new(false);
    std::thread::scope(|s| {
        let readers: Vec<_> = (0..2)
            .map(|_| {
                s.spawn(|| {
                    let mut n = 0u64;
                    while !done.load(Ordering::Relaxed) {
                        n += check();
                    }
                    n
                })
            })
            .collect();
        for _ in 0..3_000 {
            let i = f.prepare(|_| true, small).unwrap();
            fill(f.get(i).unwrap());
            f.swap(&mut f.close_gate(), i);
        }
        done.store(true, Ordering::Relaxed);
        readers.into_iter().map(|r| r.join().unwrap()).sum::<u64>()
    })
}

/// Readers probing while the current filter is swapped back and forth between two slots,
/// each retired one zeroed and refilled right after the swap away from it: a reader that
/// probed a filter being zeroed must notice and probe again, so no key is ever missed.
/// Also checks that every swap publishes the pointer lookups follow: a lookup that saw a
/// swap's new state but the old filter's pointer would read zeroed bits unnoticed.
#[test]
fn readers_never_miss_a_key_while_filters_are_swapped_and_recycled() {
    let keys: Vec<Vec<u8>> = (0..400u32)
        .map(|i| format!("key {i}").into_bytes())
        .collect();
    let f = Filters::new(small().unwrap());
    let fill = |slot: &AnyFilter| {
        for k in &keys {
            slot.admit_hash(slot.bits().hash(k));
        }
    };
    fill(f.get(0).unwrap());
    let checks = readers_while_refilled(&f, &fill, || {
        for k in &keys {
            assert!(f.contains(k), "false negative for {k:?}");
        }
        keys.len() as u64
    });
    assert!(checks > 0);
    assert!(
        f.get(2).is_none(),
        "two slots were enough: retired ones were reused"
    );
}

/// A key's hash under the seed every `small()` filter shares.
fn h(key: &[u8]) -> u64 {
    small().unwrap().bits().hash(key)
}

/// `read_any` answers what the filters answer one by one, across more trees than one
/// kernel call takes and across a change of `k` (each starts a new call), and declines
/// (`None`) when a filter has another seed, which the caller then probes by itself.
#[test]
fn read_any_answers_as_the_filters_one_by_one() {
    let shape = |k: u32| {
        let c = FilterConfig::new(1_000).seed(crate::hash::DEFAULT_SEED);
        let c = if k == 0 { c } else { c.num_hashes(k) };
        AnyFilter::new(FilterMode::Plain, c.shape().unwrap(), 1_000).unwrap()
    };
    // 11 trees: a first call of 5 (default k), then 3 with k = 3, then 3 more.
    let ks = [0, 0, 0, 0, 0, 3, 3, 3, 0, 0, 0];
    let trees: Vec<Filters> = ks.iter().map(|&k| Filters::new(shape(k))).collect();
    for (i, t) in trees.iter().enumerate() {
        for j in 0..50 {
            t.enter().admit(format!("{i}/{j}").as_bytes());
        }
    }
    let seed = trees[0].pinned().1.unwrap().seed();
    let mut maybe = 0;
    for i in 0..trees.len() {
        for j in 0..60 {
            let key = format!("{i}/{j}");
            let want = trees.iter().any(|t| t.contains(key.as_bytes()));
            let got = read_any(trees.iter(), seed, h(key.as_bytes()));
            assert_eq!(got, Some(want), "{key}");
            assert!(j >= 50 || want, "false negative for {key}");
            maybe += usize::from(want);
        }
    }
    assert!(maybe < trees.len() * 60, "the absent keys were all 'maybe'");
    assert_eq!(read_any(trees[..0].iter(), seed, h(b"x")), Some(false));
    let other = Filters::new(
        AnyFilter::new(
            FilterMode::Plain,
            FilterConfig::new(1_000).seed(seed ^ 1).shape().unwrap(),
            1_000,
        )
        .unwrap(),
    );
    let mixed = [&trees[0], &other];
    assert_eq!(read_any(mixed.iter().copied(), seed, h(b"x")), None);
}

/// `read_any` compares the states of its trees through their sum, which is sound only
/// because a state word grows at every swap, whichever slot it moves to.
#[test]
fn a_state_word_grows_at_every_swap() {
    let f = Filters::new(small().unwrap());
    let one = f.prepare(|_| false, small).unwrap();
    let mut last = f.state.word.load(Ordering::Relaxed);
    for slot in [one, 0, one, 0, 0, one] {
        f.swap(&mut f.close_gate(), slot);
        let now = f.state.word.load(Ordering::Relaxed);
        assert!(now > last, "{now:#x} after {last:#x}");
        last = now;
    }
}

/// Readers asking several trees at once (`read_any`, as a window's lookup does) while
/// one tree's filter is swapped back and forth and each retired one zeroed and refilled:
/// a key of that tree is never missed.
#[test]
fn read_any_never_misses_a_key_while_one_trees_filters_are_recycled() {
    let keys: Vec<Vec<u8>> = (0..300u32)
        .map(|i| format!("key {i}").into_bytes())
        .collect();
    let hashes: Vec<u64> = keys.iter().map(|k| h(k)).collect();
    let trees: Vec<Filters> = (0..3).map(|_| Filters::new(small().unwrap())).collect();
    let fill = |slot: &AnyFilter| {
        for k in &keys {
            slot.admit_hash(slot.bits().hash(k));
        }
    };
    // The keys live in the middle tree only.
    let busy = &trees[1];
    fill(busy.get(0).unwrap());
    let seed = busy.pinned().1.unwrap().seed();
    let checks = readers_while_refilled(busy, &fill, || {
        for (k, &h) in keys.iter().zip(&hashes) {
            let got = read_any(trees.iter(), seed, h);
            assert_eq!(got, Some(true), "false negative for {k:?}");
        }
        keys.len() as u64
    });
    assert!(checks > 0);
}

use super::*;

const SEED: u64 = 0x5eed;

fn h(key: &[u8]) -> u64 {
    hash_key(key, SEED)
}

/// A write of `key`: forgotten before the store write, ended after it.
fn write(m: &FpMemory, key: &[u8]) {
    let pending = RefCell::new(Pending::default());
    m.forget(h(key), &pending);
    m.end(&mut pending.borrow_mut());
}

fn remember(m: &FpMemory, key: &[u8]) {
    match m.recall(key) {
        Recall::Unknown(t) => m.record(t, key),
        Recall::Absent => {}
    }
}

fn remembered(m: &FpMemory, key: &[u8]) -> bool {
    matches!(m.recall(key), Recall::Absent)
}

#[test]
fn a_recorded_miss_is_recalled_until_a_write_of_the_key_forgets_it() {
    let m = FpMemory::new(64, SEED);
    assert!(!remembered(&m, b"k"));
    remember(&m, b"k");
    assert!(remembered(&m, b"k"));
    assert!(!remembered(&m, b"other"));
    write(&m, b"k");
    assert!(!remembered(&m, b"k"));
}

#[test]
fn a_miss_read_before_a_write_began_is_not_recorded_after_it() {
    let m = FpMemory::new(64, SEED);
    let Recall::Unknown(ticket) = m.recall(b"k") else {
        panic!("nothing recorded yet")
    };
    assert!(ticket.is_some());
    // A writer of the key begins and ends between the reader's store read and its record.
    write(&m, b"k");
    m.record(ticket, b"k");
    assert!(!remembered(&m, b"k"));
}

#[test]
fn no_miss_is_recorded_while_a_write_is_in_flight_on_its_set() {
    let m = FpMemory::new(1, SEED); // one set: every key shares it
    let pending = RefCell::new(Pending::default());
    m.forget(h(b"k"), &pending);
    assert!(matches!(m.recall(b"k"), Recall::Unknown(None)));
    // Another key's lookup in the same set: no ticket either, and no answer from memory.
    assert!(matches!(m.recall(b"other"), Recall::Unknown(None)));
    m.end(&mut pending.borrow_mut());
    remember(&m, b"other");
    assert!(remembered(&m, b"other"));
}

#[test]
fn a_write_forgets_only_its_key() {
    let m = FpMemory::new(1, SEED);
    remember(&m, b"a");
    remember(&m, b"b");
    write(&m, b"a");
    assert!(!remembered(&m, b"a"));
    assert!(remembered(&m, b"b"));
}

#[test]
fn the_memory_is_bounded_and_clock_keeps_referenced_entries() {
    let m = FpMemory::new(WAYS, SEED); // one set
    assert_eq!(m.capacity(), WAYS);
    let keys: Vec<Vec<u8>> = (0..WAYS + 1)
        .map(|i| format!("k{i}").into_bytes())
        .collect();
    for k in &keys[..WAYS] {
        remember(&m, k);
    }
    assert!(
        keys[..WAYS].iter().all(|k| remembered(&m, k)),
        "all referenced now"
    );
    // Every entry referenced: CLOCK clears each once, then evicts the one at its hand.
    remember(&m, &keys[WAYS]);
    assert!(remembered(&m, &keys[WAYS]));
    let held = keys.iter().filter(|k| remembered(&m, k)).count();
    assert_eq!(held, WAYS, "one evicted, never more than the set holds");
}

#[test]
fn a_memory_sized_zero_is_off() {
    let m = FpMemory::new(0, SEED);
    assert_eq!(m.capacity(), 0);
    remember(&m, b"k");
    assert!(!remembered(&m, b"k"));
    write(&m, b"k");
}

#[test]
fn a_batch_begins_each_set_once_and_ends_them_all() {
    let m = FpMemory::new(WAYS * 100, SEED); // more sets than a bitmap word
    let pending = RefCell::new(Pending::default());
    for i in 0..2_000 {
        m.forget(h(format!("b{i}").as_bytes()), &pending);
    }
    let begun = m
        .heads
        .iter()
        .filter(|s| s.word.load(Ordering::Relaxed) & WRITERS == WRITER);
    assert_eq!(begun.count(), 100, "every set begun, once each");
    m.end(&mut pending.borrow_mut());
    for set in m.heads.iter() {
        assert_eq!(set.word.load(Ordering::Relaxed) & (WRITERS | LOCK), 0);
    }
    remember(&m, b"after");
    assert!(remembered(&m, b"after"));
}

#[test]
fn a_probe_hash_is_used_only_under_the_memory_seed() {
    let m = FpMemory::new(64, SEED);
    remember(&m, b"k");
    let under = |seed, h| Hashed { h, seed };
    // The probe's hash under the memory's seed: the same answers as hashing the key.
    assert!(matches!(
        m.recall_hashed(b"k", under(SEED, h(b"k"))),
        Recall::Absent
    ));
    assert!(matches!(
        m.recall_hashed(b"other", under(SEED, h(b"other"))),
        Recall::Unknown(Some(_))
    ));
    // Under another seed (a filter the memory was not made for) its hash means nothing
    // here: the key is hashed again, whatever hash came with it.
    let other = SEED ^ 1;
    assert!(matches!(
        m.recall_hashed(b"k", under(other, 12345)),
        Recall::Absent
    ));
    assert!(matches!(
        m.recall_hashed(b"other", under(other, h(b"k"))),
        Recall::Unknown(Some(_))
    ));
    // A ticket from a hashed recall records the key under its own hash.
    let Recall::Unknown(t) = m.recall_hashed(b"new", under(other, 7)) else {
        panic!("not recorded yet")
    };
    m.record(t, b"new");
    assert!(remembered(&m, b"new"));
    write(&m, b"new");
    assert!(!remembered(&m, b"new"));
}

#[test]
fn a_memory_that_is_off_answers_unknown_from_a_batch_hash() {
    let m = FpMemory::new(0, SEED);
    let hashed = m.hash_prefetched(b"k");
    assert!(matches!(
        m.recall_hashed(b"k", hashed),
        Recall::Unknown(None)
    ));
    let on = FpMemory::new(64, SEED);
    remember(&on, b"k");
    let hashed = on.hash_prefetched(b"k");
    assert_eq!(hashed.h, h(b"k"));
    assert!(matches!(on.recall_hashed(b"k", hashed), Recall::Absent));
}

/// `forget_all` empties every set and keeps each from recording until `end`: the write it
/// stands for (another store's restore) may bring any key back.
#[test]
fn forget_all_forgets_every_key_and_blocks_records_until_end() {
    let m = FpMemory::new(70, 3);
    let keys: Vec<Vec<u8>> = (0..20u32).map(|i| i.to_le_bytes().to_vec()).collect();
    for k in &keys {
        let Recall::Unknown(t) = m.recall(k) else {
            panic!("remembered before any record")
        };
        m.record(t, k);
    }
    let remembered = keys
        .iter()
        .filter(|k| matches!(m.recall(k), Recall::Absent))
        .count();
    assert!(remembered > 0);
    let pending = RefCell::new(Pending::default());
    m.forget_all(&pending);
    for k in &keys {
        // Forgotten, and no ticket while the write is in flight.
        assert!(matches!(m.recall(k), Recall::Unknown(None)));
    }
    m.end(&mut pending.borrow_mut());
    let Recall::Unknown(t) = m.recall(&keys[0]) else {
        panic!("remembered after forget_all")
    };
    assert!(t.is_some(), "records allowed again after end");
    m.record(t, &keys[0]);
    assert!(matches!(m.recall(&keys[0]), Recall::Absent));
}

#[test]
fn a_head_rules_out_exactly_the_fingerprints_its_ways_do_not_hold() {
    const FILL: u64 = 0x5a;
    let filled = FILL * 0x0101_0101_0101_0101;
    for g in 0..256 {
        assert_eq!(may_hold(0, g), g == 0, "an empty head: fingerprint 0 only");
    }
    for fp in [0u64, 1, 0x7f, 0x80, 0xff] {
        for w in 0..WAYS {
            let fps = (filled & !(0xff << (8 * w))) | (fp << (8 * w));
            for g in 0..256 {
                assert_eq!(
                    may_hold(fps, g),
                    g == fp || g == FILL,
                    "way {w}: {fp:#x}, {g:#x}"
                );
            }
        }
        if WAYS < 8 && fp != FILL {
            // A byte past the last way is not a way.
            let fps = (filled & !(0xff << (8 * WAYS))) | (fp << (8 * WAYS));
            assert!(!may_hold(fps, fp));
        }
    }
}

#[test]
fn a_full_set_recalls_every_entry_through_its_head() {
    let m = FpMemory::new(WAYS, SEED); // one set
    let keys: Vec<Vec<u8>> = (0..WAYS).map(|i| format!("k{i}").into_bytes()).collect();
    for k in &keys {
        remember(&m, k);
    }
    for k in &keys {
        assert!(remembered(&m, k), "{k:?}");
    }
    write(&m, &keys[0]);
    assert!(!remembered(&m, &keys[0]));
    assert!(remembered(&m, &keys[1]));
}

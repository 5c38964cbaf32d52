//! `Filter::insert` is check-and-set in one probe: it says whether the key was new, also
//! when several threads insert the same key at once.

use std::sync::{Barrier, Mutex};

use bloomsled::{CountingFilter, Filter, FilterConfig};

fn key(i: u32) -> Vec<u8> {
    format!("https://news.example.com/{i}/story.html").into_bytes()
}

#[test]
fn insert_says_whether_the_key_was_new() {
    let f = Filter::with_bits_per_key(50_000, 10.0).unwrap();
    let mut seen_before = 0;
    for i in 0..50_000 {
        // New unless it is a false positive of the keys before it.
        if !f.insert(&key(i)) {
            seen_before += 1;
        }
        assert!(!f.insert(&key(i)), "a second insert of key {i} said new");
        assert!(f.contains(&key(i)));
    }
    // Only false positives of a filter filling up to capacity: under its final 0.96%.
    assert!(
        seen_before < 500,
        "{seen_before} fresh keys reported as present"
    );
    assert_eq!(f.items(), 50_000 - seen_before);
}

#[test]
fn of_threads_racing_to_insert_a_new_key_at_least_one_is_told_it_is_new() {
    const THREADS: usize = 4;
    const KEYS: u32 = 3_000;
    // Few blocks: the threads' words collide all the time.
    let f = FilterConfig::new(64).bits_per_key(10.0).build().unwrap();
    let barrier = Barrier::new(THREADS);
    let before = Mutex::new(vec![false; KEYS as usize]);
    let told_new = Mutex::new(vec![0u32; KEYS as usize]);
    std::thread::scope(|s| {
        for t in 0..THREADS {
            let (f, barrier, before, told_new) = (&f, &barrier, &before, &told_new);
            s.spawn(move || {
                for i in 0..KEYS {
                    let k = key(i);
                    if t == 0 {
                        before.lock().unwrap()[i as usize] = f.contains(&k);
                    }
                    barrier.wait();
                    if f.insert(&k) {
                        told_new.lock().unwrap()[i as usize] += 1;
                    }
                    barrier.wait();
                }
            });
        }
    });
    let (before, told_new) = (before.into_inner().unwrap(), told_new.into_inner().unwrap());
    let mut raced = 0;
    for i in 0..KEYS as usize {
        assert!(f.contains(&key(i as u32)));
        if before[i] {
            assert_eq!(told_new[i], 0, "key {i} was present, yet reported new");
        } else {
            assert!(told_new[i] >= 1, "key {i} was new, no thread was told so");
            raced += 1;
        }
    }
    assert!(
        raced > 100,
        "the filter saturated too early to test anything: {raced}"
    );
}

#[test]
fn counting_filter_uses_the_same_bits() {
    let c = CountingFilter::new(10_000, 0.01).unwrap();
    let f = Filter::with_shape(c.bits().shape(), 10_000).unwrap();
    for i in 0..10_000 {
        c.insert(&key(i));
        f.insert(&key(i));
    }
    // The same bits (the payloads of their serialized forms; the headers differ in items).
    let words = |b: Vec<u8>| bloomsled::format::decode(&b).unwrap().1;
    assert_eq!(words(c.bits().to_bytes()), words(f.to_bytes()));
    for i in 0..10_000 {
        assert!(c.remove(&key(i)));
    }
    assert_eq!(c.bits().fill_ratio(), 0.0);
}

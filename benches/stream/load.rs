//! The stores, the window and the sized tree of the stream benchmark, each loaded with its
//! keys and read once before it is measured.

use std::hint::black_box;
use std::time::{Duration, Instant};

use bloomsled::clock::ManualClock;
use bloomsled::window::{Window, WindowConfig};
use bloomsled::{Config, TreeConfig};

use crate::common::{load_chunks, size_label, write_key};
use crate::{CHUNK, GENERATIONS, VALUE};

/// A bloomsled store and a plain sled holding the keys `0..n`, both read once.
pub fn load_stores(n: u64, bpk: f64) -> (bloomsled::Db, sled::Db) {
    let t = Instant::now();
    let raw = sled::Config::new()
        .temporary(true)
        .cache_capacity(4 << 30)
        .open()
        .expect("sled");
    load_chunks(n, CHUNK, |ids, buf| {
        let mut b = sled::Batch::default();
        for i in ids {
            write_key(buf, i);
            b.insert(&buf[..], VALUE);
        }
        raw.apply_batch(b).expect("sled batch");
    });
    raw.flush().expect("flush");
    black_box(raw.iter().count());
    let db = load_bloomsled(n, bpk);
    eprintln!("[{}] stores loaded in {:.1?}", size_label(n), t.elapsed());
    (db, raw)
}

/// An empty bloomsled store sized for `n` keys at `bpk` bits per key (0: the default rate,
/// as `Config::new()` sizes a tree).
fn open_store(n: u64, bpk: f64, fp_memory: usize) -> bloomsled::Db {
    let config = Config::new()
        .temporary(true)
        .cache_capacity(4 << 30)
        .expected_items(n)
        .false_positive_memory(fp_memory)
        .auto_rebuild(false);
    let config = if bpk > 0.0 {
        config.bits_per_key(bpk)
    } else {
        config
    };
    config.open().expect("bloomsled")
}

/// A bloomsled store sized for `n` keys at `bpk` bits per key holding the keys `0..n`,
/// read once.
pub fn load_bloomsled(n: u64, bpk: f64) -> bloomsled::Db {
    load_bloomsled_with(n, bpk, bloomsled::DEFAULT_FALSE_POSITIVE_MEMORY)
}

/// [`load_bloomsled`] with a false-positive memory of `fp_memory` keys (0: off).
pub fn load_bloomsled_with(n: u64, bpk: f64, fp_memory: usize) -> bloomsled::Db {
    let db = open_store(n, bpk, fp_memory);
    load_chunks(n, CHUNK, |ids, buf| {
        let mut b = bloomsled::Batch::default();
        for i in ids {
            write_key(buf, i);
            b.insert(&buf[..], VALUE);
        }
        db.apply_batch(b).expect("bloomsled batch");
    });
    db.flush().expect("flush");
    black_box(db.iter().count());
    db
}

/// A window of [`GENERATIONS`] generations holding the keys `0..n` (in a database of its
/// own), loaded as the store is (a batch per chunk): generation `g` holds the keys
/// `n·g/G .. n·(g+1)/G`, written while its `ManualClock` stands in that generation, and its
/// filter is sized for its share at `bpk` bits per key.
pub fn load_window(n: u64, bpk: f64) -> (bloomsled::Db, Window) {
    const WIDTH_MS: u64 = 60_000;
    const T0: u64 = 1_700_000_000_000;
    let t = Instant::now();
    let g_count = u64::from(GENERATIONS);
    let db = Config::new()
        .temporary(true)
        .cache_capacity(4 << 30)
        .auto_rebuild(false)
        .open()
        .expect("bloomsled");
    let clock = ManualClock::new(T0);
    let window = db
        .open_window(
            "stream",
            WindowConfig::new(Duration::from_millis(WIDTH_MS * g_count), GENERATIONS)
                .tree_config(
                    TreeConfig::new()
                        .expected_items(n.div_ceil(g_count))
                        .bits_per_key(bpk),
                )
                .clock(clock.clone()),
        )
        .expect("window");
    for g in 0..g_count {
        clock.set(T0 + g * WIDTH_MS);
        let (from, to) = (n * g / g_count, n * (g + 1) / g_count);
        // The current generation's tree, loaded directly.
        let (_, tree) = window.generation_trees().expect("ring").remove(0);
        load_chunks(to - from, CHUNK, |ids, buf| {
            let mut b = bloomsled::Batch::default();
            for i in ids {
                write_key(buf, from + i);
                b.insert(&buf[..], VALUE);
            }
            tree.apply_batch(b).expect("bloomsled batch");
        });
    }
    db.flush().expect("flush");
    assert_eq!(window.stats().live.len(), GENERATIONS as usize);
    eprintln!(
        "[{}] window of {GENERATIONS} generations loaded in {:.1?}",
        size_label(n),
        t.elapsed()
    );
    (db, window)
}

/// A bloomsled tree whose filter is sized for `n` keys at `bpk` bits/key (0: the default
/// rate), holding `keys`, with a false-positive memory of `fp_memory` keys (0: off).
pub fn load_sized(n: u64, bpk: f64, keys: &[Vec<u8>], fp_memory: usize) -> bloomsled::Db {
    let t = Instant::now();
    let db = open_store(n, bpk, fp_memory);
    for chunk in keys.chunks(CHUNK as usize) {
        let mut b = bloomsled::Batch::default();
        for k in chunk {
            b.insert(&k[..], VALUE);
        }
        db.apply_batch(b).expect("bloomsled batch");
    }
    assert!(keys.iter().all(|k| db.may_contain(k)), "false negative");
    eprintln!(
        "[{}] tree with a filter sized for {} keys ({}, false-positive memory {}), {} keys \
         in it, loaded in {:.1?}",
        size_label(n),
        size_label(n),
        if bpk > 0.0 {
            format!("{bpk} bits/key")
        } else {
            "default rate".into()
        },
        if fp_memory > 0 { "on" } else { "off" },
        keys.len(),
        t.elapsed()
    );
    db
}

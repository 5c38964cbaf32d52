//! Rebuild, resize and counting-mode benchmarks.
//!
//! One run measures, on N URL-like keys (`BLOOMSLED_BENCH_REBUILD_KEYS`, default 1,000,000):
//!
//! * `rebuild_<N>/...`: a plain-mode `bloomsled::Db` holding N keys: `get_absent`,
//!   `get_present` and `insert` while idle and while another thread rebuilds the filter
//!   back to back (`during_rebuild`); and `rebuild/online`, one whole online rebuild, with
//!   its throughput in keys/s.
//! * `mode_<N>/...`: the same data in a plain and in a counting database: `get_absent`,
//!   `get_present`, `insert` of fresh keys, and `insert_remove` (a fresh key in and out
//!   again, which in counting mode clears its counters).
//!
//! Then it prints filter memory per key in each mode, and the false-positive rate of a
//! filter filled to 8× its capacity before and after `Tree::rebuild` resizes it, and after
//! automatic resizes from 1% of N to N.
//!
//! ```text
//! cargo bench --bench rebuild
//! BLOOMSLED_BENCH_REBUILD_KEYS=200000 cargo bench --bench rebuild
//! ```

use std::hint::black_box;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use bloomsled::{Batch, Config, Db};
use common::{env_count, key, size_label, splitmix64};
use criterion::measurement::WallTime;
use criterion::{criterion_group, criterion_main, BenchmarkGroup, Criterion, Throughput};

mod common;

/// Query keys cycled through by lookups (cache-resident, like `benches/lookup.rs`).
const HOT: usize = 1 << 14;
const HMASK: usize = HOT - 1;
const ABSENT_BASE: u64 = 1 << 40;
/// Fresh insert ids start here; each benchmark takes its own range.
const FRESH_BASE: u64 = 1 << 41;

fn configure(g: &mut BenchmarkGroup<'_, WallTime>) {
    g.sample_size(20)
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(3));
}

fn open(n: u64, counting: bool, capacity: u64, auto: bool) -> Db {
    Config::new()
        .temporary(true)
        .cache_capacity(2 << 30)
        .expected_items(capacity)
        .false_positive_rate(0.01)
        .counting(counting)
        .auto_rebuild(auto)
        .flush_every_ms(None)
        .open()
        .unwrap_or_else(|e| panic!("open for {n} keys: {e}"))
}

fn load(db: &Db, ids: std::ops::Range<u64>) {
    let mut batch = Batch::default();
    for id in ids {
        batch.insert(key(id), &b"payload!"[..]);
        if id % 10_000 == 9_999 {
            db.apply_batch(std::mem::take(&mut batch)).unwrap();
        }
    }
    db.apply_batch(batch).unwrap();
}

/// Loads N keys and reads them all once (sled is 4-8× slower until every leaf was read).
fn loaded(n: u64, counting: bool) -> Db {
    let start = Instant::now();
    let db = open(n, counting, n, false);
    load(&db, 0..n);
    for kv in db.iter() {
        black_box(kv.unwrap());
    }
    println!(
        "loaded {n} keys ({}) in {:.1?}",
        if counting { "counting" } else { "plain" },
        start.elapsed()
    );
    db
}

struct Queries {
    absent: Vec<Vec<u8>>,
    present: Vec<Vec<u8>>,
}

impl Queries {
    fn new(n: u64) -> Self {
        Queries {
            absent: (0..HOT as u64).map(|j| key(ABSENT_BASE + j)).collect(),
            present: (0..HOT as u64)
                .map(|j| key(splitmix64(j ^ 0x5A5A) % n))
                .collect(),
        }
    }
}

/// `db.get` cycling through `keys`.
fn bench_get(g: &mut BenchmarkGroup<'_, WallTime>, name: String, db: &Db, keys: &[Vec<u8>]) {
    let mut i = 0usize;
    g.bench_function(name, |b| {
        b.iter(|| {
            i = i.wrapping_add(1);
            black_box(db.get(&keys[i & HMASK]).unwrap())
        })
    });
}

/// `db.insert` of fresh keys (made outside the timed region), then `after` on each.
fn bench_insert(
    g: &mut BenchmarkGroup<'_, WallTime>,
    name: String,
    db: &Db,
    fresh: &mut u64,
    after: impl Fn(&Db, &[u8]),
) {
    g.bench_function(name, |b| {
        b.iter_batched(
            || {
                *fresh += 1;
                key(*fresh)
            },
            |k| {
                db.insert(&k, &b"payload!"[..]).unwrap();
                after(db, &k)
            },
            criterion::BatchSize::SmallInput,
        )
    });
}

/// Runs `f` while another thread rebuilds `db`'s filter back to back; returns `f`'s value
/// and the rebuilds completed meanwhile.
fn during_rebuilds<R>(db: &Db, f: impl FnOnce() -> R) -> (R, u64) {
    let stop = Arc::new(AtomicBool::new(false));
    let done = Arc::new(AtomicU64::new(0));
    let handle = {
        let (db, stop, done) = (db.clone(), stop.clone(), done.clone());
        thread::spawn(move || {
            while !stop.load(Ordering::Relaxed) {
                db.rebuild().unwrap();
                done.fetch_add(1, Ordering::Relaxed);
            }
        })
    };
    let r = f();
    stop.store(true, Ordering::Relaxed);
    handle.join().unwrap();
    (r, done.load(Ordering::Relaxed))
}

fn rebuild_group(c: &mut Criterion, n: u64, db: &Db, q: &Queries) {
    // Earlier groups inserted fresh keys: size the filter for all of them first.
    let r = db.rebuild().unwrap();
    println!(
        "rebuild before the group: {} keys in {:.1?} ({:.2}M keys/s), capacity {}",
        r.keys_scanned,
        r.duration,
        r.keys_scanned as f64 / r.duration.as_secs_f64() / 1e6,
        r.capacity
    );
    let mut g = c.benchmark_group(format!("rebuild_{}", size_label(n)));
    configure(&mut g);
    let mut fresh = FRESH_BASE;
    for during in [false, true] {
        let label = if during { "during_rebuild" } else { "idle" };
        let mut run = |g: &mut BenchmarkGroup<'_, WallTime>| {
            bench_get(g, format!("get_absent/{label}"), db, &q.absent);
            bench_get(g, format!("get_present/{label}"), db, &q.present);
            bench_insert(g, format!("insert/{label}"), db, &mut fresh, |_, _| {});
        };
        if during {
            let ((), rebuilds) = during_rebuilds(db, || run(&mut g));
            println!("{rebuilds} rebuilds completed during the measurements");
        } else {
            run(&mut g);
        }
    }
    g.sample_size(10).throughput(Throughput::Elements(n));
    g.bench_function("rebuild/online", |b| b.iter(|| db.rebuild().unwrap()));
    g.finish();
}

fn mode_group(c: &mut Criterion, n: u64, plain: &Db, counting: &Db, q: &Queries) {
    let mut g = c.benchmark_group(format!("mode_{}", size_label(n)));
    configure(&mut g);
    let mut fresh = FRESH_BASE + (1 << 32);
    // Lookups first, while both hold exactly the same keys.
    let modes = [("plain", plain), ("counting", counting)];
    for (label, db) in modes {
        bench_get(&mut g, format!("get_absent/{label}"), db, &q.absent);
    }
    for (label, db) in modes {
        bench_get(&mut g, format!("get_present/{label}"), db, &q.present);
    }
    for (label, db) in modes {
        bench_insert(&mut g, format!("insert/{label}"), db, &mut fresh, |_, _| {});
        bench_insert(
            &mut g,
            format!("insert_remove/{label}"),
            db,
            &mut fresh,
            |db, k| {
                db.remove(k).unwrap();
            },
        );
    }
    g.finish();
}

fn print_memory(plain: &Db, counting: &Db) {
    for (label, db) in [("plain", plain), ("counting", counting)] {
        let s = db.stats();
        println!(
            "memory {label}: {} bytes of filter for {} keys = {:.2} bits/key \
             (capacity {}, {:.2} bits per capacity item)",
            s.memory_bytes,
            s.items,
            s.memory_bytes as f64 * 8.0 / s.items as f64,
            s.capacity,
            s.memory_bytes as f64 * 8.0 / s.capacity as f64
        );
    }
}

fn fpr(db: &Db) -> f64 {
    let probes = 200_000u64;
    let fp = (0..probes)
        .filter(|&j| db.may_contain(key(ABSENT_BASE + (1 << 30) + j)))
        .count();
    fp as f64 / probes as f64
}

/// The false-positive rate before and after resizes.
fn resize_report(n: u64) {
    let db = open(n, false, n / 8, false);
    load(&db, 0..n);
    let before = (fpr(&db), db.stats());
    let t = Instant::now();
    let r = db.rebuild().unwrap();
    let took = t.elapsed();
    let after = (fpr(&db), db.stats());
    println!(
        "resize on demand: {n} keys in a filter for {}: measured FPR {:.4}% (model now {:.4}%); \
         rebuild to capacity {} in {took:.1?} ({:.2}M keys/s): measured FPR {:.4}% (target {:.4}%)",
        before.1.capacity,
        before.0 * 100.0,
        before.1.estimated_fpr * 100.0,
        r.capacity,
        n as f64 / took.as_secs_f64() / 1e6,
        after.0 * 100.0,
        after.1.target_fpr * 100.0
    );
    drop(db);
    let db = open(n, false, n / 100, true);
    let t = Instant::now();
    load(&db, 0..n);
    let loaded = t.elapsed();
    db.wait_for_rebuild();
    let s = db.stats();
    println!(
        "automatic resizes: {n} keys into a filter for {} ({loaded:.1?} to load, {:.1?} \
         with the last rebuild): {} resizes, capacity {}, measured FPR {:.4}% (target {:.4}%)",
        n / 100,
        t.elapsed(),
        s.resizes,
        s.capacity,
        fpr(&db) * 100.0,
        s.target_fpr * 100.0
    );
}

fn benches(c: &mut Criterion) {
    let n = env_count("BLOOMSLED_BENCH_REBUILD_KEYS", 1_000_000);
    let q = Queries::new(n);
    let plain = loaded(n, false);
    let counting = loaded(n, true);
    print_memory(&plain, &counting);
    mode_group(c, n, &plain, &counting, &q);
    drop(counting);
    rebuild_group(c, n, &plain, &q);
    drop(plain);
    resize_report(n);
}

criterion_group! {
    name = group;
    config = Criterion::default();
    targets = benches
}
criterion_main!(group);

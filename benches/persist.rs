//! Persistence benchmarks: snapshot write, verified reload (reopen without a scan), and
//! rebuild from a key scan, at 1M and 10M keys and 10 bits/key.
//!
//! And `flush()` against plain sled's (`persist/flush.rs`): latency and write streams with
//! a flush every 1, 100 and 10,000 writes, in fresh processes.
//!
//! `cargo bench --bench persist` (`BLOOMSLED_PERSIST_ONLY=flush`: the flush table alone).
//! The reopen figure is a whole `Config::open` +
//! `open_tree` of a database whose tree filter holds N keys (sled's own open of the small
//! data set included); the rebuild figure scans a sled tree of 1M real keys.

use std::hint::black_box;
use std::time::{Duration, Instant};

use criterion::{criterion_group, BenchmarkId, Criterion, Throughput};

#[path = "persist/flush.rs"]
mod flush;

fn url(i: u64) -> String {
    format!(
        "https://h{}.example.com/p/{:016x}",
        i % 97,
        i.wrapping_mul(0x9E37_79B9_7F4A_7C15)
    )
}

fn config(dir: &std::path::Path, n: u64) -> bloomsled::Config {
    bloomsled::Config::new()
        .path(dir)
        .expected_items(n)
        .bits_per_key(10.0)
        .cache_capacity(256 << 20)
}

/// A database whose tree "t" has a filter of `n` keys (inserted into the filter by hash
/// through a real sled tree would take minutes at 10M; the filter's size, not the data's,
/// is what reload costs).
fn filter_db(n: u64) -> (tempfile::TempDir, u64) {
    let dir = tempfile::tempdir().unwrap();
    let bytes;
    {
        let db = config(dir.path(), n).open().unwrap();
        let t = db.open_tree("t").unwrap();
        // The filter's bytes, not its fill, are what a reload reads and checks: an empty
        // filter sized for n keys costs the same to load as a full one.
        t.insert("k", "v").unwrap();
        bytes = t.snapshot().unwrap().bytes;
    }
    (dir, bytes)
}

fn snapshot_and_reload(c: &mut Criterion) {
    let mut g = c.benchmark_group("persist");
    g.sample_size(10)
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(8));
    for n in [1_000_000u64, 10_000_000] {
        let (dir, bytes) = filter_db(n);
        g.throughput(Throughput::Bytes(bytes));
        // Snapshot write: copy bits, encode with page CRCs, write tmp, fsync, rename, fsync dir.
        {
            let db = config(dir.path(), n).open().unwrap();
            let t = db.open_tree("t").unwrap();
            g.bench_with_input(BenchmarkId::new("snapshot_write", n), &n, |b, _| {
                b.iter(|| black_box(t.snapshot().unwrap()))
            });
        }
        // Reopen: sled open + snapshot read + every CRC verified + filter built. No scan.
        g.bench_with_input(BenchmarkId::new("reopen_loaded", n), &n, |b, _| {
            b.iter_custom(|iters| {
                let mut total = Duration::ZERO;
                for _ in 0..iters {
                    let t0 = Instant::now();
                    let db = config(dir.path(), n).open().unwrap();
                    let t = db.open_tree("t").unwrap();
                    total += t0.elapsed();
                    assert!(t.recovery_report().loaded());
                    assert!(t.recovery_report().bytes_verified >= bytes);
                }
                total
            })
        });
    }
    g.finish();
}

fn rebuild(c: &mut Criterion) {
    let n = 1_000_000u64;
    let dir = tempfile::tempdir().unwrap();
    let snap = {
        let db = config(dir.path(), n).open().unwrap();
        let t = db.open_tree("t").unwrap();
        for chunk in (0..n).collect::<Vec<_>>().chunks(10_000) {
            let mut b = bloomsled::Batch::default();
            for &i in chunk {
                b.insert(url(i).as_bytes(), &b""[..]);
            }
            t.apply_batch(b).unwrap();
        }
        db.flush().unwrap();
        t.filter_snapshot_path().unwrap().to_path_buf()
    };
    let mut g = c.benchmark_group("persist");
    g.sample_size(10).measurement_time(Duration::from_secs(10));
    g.throughput(Throughput::Elements(n));
    g.bench_function(BenchmarkId::new("rebuild_from_scan", n), |b| {
        b.iter_custom(|iters| {
            let mut total = Duration::ZERO;
            for _ in 0..iters {
                std::fs::remove_file(&snap).unwrap();
                let t0 = Instant::now();
                let db = config(dir.path(), n).open().unwrap();
                let t = db.open_tree("t").unwrap();
                total += t0.elapsed();
                assert_eq!(t.recovery_report().keys_scanned, n);
            }
            total
        })
    });
    g.finish();
}

/// Writers during snapshots: a thread snapshots a 1M-key filter back to back while the
/// benchmark inserts. Snapshots take no lock writers wait on; the cost writers do see is the
/// dirty marker's fsync, paid by the first write after each snapshot.
fn writers_during_snapshots(c: &mut Criterion) {
    let n = 1_000_000u64;
    let (dir, _) = filter_db(n);
    let db = config(dir.path(), n).open().unwrap();
    let t = db.open_tree("t").unwrap();
    let mut g = c.benchmark_group("persist");
    g.sample_size(20).measurement_time(Duration::from_secs(5));
    g.throughput(Throughput::Elements(1));
    let mut next = 0u64;
    g.bench_function("insert/idle", |b| {
        b.iter(|| {
            next += 1;
            t.insert(url(next).as_bytes(), &b""[..]).unwrap()
        })
    });
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let snapshots = std::sync::Arc::new(std::sync::atomic::AtomicU64::new(0));
    let bg = {
        let (t, stop, snapshots) = (t.clone(), stop.clone(), snapshots.clone());
        std::thread::spawn(move || {
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                t.snapshot().unwrap();
                snapshots.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            }
        })
    };
    let started = Instant::now();
    g.bench_function("insert/during_snapshots", |b| {
        b.iter(|| {
            next += 1;
            t.insert(url(next).as_bytes(), &b""[..]).unwrap()
        })
    });
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    bg.join().unwrap();
    eprintln!(
        "{} snapshots of a {} MB filter in {:.1?} alongside the inserts",
        snapshots.load(std::sync::atomic::Ordering::Relaxed),
        t.stats().memory_bytes >> 20,
        started.elapsed()
    );
    g.finish();
}

criterion_group!(
    benches,
    snapshot_and_reload,
    rebuild,
    writers_during_snapshots
);
fn main() {
    if flush::child() {
        return;
    }
    let table = flush::table();
    println!("\n`flush()` against plain sled's:\n\n{table}");
    if std::env::var("BLOOMSLED_PERSIST_ONLY").as_deref() == Ok("flush") {
        return;
    }
    benches();
    Criterion::default().configure_from_args().final_summary();
}

//! The `metrics` feature's cost on the lookup path: the same store, the same key streams,
//! measured in alternating rounds with metrics off (no recorder, nothing recording) and on
//! (a real recorder installed, metrics-util's `DebuggingRecorder`, and every open tree's
//! series recorded every 10 ms from a background thread, as `Config::metrics_interval`
//! does, 1,000× more often than a 10 s scrape would), switched every 100,000 keys. The lookup path has no facade call
//! either way: what this measures is whether recording from the striped counters disturbs
//! it. Keys are separately allocated URL-like `Vec<u8>`s made before the store is loaded,
//! iterated in order; figures are medians over rounds, the ratio the median of per-round
//! on/off ratios.
//!
//! ```text
//! cargo bench --features metrics --bench metrics            # 2M keys, 21 rounds
//! BLOOMSLED_METRICS_BENCH_KEYS=200000 cargo bench --features metrics --bench metrics
//! ```

use std::hint::black_box;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bloomsled::{Batch, Config};

fn url(i: u64, tag: &str) -> Vec<u8> {
    let h = i.wrapping_mul(0x9E37_79B9_7F4A_7C15);
    format!("https://{tag}{:02}.example.com/path/{h:016x}/{i}", i % 97).into_bytes()
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn ns_per(keys: &[Vec<u8>], f: impl Fn(&[u8]) -> bool) -> f64 {
    let t = Instant::now();
    let mut hits = 0u64;
    for k in keys {
        hits += u64::from(f(black_box(k)));
    }
    black_box(hits);
    t.elapsed().as_nanos() as f64 / keys.len() as f64
}

fn main() {
    let n: u64 = std::env::var("BLOOMSLED_METRICS_BENCH_KEYS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(2_000_000);
    let rounds = 21;
    let absent: Vec<Vec<u8>> = (0..n).map(|i| url(i, "absent")).collect();
    let present: Vec<Vec<u8>> = (0..n).map(|i| url(i, "present")).collect();
    let db = Config::new()
        .temporary(true)
        .expected_items(n)
        .open()
        .unwrap();
    for chunk in present.chunks(10_000) {
        let mut b = Batch::default();
        for k in chunk {
            b.insert(k.as_slice(), &b"v"[..]);
        }
        db.apply_batch(b).unwrap();
    }
    let recorder = metrics_util::debugging::DebuggingRecorder::new();
    let snapshotter = recorder.snapshotter();
    recorder.install().unwrap();

    // The recorder thread runs throughout and records every 10 ms while `active`; rounds
    // switch it on and off every chunk of 100,000 keys, so that both see the same load
    // from the rest of the machine.
    let active = Arc::new(AtomicBool::new(false));
    let done = Arc::new(AtomicBool::new(false));
    let recording = {
        let (db, active, done) = (db.clone(), active.clone(), done.clone());
        std::thread::spawn(move || {
            while !done.load(Ordering::Relaxed) {
                if active.load(Ordering::Relaxed) {
                    db.record_metrics();
                }
                std::thread::sleep(Duration::from_millis(10));
            }
        })
    };
    let mut on_off: [Vec<f64>; 4] = Default::default();
    let mut ratios: [Vec<f64>; 2] = Default::default();
    for round in 0..rounds {
        // [off, on] × [may_contain, get]: ns summed over chunks.
        let mut sum = [[0.0; 2]; 2];
        for (c, chunk) in absent.chunks(100_000).enumerate() {
            let first = (round + c) % 2 == 0;
            for on in [first, !first] {
                active.store(on, Ordering::Relaxed);
                // Past one recording, so that its thread is at work when on.
                std::thread::sleep(Duration::from_millis(if on { 12 } else { 0 }));
                sum[usize::from(on)][0] += ns_per(chunk, |k| db.may_contain(k));
                sum[usize::from(on)][1] += ns_per(chunk, |k| db.get(k).unwrap().is_some());
            }
        }
        active.store(false, Ordering::Relaxed);
        for i in 0..2 {
            on_off[2 * i].push(sum[0][i]);
            on_off[2 * i + 1].push(sum[1][i]);
            ratios[i].push(sum[1][i] / sum[0][i]);
        }
    }
    done.store(true, Ordering::Relaxed);
    recording.join().unwrap();
    let chunks = absent.chunks(100_000).count() as f64;
    for v in &mut on_off {
        for x in v.iter_mut() {
            *x /= chunks;
        }
    }
    assert!(
        !snapshotter.snapshot().into_vec().is_empty(),
        "metrics were recorded"
    );
    println!("{n} keys, {rounds} rounds, absent keys, ns per lookup (medians):");
    println!("| lookup | metrics off | metrics on | on / off |");
    println!("|---|---|---|---|");
    for (i, name) in ["`Tree::may_contain`", "`Tree::get` (absent)"]
        .iter()
        .enumerate()
    {
        let r = ratios[i].clone();
        let (lo, hi) = r
            .iter()
            .fold((f64::MAX, f64::MIN), |(a, b), &x| (a.min(x), b.max(x)));
        println!(
            "| {name} | {:.1} | {:.1} | {:.3} ({lo:.3}–{hi:.3}) |",
            median(on_off[2 * i].clone()),
            median(on_off[2 * i + 1].clone()),
            median(r),
        );
    }
}

//! Quick start: load URL-like keys, then look up absent and present keys through bloomsled
//! and through plain sled holding the same data, and print what the filter saved.
//!
//! `cargo run --release --example quickstart [ITEMS]` (default 200,000).

use std::hint::black_box;
use std::time::Instant;

fn url(i: u64, tag: &str) -> String {
    format!(
        "https://host{}.example.com/{tag}/{:016x}",
        i % 113,
        i.wrapping_mul(0x9E37_79B9_7F4A_7C15)
    )
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let n: u64 = match std::env::args().nth(1) {
        Some(a) => a
            .parse()
            .map_err(|e| format!("ITEMS must be a number: {e}"))?,
        None => 200_000,
    };
    let probes = n.clamp(1, 200_000);

    let db = bloomsled::Config::new()
        .temporary(true)
        .expected_items(n)
        .false_positive_rate(0.01)
        .open()?;
    let plain = sled::Config::new().temporary(true).open()?;

    let t = Instant::now();
    for chunk_start in (0..n).step_by(10_000) {
        let mut batch = bloomsled::Batch::default();
        let mut plain_batch = sled::Batch::default();
        for i in chunk_start..(chunk_start + 10_000).min(n) {
            batch.insert(url(i, "in").as_bytes(), &b"1"[..]);
            plain_batch.insert(url(i, "in").as_bytes(), &b"1"[..]);
        }
        db.apply_batch(batch)?;
        plain.apply_batch(plain_batch)?;
    }
    println!(
        "loaded {n} keys into bloomsled and into plain sled in {:.2?}",
        t.elapsed()
    );

    let absent: Vec<String> = (0..probes).map(|i| url(i, "out")).collect();
    let present: Vec<String> = (0..probes).map(|i| url(i * 7 % n.max(1), "in")).collect();
    // Each lookup set runs twice: the first pass finds sled's pages cold (as lookups of
    // keys that were never asked for do in a large store), the second finds them cached.
    let time = |f: &dyn Fn(&str) -> bool, keys: &[String]| {
        let mut passes = [0.0; 2];
        let mut hits = 0;
        for pass in &mut passes {
            let t = Instant::now();
            hits = keys.iter().filter(|k| f(k)).count();
            *pass = t.elapsed().as_nanos() as f64 / keys.len() as f64;
        }
        (passes, hits)
    };
    let (bs_abs, fp) = time(&|k| db.get(k).unwrap().is_some(), &absent);
    let (sl_abs, _) = time(&|k| black_box(plain.get(k).unwrap()).is_some(), &absent);
    let (bs_pre, hits) = time(&|k| db.get(k).unwrap().is_some(), &present);
    let (sl_pre, _) = time(&|k| black_box(plain.get(k).unwrap()).is_some(), &present);
    assert_eq!(fp, 0, "an absent key was found");
    assert_eq!(hits, present.len(), "a present key was missed");

    println!();
    println!(
        "{:<30}{:>12}{:>12}{:>10}",
        "lookup (ns per get)", "bloomsled", "sled", "speed-up"
    );
    for (pass, name) in ["cold", "warm"].iter().enumerate() {
        let row = |what: &str, b: [f64; 2], s: [f64; 2]| {
            println!(
                "{:<30}{:>9.0} ns{:>9.0} ns{:>9.1}x",
                format!("{what}, {name} store"),
                b[pass],
                s[pass],
                s[pass] / b[pass]
            )
        };
        row("absent key", bs_abs, sl_abs);
        row("present key", bs_pre, sl_pre);
    }
    println!(
        "(an absent get that is a false positive costs a full sled lookup: at a 1% rate that \
         share bounds the speed-up near 100x)"
    );
    println!();
    let s = db.stats();
    println!(
        "store lookups skipped: {} of {} ({:.2}%)",
        s.store_lookups_skipped,
        s.lookups,
        100.0 * s.skip_ratio()
    );
    println!(
        "false positives: {} of {} absent lookups = {:.3}% (target {:.3}%, estimate {:.3}%)",
        s.false_positives,
        2 * probes,
        100.0 * s.observed_fpr(),
        100.0 * s.target_fpr,
        100.0 * s.estimated_fpr
    );
    println!(
        "filter: {:.1} KiB, {:.2} bits/key, k = {}",
        s.memory_bytes as f64 / 1024.0,
        s.bits_per_key,
        s.num_hashes
    );
    Ok(())
}

//! Cache penetration: a slow backend sits behind a cache; an attacker floods requests for keys
//! that do not exist, which miss the cache every time and all land on the backend. A bloomsled
//! filter of the keys that do exist stops the flood before it reaches the backend.
//!
//! `cargo run --release --example cache_penetration [REQUESTS]` (default 20,000).

use std::collections::HashMap;
use std::time::{Duration, Instant};

/// Simulated backend latency per call.
const BACKEND_LATENCY: Duration = Duration::from_micros(200);
const PRODUCTS: u64 = 50_000;

struct Backend {
    calls: u64,
}

impl Backend {
    fn fetch(&mut self, id: &str) -> Option<String> {
        self.calls += 1;
        std::thread::sleep(BACKEND_LATENCY);
        let n: u64 = id.strip_prefix("product:")?.parse().ok()?;
        (n < PRODUCTS).then(|| format!("{{\"id\":{n}}}"))
    }
}

/// Serves `requests` through a cache, optionally guarded by the filter; returns (backend
/// calls, elapsed).
fn serve(
    requests: &[String],
    guard: Option<&bloomsled::Db>,
) -> Result<(u64, Duration), bloomsled::Error> {
    let mut backend = Backend { calls: 0 };
    let mut cache: HashMap<String, String> = HashMap::new();
    let start = Instant::now();
    for id in requests {
        if let Some(filter) = guard {
            if !filter.may_contain(id) {
                continue; // certainly no such product: answer "not found" at once
            }
        }
        if !cache.contains_key(id) {
            // A cache that (like most) does not store misses: absent keys always penetrate.
            if let Some(v) = backend.fetch(id) {
                cache.insert(id.clone(), v);
            }
        }
    }
    Ok((backend.calls, start.elapsed()))
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let requests: usize = match std::env::args().nth(1) {
        Some(a) => a
            .parse()
            .map_err(|e| format!("REQUESTS must be a number: {e}"))?,
        None => 20_000,
    };
    // Every existing product id goes into the filter (a real service loads it from its DB).
    let known = bloomsled::Config::new()
        .temporary(true)
        .expected_items(PRODUCTS)
        .false_positive_rate(0.001)
        .open()?;
    let mut batch = bloomsled::Batch::default();
    for n in 0..PRODUCTS {
        batch.insert(format!("product:{n}").as_bytes(), &b""[..]);
    }
    known.apply_batch(batch)?;

    // 5% legitimate traffic over 100 popular products, 95% a flood of ids that do not exist.
    let traffic: Vec<String> = (0..requests as u64)
        .map(|i| {
            if i % 20 == 0 {
                format!("product:{}", (i / 20) % 100)
            } else {
                format!("product:{}", PRODUCTS + i * 7919)
            }
        })
        .collect();

    let (plain_calls, plain_time) = serve(&traffic, None)?;
    let (guarded_calls, guarded_time) = serve(&traffic, Some(&known))?;
    println!(
        "{requests} requests, 95% for products that do not exist, backend {BACKEND_LATENCY:?}/call"
    );
    println!("without the filter: {plain_calls} backend calls in {plain_time:.2?}");
    println!("with the filter:    {guarded_calls} backend calls in {guarded_time:.2?}");
    println!(
        "backend load cut by {:.1}%",
        100.0 * (1.0 - guarded_calls as f64 / plain_calls.max(1) as f64)
    );
    assert!(guarded_calls <= plain_calls);
    Ok(())
}

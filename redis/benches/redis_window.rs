//! Shared window on a local redis-server: lookups per second of a 7-generation window
//! against a single shared filter holding the same keys, in one run, on one server.
//!
//! `cargo bench -p bloomsled-redis --bench redis_window` (needs `redis-server` on PATH;
//! starts its own on a free port without persistence and kills it at the end).
//!
//! Both hold the same keys (`BLOOMSLED_BENCH_KEYS`, default 70,000) at the same overall
//! false-positive rate, 1%: the single filter sized for all of them, each of the window's 7
//! generations for a seventh of them at 1/7 % (a lookup asks all 7). A clock the bench moves
//! puts a seventh of the keys in each generation, so all 7 exist. A window lookup sends one
//! `HMGET` of the record's incarnation and ring entries plus one `GETRANGE` per key and
//! generation, in one pipeline; the single filter one `GETRANGE` per key. Present and
//! absent keys; batched (`contains_many`, 1,000 keys per call) and one key at a time (one
//! round trip each). Figures are medians over interleaved rounds; ratios are the median of
//! per-round ratios.

#[path = "../../benches/common/mod.rs"]
mod common;
#[path = "../tests/redis_support/mod.rs"]
mod redis_support;

use std::time::{Duration, Instant};

use bloomsled::clock::ManualClock;
use bloomsled::FilterConfig;
use bloomsled_redis::{Endpoint, SharedFilter, SharedWindow, SharedWindowConfig};
use common::rounds::{interleave, median, median_ratio};

const GENERATIONS: u32 = 7;
const ROUNDS: usize = 5;
const BATCH: usize = 1_000;

fn main() {
    if !redis_support::redis_available() {
        return;
    }
    let n = common::env_count("BLOOMSLED_BENCH_KEYS", 70_000) as usize;
    let single_n = common::env_count("BLOOMSLED_BENCH_SINGLE", 3_000) as usize;
    let server = redis_support::Server::start();
    let ep = Endpoint::url(server.url());
    let key = |prefix: &str, i: usize| {
        format!("https://www.example.com/{prefix}/{i}/index.html").into_bytes()
    };
    let present: Vec<Vec<u8>> = (0..n).map(|i| key("in", i)).collect();
    let absent: Vec<Vec<u8>> = (0..n).map(|i| key("out", i)).collect();

    let single = SharedFilter::create(&ep, "single", &FilterConfig::new(n as u64)).unwrap();
    single.insert_many(&present).unwrap();
    let clock = ManualClock::starting_now();
    let day = Duration::from_secs(86_400);
    let window = SharedWindow::create(
        &ep,
        "week",
        &SharedWindowConfig::new(
            day * GENERATIONS,
            GENERATIONS,
            // A lookup asks every generation, so each gets a seventh of the rate.
            FilterConfig::new((n / GENERATIONS as usize) as u64 + 1)
                .false_positive_rate(0.01 / f64::from(GENERATIONS)),
        )
        .clock(clock.clone()),
    )
    .unwrap();
    for (g, chunk) in present.chunks(n.div_ceil(GENERATIONS as usize)).enumerate() {
        if g > 0 {
            clock.advance(day);
        }
        window.insert_many(chunk).unwrap();
    }
    assert_eq!(window.stats().unwrap().live.len(), GENERATIONS as usize);
    println!(
        "shared window: {n} keys, {GENERATIONS} generations of {} keys each vs one filter of \
         {n}; batches of {BATCH}, {single_n} single-key lookups, {ROUNDS} rounds, \
         redis-server {}",
        n.div_ceil(GENERATIONS as usize),
        server.version()
    );

    // keys/s of one pass of `look` over `keys`; checks the answers.
    fn rate(
        keys: &[Vec<u8>],
        batched: bool,
        want: bool,
        look: &dyn Fn(&[Vec<u8>]) -> Vec<bool>,
    ) -> f64 {
        let t = Instant::now();
        let mut hits = 0usize;
        if batched {
            for chunk in keys.chunks(BATCH) {
                hits += look(chunk).iter().filter(|&&b| b).count();
            }
        } else {
            for k in keys {
                hits += look(std::slice::from_ref(k)).iter().filter(|&&b| b).count();
            }
        }
        let secs = t.elapsed().as_secs_f64();
        if want {
            assert_eq!(hits, keys.len(), "false negative");
        } else {
            assert!(hits < keys.len() / 20, "{hits} false positives");
        }
        keys.len() as f64 / secs
    }
    let w = |k: &[Vec<u8>]| -> Vec<bool> {
        if k.len() == 1 {
            vec![window.contains(&k[0]).unwrap()]
        } else {
            window.contains_many(k).unwrap()
        }
    };
    let s = |k: &[Vec<u8>]| -> Vec<bool> {
        if k.len() == 1 {
            vec![single.contains(&k[0]).unwrap()]
        } else {
            single.contains_many(k).unwrap()
        }
    };
    let few_in = &present[..single_n.min(n)];
    let few_out = &absent[..single_n.min(n)];
    let cases: [(&str, &[Vec<u8>], bool, bool); 4] = [
        ("present, batched", &present, true, true),
        ("absent, batched", &absent, true, false),
        ("present, single key", few_in, false, true),
        ("absent, single key", few_out, false, false),
    ];
    println!(
        "\n{:<22} {:>16} {:>16} {:>9}",
        "lookups", "window keys/s", "single keys/s", "ratio"
    );
    for (name, keys, batched, want) in cases {
        let mut cw = || rate(keys, batched, want, &w);
        let mut cs = || rate(keys, batched, want, &s);
        let per = interleave(ROUNDS, &mut [&mut cw, &mut cs]);
        // Rates, so the ratio window/single is the median of single/window inverted.
        println!(
            "{name:<22} {:>16.0} {:>16.0} {:>8.2}x",
            median(per[0].clone()),
            median(per[1].clone()),
            1.0 / median_ratio(&per[0], &per[1]),
        );
    }

    // Commands and round trips the server sees per single-key lookup.
    let stats = |field: &str| -> u64 {
        server
            .cli(&["info", "stats"])
            .lines()
            .find_map(|l| l.strip_prefix(field))
            .and_then(|v| v.trim().parse().ok())
            .unwrap()
    };
    let before = stats("total_commands_processed:");
    for k in &few_in[..1_000.min(few_in.len())] {
        assert!(window.contains(k).unwrap());
    }
    let per = (stats("total_commands_processed:") - before - 1) as f64 / 1_000.0;
    println!(
        "\nRedis commands per single-key window lookup: {per:.2} (1 HMGET + 1 GETRANGE per \
         generation, one round trip)"
    );
}

//! The fingerprint-set benchmark: `FingerprintSet` against plain sled holding the same
//! fingerprints, loaded the same way (one `insert` per fingerprint, in the same order).
//!
//! `n` 20-byte fingerprints (`BLOOMSLED_FPSET_KEYS`, default 2,000,000) that look like
//! digests. The set is loaded first, then sled (with its default cache), each in its own
//! folder; the process's resident memory (`VmRSS`) is read before and after each load, so
//! each load's growth is its own (the set's is measured on a clean process; sled's on top
//! of it). Then, in interleaved rounds (`BLOOMSLED_FPSET_ROUNDS`, default 9; the first
//! contender rotating; medians, and ratios as medians of per-round ratios):
//!
//! * absent fingerprints: `FingerprintSet::contains` against sled's `contains_key`;
//! * present fingerprints (drawn from all `n`): the same pair;
//! * inserts of fresh fingerprints: `FingerprintSet::insert` against sled's `insert`.
//!
//! ```text
//! cargo bench -p bloomsled-fpset --bench fpset
//! BLOOMSLED_FPSET_KEYS=10000000 cargo bench -p bloomsled-fpset --bench fpset
//! ```

use std::time::Instant;

use bloomsled_fpset::FingerprintSetConfig;
use common::rounds::{fmt_ns, interleave, median, median_ratio, spread};
use common::{env_count, size_label, splitmix64};

#[path = "../../benches/common/mod.rs"]
mod common;

/// Query fingerprints of each kind per round.
const Q: usize = 1 << 16;
const ABSENT_BASE: u64 = 1 << 40;
const FRESH_BASE: u64 = 1 << 41;

/// Fingerprint `i`: 20 bytes spread like a SHA-1 digest.
fn fp(i: u64) -> [u8; 20] {
    let mut out = [0u8; 20];
    out[..8].copy_from_slice(&splitmix64(i).to_be_bytes());
    out[8..16].copy_from_slice(&splitmix64(i ^ 0x5bd1_e995).to_be_bytes());
    out[16..].copy_from_slice(&(splitmix64(!i) as u32).to_be_bytes());
    out
}

/// The process's resident memory in MiB (Linux), or NaN.
fn rss_mib() -> f64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("VmRSS:"))
                .and_then(|l| l.split_whitespace().nth(1))
                .and_then(|kb| kb.parse::<f64>().ok())
        })
        .map_or(f64::NAN, |kb| kb / 1024.0)
}

fn main() {
    let n = env_count("BLOOMSLED_FPSET_KEYS", 2_000_000);
    let rounds = env_count("BLOOMSLED_FPSET_ROUNDS", 9) as usize;
    let dir = tempfile::tempdir().expect("a temporary folder");

    let rss0 = rss_mib();
    let set = FingerprintSetConfig::new(dir.path().join("set"))
        .expected_items(n)
        .false_positive_rate(0.01)
        .open()
        .expect("the set opens");
    let t = Instant::now();
    for i in 0..n {
        set.insert(&fp(i)).expect("insert");
    }
    set.sync().expect("sync");
    let set_load = t.elapsed().as_nanos() as f64 / n as f64;
    let rss1 = rss_mib();

    let sled = sled::Config::new()
        .path(dir.path().join("sled"))
        .open()
        .expect("sled opens");
    let t = Instant::now();
    for i in 0..n {
        sled.insert(fp(i), &[]).expect("insert");
    }
    sled.flush().expect("flush");
    let sled_load = t.elapsed().as_nanos() as f64 / n as f64;
    let rss2 = rss_mib();

    let absent: Vec<[u8; 20]> = (0..Q as u64).map(|j| fp(ABSENT_BASE + j)).collect();
    let present: Vec<[u8; 20]> = (0..Q as u64)
        .map(|j| fp(splitmix64(j ^ 0xA5A5) % n))
        .collect();
    let mut fresh = FRESH_BASE;

    let count = |v: Vec<bool>| v.into_iter().filter(|b| *b).count();
    let per = |t: Instant| t.elapsed().as_nanos() as f64 / Q as f64;
    let mut set_absent = || {
        let t = Instant::now();
        let hits = count(absent.iter().map(|k| set.contains(k).unwrap()).collect());
        assert_eq!(hits, 0, "the set is exact");
        per(t)
    };
    let mut sled_absent = || {
        let t = Instant::now();
        let hits = count(
            absent
                .iter()
                .map(|k| sled.contains_key(k).unwrap())
                .collect(),
        );
        assert_eq!(hits, 0);
        per(t)
    };
    let mut set_present = || {
        let t = Instant::now();
        let hits = count(present.iter().map(|k| set.contains(k).unwrap()).collect());
        assert_eq!(hits, Q, "the set is exact");
        per(t)
    };
    let mut sled_present = || {
        let t = Instant::now();
        let hits = count(
            present
                .iter()
                .map(|k| sled.contains_key(k).unwrap())
                .collect(),
        );
        assert_eq!(hits, Q);
        per(t)
    };
    let figures = interleave(
        rounds,
        &mut [
            &mut set_absent,
            &mut sled_absent,
            &mut set_present,
            &mut sled_present,
        ],
    );
    // Inserts: each round adds Q fresh fingerprints to both.
    let inserts = {
        let set = &set;
        let sled = &sled;
        let base = &mut fresh;
        let mut per_round = (Vec::new(), Vec::new());
        for r in 0..rounds {
            let keys: Vec<[u8; 20]> = (0..Q as u64).map(|j| fp(*base + j)).collect();
            *base += Q as u64;
            let a = || {
                let t = Instant::now();
                for k in &keys {
                    assert!(set.insert(k).unwrap());
                }
                per(t)
            };
            let b = || {
                let t = Instant::now();
                for k in &keys {
                    sled.insert(k, &[]).unwrap();
                }
                per(t)
            };
            if r % 2 == 0 {
                per_round.0.push(a());
                per_round.1.push(b());
            } else {
                per_round.1.push(b());
                per_round.0.push(a());
            }
        }
        per_round
    };

    let stats = set.stats();
    let mut table = String::new();
    table.push_str(&format!(
        "{} 20-byte fingerprints, {rounds} interleaved rounds of {Q} lookups; set at 1% FPR, {} runs\n\n",
        size_label(n),
        stats.runs
    ));
    table.push_str("| per fingerprint | `FingerprintSet` | sled 0.34 | set ÷ sled (min–max) |\n");
    table.push_str("|---|---:|---:|---:|\n");
    let row = |name: &str, a: &[f64], b: &[f64]| {
        let ratios: Vec<f64> = a.iter().zip(b).map(|(a, b)| a / b).collect();
        let (lo, hi) = spread(&ratios);
        format!(
            "| {name} | {} | {} | {:.2}× ({lo:.2}–{hi:.2}) |\n",
            fmt_ns(median(a.to_vec())),
            fmt_ns(median(b.to_vec())),
            median_ratio(b, a)
        )
    };
    table.push_str(&row("absent lookup", &figures[0], &figures[1]));
    table.push_str(&row("present lookup", &figures[2], &figures[3]));
    table.push_str(&row("insert of a fresh one", &inserts.0, &inserts.1));
    table.push_str(&format!(
        "| load, one `insert` each (one pass) | {} | {} | {:.2}× |\n",
        fmt_ns(set_load),
        fmt_ns(sled_load),
        set_load / sled_load
    ));
    table.push_str(&format!(
        "| resident memory the load added | {:.0} MiB | {:.0} MiB | {:.3}× |\n",
        rss1 - rss0,
        rss2 - rss1,
        (rss1 - rss0) / (rss2 - rss1)
    ));
    println!("{table}");
}

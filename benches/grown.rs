//! One tree grown from empty at default settings, beside the same load into a tree sized
//! for it (`expected_items`) and into plain sled: what a user who only changed the import
//! gets when a tree grows to millions of keys (DESIGN.md invariant 7).
//!
//! Each store runs in a fresh process of its own (two sled 0.34 stores of 5M keys do not fit
//! one machine of 24 GB side by side), `ROUNDS` times (default 1), alternating the order:
//! - **grown**: `bloomsled::Config::new().path(..)`, nothing else set
//!   (`BLOOMSLED_GROWN_FACTOR` sets `Config::growth_factor`, to compare factors);
//! - **sized**: the same with `expected_items(n)`;
//! - **sled**: `sled::Config::new().path(..)`.
//!
//! Each loads `BLOOMSLED_GROWN_KEYS` URL-like keys (default 5,000,000; `cargo test --benches`
//! runs 20,000) in batches of 10,000 (`apply_batch`), flushes, and reports its keys/s
//! (keys over the wall time of the load and its flush). bloomsled then waits for any
//! rebuild in flight and reports its filter (`Stats::memory_bytes`, `allocated_bytes`,
//! capacity), the false-positive rate measured on 1,000,000 absent keys (`may_contain`),
//! and the median time of an absent `get` over 7 rounds of 200,000 absent keys (keys made
//! beforehand, looked up in order). Then the process closes it and opens the same folder
//! with plain sled, and times sled's absent `get` on the first 20,000 of the same keys: the
//! ratio is bloomsled's absent `get` against sled's on the same store.
//!
//! `cargo bench --bench grown`

#[path = "common/mod.rs"]
mod common;

use std::path::Path;
use std::process::Command;
use std::time::Instant;

const CHUNK: u64 = 10_000;
const VALUE: &[u8] = b"payload!";
/// Absent keys are ids past every loaded one.
const ABSENT_BASE: u64 = 1 << 40;

fn absent_keys(n: u64) -> Vec<Vec<u8>> {
    (0..n).map(|i| common::key(ABSENT_BASE + i)).collect()
}

/// Median ns per absent `get` over 7 rounds of `keys`.
fn absent_get_ns(keys: &[Vec<u8>], get: impl Fn(&[u8]) -> bool) -> f64 {
    let mut rounds: Vec<f64> = (0..7)
        .map(|_| {
            let start = Instant::now();
            let mut found = 0u64;
            for k in keys {
                found += u64::from(get(k));
            }
            assert_eq!(found, 0, "an absent key was found");
            start.elapsed().as_nanos() as f64 / keys.len() as f64
        })
        .collect();
    rounds.sort_by(f64::total_cmp);
    rounds[3]
}

/// Loads `n` keys into `apply` in batches; returns keys/s.
fn load(n: u64, mut apply: impl FnMut(&[Vec<u8>])) -> f64 {
    let mut keys = Vec::with_capacity(CHUNK as usize);
    let start = Instant::now();
    common::load_chunks(n, CHUNK, |ids, buf| {
        keys.clear();
        for id in ids {
            common::write_key(buf, id);
            keys.push(buf.clone());
        }
        apply(&keys);
    });
    n as f64 / start.elapsed().as_secs_f64()
}

fn child(mode: &str, dir: &Path, n: u64) {
    let absent = absent_keys(1_000_000);
    match mode {
        "sled" => {
            let db = sled::Config::new().path(dir).open().unwrap();
            let rate = load(n, |keys| {
                let mut b = sled::Batch::default();
                for k in keys {
                    b.insert(&k[..], VALUE);
                }
                db.apply_batch(b).unwrap();
            });
            db.flush().unwrap();
            let ns = absent_get_ns(&absent[..20_000], |k| db.get(k).unwrap().is_some());
            // The same store after one full scan, as a growth rebuild reads it: sled
            // consolidates the pages a read walks, and its absent `get` changes with that.
            assert_eq!(db.iter().count() as u64, n);
            let scanned = absent_get_ns(&absent[..20_000], |k| db.get(k).unwrap().is_some());
            println!("rate={rate:.0} sled_ns={ns:.1} scanned_ns={scanned:.1}");
        }
        "grown" | "sized" => {
            let mut config = bloomsled::Config::new().path(dir);
            if mode == "sized" {
                config = config.expected_items(n);
            } else if let Ok(f) = std::env::var("BLOOMSLED_GROWN_FACTOR") {
                config = config.growth_factor(f.parse().expect("a growth factor"));
            }
            let db = config.open().unwrap();
            let start = Instant::now();
            load(n, |keys| {
                let mut b = bloomsled::Batch::default();
                for k in keys {
                    b.insert(&k[..], VALUE);
                }
                db.apply_batch(b).unwrap();
            });
            db.flush().unwrap();
            let rate = n as f64 / start.elapsed().as_secs_f64();
            db.wait_for_rebuild();
            let s = db.stats();
            let fp = absent.iter().filter(|k| db.may_contain(k)).count();
            let ns = absent_get_ns(&absent[..200_000], |k| db.get(k).unwrap().is_some());
            db.close().unwrap();
            let sled_db = sled::Config::new().path(dir).open().unwrap();
            let sled_ns = absent_get_ns(&absent[..20_000], |k| sled_db.get(k).unwrap().is_some());
            println!(
                "rate={rate:.0} mem={} alloc={} capacity={} fpr={} ns={ns:.1} sled_ns={sled_ns:.1}",
                s.memory_bytes,
                s.allocated_bytes,
                s.capacity,
                fp as f64 / absent.len() as f64
            );
        }
        _ => panic!("unknown mode {mode}"),
    }
}

fn run(mode: &str, base: &Path, n: u64) -> Vec<(String, f64)> {
    let dir = base.join(mode);
    let _ = std::fs::remove_dir_all(&dir);
    let out = Command::new(std::env::current_exe().unwrap())
        .args(["child", mode])
        .arg(&dir)
        .arg(n.to_string())
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{mode}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    std::fs::remove_dir_all(&dir).unwrap();
    String::from_utf8_lossy(&out.stdout)
        .split_whitespace()
        .filter_map(|w| w.split_once('='))
        .map(|(k, v)| (k.to_owned(), v.parse().unwrap()))
        .collect()
}

fn median_of(runs: &[Vec<(String, f64)>], field: &str) -> f64 {
    let mut v: Vec<f64> = runs
        .iter()
        .filter_map(|r| r.iter().find(|(k, _)| k == field).map(|(_, v)| *v))
        .collect();
    v.sort_by(f64::total_cmp);
    v.get(v.len() / 2).copied().unwrap_or(f64::NAN)
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    if args.get(1).map(String::as_str) == Some("child") {
        child(&args[2], Path::new(&args[3]), args[4].parse().unwrap());
        return;
    }
    let bench = args.iter().any(|a| a == "--bench");
    let n = common::env_count(
        "BLOOMSLED_GROWN_KEYS",
        if bench { 5_000_000 } else { 20_000 },
    );
    let rounds = common::env_count("ROUNDS", 1);
    let base =
        tempfile::tempdir_in(std::env::var("BLOOMSLED_GROWN_DIR").unwrap_or(".".into())).unwrap();
    // `BLOOMSLED_GROWN_MODES`: a subset, e.g. `grown` to compare growth factors alone.
    let only = std::env::var("BLOOMSLED_GROWN_MODES").unwrap_or_default();
    let modes = ["grown", "sized", "sled"];
    let mut runs: Vec<Vec<Vec<(String, f64)>>> = vec![Vec::new(); modes.len()];
    for r in 0..rounds {
        let order: Vec<usize> = if r % 2 == 0 {
            vec![0, 1, 2]
        } else {
            vec![2, 1, 0]
        };
        for i in order {
            if only.is_empty() || only.split(',').any(|m| m == modes[i]) {
                runs[i].push(run(modes[i], base.path(), n));
            }
        }
    }
    let sled_rate = median_of(&runs[2], "rate");
    println!(
        "one tree of {} keys, {rounds} round(s), medians\n",
        common::size_label(n)
    );
    println!(
        "| store | load keys/s | ÷ sled | filter memory | allocated | capacity | \
         measured FPR | absent `get` | sled's absent `get` on it | speed-up |"
    );
    println!("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|");
    for (i, name) in ["grown at defaults", "sized (`expected_items`)"]
        .iter()
        .enumerate()
    {
        let m = |f: &str| median_of(&runs[i], f);
        println!(
            "| {name} | {:.0} | {:.2}× | {:.2} MB | {:.2} MB | {:.0} | {:.4}% | {:.1} ns | {:.0} ns | {:.0}× |",
            m("rate"),
            m("rate") / sled_rate,
            m("mem") / 1e6,
            m("alloc") / 1e6,
            m("capacity"),
            m("fpr") * 100.0,
            m("ns"),
            m("sled_ns"),
            m("sled_ns") / m("ns")
        );
    }
    println!(
        "| plain sled | {sled_rate:.0} | 1.00× | — | — | — | — | {:.0} ns | | |",
        median_of(&runs[2], "sled_ns")
    );
    println!(
        "| plain sled after one full scan | | | — | — | — | — | {:.0} ns | | |",
        median_of(&runs[2], "scanned_ns")
    );
    let g = |f: &str| median_of(&runs[0], f);
    let s = |f: &str| median_of(&runs[1], f);
    println!(
        "\ngrown ÷ sized: filter memory {:.2}×, absent get {:.2}×",
        g("mem") / s("mem"),
        g("ns") / s("ns")
    );
}

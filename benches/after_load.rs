//! What a loaded tree's lookups cost in the minute after the load, round by round, beside
//! fastbloom + xxh3 on the same keys: the bench behind issue 37's bimodal timings.
//!
//! A database at the default settings (snapshots off, auto-rebuild on, sled's flusher every
//! 500 ms) is loaded with `BLOOMSLED_AFTER_LOAD_KEYS` URL-like keys (default 2,000,000) in
//! batches, the tree sized with `expected_items` (`BLOOMSLED_AFTER_LOAD_SIZED=0`: left at
//! the default million, so the load outgrows it and a resize rebuild follows). Then, for
//! `BLOOMSLED_AFTER_LOAD_ROUNDS` rounds (default 30), 1M absent keys go through
//! `Tree::may_contain` and through fastbloom (interleaved), and each round prints its two
//! figures, the CPU time the process's other threads (sled's flusher, a rebuild, a
//! snapshot) used meanwhile and which one used the most, whether a rebuild was running, and
//! the process's transparent huge pages (`AnonHugePages` of `/proc/self/smaps_rollup`).
//!
//! First, a standalone filter for `BLOOMSLED_AFTER_LOAD_FILTER_KEYS` keys (default 50M; 0:
//! none) is made and filled, and the process's huge pages printed before and after.
//!
//! ```text
//! cargo bench --bench after_load
//! BLOOMSLED_AFTER_LOAD_KEYS=50000000 cargo bench --bench after_load
//! ```

use std::collections::HashMap;
use std::hint::black_box;
use std::time::Instant;

use bloomsled::hash::hash_key;
use bloomsled::Config;
use common::{env_count, key, load_chunks, write_key};

mod common;

const Q: usize = 1 << 20;
const CHUNK: u64 = 10_000;

/// CPU time (ms) per thread of this process other than the calling one, by thread id, with
/// the thread's name.
fn other_threads() -> HashMap<u32, (String, f64)> {
    let me = std::fs::read_link("/proc/thread-self")
        .ok()
        .and_then(|p| p.file_name()?.to_str()?.parse::<u32>().ok());
    let tick = 100.0; // USER_HZ on Linux
    let mut out = HashMap::new();
    let Ok(dir) = std::fs::read_dir("/proc/self/task") else {
        return out;
    };
    for e in dir.flatten() {
        let Some(tid) = e.file_name().to_str().and_then(|s| s.parse::<u32>().ok()) else {
            continue;
        };
        if Some(tid) == me {
            continue;
        }
        let Ok(stat) = std::fs::read_to_string(e.path().join("stat")) else {
            continue;
        };
        // "tid (comm) state ... utime stime": fields after the closing parenthesis.
        let Some((head, rest)) = stat.rsplit_once(") ") else {
            continue;
        };
        let name = head
            .split_once(" (")
            .map(|(_, n)| n)
            .unwrap_or("?")
            .to_string();
        let f: Vec<&str> = rest.split_whitespace().collect();
        let (u, s): (f64, f64) = (
            f.get(11).and_then(|x| x.parse().ok()).unwrap_or(0.0),
            f.get(12).and_then(|x| x.parse().ok()).unwrap_or(0.0),
        );
        out.insert(tid, (name, (u + s) * 1000.0 / tick));
    }
    out
}

/// `AnonHugePages` of this process, in kB.
fn huge_kb() -> u64 {
    std::fs::read_to_string("/proc/self/smaps_rollup")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("AnonHugePages:"))
                .and_then(|l| l.split_whitespace().nth(1)?.parse().ok())
        })
        .unwrap_or(0)
}

fn main() {
    let n = env_count("BLOOMSLED_AFTER_LOAD_KEYS", 2_000_000);
    let rounds = env_count("BLOOMSLED_AFTER_LOAD_ROUNDS", 30) as usize;
    let sized = env_count("BLOOMSLED_AFTER_LOAD_SIZED", 1) != 0;
    let thp =
        std::fs::read_to_string("/sys/kernel/mm/transparent_hugepage/enabled").unwrap_or_default();
    println!(
        "kernel {}, THP {}, {n} keys, tree {}",
        bloomsled::probe_kernel(),
        thp.trim(),
        if sized {
            "sized for them"
        } else {
            "at the default capacity"
        }
    );
    // A standalone filter of `BLOOMSLED_AFTER_LOAD_FILTER_KEYS` keys (default 50M, 0: none),
    // filled: did its memory get huge pages (it asks for them past 8 MiB)?
    let big = env_count("BLOOMSLED_AFTER_LOAD_FILTER_KEYS", 50_000_000);
    if big > 0 {
        let before = huge_kb();
        let f = bloomsled::Filter::with_bits_per_key(big, 10.0).expect("filter");
        let empty = huge_kb();
        for i in 0..big {
            f.insert_hash(common::splitmix64(i));
        }
        println!(
            "a filter for {big} keys ({} MiB): AnonHugePages {before} kB before, {empty} kB made, {} kB filled",
            f.num_bits() / 8 / (1 << 20),
            huge_kb()
        );
    }
    if n == 0 {
        return;
    }
    let absent: Vec<Vec<u8>> = (0..Q as u64).map(|j| key((1 << 40) + j)).collect();
    let mut config = Config::new().temporary(true).false_positive_rate(0.01);
    if sized {
        config = config.expected_items(n);
    }
    let db = config.open().expect("open");
    let t = Instant::now();
    let huge_before = huge_kb();
    load_chunks(n, CHUNK, |ids, buf| {
        let mut b = bloomsled::Batch::default();
        for i in ids {
            write_key(buf, i);
            b.insert(&buf[..], &b"payload!"[..]);
        }
        db.apply_batch(b).expect("batch");
    });
    let s = db.stats();
    let mut fb = fastbloom::BloomFilter::with_num_bits(s.num_bits as usize).hashes(s.num_hashes);
    let seed = 0x626c_6f6f_6d73_6c64; // the default seed, which xxh3 gets for fastbloom too
    load_chunks(n, CHUNK, |ids, buf| {
        for i in ids {
            write_key(buf, i);
            fb.insert_hash(hash_key(buf, seed));
        }
    });
    println!(
        "loaded in {:.1?}: filter {} MiB, k = {}; AnonHugePages {} kB before the load, {} kB after",
        t.elapsed(),
        s.num_bits / 8 / (1 << 20),
        s.num_hashes,
        huge_before,
        huge_kb()
    );
    println!("| s | may_contain | fastbloom | ratio | other threads' CPU | busiest | rebuild | AnonHugePages |");
    println!("|---:|---:|---:|---:|---:|---|---|---:|");
    let start = Instant::now();
    for r in 0..rounds {
        let before = other_threads();
        let mut may = 0.0;
        let mut base = 0.0;
        for j in 0..2 {
            let t = Instant::now();
            if (r + j) % 2 == 0 {
                black_box(absent.iter().filter(|k| db.may_contain(k)).count());
                may = t.elapsed().as_nanos() as f64 / Q as f64;
            } else {
                black_box(
                    absent
                        .iter()
                        .filter(|k| fb.contains_hash(hash_key(k, seed)))
                        .count(),
                );
                base = t.elapsed().as_nanos() as f64 / Q as f64;
            }
        }
        let after = other_threads();
        let mut busiest = (String::new(), 0.0);
        let mut total = 0.0;
        for (tid, (name, ms)) in &after {
            let d = ms - before.get(tid).map(|b| b.1).unwrap_or(0.0);
            total += d;
            if d > busiest.1 {
                busiest = (name.clone(), d);
            }
        }
        let st = db.stats();
        println!(
            "| {:.1} | {may:.1} ns | {base:.1} ns | {:.2}× | {total:.0} ms | {} ({:.0} ms) | {} | {} kB |",
            start.elapsed().as_secs_f64(),
            may / base,
            busiest.0,
            busiest.1,
            if st.rebuild_in_progress { "running" } else { "-" },
            huge_kb()
        );
    }
}

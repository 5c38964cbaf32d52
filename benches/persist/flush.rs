//! `flush()` against plain sled's, fresh processes (this binary re-run as a child): the
//! latency of one `flush()` after one insert, and a write-heavy stream with a flush every
//! 1, 100 and 10,000 writes, bloomsled and plain sled 0.34 on the same keys (sled's
//! background flusher off in both, so each flush does the work), alternated in pairs
//! (which goes first too); medians and their ratios, as one table.
//!
//! `BLOOMSLED_PERSIST_ONLY=flush cargo bench --bench persist` runs only this table;
//! `BLOOMSLED_PERSIST_FLUSH_ROUNDS` sets the pairs (default 5).

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Instant;

const ROLE: &str = "BLOOMSLED_PERSIST_FLUSH_CHILD";

fn url(i: u64) -> Vec<u8> {
    super::url(i).into_bytes()
}

/// One store: an insert and a flush.
trait Store {
    fn put(&self, i: u64);
    fn sync(&self);
}

impl Store for bloomsled::Db {
    fn put(&self, i: u64) {
        bloomsled::Tree::insert(self, url(i), vec![b'v'; 100]).unwrap();
    }
    fn sync(&self) {
        bloomsled::Tree::flush(self).unwrap();
    }
}

impl Store for sled::Db {
    fn put(&self, i: u64) {
        sled::Tree::insert(self, url(i), vec![b'v'; 100]).unwrap();
    }
    fn sync(&self) {
        sled::Tree::flush(self).unwrap();
    }
}

fn open(store: &str, dir: &Path) -> Box<dyn Store> {
    match store {
        "sled" => Box::new(
            sled::Config::new()
                .path(dir)
                .flush_every_ms(None)
                .open()
                .unwrap(),
        ),
        _ => Box::new(
            bloomsled::Config::new()
                .path(dir)
                .flush_every_ms(None)
                .expected_items(200_000)
                .open()
                .unwrap(),
        ),
    }
}

/// The writes a stream with a flush every `every` writes makes (bounded in time).
fn writes(every: u64) -> u64 {
    (every * 200).clamp(2_000, 100_000)
}

/// The child: `latency` (the median of 200 inserts each followed by a flush, in µs) or
/// `stream <every>` (writes per second with a flush every `every` writes).
pub fn child() -> bool {
    let Ok(spec) = std::env::var(ROLE) else {
        return false;
    };
    let mut p = spec.split('|');
    let (store, dir, what) = (p.next().unwrap(), p.next().unwrap(), p.next().unwrap());
    let s = open(store, Path::new(dir));
    // Warm: the first writes create sled's segments (and bloomsled's dirty mark).
    for i in 0..100 {
        s.put(u64::MAX - i);
    }
    s.sync();
    if what == "latency" {
        let mut us: Vec<f64> = (0..200)
            .map(|i| {
                s.put(i);
                let t = Instant::now();
                s.sync();
                t.elapsed().as_secs_f64() * 1e6
            })
            .collect();
        us.sort_by(f64::total_cmp);
        println!("RESULT {}", us[us.len() / 2]);
    } else {
        let every: u64 = what.parse().unwrap();
        let n = writes(every);
        let t = Instant::now();
        for i in 0..n {
            s.put(i);
            if (i + 1) % every == 0 {
                s.sync();
            }
        }
        s.sync();
        println!("RESULT {}", n as f64 / t.elapsed().as_secs_f64());
    }
    true
}

fn run(store: &str, what: &str) -> f64 {
    let base = tempfile::tempdir().unwrap();
    let dir = base.path().join("db");
    let out = Command::new(std::env::current_exe().unwrap())
        .env(ROLE, format!("{store}|{}|{what}", dir.display()))
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .output()
        .unwrap();
    assert!(out.status.success(), "child {store} {what} failed");
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .find_map(|l| l.strip_prefix("RESULT "))
        .expect("a result")
        .trim()
        .parse()
        .unwrap()
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

/// Medians of `rounds` pairs of fresh processes: (bloomsled, sled, paired ratio b/s).
fn pairs(what: &str, rounds: u64) -> (f64, f64, f64) {
    let (mut b, mut s, mut r) = (Vec::new(), Vec::new(), Vec::new());
    for round in 0..rounds {
        let (x, y) = if round % 2 == 0 {
            let x = run("bloomsled", what);
            (x, run("sled", what))
        } else {
            let y = run("sled", what);
            (run("bloomsled", what), y)
        };
        eprintln!("flush {what} round {round}: bloomsled {x:.1}, sled {y:.1}");
        b.push(x);
        s.push(y);
        r.push(x / y);
    }
    (median(b), median(s), median(r))
}

/// The table (Markdown).
pub fn table() -> String {
    let rounds = std::env::var("BLOOMSLED_PERSIST_FLUSH_ROUNDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(5);
    let mut out = format!(
        "| flush() (fresh processes, {rounds} pairs, medians) | bloomsled | plain sled | \
         bloomsled / sled (median of the pairs' ratios) |\n|---|---|---|---|\n"
    );
    let (b, s, r) = pairs("latency", rounds);
    out += &format!(
        "| latency of one `flush()` after one insert | {b:.0} µs | {s:.0} µs | {r:.2}x |\n"
    );
    for every in [1u64, 100, 10_000] {
        let (b, s, r) = pairs(&every.to_string(), rounds);
        out += &format!(
            "| writes/s, a flush every {every} writes ({} writes) | {b:.0} | {s:.0} | {r:.3}x |\n",
            writes(every)
        );
    }
    out
}

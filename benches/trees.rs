//! Many small trees at default settings, bloomsled beside plain sled, each store in fresh
//! processes of its own: what a sled user who keeps a tree per user, feed or tenant and
//! only changed the import pays (DESIGN.md invariant 7).
//!
//! For each size `N × K` (`BLOOMSLED_TREES`, a comma list of `NxK`, default
//! `2000x100,10000x100`; `cargo test --benches` runs `50x10` once) and each store, three
//! processes run one after the other on one folder:
//! 1. **load**: open, then per tree `open_tree` and one `apply_batch` of `K` URL-like keys
//!    (`common::write_key`, 8-byte values), then a flush; it reports the resident memory the
//!    load added (RSS after the flush minus RSS before the open), then closes (bloomsled:
//!    `Db::close`; sled: drop after its flush).
//! 2. **reopen**: open, then per tree `open_tree` and one `get` of a present key (the time
//!    to every tree's first answer) and the resident memory the reopen added.
//! 3. the bytes on disk: every file under the folder, counted by its allocated blocks.
//!
//! `ROUNDS` (default 3) repeats both stores, alternating which goes first; the table gives
//! medians and the bloomsled ÷ sled ratios.
//!
//! `cargo bench --bench trees`

#[path = "common/mod.rs"]
mod common;

use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

fn rss_bytes() -> u64 {
    std::fs::read_to_string("/proc/self/statm")
        .ok()
        .and_then(|s| s.split_whitespace().nth(1)?.parse::<u64>().ok())
        .map_or(0, |pages| pages * 4096)
}

/// Allocated bytes of every file under `dir`.
fn disk_bytes(dir: &Path) -> u64 {
    let Ok(rd) = std::fs::read_dir(dir) else {
        return 0;
    };
    rd.flatten()
        .map(|e| match e.metadata() {
            Ok(m) if m.is_dir() => disk_bytes(&e.path()),
            Ok(m) => m.blocks() * 512,
            Err(_) => 0,
        })
        .sum()
}

fn tree_name(i: u64) -> String {
    format!("tenant-{i}")
}

/// One phase of one store, in this (fresh) process; prints `rss=<bytes> ms=<time>`.
fn child(store: &str, phase: &str, dir: &Path, n: u64, k: u64) {
    let rss0 = rss_bytes();
    let start = Instant::now();
    let mut buf = Vec::with_capacity(80);
    match (store, phase) {
        ("bloomsled", "load") => {
            let db = bloomsled::Config::new().path(dir).open().unwrap();
            for i in 0..n {
                let t = db.open_tree(tree_name(i)).unwrap();
                let mut b = bloomsled::Batch::default();
                for j in 0..k {
                    common::write_key(&mut buf, i * k + j);
                    b.insert(buf.as_slice(), &b"value---"[..]);
                }
                t.apply_batch(b).unwrap();
            }
            db.flush().unwrap();
            report(rss0, start);
            db.close().unwrap();
        }
        ("sled", "load") => {
            let db = sled::Config::new().path(dir).open().unwrap();
            for i in 0..n {
                let t = db.open_tree(tree_name(i)).unwrap();
                let mut b = sled::Batch::default();
                for j in 0..k {
                    common::write_key(&mut buf, i * k + j);
                    b.insert(buf.as_slice(), &b"value---"[..]);
                }
                t.apply_batch(b).unwrap();
            }
            db.flush().unwrap();
            report(rss0, start);
        }
        ("bloomsled", "reopen") => {
            let db = bloomsled::Config::new().path(dir).open().unwrap();
            let mut trees = Vec::with_capacity(n as usize);
            for i in 0..n {
                let t = db.open_tree(tree_name(i)).unwrap();
                common::write_key(&mut buf, i * k);
                assert!(t.get(&buf).unwrap().is_some());
                trees.push(t);
            }
            report(rss0, start);
        }
        ("sled", "reopen") => {
            let db = sled::Config::new().path(dir).open().unwrap();
            let mut trees = Vec::with_capacity(n as usize);
            for i in 0..n {
                let t = db.open_tree(tree_name(i)).unwrap();
                common::write_key(&mut buf, i * k);
                assert!(t.get(&buf).unwrap().is_some());
                trees.push(t);
            }
            report(rss0, start);
        }
        _ => panic!("unknown store or phase {store} {phase}"),
    }
}

fn report(rss0: u64, start: Instant) {
    let ms = start.elapsed().as_secs_f64() * 1e3;
    println!("rss={} ms={ms:.1}", rss_bytes().saturating_sub(rss0));
}

/// Runs one phase in a fresh process of this binary; `(rss bytes, ms)`.
fn run_phase(store: &str, phase: &str, dir: &Path, n: u64, k: u64) -> (f64, f64) {
    let out = Command::new(std::env::current_exe().unwrap())
        .args(["child", store, phase])
        .arg(dir)
        .args([n.to_string(), k.to_string()])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{store} {phase}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8_lossy(&out.stdout);
    let field = |name: &str| -> f64 {
        text.split_whitespace()
            .find_map(|w| w.strip_prefix(name))
            .and_then(|v| v.parse().ok())
            .unwrap_or_else(|| panic!("no {name} in {text:?}"))
    };
    (field("rss="), field("ms="))
}

#[derive(Default)]
struct Figures {
    load_rss: Vec<f64>,
    load_ms: Vec<f64>,
    reopen_rss: Vec<f64>,
    reopen_ms: Vec<f64>,
    disk: Vec<f64>,
}

fn median(v: &[f64]) -> f64 {
    let mut v = v.to_vec();
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn one_round(store: &str, base: &Path, n: u64, k: u64, f: &mut Figures) {
    let dir: PathBuf = base.join(store);
    let _ = std::fs::remove_dir_all(&dir);
    let (rss, ms) = run_phase(store, "load", &dir, n, k);
    f.load_rss.push(rss);
    f.load_ms.push(ms);
    let (rss, ms) = run_phase(store, "reopen", &dir, n, k);
    f.reopen_rss.push(rss);
    f.reopen_ms.push(ms);
    f.disk.push(disk_bytes(&dir) as f64);
    std::fs::remove_dir_all(&dir).unwrap();
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    if args.get(1).map(String::as_str) == Some("child") {
        let num = |i: usize| args[i].parse::<u64>().unwrap();
        child(&args[2], &args[3], Path::new(&args[4]), num(5), num(6));
        return;
    }
    let bench = args.iter().any(|a| a == "--bench");
    let sizes = std::env::var("BLOOMSLED_TREES").unwrap_or_else(|_| {
        if bench {
            "2000x100,10000x100".into()
        } else {
            "50x10".into()
        }
    });
    let rounds = common::env_count("ROUNDS", if bench { 3 } else { 1 });
    let base =
        tempfile::tempdir_in(std::env::var("BLOOMSLED_TREES_DIR").unwrap_or(".".into())).unwrap();
    println!(
        "| trees × keys | store | RSS added by the load | RSS added by the reopen | load | \
         reopen to every tree's first answer | on disk |"
    );
    println!("|---|---|---:|---:|---:|---:|---:|");
    for size in sizes.split(',') {
        let (n, k) = size.split_once('x').expect("NxK");
        let (n, k): (u64, u64) = (n.parse().unwrap(), k.parse().unwrap());
        let (mut b, mut s) = (Figures::default(), Figures::default());
        for r in 0..rounds {
            if r % 2 == 0 {
                one_round("bloomsled", base.path(), n, k, &mut b);
                one_round("sled", base.path(), n, k, &mut s);
            } else {
                one_round("sled", base.path(), n, k, &mut s);
                one_round("bloomsled", base.path(), n, k, &mut b);
            }
        }
        let mib = |v: &[f64]| median(v) / (1 << 20) as f64;
        for (name, f) in [("sled", &s), ("bloomsled", &b)] {
            println!(
                "| {n} × {k} | {name} | {:.1} MiB | {:.1} MiB | {:.0} ms | {:.1} ms | {:.1} MiB |",
                mib(&f.load_rss),
                mib(&f.reopen_rss),
                median(&f.load_ms),
                median(&f.reopen_ms),
                mib(&f.disk)
            );
        }
        let ratio = |a: &[f64], b: &[f64]| median(a) / median(b).max(1.0);
        println!(
            "| {n} × {k} | **ratio** | {:.2}× | {:.2}× | {:.2}× | {:.2}× | {:.2}× |",
            ratio(&b.load_rss, &s.load_rss),
            ratio(&b.reopen_rss, &s.reopen_rss),
            ratio(&b.load_ms, &s.load_ms),
            ratio(&b.reopen_ms, &s.reopen_ms),
            ratio(&b.disk, &s.disk)
        );
    }
}

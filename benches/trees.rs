//! Many small trees: N trees of one key each (the issue-11 case: 1,000 trees took 14 s,
//! 1.2 GB of RAM and 1.2 GB of snapshots). Prints wall time to create, write and close,
//! resident memory, snapshot bytes on disk, and the reopen time, for the default sizing
//! (a million keys per tree) and for per-tree sizing (`open_tree_with`).
//!
//! `cargo bench --bench trees` (N = 1,000; `BLOOMSLED_TREES` overrides).

use std::path::Path;
use std::time::Instant;

use bloomsled::{Config, TreeConfig};

fn rss_bytes() -> u64 {
    std::fs::read_to_string("/proc/self/statm")
        .ok()
        .and_then(|s| s.split_whitespace().nth(1)?.parse::<u64>().ok())
        .map_or(0, |pages| pages * 4096)
}

fn du(dir: &Path) -> u64 {
    std::fs::read_dir(dir)
        .map(|rd| {
            rd.flatten()
                .map(|e| e.metadata().map_or(0, |m| m.len()))
                .sum()
        })
        .unwrap_or(0)
}

fn run(n: u32, per_tree: Option<u64>) {
    let dir = tempfile::tempdir().unwrap();
    let rss0 = rss_bytes();
    let start = Instant::now();
    let db = Config::new().path(dir.path()).open().unwrap();
    let mut trees = Vec::new();
    for i in 0..n {
        let name = format!("tenant-{i}");
        let t = match per_tree {
            Some(items) => db
                .open_tree_with(&name, TreeConfig::new().expected_items(items))
                .unwrap(),
            None => db.open_tree(&name).unwrap(),
        };
        t.insert("k", "v").unwrap();
        trees.push(t);
    }
    let rss = rss_bytes().saturating_sub(rss0);
    drop(trees);
    db.close().unwrap();
    let write = start.elapsed();
    let disk = du(&dir.path().join(bloomsled::persist::DIR_NAME));
    let start = Instant::now();
    let db = Config::new().path(dir.path()).open().unwrap();
    let mut loaded = 0;
    for i in 0..n {
        if db
            .open_tree(format!("tenant-{i}"))
            .unwrap()
            .recovery_report()
            .loaded()
        {
            loaded += 1;
        }
    }
    let reopen = start.elapsed();
    println!(
        "{n} trees, {:<24} create+write+close {:>7.2?}  RSS +{:>6.1} MB  snapshots {:>7.2} MB  \
         reopen {:>7.2?} ({loaded} loaded)",
        match per_tree {
            Some(i) => format!("open_tree_with({i}):"),
            None => "default (1M keys each):".to_string(),
        },
        write,
        rss as f64 / 1e6,
        disk as f64 / 1e6,
        reopen,
    );
}

fn main() {
    // `cargo bench` passes `--bench`; `cargo test --benches` runs this once, small.
    let n = std::env::var("BLOOMSLED_TREES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(if std::env::args().any(|a| a == "--bench") {
            1_000
        } else {
            20
        });
    run(n, None);
    run(n, Some(1_000));
}

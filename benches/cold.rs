//! Cold lookups: the first lookups of a process whose store is not in the page cache (a
//! restarted host, a store larger than memory), bloomsled against plain sled.
//!
//! The same keys (URL-like, 40–80 bytes, value 1 byte), loaded the same way (batches of
//! 10,000) into a bloomsled database (default settings) and a plain sled database. Then,
//! for each store and for absent and for present keys, a fresh process (this binary again)
//! after `sync; echo 3 > /proc/sys/vm/drop_caches` (root): open the store, time each of the
//! first 20,000 lookups of keys in a random order; the medians are printed. Needs root;
//! the stores are kept in `target/cold-bench-N/` for the next run.
//!
//! ```text
//! cargo bench --bench cold                                  # 2M keys
//! BLOOMSLED_COLD_KEYS=200000 cargo bench --bench cold
//! ```

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

const LOOKUPS: u64 = 20_000;
const ROLE: &str = "BLOOMSLED_COLD_ROLE";

fn url(i: u64, tag: &str) -> Vec<u8> {
    let h = i.wrapping_mul(0x9E37_79B9_7F4A_7C15);
    let pad = "x".repeat((h % 41) as usize);
    format!("https://{tag}{:02}.example.com/{h:016x}/{pad}{i}", i % 89).into_bytes()
}

fn mix(mut z: u64) -> u64 {
    z = z.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

fn load(dir: &Path, n: u64) {
    let b = dir.join("bloomsled");
    let s = dir.join("sled");
    if dir.join("loaded").exists() {
        return;
    }
    let _ = std::fs::remove_dir_all(dir);
    let keys: Vec<Vec<u8>> = (0..n).map(|i| url(i, "present")).collect();
    let t = Instant::now();
    let db = bloomsled::Config::new().path(&b).open().unwrap();
    for chunk in keys.chunks(10_000) {
        let mut batch = bloomsled::Batch::default();
        for k in chunk {
            batch.insert(k.as_slice(), &b"v"[..]);
        }
        db.apply_batch(batch).unwrap();
    }
    db.close().unwrap();
    eprintln!("bloomsled loaded in {:.1} s", t.elapsed().as_secs_f64());
    let t = Instant::now();
    let db = sled::Config::new().path(&s).open().unwrap();
    for chunk in keys.chunks(10_000) {
        let mut batch = sled::Batch::default();
        for k in chunk {
            batch.insert(k.as_slice(), &b"v"[..]);
        }
        db.apply_batch(batch).unwrap();
    }
    db.flush().unwrap();
    drop(db);
    eprintln!("sled loaded in {:.1} s", t.elapsed().as_secs_f64());
    std::fs::write(dir.join("loaded"), n.to_string()).unwrap();
}

/// One lookup: true if the key is present.
type Get = Box<dyn Fn(&[u8]) -> bool>;

/// The child: opens `store` at `path`, looks up the first 20,000 keys, prints the median
/// ns of one lookup, and the open's ms.
fn child(store: &str, kind: &str, path: &Path, n: u64) {
    let keys: Vec<Vec<u8>> = (0..LOOKUPS)
        .map(|i| match kind {
            "absent" => url(mix(i) | 1 << 62, "absent"),
            _ => url(mix(i) % n, "present"),
        })
        .collect();
    let t = Instant::now();
    let get: Get = match store {
        "bloomsled" => {
            let db = bloomsled::Config::new().path(path).open().unwrap();
            Box::new(move |k| db.get(k).unwrap().is_some())
        }
        _ => {
            let db = sled::Config::new().path(path).open().unwrap();
            Box::new(move |k| db.get(k).unwrap().is_some())
        }
    };
    let open_ms = t.elapsed().as_secs_f64() * 1e3;
    let mut ns = Vec::with_capacity(keys.len());
    for k in &keys {
        let t = Instant::now();
        let found = get(k);
        ns.push(t.elapsed().as_nanos() as u64);
        assert_eq!(found, kind == "present", "{store} {kind}");
    }
    ns.sort_unstable();
    println!("{} {open_ms:.0}", ns[ns.len() / 2]);
}

fn drop_caches() {
    let ok = Command::new("sh")
        .args(["-c", "sync && echo 3 > /proc/sys/vm/drop_caches"])
        .status()
        .map(|s| s.success())
        .unwrap_or(false);
    assert!(ok, "dropping the page cache needs root");
}

fn main() {
    let n: u64 = std::env::var("BLOOMSLED_COLD_KEYS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(2_000_000);
    let dir = PathBuf::from(format!("target/cold-bench-{n}"));
    if let Ok(role) = std::env::var(ROLE) {
        let (store, kind) = role.split_once(' ').unwrap();
        return child(store, kind, &dir.join(store), n);
    }
    if std::env::args().any(|a| a == "--bench") && std::env::var("BLOOMSLED_COLD").is_err() {
        // `cargo bench` runs every bench: this one only when asked (it drops the page cache).
        eprintln!("cold: set BLOOMSLED_COLD=1 to run (needs root: drops the page cache)");
        return;
    }
    load(&dir, n);
    // Each store opened and closed once, untimed: sled's first open after the load
    // replays its log and writes its own snapshot, which would be timed in the first
    // measured process only (and would leave that process' cache full of the store).
    drop(
        bloomsled::Config::new()
            .path(dir.join("bloomsled"))
            .open()
            .unwrap(),
    );
    drop(sled::Config::new().path(dir.join("sled")).open().unwrap());
    let me = std::env::current_exe().unwrap();
    let mut rows = Vec::new();
    for kind in ["absent", "present"] {
        let mut r = Vec::new();
        for store in ["sled", "bloomsled"] {
            drop_caches();
            let out = Command::new(&me)
                .env(ROLE, format!("{store} {kind}"))
                .env("BLOOMSLED_COLD_KEYS", n.to_string())
                .output()
                .unwrap();
            assert!(
                out.status.success(),
                "{}",
                String::from_utf8_lossy(&out.stderr)
            );
            let text = String::from_utf8(out.stdout).unwrap();
            let v: Vec<f64> = text
                .split_whitespace()
                .map(|x| x.parse().unwrap())
                .collect();
            r.push((v[0], v[1]));
        }
        rows.push((kind, r));
    }
    println!("{n} keys, page cache dropped before each process; first {LOOKUPS} lookups, median ns each:");
    println!("| lookups | sled | bloomsled | sled / bloomsled | open (sled, bloomsled) |");
    println!("|---|---|---|---|---|");
    for (kind, r) in rows {
        println!(
            "| {kind} | {:.0} ns | {:.0} ns | {:.2}× | {:.0} ms, {:.0} ms |",
            r[0].0,
            r[1].0,
            r[0].0 / r[1].0,
            r[0].1,
            r[1].1
        );
    }
}

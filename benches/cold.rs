//! Cold lookups: the first lookups of a process whose store is not in memory (a restarted
//! host, a store larger than memory), bloomsled against plain sled.
//!
//! The same keys (URL-like, 40–80 bytes; the absent ones are ids past the loaded ones in the
//! same shape, so they fall between present keys all over the tree) with values of a realistic size (256 bytes by
//! default, incompressible), loaded the same way (batches of 10,000) into a bloomsled
//! database (default settings) and a plain sled database. Both are then read with a sled
//! cache much smaller than the store (16 MiB by default, `cache_capacity` of each), so the
//! store cannot be held in sled's cache. For each store, for absent and for present keys, a
//! fresh process (this binary again) after `sync; echo 3 > /proc/sys/vm/drop_caches`: open
//! the store, time each of the first 20,000 lookups of keys in a random order; the mean and
//! the median are printed, with the open's time.
//!
//! Dropping the page cache needs root. Without it the bench still runs, says loudly that
//! its figures are warm (the stores' files are in the page cache from the previous process),
//! and marks them so in the table. The stores are kept in `target/cold-bench-N-V/` for the
//! next run.
//!
//! ```text
//! BLOOMSLED_COLD=1 cargo bench --bench cold                           # 2M keys, 256 B values
//! BLOOMSLED_COLD=1 BLOOMSLED_COLD_KEYS=200000 cargo bench --bench cold
//! BLOOMSLED_COLD_VALUE=1024 BLOOMSLED_COLD_CACHE_MIB=64 ...           # other shapes
//! ```

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

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

/// The value of key `i`: `len` pseudo-random bytes (incompressible, like most records).
fn value(i: u64, len: usize) -> Vec<u8> {
    let mut v = Vec::with_capacity(len + 8);
    let mut z = i;
    while v.len() < len {
        z = mix(z);
        v.extend_from_slice(&z.to_le_bytes());
    }
    v.truncate(len);
    v
}

fn env(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// Bytes of the files under `dir`.
fn du(dir: &Path) -> u64 {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return 0;
    };
    entries
        .flatten()
        .map(|e| match e.metadata() {
            Ok(m) if m.is_dir() => du(&e.path()),
            Ok(m) => m.len(),
            Err(_) => 0,
        })
        .sum()
}

fn load(dir: &Path, n: u64, value_len: usize) {
    if dir.join("loaded").exists() {
        return;
    }
    let _ = std::fs::remove_dir_all(dir);
    let (b, s) = (dir.join("bloomsled"), dir.join("sled"));
    let batches = || {
        (0..n).step_by(10_000).map(move |start| {
            (start..(start + 10_000).min(n)).map(move |i| (url(i, "present"), value(i, value_len)))
        })
    };
    let t = Instant::now();
    let db = bloomsled::Config::new().path(&b).open().unwrap();
    for chunk in batches() {
        let mut batch = bloomsled::Batch::default();
        for (k, v) in chunk {
            batch.insert(k, v);
        }
        db.apply_batch(batch).unwrap();
    }
    // Past its capacity (1M keys by default) the filter grows by a background rebuild:
    // let the last one finish, so that close snapshots the grown filter.
    db.wait_for_rebuild();
    db.close().unwrap();
    eprintln!("bloomsled loaded in {:.1} s", t.elapsed().as_secs_f64());
    let t = Instant::now();
    let db = sled::Config::new().path(&s).open().unwrap();
    for chunk in batches() {
        let mut batch = sled::Batch::default();
        for (k, v) in chunk {
            batch.insert(k, v);
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

/// The child: opens `store` at `path` with a sled cache of `cache` bytes, looks up the
/// first 20,000 keys, prints the median and mean ns of one lookup, the open's ms, and
/// (bloomsled) 1 if the filter answered from the first lookup on.
fn child(store: &str, kind: &str, path: &Path, n: u64, cache: u64) {
    let keys: Vec<Vec<u8>> = (0..LOOKUPS)
        .map(|i| match kind {
            // Ids past the loaded ones, in the same URL shape: spread through the key space
            // between the present keys (a distinct prefix would sort them all into one
            // corner of the tree, one leaf read for all of them).
            "absent" => url(n + mix(i) % (1 << 40), "present"),
            _ => url(mix(i) % n, "present"),
        })
        .collect();
    let t = Instant::now();
    let (get, filter_ready): (Get, bool) = match store {
        "bloomsled" => {
            let db = bloomsled::Config::new()
                .path(path)
                .cache_capacity(cache)
                .open()
                .unwrap();
            let ready = db.wait_for_filter(Duration::ZERO).unwrap();
            (Box::new(move |k| db.get(k).unwrap().is_some()), ready)
        }
        _ => {
            let db = sled::Config::new()
                .path(path)
                .cache_capacity(cache)
                .open()
                .unwrap();
            (Box::new(move |k| db.get(k).unwrap().is_some()), true)
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
    let mean = ns.iter().sum::<u64>() as f64 / ns.len() as f64;
    // Lookups that took 10 µs or more: disk reads (or the process descheduled).
    let slow = ns.iter().filter(|&&t| t >= 10_000).count();
    ns.sort_unstable();
    println!(
        "{} {mean:.0} {open_ms:.0} {} {slow}",
        ns[ns.len() / 2],
        u8::from(filter_ready)
    );
}

/// Drops the page cache; false (after saying so loudly) if that is not allowed.
fn drop_caches() -> bool {
    let ok = Command::new("sh")
        .args(["-c", "sync && echo 3 > /proc/sys/vm/drop_caches"])
        .stderr(std::process::Stdio::null())
        .status()
        .map(|s| s.success())
        .unwrap_or(false);
    if !ok {
        eprintln!(
            "\n*** cold: cannot drop the page cache (needs root): the stores' files stay in \
             the page cache, so these figures are WARM, not cold ***\n"
        );
    }
    ok
}

fn micros(ns: f64) -> String {
    if ns >= 10_000.0 {
        format!("{:.1} µs", ns / 1e3)
    } else {
        format!("{ns:.0} ns")
    }
}

fn main() {
    let n = env("BLOOMSLED_COLD_KEYS", 2_000_000);
    let value_len = env("BLOOMSLED_COLD_VALUE", 256) as usize;
    let cache = env("BLOOMSLED_COLD_CACHE_MIB", 16) << 20;
    let dir = PathBuf::from(format!("target/cold-bench-{n}-{value_len}"));
    if let Ok(role) = std::env::var(ROLE) {
        let (store, kind) = role.split_once(' ').unwrap();
        return child(store, kind, &dir.join(store), n, cache);
    }
    if std::env::args().any(|a| a == "--bench") && std::env::var("BLOOMSLED_COLD").is_err() {
        // `cargo bench` runs every bench: this one only when asked (it drops the page cache).
        eprintln!("cold: set BLOOMSLED_COLD=1 to run (as root: it drops the page cache)");
        return;
    }
    load(&dir, n, value_len);
    // Each store opened and closed once, untimed: sled's first open after the load
    // replays its log and writes its own snapshot, which would be timed in the first
    // measured process only.
    let db = bloomsled::Config::new()
        .path(dir.join("bloomsled"))
        .open()
        .unwrap();
    if db.stats().items > db.stats().capacity {
        // A store loaded by an earlier version of this bench, closed before its filter's
        // growth finished: grow it now, as the load's own rebuild would have.
        eprintln!("cold: the bloomsled store's filter is past its capacity: rebuilding it");
        db.rebuild().unwrap();
    }
    let st = db.stats();
    eprintln!(
        "bloomsled filter: {} keys, capacity {}, {:.1} bits/key, estimated FPR {:.3}%",
        st.items,
        st.capacity,
        st.num_bits as f64 / st.items.max(1) as f64,
        100.0 * st.estimated_fpr
    );
    db.close().unwrap();
    drop(sled::Config::new().path(dir.join("sled")).open().unwrap());
    let me = std::env::current_exe().unwrap();
    let mut rows = Vec::new();
    let mut all_cold = true;
    for kind in ["absent", "present"] {
        let mut r = Vec::new();
        for store in ["sled", "bloomsled"] {
            all_cold &= drop_caches();
            let out = Command::new(&me)
                .env(ROLE, format!("{store} {kind}"))
                .env("BLOOMSLED_COLD_KEYS", n.to_string())
                .env("BLOOMSLED_COLD_VALUE", value_len.to_string())
                .env("BLOOMSLED_COLD_CACHE_MIB", (cache >> 20).to_string())
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
            r.push(v);
        }
        rows.push((kind, r));
    }
    let mib = |p: &str| du(&dir.join(p)) as f64 / f64::from(1 << 20);
    println!(
        "{n} keys, {value_len} B values; on disk: sled {:.0} MiB, bloomsled {:.0} MiB; sled \
         cache {} MiB; {}; first {LOOKUPS} lookups of each fresh process:",
        mib("sled"),
        mib("bloomsled"),
        cache >> 20,
        if all_cold {
            "page cache dropped before each process"
        } else {
            "WARM: the page cache could not be dropped (not root)"
        }
    );
    println!(
        "| lookups | sled mean | bloomsled mean | sled / bloomsled (mean) | sled median | \
         bloomsled median | lookups ≥ 10 µs (sled, bloomsled) | open (sled, bloomsled) |"
    );
    println!("|---|---:|---:|---:|---:|---:|---|---|");
    for (kind, r) in rows {
        let (s, b) = (&r[0], &r[1]);
        println!(
            "| {kind} | {} | {} | {:.2}× | {} | {} | {}, {} | {:.0} ms, {:.0} ms{} |",
            micros(s[1]),
            micros(b[1]),
            s[1] / b[1],
            micros(s[0]),
            micros(b[0]),
            s[4],
            b[4],
            s[2],
            b[2],
            if b[3] == 1.0 {
                ""
            } else {
                " (filter not ready at the first lookup)"
            }
        );
    }
}

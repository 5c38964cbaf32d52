//! Cold lookups: the first lookups of a process whose redb file is not in memory (a
//! restarted host, a file larger than memory), `bloomsled-redb` against redb 4 itself.
//!
//! The same URL-like keys (40–80 bytes; the absent ones are ids past the loaded ones in the
//! same shape, so they fall between present keys all over the B-tree) with 256-byte
//! incompressible values, loaded the same way (transactions of 10,000, redb's defaults)
//! into a `bloomsled-redb` file and a redb file; `bloomsled-redb` is then dropped, so its
//! clean close writes the table's filter into its file. For each store, for absent and for
//! present keys, a fresh process (this binary again) after
//! `sync; echo 3 > /proc/sys/vm/drop_caches`: open the file with a redb cache of 16 MiB
//! (much smaller than the file), `begin_read` + `open_table` (where `bloomsled-redb` loads
//! the filter: counted in the open's time), then time each of the first 20,000 lookups of
//! keys in a random order; the mean and median are printed. Then, per kind, what the means
//! are made of: bloomsled-redb's false positives (each a cold redb lookup), the part of each
//! mean spent in lookups of 2 µs or more (disk reads), and an empty timed span (part of every
//! lookup's figure); each process's slowest lookups go to stderr.
//!
//! Dropping the page cache needs root. Without it the bench still runs, says loudly that its
//! figures are warm, and marks them so. The files are kept in
//! `target/redb-cold-bench-N/` for the next run.
//!
//! ```text
//! BLOOMSLED_COLD=1 cargo bench -p bloomsled-redb --bench cold          # 1M keys
//! BLOOMSLED_COLD=1 BLOOMSLED_COLD_KEYS=10000000 cargo bench -p bloomsled-redb --bench cold
//! ```

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

const LOOKUPS: u64 = 20_000;
const ROLE: &str = "BLOOMSLED_REDB_COLD_ROLE";
const VALUE_LEN: usize = 256;
const OURS: bloomsled_redb::TableDefinition<&[u8], &[u8]> =
    bloomsled_redb::TableDefinition::new("urls");
const THEIRS: redb::TableDefinition<&[u8], &[u8]> = redb::TableDefinition::new("urls");

fn url(i: u64) -> Vec<u8> {
    let h = i.wrapping_mul(0x9E37_79B9_7F4A_7C15);
    let pad = "x".repeat((h % 41) as usize);
    format!("https://present{:02}.example.com/{h:016x}/{pad}{i}", i % 89).into_bytes()
}

fn mix(mut z: u64) -> u64 {
    z = z.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// The value of key `i`: pseudo-random bytes (incompressible, like most records).
fn value(i: u64) -> Vec<u8> {
    let mut v = Vec::with_capacity(VALUE_LEN + 8);
    let mut z = i;
    while v.len() < VALUE_LEN {
        z = mix(z);
        v.extend_from_slice(&z.to_le_bytes());
    }
    v.truncate(VALUE_LEN);
    v
}

fn env(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// Both files, loaded the same way, unless an earlier run left them.
fn load(dir: &Path, n: u64) {
    if dir.join("loaded").exists() {
        return;
    }
    let _ = std::fs::remove_dir_all(dir);
    std::fs::create_dir_all(dir).unwrap();
    let chunks = || (0..n).step_by(10_000).map(move |s| s..(s + 10_000).min(n));
    let t = Instant::now();
    let ours = bloomsled_redb::Database::create(dir.join("bloomsled-redb.redb")).unwrap();
    for ids in chunks() {
        let w = ours.begin_write().unwrap();
        {
            let mut t = w.open_table(OURS).unwrap();
            for i in ids {
                t.insert(url(i).as_slice(), value(i).as_slice()).unwrap();
            }
        }
        w.commit().unwrap();
    }
    // Growth rebuilds run in the background: the clean close writes the last one's filter.
    ours.wait_for_filters();
    drop(ours);
    eprintln!(
        "bloomsled-redb loaded in {:.1} s",
        t.elapsed().as_secs_f64()
    );
    let t = Instant::now();
    let theirs = redb::Database::create(dir.join("redb.redb")).unwrap();
    for ids in chunks() {
        let w = theirs.begin_write().unwrap();
        {
            let mut t = w.open_table(THEIRS).unwrap();
            for i in ids {
                t.insert(url(i).as_slice(), value(i).as_slice()).unwrap();
            }
        }
        w.commit().unwrap();
    }
    drop(theirs);
    eprintln!("redb loaded in {:.1} s", t.elapsed().as_secs_f64());
    std::fs::write(dir.join("loaded"), n.to_string()).unwrap();
}

/// The child: opens `store` with a cache of `cache` bytes, looks up the first 20,000
/// keys, prints the median and mean ns of one lookup, the open's ms (to the table open and,
/// for bloomsled-redb, its filter loaded), whether the filter answered from the first lookup
/// on, and how many lookups took 10 µs or more.
fn child(store: &str, kind: &str, dir: &Path, n: u64, cache: usize) {
    use bloomsled_redb::ReadableDatabase as _;
    use redb::ReadableDatabase as _;
    let keys: Vec<Vec<u8>> = (0..LOOKUPS)
        .map(|i| match kind {
            "absent" => url(n + mix(i) % (1 << 40)),
            _ => url(mix(i) % n),
        })
        .collect();
    let mut ns = Vec::with_capacity(keys.len());
    let timer = timer_ns();
    let t = Instant::now();
    let (open_ms, filter, fps) = if store == "bloomsled-redb" {
        let db = bloomsled_redb::Builder::new()
            .set_cache_size(cache)
            .open(dir.join("bloomsled-redb.redb"))
            .unwrap();
        let r = db.begin_read().unwrap();
        let table = r.open_table(OURS).unwrap();
        let open_ms = t.elapsed().as_secs_f64() * 1e3;
        for k in &keys {
            let t = Instant::now();
            let found = table.get(k.as_slice()).unwrap().is_some();
            ns.push(t.elapsed().as_nanos() as u64);
            assert_eq!(found, kind == "present");
        }
        let fps = db.table_filter_stats(OURS).map_or(0, |s| s.false_positives);
        (open_ms, table.filter_in_use(), fps)
    } else {
        let db = redb::Builder::new()
            .set_cache_size(cache)
            .open(dir.join("redb.redb"))
            .unwrap();
        let r = db.begin_read().unwrap();
        let table = r.open_table(THEIRS).unwrap();
        let open_ms = t.elapsed().as_secs_f64() * 1e3;
        for k in &keys {
            let t = Instant::now();
            let found = table.get(k.as_slice()).unwrap().is_some();
            ns.push(t.elapsed().as_nanos() as u64);
            assert_eq!(found, kind == "present");
        }
        (open_ms, true, 0)
    };
    let mean = ns.iter().sum::<u64>() as f64 / ns.len() as f64;
    let slow = ns.iter().filter(|&&t| t >= 10_000).count();
    // What the lookups that read the disk (2 µs or more) took, of the mean.
    let disk = ns.iter().filter(|&&t| t >= 2_000).sum::<u64>() as f64 / ns.len() as f64;
    let mut order: Vec<usize> = (0..ns.len()).collect();
    order.sort_by_key(|&i| std::cmp::Reverse(ns[i]));
    let slowest: Vec<String> = order[..8]
        .iter()
        .map(|&i| format!("#{i}: {}", micros(ns[i] as f64)))
        .collect();
    eprintln!("{store} {kind}: slowest lookups {}", slowest.join(", "));
    ns.sort_unstable();
    println!(
        "{} {mean:.0} {open_ms:.0} {} {slow} {fps} {disk:.0} {timer}",
        ns[ns.len() / 2],
        u8::from(filter)
    );
}

/// The median time of an empty timed span (`Instant::now` and `elapsed`), in ns: part of
/// every lookup's figure, the same for both stores.
fn timer_ns() -> u64 {
    let mut t: Vec<u64> = (0..1_000)
        .map(|_| {
            let t = Instant::now();
            t.elapsed().as_nanos() as u64
        })
        .collect();
    t.sort_unstable();
    t[t.len() / 2]
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
            "\n*** cold: cannot drop the page cache (needs root): the files stay in the page \
             cache, so these figures are WARM, not cold ***\n"
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
    let n = env("BLOOMSLED_COLD_KEYS", 1_000_000);
    let cache = (env("BLOOMSLED_COLD_CACHE_MIB", 16) << 20) as usize;
    let dir = PathBuf::from(format!("target/redb-cold-bench-{n}"));
    if let Ok(role) = std::env::var(ROLE) {
        let (store, kind) = role.split_once(' ').unwrap();
        return child(store, kind, &dir, n, cache);
    }
    if std::env::args().any(|a| a == "--bench") && std::env::var("BLOOMSLED_COLD").is_err() {
        // `cargo bench` runs every bench: this one only when asked (it drops the page cache).
        eprintln!("cold: set BLOOMSLED_COLD=1 to run (as root: it drops the page cache)");
        return;
    }
    load(&dir, n);
    let me = std::env::current_exe().unwrap();
    let mut rows = Vec::new();
    let mut all_cold = true;
    for kind in ["absent", "present"] {
        let mut r = Vec::new();
        for store in ["redb", "bloomsled-redb"] {
            all_cold &= drop_caches();
            let out = Command::new(&me)
                .env(ROLE, format!("{store} {kind}"))
                .env("BLOOMSLED_COLD_KEYS", n.to_string())
                .env("BLOOMSLED_COLD_CACHE_MIB", (cache >> 20).to_string())
                .output()
                .unwrap();
            assert!(
                out.status.success(),
                "{}",
                String::from_utf8_lossy(&out.stderr)
            );
            eprint!("{}", String::from_utf8_lossy(&out.stderr));
            let text = String::from_utf8(out.stdout).unwrap();
            let v: Vec<f64> = text
                .split_whitespace()
                .map(|x| x.parse().unwrap())
                .collect();
            r.push(v);
        }
        rows.push((kind, r));
    }
    let mib = |f: &str| {
        std::fs::metadata(dir.join(f)).map_or(0.0, |m| m.len() as f64 / f64::from(1 << 20))
    };
    println!(
        "{n} keys, {VALUE_LEN} B values; files: redb {:.0} MiB, bloomsled-redb {:.0} MiB; \
         cache {} MiB; {}; first {LOOKUPS} lookups of each fresh process:",
        mib("redb.redb"),
        mib("bloomsled-redb.redb"),
        cache >> 20,
        if all_cold {
            "page cache dropped before each process"
        } else {
            "WARM: the page cache could not be dropped (not root)"
        }
    );
    println!(
        "| lookups | redb mean | bloomsled-redb mean | redb / bloomsled-redb (mean) | redb \
         median | bloomsled-redb median | lookups ≥ 10 µs (redb, ours) | open + first \
         open_table (redb, ours) |"
    );
    println!("|---|---:|---:|---:|---:|---:|---|---|");
    for (kind, r) in &rows {
        let (s, b) = (&r[0], &r[1]);
        println!(
            "| {kind} | {} | {} | {:.0}× | {} | {} | {}, {} | {:.0} ms, {:.0} ms{} |",
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
                " (filter not in use at the first lookup)"
            }
        );
    }
    println!();
    for (kind, r) in &rows {
        let (s, b) = (&r[0], &r[1]);
        println!(
            "{kind}: bloomsled-redb's false positives {} of {LOOKUPS}; lookups of 2 µs or more: \
             {} of redb's mean, {} of bloomsled-redb's; an empty timed span: {:.0} ns, {:.0} ns",
            b[5],
            micros(s[6]),
            micros(b[6]),
            s[7],
            b[7]
        );
    }
}

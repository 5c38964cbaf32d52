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
//! the filter: counted in the open's time), then the first 20,000 lookups of keys in a
//! random order, timed as one span (two clock reads in all): the mean. Three rounds
//! (`BLOOMSLED_COLD_ROUNDS`), the first store alternating; the figure is the median of the
//! rounds' ratios. Then one more fresh process per store and kind times every lookup on its
//! own, for what the means are made of: the medians, bloomsled-redb's false positives (each
//! a cold redb lookup), the part of the mean spent in lookups of 2 µs or more (disk reads),
//! and an empty timed span (part of each of those figures, not of the means above); each
//! process's slowest lookups go to stderr.
//!
//! Dropping the page cache needs root. Without it the bench still runs, says loudly that its
//! figures are warm, and marks them so. The files are kept in
//! `target/redb-cold-bench-N/` for the next run (remove it after a change to the filters'
//! settings: a reopen loads the filter the load stored).
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

/// The child: opens `store` with a cache of `cache` bytes and looks up the first 20,000
/// keys. `batch`: one clock read before the first lookup and one after the last, and prints
/// the mean ns of one lookup and the open's ms (to the table open and, for bloomsled-redb,
/// its filter loaded): the figure. `each`: every lookup timed on its own (two clock reads
/// in each figure), for what the mean is made of: prints the median and mean ns, the open's
/// ms, whether the filter answered from the first lookup on, the lookups of 10 µs or more,
/// the false positives, the mean's share of lookups of 2 µs or more, and an empty timed span.
fn child(store: &str, kind: &str, mode: &str, dir: &Path, n: u64, cache: usize) {
    use bloomsled_redb::ReadableDatabase as _;
    use redb::ReadableDatabase as _;
    let keys: Vec<Vec<u8>> = (0..LOOKUPS)
        .map(|i| match kind {
            "absent" => url(n + mix(i) % (1 << 40)),
            _ => url(mix(i) % n),
        })
        .collect();
    let each = mode == "each";
    let mut ns = Vec::with_capacity(keys.len());
    // Every lookup's answer is checked after the timed loop, so the check costs no time.
    let mut found = 0u64;
    let timer = timer_ns();
    let t = Instant::now();
    let (open_ms, total_ns, filter, fps) = if store == "bloomsled-redb" {
        let db = bloomsled_redb::Builder::new()
            .set_cache_size(cache)
            .open(dir.join("bloomsled-redb.redb"))
            .unwrap();
        let r = db.begin_read().unwrap();
        let table = r.open_table(OURS).unwrap();
        let open_ms = t.elapsed().as_secs_f64() * 1e3;
        let all = Instant::now();
        for k in &keys {
            let t = each.then(Instant::now);
            found += u64::from(table.get(k.as_slice()).unwrap().is_some());
            if let Some(t) = t {
                ns.push(t.elapsed().as_nanos() as u64);
            }
        }
        let total_ns = all.elapsed().as_nanos() as f64;
        let fps = db.table_filter_stats(OURS).map_or(0, |s| s.false_positives);
        (open_ms, total_ns, table.filter_in_use(), fps)
    } else {
        let db = redb::Builder::new()
            .set_cache_size(cache)
            .open(dir.join("redb.redb"))
            .unwrap();
        let r = db.begin_read().unwrap();
        let table = r.open_table(THEIRS).unwrap();
        let open_ms = t.elapsed().as_secs_f64() * 1e3;
        let all = Instant::now();
        for k in &keys {
            let t = each.then(Instant::now);
            found += u64::from(table.get(k.as_slice()).unwrap().is_some());
            if let Some(t) = t {
                ns.push(t.elapsed().as_nanos() as u64);
            }
        }
        let total_ns = all.elapsed().as_nanos() as f64;
        (open_ms, total_ns, true, 0)
    };
    let expected = if kind == "present" { LOOKUPS } else { 0 };
    assert_eq!(found, expected, "{store} {kind}: wrong answers");
    if !each {
        println!("{:.1} {open_ms:.1}", total_ns / LOOKUPS as f64);
        return;
    }
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

/// The median of `v` (the upper one of an even count).
fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

/// Runs this binary as a child for `store`, `kind` and `mode` after dropping the page
/// cache: its figures, and whether the cache was dropped.
fn run_child(me: &Path, role: &str, n: u64, cache: usize) -> (Vec<f64>, bool) {
    let cold = drop_caches();
    let out = Command::new(me)
        .env(ROLE, role)
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
    let v = text
        .split_whitespace()
        .map(|x| x.parse().unwrap())
        .collect();
    (v, cold)
}

fn main() {
    let n = env("BLOOMSLED_COLD_KEYS", 1_000_000);
    let cache = (env("BLOOMSLED_COLD_CACHE_MIB", 16) << 20) as usize;
    let rounds = env("BLOOMSLED_COLD_ROUNDS", 3).max(1);
    let dir = PathBuf::from(format!("target/redb-cold-bench-{n}"));
    if let Ok(role) = std::env::var(ROLE) {
        let mut parts = role.split(' ');
        let (store, kind, mode) = (
            parts.next().unwrap(),
            parts.next().unwrap(),
            parts.next().unwrap(),
        );
        return child(store, kind, mode, &dir, n, cache);
    }
    if std::env::args().any(|a| a == "--bench") && std::env::var("BLOOMSLED_COLD").is_err() {
        // `cargo bench` runs every bench: this one only when asked (it drops the page cache).
        eprintln!("cold: set BLOOMSLED_COLD=1 to run (as root: it drops the page cache)");
        return;
    }
    load(&dir, n);
    let me = std::env::current_exe().unwrap();
    let mut all_cold = true;
    let mut rows = Vec::new();
    for kind in ["absent", "present"] {
        // Rounds of one fresh process per store, the first store alternating.
        let (mut theirs, mut ours, mut ratios, mut opens) = (vec![], vec![], vec![], vec![]);
        for round in 0..rounds {
            let mut means = [0.0; 2];
            let order = if round % 2 == 0 { [0, 1] } else { [1, 0] };
            for i in order {
                let store = ["redb", "bloomsled-redb"][i];
                let (v, cold) = run_child(&me, &format!("{store} {kind} batch"), n, cache);
                all_cold &= cold;
                means[i] = v[0];
                opens.push((i, v[1]));
            }
            theirs.push(means[0]);
            ours.push(means[1]);
            ratios.push(means[0] / means[1]);
        }
        let open = |i| median(opens.iter().filter(|o| o.0 == i).map(|o| o.1).collect());
        let each: Vec<Vec<f64>> = ["redb", "bloomsled-redb"]
            .iter()
            .map(|store| {
                let (v, cold) = run_child(&me, &format!("{store} {kind} each"), n, cache);
                all_cold &= cold;
                v
            })
            .collect();
        rows.push((kind, theirs, ours, ratios, [open(0), open(1)], each));
    }
    let mib = |f: &str| {
        std::fs::metadata(dir.join(f)).map_or(0.0, |m| m.len() as f64 / f64::from(1 << 20))
    };
    println!(
        "{n} keys, {VALUE_LEN} B values; files: redb {:.0} MiB, bloomsled-redb {:.0} MiB; \
         cache {} MiB; {}; the first {LOOKUPS} lookups of each fresh process, {rounds} \
         rounds (medians):",
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
        "| lookups | redb mean | bloomsled-redb mean | redb / bloomsled-redb (each round) | \
         open + first open_table (redb, ours) |"
    );
    println!("|---|---:|---:|---:|---|");
    for (kind, theirs, ours, ratios, open, _) in &rows {
        // Speed-ups to the unit, ratios near 1 (present keys) to the hundredth.
        let ratio = |r: f64| {
            if r >= 10.0 {
                format!("{r:.0}")
            } else {
                format!("{r:.2}")
            }
        };
        let each: Vec<String> = ratios.iter().map(|&r| ratio(r)).collect();
        println!(
            "| {kind} | {} | {} | **{}×** ({}) | {:.0} ms, {:.0} ms |",
            micros(median(theirs.clone())),
            micros(median(ours.clone())),
            ratio(median(ratios.clone())),
            each.join(", "),
            open[0],
            open[1],
        );
    }
    println!(
        "\nWhat the means are made of (one more fresh process per store, each lookup timed on \
         its own, so an empty timed span is in every figure):"
    );
    println!(
        "| lookups | median (redb, ours) | mean (redb, ours) | ≥ 10 µs (redb, ours) | \
         ours: false positives | of the mean, lookups ≥ 2 µs (redb, ours) | empty span |"
    );
    println!("|---|---|---|---|---:|---|---:|");
    for (kind, .., each) in &rows {
        let (s, b) = (&each[0], &each[1]);
        println!(
            "| {kind} | {}, {} | {}, {} | {}, {} | {}{} | {}, {} | {:.0} ns |",
            micros(s[0]),
            micros(b[0]),
            micros(s[1]),
            micros(b[1]),
            s[4],
            b[4],
            b[5],
            if b[3] == 1.0 {
                ""
            } else {
                " (filter not in use at the first lookup)"
            },
            micros(s[6]),
            micros(b[6]),
            b[7]
        );
    }
}

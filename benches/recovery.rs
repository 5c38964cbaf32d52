//! RecoveryPolicy after `kill -9`: how long a crashed database is unavailable, against sled's own
//! open of the same files. Every step is a fresh process (this binary, re-run as a child),
//! as an operator meets it.
//!
//! `cargo bench --bench recovery` (1M keys); `BLOOMSLED_RECOVERY_KEYS=1000000,5000000` for
//! several sizes, `BLOOMSLED_RECOVERY_ROUNDS` crash rounds per size (default 3).
//!
//! Per size: a child loads N URL keys (batches of 10,000) and closes cleanly. Then, per
//! round: a child opens bloomsled cleanly (open + first lookup: the clean-open figure),
//! writes 1,000 keys, flushes, and is killed with SIGKILL; the crashed folder is copied;
//! a child opens the copy with plain sled (open + first lookup: sled's own open of the
//! same files), then iterates its default tree (sled's iteration rate); a child opens the
//! original with bloomsled (default settings: background recovery) and measures the
//! return of `open`, its first answer, and the time until the filter is back
//! (`wait_for_filter`), from which the rebuild's scan rate. Medians over the rounds.

mod common;

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::rounds::median;
use common::{env_count, key, load_chunks, size_label, write_key};

const ROLE: &str = "BLOOMSLED_RECOVERY_ROLE";
const DIR: &str = "BLOOMSLED_RECOVERY_DIR";
const KEYS: &str = "BLOOMSLED_RECOVERY_N";
const ROUND: &str = "BLOOMSLED_RECOVERY_ROUND";

fn config(dir: &Path, n: u64) -> bloomsled::Config {
    bloomsled::Config::new().path(dir).expected_items(n)
}

fn main() {
    if let Ok(role) = std::env::var(ROLE) {
        child(&role);
        return;
    }
    if std::env::args().any(|a| a == "--list") {
        return; // `cargo test --benches` lists benches: there are none to list.
    }
    let sizes: Vec<u64> = std::env::var("BLOOMSLED_RECOVERY_KEYS")
        .unwrap_or_else(|_| "1000000".into())
        .split(',')
        .map(|s| s.trim().replace('_', "").parse().expect("a key count"))
        .collect();
    let rounds = env_count("BLOOMSLED_RECOVERY_ROUNDS", 3);
    let mut rows = Vec::new();
    for &n in &sizes {
        rows.push(measure(n, rounds));
    }
    println!();
    println!(
        "| keys | sled open | bloomsled clean open | after kill -9: open returns | first answer \
         | filter back | (open + first answer) / sled open | rebuild scan | sled iteration \
         | scan / sled |"
    );
    println!("|---|---|---|---|---|---|---|---|---|---|");
    for r in rows {
        println!("{r}");
    }
}

/// One size: medians over the rounds, as a table row.
fn measure(n: u64, rounds: u64) -> String {
    let base = tempfile::tempdir().unwrap();
    let dir = base.path().join("db");
    let copy = base.path().join("copy");
    let t = Instant::now();
    run_child("load", &dir, n, 0);
    eprintln!("{}: loaded in {:?}", size_label(n), t.elapsed());
    let mut m: std::collections::BTreeMap<&str, Vec<f64>> = Default::default();
    for round in 0..rounds {
        let crashed = run_until_killed(&dir, n, round);
        m.entry("clean_open")
            .or_default()
            .push(crashed["open_first"]);
        let _ = std::fs::remove_dir_all(&copy);
        copy_dir(&dir, &copy);
        let sled = run_child("sled", &copy, n, round);
        m.entry("sled_open").or_default().push(sled["open_first"]);
        m.entry("sled_rate").or_default().push(sled["iter_rate"]);
        let rec = run_child("recover", &dir, n, round);
        for k in ["open", "open_first", "filter_back", "scan_rate"] {
            m.entry(k).or_default().push(rec[k]);
        }
        eprintln!(
            "{} round {round}: sled open {:.3} s, iterate {:.0} keys/s; bloomsled clean {:.3} \
             s; after kill -9: open {:.3} s, first answer {:.3} s, filter back {:.3} s, scan \
             {:.0} keys/s ({} keys)",
            size_label(n),
            sled["open_first"],
            sled["iter_rate"],
            crashed["open_first"],
            rec["open"],
            rec["open_first"],
            rec["filter_back"],
            rec["scan_rate"],
            rec["scanned"],
        );
    }
    let med = |k: &str| median(m[k].clone());
    format!(
        "| {} | {:.3} s | {:.3} s | {:.3} s | {:.3} s | {:.2} s | {:.2}x | {:.0}k keys/s | {:.0}k \
         keys/s | {:.2}x |",
        size_label(n),
        med("sled_open"),
        med("clean_open"),
        med("open"),
        med("open_first"),
        med("filter_back"),
        med("open_first") / med("sled_open"),
        med("scan_rate") / 1e3,
        med("sled_rate") / 1e3,
        med("scan_rate") / med("sled_rate"),
    )
}

fn child_command(role: &str, dir: &Path, n: u64, round: u64) -> Command {
    let mut c = Command::new(std::env::current_exe().unwrap());
    c.env(ROLE, role)
        .env(DIR, dir)
        .env(KEYS, n.to_string())
        .env(ROUND, round.to_string())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit());
    c
}

type Results = std::collections::HashMap<String, f64>;

/// `name=value` pairs of the child's `RESULT` lines.
fn parse(line: &str, into: &mut Results) {
    if let Some(rest) = line.strip_prefix("RESULT ") {
        for kv in rest.split_whitespace() {
            let (k, v) = kv.split_once('=').unwrap();
            into.insert(k.to_string(), v.parse().unwrap());
        }
    }
}

fn run_child(role: &str, dir: &Path, n: u64, round: u64) -> Results {
    let out = child_command(role, dir, n, round).output().unwrap();
    assert!(out.status.success(), "child {role} failed");
    let mut r = Results::new();
    for line in String::from_utf8_lossy(&out.stdout).lines() {
        parse(line, &mut r);
    }
    r
}

/// Runs the `crash` child until it says its writes are flushed, then SIGKILLs it.
fn run_until_killed(dir: &Path, n: u64, round: u64) -> Results {
    let mut child = child_command("crash", dir, n, round).spawn().unwrap();
    let out = BufReader::new(child.stdout.take().unwrap());
    let mut r = Results::new();
    for line in out.lines() {
        let line = line.unwrap();
        parse(&line, &mut r);
        if line == "FLUSHED" {
            break;
        }
    }
    child.kill().unwrap(); // SIGKILL
    child.wait().unwrap();
    assert!(r.contains_key("open_first"), "crash child died early");
    r
}

fn copy_dir(from: &Path, to: &PathBuf) {
    std::fs::create_dir_all(to).unwrap();
    for e in std::fs::read_dir(from).unwrap() {
        let e = e.unwrap();
        let target = to.join(e.file_name());
        if e.file_type().unwrap().is_dir() {
            copy_dir(&e.path(), &target);
        } else {
            std::fs::copy(e.path(), target).unwrap();
        }
    }
}

fn secs(d: Duration) -> f64 {
    d.as_secs_f64()
}

fn child(role: &str) {
    let dir = PathBuf::from(std::env::var(DIR).unwrap());
    let n: u64 = std::env::var(KEYS).unwrap().parse().unwrap();
    let round: u64 = std::env::var(ROUND).unwrap().parse().unwrap();
    let present = key(n / 2);
    match role {
        "load" => {
            let db = config(&dir, n).open().unwrap();
            load_chunks(n, 10_000, |ids, buf| {
                let mut b = bloomsled::Batch::default();
                for id in ids {
                    write_key(buf, id);
                    b.insert(&buf[..], &b"v"[..]);
                }
                db.apply_batch(b).unwrap();
            });
            db.close().unwrap();
        }
        "crash" => {
            let t = Instant::now();
            let db = config(&dir, n).open().unwrap();
            assert!(db.get(&present).unwrap().is_some());
            println!("RESULT open_first={}", secs(t.elapsed()));
            // 1,000 fresh keys per round, after the last snapshot.
            let from = n + 1_000_000 * (round + 1);
            let mut b = bloomsled::Batch::default();
            for id in from..from + 1_000 {
                b.insert(key(id), &b"w"[..]);
            }
            db.apply_batch(b).unwrap();
            db.flush().unwrap();
            println!("FLUSHED");
            std::thread::sleep(Duration::from_secs(600));
            std::process::exit(3);
        }
        "sled" => {
            let t = Instant::now();
            let db = sled::Config::new().path(&dir).open().unwrap();
            assert!(db.get(&present).unwrap().is_some());
            let open_first = secs(t.elapsed());
            let t = Instant::now();
            let mut count = 0u64;
            for k in db.iter().keys() {
                k.unwrap();
                count += 1;
            }
            let iter = secs(t.elapsed());
            println!(
                "RESULT open_first={open_first} iter_rate={} keys={count}",
                count as f64 / iter
            );
        }
        "recover" => {
            let t = Instant::now();
            let db = config(&dir, n).open().unwrap();
            let open = secs(t.elapsed());
            assert!(db.get(&present).unwrap().is_some());
            let open_first = secs(t.elapsed());
            assert!(db.wait_for_filter(Duration::from_secs(3600)).unwrap());
            let filter_back = secs(t.elapsed());
            let r = db.recovery_report();
            assert!(
                !r.loaded(),
                "the crash left a trusted snapshot: nothing to recover ({r:?})"
            );
            let scan_rate = r.keys_scanned as f64 / (filter_back - open).max(1e-9);
            println!(
                "RESULT open={open} open_first={open_first} filter_back={filter_back} \
                 scan_rate={scan_rate} scanned={}",
                r.keys_scanned
            );
            db.close().unwrap();
        }
        other => panic!("unknown role {other}"),
    }
}

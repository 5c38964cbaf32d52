//! RecoveryPolicy after `kill -9`: how long a crashed database is unavailable, against sled's own
//! open of the same files. Every step is a fresh process (this binary, re-run as a child),
//! as an operator meets it.
//!
//! `cargo bench --bench recovery` (1M keys); `BLOOMSLED_RECOVERY_KEYS=1000000,5000000` for
//! several sizes, `BLOOMSLED_RECOVERY_ROUNDS` crash rounds per size (default 3),
//! `BLOOMSLED_RECOVERY_LOST=1000,100000` the writes since the last snapshot at the kill
//! (default both), `BLOOMSLED_RECOVERY_JOURNAL=0` the crash journal off (the scan).
//!
//! With the crash journal (the default), the filter is back when `open` returns: the
//! journals of the writes since the snapshot are replayed over it (`RecoveryOutcome::Replayed`).
//! A last table compares single inserts per second with the journal and without
//! (`Config::crash_journal(false)`), each in a fresh process, alternated (which goes first
//! too), `BLOOMSLED_RECOVERY_INSERT_ROUNDS` pairs (default 6), medians;
//! `BLOOMSLED_RECOVERY_KEYS=0` runs this table alone.
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

const LOST: &str = "BLOOMSLED_RECOVERY_LOST_N";

fn journal_on() -> bool {
    std::env::var("BLOOMSLED_RECOVERY_JOURNAL").map_or(true, |v| v != "0")
}

fn config(dir: &Path, n: u64) -> bloomsled::Config {
    bloomsled::Config::new()
        .path(dir)
        .expected_items(n)
        .crash_journal(journal_on())
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
        .filter(|&n| n > 0) // `BLOOMSLED_RECOVERY_KEYS=0`: the insert table alone
        .collect();
    let rounds = env_count("BLOOMSLED_RECOVERY_ROUNDS", 3);
    let losts: Vec<u64> = std::env::var("BLOOMSLED_RECOVERY_LOST")
        .unwrap_or_else(|_| "1000,100000".into())
        .split(',')
        .map(|s| s.trim().replace('_', "").parse().expect("a write count"))
        .collect();
    let mut rows = Vec::new();
    for &n in &sizes {
        rows.extend(measure(n, &losts, rounds));
    }
    if !rows.is_empty() {
        print_rows(&rows);
    }
    if env_count("BLOOMSLED_RECOVERY_INSERTS", 200_000) > 0 {
        println!();
        println!(
            "{}",
            insert_cost(env_count("BLOOMSLED_RECOVERY_INSERT_ROUNDS", 6))
        );
    }
}

fn print_rows(rows: &[String]) {
    println!();
    println!(
        "| keys | writes since snapshot | sled open | bloomsled clean open | after kill -9: \
         open returns | first answer | filter back | filter back / sled open | keys scanned \
         | records replayed |"
    );
    println!("|---|---|---|---|---|---|---|---|---|---|");
    for r in rows {
        println!("{r}");
    }
}

/// Single inserts per second into a fresh database with the crash journal and without,
/// each run a fresh process, alternated; medians and their ratio, as a table.
fn insert_cost(rounds: u64) -> String {
    let n = env_count("BLOOMSLED_RECOVERY_INSERTS", 200_000);
    let (mut on, mut off) = (Vec::new(), Vec::new());
    for round in 0..rounds {
        // Alternate which goes first: the second run of a pair met a warmer machine.
        let mut order = [("1", &mut on), ("0", &mut off)];
        if round % 2 == 1 {
            order.reverse();
        }
        for (journal, into) in order {
            let base = tempfile::tempdir().unwrap();
            let out = child_command("inserts", base.path(), n, round)
                .env("BLOOMSLED_RECOVERY_JOURNAL", journal)
                .output()
                .unwrap();
            assert!(out.status.success(), "child inserts failed");
            let mut r = Results::new();
            for line in String::from_utf8_lossy(&out.stdout).lines() {
                parse(line, &mut r);
            }
            into.push(r["rate"]);
        }
        eprintln!(
            "inserts round {round}: journal {:.0}/s, none {:.0}/s",
            on[on.len() - 1],
            off[off.len() - 1]
        );
    }
    let paired = median(off.iter().zip(&on).map(|(f, o)| f / o).collect());
    let (a, b) = (median(on), median(off));
    format!(
        "| single inserts ({n}, fresh database) | crash journal on | off | time per insert, on / off (median of the rounds' ratios) |\n\
         |---|---|---|---|\n\
         | per second (median of {rounds}) | {a:.0} | {b:.0} | {paired:.3}x |"
    )
}

/// One size: per count of writes lost, medians over the rounds, as table rows.
fn measure(n: u64, losts: &[u64], rounds: u64) -> Vec<String> {
    let base = tempfile::tempdir().unwrap();
    let dir = base.path().join("db");
    let t = Instant::now();
    run_child("load", &dir, n, 0);
    eprintln!("{}: loaded in {:?}", size_label(n), t.elapsed());
    let mut round = 0;
    losts
        .iter()
        .map(|&lost| {
            let row = measure_lost(base.path(), n, lost, round, rounds);
            round += rounds;
            row
        })
        .collect()
}

/// `rounds` crashes after `lost` writes since the snapshot.
fn measure_lost(base: &Path, n: u64, lost: u64, first: u64, rounds: u64) -> String {
    let dir = base.join("db");
    let copy = base.join("copy");
    let mut m: std::collections::BTreeMap<&str, Vec<f64>> = Default::default();
    for round in first..first + rounds {
        let crashed = run_until_killed(&dir, n, lost, round);
        m.entry("clean_open")
            .or_default()
            .push(crashed["open_first"]);
        let _ = std::fs::remove_dir_all(&copy);
        copy_dir(&dir, &copy);
        let sled = run_child("sled", &copy, n, round);
        m.entry("sled_open").or_default().push(sled["open_first"]);
        let rec = run_child("recover", &dir, n, round);
        for k in ["open", "open_first", "filter_back", "scanned", "replayed"] {
            m.entry(k).or_default().push(rec[k]);
        }
        eprintln!(
            "{} lost {lost} round {round}: sled open {:.3} s; bloomsled clean {:.3} s; after \
             kill -9: open {:.3} s, first answer {:.3} s, filter back {:.3} s ({} keys \
             scanned, {} records replayed)",
            size_label(n),
            sled["open_first"],
            crashed["open_first"],
            rec["open"],
            rec["open_first"],
            rec["filter_back"],
            rec["scanned"],
            rec["replayed"],
        );
    }
    let med = |k: &str| median(m[k].clone());
    format!(
        "| {} | {} | {:.3} s | {:.3} s | {:.3} s | {:.3} s | {:.3} s | {:.2}x | {:.0} | {:.0} |",
        size_label(n),
        size_label(lost),
        med("sled_open"),
        med("clean_open"),
        med("open"),
        med("open_first"),
        med("filter_back"),
        med("filter_back") / med("sled_open"),
        med("scanned"),
        med("replayed"),
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
fn run_until_killed(dir: &Path, n: u64, lost: u64, round: u64) -> Results {
    let mut child = child_command("crash", dir, n, round)
        .env(LOST, lost.to_string())
        .spawn()
        .unwrap();
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
            // Fresh keys after the last snapshot, in batches of 1,000.
            let lost: u64 = std::env::var(LOST).unwrap().parse().unwrap();
            let from = n + 1_000_000 * (round + 1);
            for start in (from..from + lost).step_by(1_000) {
                let mut b = bloomsled::Batch::default();
                for id in start..(start + 1_000).min(from + lost) {
                    b.insert(key(id), &b"w"[..]);
                }
                db.apply_batch(b).unwrap();
            }
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
            println!("RESULT open_first={open_first}");
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
            let replayed = match r.outcome {
                bloomsled::RecoveryOutcome::Replayed { records, .. } => records,
                _ => 0,
            };
            println!(
                "RESULT open={open} open_first={open_first} filter_back={filter_back} \
                 scanned={} replayed={replayed}",
                r.keys_scanned
            );
            db.close().unwrap();
        }
        "inserts" => {
            let db = config(&dir, n).open().unwrap();
            let mut buf = Vec::new();
            let t = Instant::now();
            for id in 0..n {
                write_key(&mut buf, id);
                db.insert(&buf[..], &b"v"[..]).unwrap();
            }
            println!("RESULT rate={}", n as f64 / secs(t.elapsed()));
        }
        other => panic!("unknown role {other}"),
    }
}

//! `bloomsled`: inspect, load, check, verify and repair bloomsled databases, and run the demo.

use std::fs;
use std::io::{self, BufRead, BufReader, IsTerminal, Read, Write};
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Instant;

use bloomsled::{Batch, Config, Db, Recovery, RecoveryOutcome, RecoveryReport, Tree};
use clap::{Parser, Subcommand};
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use serde_json::{json, Value};

// The `redis` command group lives in its own file (src/bin/bloomsled/redis.rs); once this
// file moves to src/bin/bloomsled/main.rs, a plain `mod redis;` finds it.
#[cfg(feature = "redis")]
#[path = "bloomsled/redis.rs"]
mod redis;

/// A Bloom filter in front of sled: absent keys never touch the store.
#[derive(Parser)]
#[command(name = "bloomsled", version, about)]
struct Cli {
    /// Print machine-readable JSON instead of text (for commands that report).
    #[arg(long, global = true)]
    json: bool,
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Build a demo database, compare lookups with plain sled, then reopen it.
    Demo {
        /// Directory for the demo (replaced if it holds an earlier demo).
        #[arg(long, default_value = "./bloomsled-demo")]
        dir: PathBuf,
        /// Number of URL-like keys to load.
        #[arg(long, default_value_t = 1_000_000)]
        items: u64,
    },
    /// Load keys, one per line (`key` or `key<TAB>value`), from FILE or `-` (stdin).
    Load {
        /// Database directory.
        db: PathBuf,
        /// Tree to load into (default: the default tree).
        #[arg(long)]
        tree: Option<String>,
        /// Input file, or `-` for standard input.
        #[arg(default_value = "-")]
        file: String,
    },
    /// For each key, print `absent` (the filter said no), `present`, or `false-positive`.
    Check {
        /// Database directory.
        db: PathBuf,
        /// Tree to look in.
        #[arg(long)]
        tree: Option<String>,
        /// Keys to check, or `-` to read them from standard input.
        #[arg(required = true)]
        keys: Vec<String>,
    },
    /// Filter statistics and how each tree's filter was restored.
    Stats {
        /// Database directory.
        db: PathBuf,
    },
    /// Check every snapshot CRC and every stored key against its filter; exit 1 on a problem.
    Verify {
        /// Database directory.
        db: PathBuf,
    },
    /// Discard the snapshots and rebuild every filter from the keys.
    Rebuild {
        /// Database directory.
        db: PathBuf,
    },
    /// Write a fresh snapshot of every tree's filter.
    Snapshot {
        /// Database directory.
        db: PathBuf,
    },
    /// A filter shared through Redis or Redis Cluster (create, add, check, info, push, pull).
    #[cfg(feature = "redis")]
    #[command(subcommand)]
    Redis(redis::RedisCommand),
}

type CliResult<T> = Result<T, String>;

fn main() -> ExitCode {
    let cli = Cli::parse();
    match run(&cli) {
        Ok(code) => code,
        Err(msg) => {
            eprintln!("bloomsled: {msg}");
            ExitCode::FAILURE
        }
    }
}

fn run(cli: &Cli) -> CliResult<ExitCode> {
    match &cli.command {
        Command::Demo { dir, items } => demo(dir, *items, cli.json),
        Command::Load { db, tree, file } => load(db, tree.as_deref(), file, cli.json),
        Command::Check { db, tree, keys } => check(db, tree.as_deref(), keys, cli.json),
        Command::Stats { db } => stats(db, cli.json),
        Command::Verify { db } => verify(db, cli.json),
        Command::Rebuild { db } => rebuild(db, cli.json),
        Command::Snapshot { db } => snapshot(db, cli.json),
        #[cfg(feature = "redis")]
        Command::Redis(cmd) => redis::run(cmd, cli.json),
    }
}

/// Opens an existing database (never creates one), with a clear message when it is locked.
fn open_existing(path: &Path, recovery: Recovery) -> CliResult<Db> {
    if !path.join("conf").exists() && !path.join("db").exists() {
        return Err(format!("{}: not a database directory", path.display()));
    }
    open_db(path, recovery)
}

fn open_db(path: &Path, recovery: Recovery) -> CliResult<Db> {
    // Open a counting-mode database in counting mode (its default tree's snapshot says so):
    // the other mode would rebuild its filters as plain ones.
    let counting = bloomsled::persist::stored_mode(path, b"__sled__default")
        == Some(bloomsled::FilterMode::Counting);
    Config::new()
        .path(path)
        .recovery(recovery)
        .counting(counting)
        .open()
        .map_err(|e| match e {
            // sled reports a held lock as an I/O error "could not acquire lock on ...".
            bloomsled::Error::Sled(sled::Error::Io(io))
                if io.kind() == io::ErrorKind::WouldBlock
                    || io.to_string().contains("could not acquire lock") =>
            {
                format!(
                    "{}: the database is in use by another process",
                    path.display()
                )
            }
            e => format!("{}: {e}", path.display()),
        })
}

fn open_tree(db: &Db, name: Option<&str>) -> CliResult<Tree> {
    match name {
        None => Ok((**db).clone()),
        Some(n) => db.open_tree(n).map_err(|e| format!("tree {n:?}: {e}")),
    }
}

/// Every tree of the database, the default one first.
fn all_trees(db: &Db) -> CliResult<Vec<Tree>> {
    let mut trees = vec![(**db).clone()];
    for name in db.tree_names() {
        if &*name != b"__sled__default" {
            trees.push(db.open_tree(&name).map_err(|e| e.to_string())?);
        }
    }
    Ok(trees)
}

fn progress(len: Option<u64>, what: &str) -> ProgressBar {
    let bar = match len {
        Some(n) => ProgressBar::new(n),
        None => ProgressBar::new_spinner(),
    };
    if !io::stderr().is_terminal() {
        bar.set_draw_target(ProgressDrawTarget::hidden());
    }
    let template = if len.is_some() {
        "{msg} [{bar:40}] {pos}/{len} ({per_sec}, {eta})"
    } else {
        "{msg} {spinner} {pos} ({per_sec})"
    };
    bar.set_style(ProgressStyle::with_template(template).expect("valid template"));
    bar.set_message(what.to_string());
    bar
}

fn outcome_text(o: &RecoveryOutcome) -> String {
    match o {
        RecoveryOutcome::Loaded => "loaded from snapshot".into(),
        RecoveryOutcome::Rebuilt { reason } => format!("rebuilt from keys ({reason})"),
        RecoveryOutcome::Created => "created".into(),
        RecoveryOutcome::InMemory => "in memory".into(),
        other => format!("{other:?}"),
    }
}

fn report_json(r: &RecoveryReport) -> Value {
    json!({
        "tree": r.tree,
        "outcome": outcome_text(&r.outcome),
        "loaded": r.loaded(),
        "keys_scanned": r.keys_scanned,
        "bytes_verified": r.bytes_verified,
        "generation": r.generation,
        "millis": r.duration.as_secs_f64() * 1e3,
    })
}

fn print(json_mode: bool, value: &Value, text: impl FnOnce() -> String) {
    if json_mode {
        println!("{value}");
    } else {
        println!("{}", text());
    }
}

fn load(path: &Path, tree: Option<&str>, file: &str, json_mode: bool) -> CliResult<ExitCode> {
    let db = open_db(path, Recovery::Repair)?;
    let t = open_tree(&db, tree)?;
    let (input, len): (Box<dyn Read>, Option<u64>) = if file == "-" {
        (Box::new(io::stdin()), None)
    } else {
        let f = fs::File::open(file).map_err(|e| format!("{file}: {e}"))?;
        let len = f.metadata().map(|m| m.len()).ok();
        (Box::new(f), len)
    };
    let bar = progress(len, "loading");
    let start = Instant::now();
    let (mut keys, mut batch, mut in_batch) = (0u64, Batch::default(), 0usize);
    for line in BufReader::new(input).split(b'\n') {
        let line = line.map_err(|e| format!("{file}: {e}"))?;
        bar.inc(line.len() as u64 + 1);
        let line = line.strip_suffix(b"\r").unwrap_or(&line);
        if line.is_empty() {
            continue;
        }
        let (k, v) = match line.iter().position(|&b| b == b'\t') {
            Some(i) => (&line[..i], &line[i + 1..]),
            None => (line, &b""[..]),
        };
        batch.insert(k, v);
        keys += 1;
        in_batch += 1;
        if in_batch == 10_000 {
            t.apply_batch(std::mem::take(&mut batch))
                .map_err(|e| e.to_string())?;
            in_batch = 0;
        }
    }
    t.apply_batch(batch).map_err(|e| e.to_string())?;
    db.close().map_err(|e| e.to_string())?;
    bar.finish_and_clear();
    let secs = start.elapsed().as_secs_f64();
    let rate = keys as f64 / secs.max(1e-9);
    print(
        json_mode,
        &json!({"keys": keys, "seconds": secs, "keys_per_second": rate}),
        || format!("loaded {keys} keys in {secs:.2} s ({rate:.0} keys/s)"),
    );
    Ok(ExitCode::SUCCESS)
}

fn check(path: &Path, tree: Option<&str>, keys: &[String], json_mode: bool) -> CliResult<ExitCode> {
    let db = open_existing(path, Recovery::Repair)?;
    let t = open_tree(&db, tree)?;
    let keys: Vec<String> = if keys.len() == 1 && keys[0] == "-" {
        io::stdin()
            .lock()
            .lines()
            .collect::<Result<_, _>>()
            .map_err(|e| e.to_string())?
    } else {
        keys.to_vec()
    };
    let mut out = io::stdout().lock();
    for k in &keys {
        let verdict = if !t.may_contain(k) {
            "absent"
        } else if t.contains_key(k).map_err(|e| e.to_string())? {
            "present"
        } else {
            "false-positive"
        };
        let line = if json_mode {
            json!({"key": k, "result": verdict}).to_string()
        } else {
            format!("{verdict}\t{k}")
        };
        writeln!(out, "{line}").map_err(|e| e.to_string())?;
    }
    Ok(ExitCode::SUCCESS)
}

fn stats(path: &Path, json_mode: bool) -> CliResult<ExitCode> {
    let db = open_existing(path, Recovery::Repair)?;
    let mut rows = Vec::new();
    for t in all_trees(&db)? {
        let s = t.stats();
        let r = t.recovery_report();
        rows.push(json!({
            "tree": r.tree,
            "mode": s.mode.name(),
            "items": s.items,
            "stale": s.stale_entries,
            "capacity": s.capacity,
            "bits": s.num_bits,
            "k": s.num_hashes,
            "bits_per_key": s.bits_per_key,
            "fill_ratio": s.fill_ratio,
            "estimated_fpr": s.estimated_fpr,
            "target_fpr": s.target_fpr,
            "memory_bytes": s.memory_bytes,
            "recovery": report_json(&r),
        }));
    }
    print(json_mode, &Value::Array(rows.clone()), || {
        rows.iter()
            .map(|r| {
                format!(
                    "tree {} ({}): {} items (capacity {}), {} bits, k={}, {:.2} bits/key, \
                     fill {:.1}%, FPR now {:.4}% (target {:.4}%), {} KiB; {}",
                    r["tree"],
                    r["mode"].as_str().unwrap_or(""),
                    r["items"],
                    r["capacity"],
                    r["bits"],
                    r["k"],
                    r["bits_per_key"].as_f64().unwrap_or(0.0),
                    100.0 * r["fill_ratio"].as_f64().unwrap_or(0.0),
                    100.0 * r["estimated_fpr"].as_f64().unwrap_or(0.0),
                    100.0 * r["target_fpr"].as_f64().unwrap_or(0.0),
                    r["memory_bytes"].as_u64().unwrap_or(0) / 1024,
                    r["recovery"]["outcome"].as_str().unwrap_or(""),
                )
            })
            .collect::<Vec<_>>()
            .join("\n")
    });
    Ok(ExitCode::SUCCESS)
}

fn verify(path: &Path, json_mode: bool) -> CliResult<ExitCode> {
    // Strict: a snapshot that cannot be trusted is a finding, not something to repair here.
    let db = match open_existing(path, Recovery::Strict) {
        Ok(db) => db,
        Err(msg) if msg.contains("rejected") => {
            print(json_mode, &json!({"ok": false, "error": msg}), || {
                format!(
                    "FAILED: {msg}\n(run `bloomsled rebuild {}` to repair)",
                    path.display()
                )
            });
            return Ok(ExitCode::FAILURE);
        }
        Err(msg) => return Err(msg),
    };
    let mut ok = true;
    let mut rows = Vec::new();
    for t in all_trees(&db).map_err(|e| format!("FAILED: {e}"))? {
        let r = t.verify().map_err(|e| e.to_string())?;
        ok &= r.is_ok();
        rows.push(json!({
            "tree": t.recovery_report().tree,
            "ok": r.is_ok(),
            "keys_checked": r.keys_checked,
            "false_negatives": r.false_negatives,
            "snapshot": match &r.snapshot {
                Some(Ok(g)) => json!({"generation": g}),
                Some(Err(f)) => json!({"fault": f.to_string()}),
                None => Value::Null,
            },
        }));
    }
    print(json_mode, &json!({"ok": ok, "trees": rows.clone()}), || {
        let mut lines: Vec<String> = rows
            .iter()
            .map(|r| {
                format!(
                    "tree {}: {} keys checked, {} false negatives, snapshot {}",
                    r["tree"], r["keys_checked"], r["false_negatives"], r["snapshot"]
                )
            })
            .collect();
        lines.push(if ok { "OK".into() } else { "FAILED".into() });
        lines.join("\n")
    });
    Ok(if ok {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}

fn rebuild(path: &Path, json_mode: bool) -> CliResult<ExitCode> {
    // Without its snapshots the next open rebuilds every filter from the keys and writes
    // fresh snapshots; the data itself is never touched.
    let snaps = path.join(bloomsled::persist::DIR_NAME);
    if !path.join("conf").exists() && !path.join("db").exists() {
        return Err(format!("{}: not a database directory", path.display()));
    }
    // Check the lock before deleting anything.
    drop(open_db(path, Recovery::Repair)?);
    if snaps.exists() {
        for entry in fs::read_dir(&snaps).map_err(|e| e.to_string())? {
            let p = entry.map_err(|e| e.to_string())?.path();
            if p.extension().is_some_and(|e| e == "snap") {
                fs::remove_file(&p).map_err(|e| format!("{}: {e}", p.display()))?;
            }
        }
    }
    let db = open_db(path, Recovery::Repair)?;
    let reports: Vec<RecoveryReport> = all_trees(&db)?
        .iter()
        .map(|t| t.recovery_report())
        .collect();
    let rows: Vec<Value> = reports.iter().map(report_json).collect();
    print(json_mode, &Value::Array(rows), || {
        reports
            .iter()
            .map(|r| {
                format!(
                    "tree {:?}: {}, {} keys scanned in {:.2?}",
                    r.tree,
                    outcome_text(&r.outcome),
                    r.keys_scanned,
                    r.duration
                )
            })
            .collect::<Vec<_>>()
            .join("\n")
    });
    Ok(ExitCode::SUCCESS)
}

fn snapshot(path: &Path, json_mode: bool) -> CliResult<ExitCode> {
    let db = open_existing(path, Recovery::Repair)?;
    let mut rows = Vec::new();
    for t in all_trees(&db)? {
        let info = t.snapshot().map_err(|e| e.to_string())?;
        rows.push(json!({
            "tree": t.recovery_report().tree,
            "generation": info.generation,
            "bytes": info.bytes,
            "pages": info.pages,
            "millis": info.duration.as_secs_f64() * 1e3,
        }));
    }
    print(json_mode, &Value::Array(rows.clone()), || {
        rows.iter()
            .map(|r| {
                format!(
                    "tree {}: generation {}, {} bytes",
                    r["tree"], r["generation"], r["bytes"]
                )
            })
            .collect::<Vec<_>>()
            .join("\n")
    });
    Ok(ExitCode::SUCCESS)
}

fn demo_url(i: u64, tag: &str) -> String {
    format!(
        "https://site{}.example.com/{tag}/{:016x}",
        i % 997,
        i.wrapping_mul(0x9E37_79B9_7F4A_7C15)
    )
}

fn demo(dir: &Path, items: u64, json_mode: bool) -> CliResult<ExitCode> {
    if items == 0 {
        return Err("--items must be at least 1".into());
    }
    let marker = dir.join("bloomsled-demo");
    if dir.exists() {
        if !marker.exists() {
            return Err(format!(
                "{}: exists and is not a bloomsled demo directory; choose another --dir",
                dir.display()
            ));
        }
        fs::remove_dir_all(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    }
    fs::create_dir_all(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    fs::write(&marker, "created by `bloomsled demo`; safe to delete\n")
        .map_err(|e| e.to_string())?;
    let bs_path = dir.join("bloomsled");
    let sled_path = dir.join("plain-sled");

    let db = Config::new()
        .path(&bs_path)
        .expected_items(items)
        .open()
        .map_err(|e| e.to_string())?;
    let plain = sled::Config::new()
        .path(&sled_path)
        .open()
        .map_err(|e| e.to_string())?;
    let bar = progress(Some(items), "loading");
    let mut i = 0;
    while i < items {
        let end = (i + 10_000).min(items);
        let (mut b, mut p) = (Batch::default(), sled::Batch::default());
        for j in i..end {
            let k = demo_url(j, "page");
            b.insert(k.as_bytes(), &b"1"[..]);
            p.insert(k.as_bytes(), &b"1"[..]);
        }
        db.apply_batch(b).map_err(|e| e.to_string())?;
        plain.apply_batch(p).map_err(|e| e.to_string())?;
        bar.set_position(end);
        i = end;
    }
    bar.finish_and_clear();

    let probes = items.min(100_000);
    let absent: Vec<String> = (0..probes).map(|j| demo_url(j, "missing")).collect();
    let present: Vec<String> = (0..probes)
        .map(|j| demo_url(j * 7 % items, "page"))
        .collect();
    let time = |f: &dyn Fn(&str) -> bool, keys: &[String]| -> (f64, usize) {
        let t = Instant::now();
        let hits = keys.iter().filter(|k| f(k)).count();
        (t.elapsed().as_nanos() as f64 / keys.len() as f64, hits)
    };
    let ok =
        |r: Result<Option<sled::IVec>, bloomsled::Error>| r.map(|v| v.is_some()).unwrap_or(false);
    let (bs_abs, _) = time(&|k| ok(db.get(k)), &absent);
    let (sl_abs, _) = time(
        &|k| plain.get(k).map(|v| v.is_some()).unwrap_or(false),
        &absent,
    );
    let (bs_pre, found) = time(&|k| ok(db.get(k)), &present);
    let (sl_pre, _) = time(
        &|k| plain.get(k).map(|v| v.is_some()).unwrap_or(false),
        &present,
    );
    if found != present.len() {
        return Err(format!(
            "{} present keys were not found",
            present.len() - found
        ));
    }
    let s = db.stats();
    drop(plain);
    db.close().map_err(|e| e.to_string())?;
    let t = Instant::now();
    let db = Config::new()
        .path(&bs_path)
        .open()
        .map_err(|e| e.to_string())?;
    let reopen = t.elapsed();
    let r = db.recovery_report();
    let value = json!({
        "items": items,
        "absent_get_ns": {"bloomsled": bs_abs, "sled": sl_abs, "speedup": sl_abs / bs_abs},
        "present_get_ns": {"bloomsled": bs_pre, "sled": sl_pre},
        "store_lookups_skipped": s.store_lookups_skipped,
        "lookups": s.lookups,
        "false_positive_rate": {"measured": s.observed_fpr(), "target": s.target_fpr},
        "reopen": report_json(&r),
        "reopen_millis": reopen.as_secs_f64() * 1e3,
    });
    print(json_mode, &value, || {
        format!(
            "{items} URL-like keys in {}\n\n\
             {:<22}{:>12}{:>12}{:>10}\n\
             {:<22}{:>9.0} ns{:>9.0} ns{:>9.1}x\n\
             {:<22}{:>9.0} ns{:>9.0} ns{:>9.2}x\n\n\
             store lookups skipped: {} of {}\n\
             false positives: {:.3}% measured, {:.3}% target\n\n\
             reopened in {:.1?}: filter {} ({} keys scanned, {} snapshot bytes verified)",
            dir.display(),
            "lookup",
            "bloomsled",
            "sled",
            "speed-up",
            "absent key",
            bs_abs,
            sl_abs,
            sl_abs / bs_abs,
            "present key",
            bs_pre,
            sl_pre,
            sl_pre / bs_pre,
            s.store_lookups_skipped,
            s.lookups,
            100.0 * s.observed_fpr(),
            100.0 * s.target_fpr,
            reopen,
            outcome_text(&r.outcome),
            r.keys_scanned,
            r.bytes_verified,
        )
    });
    Ok(ExitCode::SUCCESS)
}

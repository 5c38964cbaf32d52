//! `demo`: a database of URL-like keys beside a plain sled one, lookups timed on both, then
//! a reopen; ends with the database's path and the commands to try on it next.

pub mod folder;

use std::path::Path;
use std::process::ExitCode;
use std::time::Instant;

use bloomsled::{Batch, Config};
use serde::Serialize;

use crate::error::{CliError, CliResult};
use crate::output::{emit, outcome_text, progress, shell_word, RecoveryRow};

/// Keys per batch.
const BATCH: u64 = 10_000;

/// Nanoseconds per lookup in each store.
#[derive(Serialize)]
struct Lookup {
    bloomsled: f64,
    sled: f64,
    speedup: f64,
}

impl Lookup {
    fn new(bloomsled: f64, sled: f64) -> Self {
        Lookup {
            bloomsled,
            sled,
            speedup: sled / bloomsled,
        }
    }
}

/// Measured and target false-positive rates.
#[derive(Serialize)]
struct Rate {
    measured: f64,
    target: f64,
}

/// What the demo reports.
#[derive(Serialize)]
struct DemoRow {
    items: u64,
    /// The bloomsled database the demo made.
    database: String,
    absent_get_ns: Lookup,
    present_get_ns: Lookup,
    store_lookups_skipped: u64,
    lookups: u64,
    false_positive_rate: Rate,
    reopen: RecoveryRow,
    reopen_millis: f64,
    /// Commands to try on the database next.
    next_commands: Vec<String>,
}

fn demo_url(i: u64, tag: &str) -> String {
    format!(
        "https://site{}.example.com/{tag}/{:016x}",
        i % 997,
        i.wrapping_mul(0x9E37_79B9_7F4A_7C15)
    )
}

/// Mean nanoseconds per key of `f`, and how many keys it found.
fn time(f: impl Fn(&str) -> bool, keys: &[String]) -> (f64, usize) {
    let t = Instant::now();
    let hits = keys.iter().filter(|k| f(k)).count();
    (t.elapsed().as_nanos() as f64 / keys.len() as f64, hits)
}

pub fn run(dir: &Path, items: u64, json: bool) -> CliResult<ExitCode> {
    if items == 0 {
        return Err(CliError::NoItems);
    }
    let dir = folder::prepare(dir)?;
    let bs_path = folder::database_of(&dir);
    let sled_path = dir.join(folder::SLED_DIR);

    let db = Config::new().path(&bs_path).expected_items(items).open()?;
    let plain = sled::Config::new().path(&sled_path).open()?;
    let bar = progress(Some(items), "loading");
    let mut i = 0;
    while i < items {
        let end = (i + BATCH).min(items);
        let (mut b, mut p) = (Batch::default(), sled::Batch::default());
        for j in i..end {
            let k = demo_url(j, "page");
            b.insert(k.as_bytes(), &b"1"[..]);
            p.insert(k.as_bytes(), &b"1"[..]);
        }
        db.apply_batch(b)?;
        plain.apply_batch(p)?;
        bar.set_position(end);
        i = end;
    }
    bar.finish_and_clear();

    let probes = items.min(100_000);
    let absent: Vec<String> = (0..probes).map(|j| demo_url(j, "missing")).collect();
    let present: Vec<String> = (0..probes)
        .map(|j| demo_url(j * 7 % items, "page"))
        .collect();
    let in_bloomsled = |k: &str| db.get(k).is_ok_and(|v| v.is_some());
    let in_sled = |k: &str| plain.get(k).is_ok_and(|v| v.is_some());
    let (bs_abs, _) = time(in_bloomsled, &absent);
    let (sl_abs, _) = time(in_sled, &absent);
    let (bs_pre, found) = time(in_bloomsled, &present);
    let (sl_pre, _) = time(in_sled, &present);
    if found != present.len() {
        return Err(CliError::DemoLostKeys(present.len() - found));
    }
    let s = db.stats();
    drop(plain);
    db.close()?;
    let t = Instant::now();
    let db = Config::new().path(&bs_path).open()?;
    let reopen = t.elapsed();
    let r = db.recovery_report();
    drop(db);

    let db_word = shell_word(&bs_path.to_string_lossy());
    let row = DemoRow {
        items,
        database: bs_path.to_string_lossy().into_owned(),
        absent_get_ns: Lookup::new(bs_abs, sl_abs),
        present_get_ns: Lookup::new(bs_pre, sl_pre),
        store_lookups_skipped: s.store_lookups_skipped,
        lookups: s.lookups,
        false_positive_rate: Rate {
            measured: s.observed_fpr(),
            target: s.target_fpr,
        },
        reopen: RecoveryRow::from(&r),
        reopen_millis: reopen.as_secs_f64() * 1e3,
        next_commands: vec![
            format!("bloomsled stats {db_word}"),
            format!("bloomsled verify {db_word}"),
            format!(
                "bloomsled check {db_word} {} {}",
                demo_url(0, "page"),
                demo_url(0, "missing")
            ),
        ],
    };
    emit(json, &row, |v| {
        format!(
            "{} URL-like keys in {}\n\n\
             {:<22}{:>12}{:>12}{:>10}\n\
             {:<22}{:>9.0} ns{:>9.0} ns{:>9.1}x\n\
             {:<22}{:>9.0} ns{:>9.0} ns{:>9.2}x\n\n\
             store lookups skipped: {} of {}\n\
             false positives: {:.3}% measured, {:.3}% target\n\n\
             reopened in {:.1?}: filter {} ({} keys scanned, {} snapshot bytes verified)\n\n\
             database: {}\n\
             next, try:\n  {}",
            v.items,
            dir.display(),
            "lookup",
            "bloomsled",
            "sled",
            "speed-up",
            "absent key",
            v.absent_get_ns.bloomsled,
            v.absent_get_ns.sled,
            v.absent_get_ns.speedup,
            "present key",
            v.present_get_ns.bloomsled,
            v.present_get_ns.sled,
            v.present_get_ns.speedup,
            v.store_lookups_skipped,
            v.lookups,
            100.0 * v.false_positive_rate.measured,
            100.0 * v.false_positive_rate.target,
            reopen,
            outcome_text(&r.outcome),
            v.reopen.keys_scanned,
            v.reopen.bytes_verified,
            v.database,
            v.next_commands.join("\n  "),
        )
    })?;
    Ok(ExitCode::SUCCESS)
}

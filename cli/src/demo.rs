//! `demo`: a database of URL-like keys beside a plain sled one, lookups timed on both, then
//! a reopen; ends with the database's path, the commands to try on it next, and what the
//! demo leaves on disk.
//!
//! The two stores are timed as the stream benchmark (`benches/stream.rs`) times its pairs:
//! warm (one untimed pass of each over the keys first) and interleaved (alternating chunks
//! of the same keys, the side that goes first swapping chunk by chunk), so neither side
//! inherits a colder cache than the other. Present keys cost what sled costs on both sides
//! (a ratio near 1.0x); absent keys are where the filter saves sled's lookup.

pub mod folder;

use std::path::Path;
use std::process::ExitCode;
use std::time::{Duration, Instant};

use bloomsled::{Batch, Config};
use serde::Serialize;

use crate::error::{CliError, CliResult};
use crate::output::{emit, outcome_text, progress, shell_word, RecoveryRow};

/// Keys per batch.
const BATCH: u64 = 10_000;
/// Keys per chunk of the interleaved timing: long enough that reading the clock is noise,
/// short enough that both sides see the same cache state.
const CHUNK: usize = 1_000;
/// Timed passes over the keys; the figures are medians over them.
const PASSES: usize = 5;

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

/// What the demo leaves on disk.
#[derive(Serialize)]
struct Disk {
    /// The demo's folder.
    folder: String,
    /// Bytes under it (both databases).
    bytes: u64,
    /// The command that removes it.
    remove: String,
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
    /// What the demo leaves on disk.
    disk: Disk,
}

fn demo_url(i: u64, tag: &str) -> String {
    format!(
        "https://site{}.example.com/{tag}/{:016x}",
        i % 997,
        i.wrapping_mul(0x9E37_79B9_7F4A_7C15)
    )
}

/// Nanoseconds per key of `bloomsled` and of `sled` over the same `keys`, with how many
/// keys each found: one untimed pass of each first (both warm), then [`PASSES`] passes in
/// alternating chunks (sled, bloomsled, sled, bloomsled, ... with the first of each chunk
/// swapping), so both see the same keys in the same cache state. Medians over the passes.
fn paired(
    keys: &[String],
    bloomsled: impl Fn(&str) -> bool,
    sled: impl Fn(&str) -> bool,
) -> (f64, f64, usize, usize) {
    let sides: [&dyn Fn(&str) -> bool; 2] = [&sled, &bloomsled];
    for side in sides {
        for k in keys {
            std::hint::black_box(side(k));
        }
    }
    let mut ns = [Vec::with_capacity(PASSES), Vec::with_capacity(PASSES)];
    let mut hits = [0; 2];
    for pass in 0..PASSES {
        let mut elapsed = [0u128; 2];
        hits = [0; 2];
        for (c, chunk) in keys.chunks(CHUNK).enumerate() {
            for turn in 0..2 {
                let s = (c + pass + turn) % 2;
                let t = Instant::now();
                hits[s] += chunk.iter().filter(|k| sides[s](k)).count();
                elapsed[s] += t.elapsed().as_nanos();
            }
        }
        for s in 0..2 {
            ns[s].push(elapsed[s] as f64 / keys.len() as f64);
        }
    }
    let median = |v: &mut Vec<f64>| {
        v.sort_by(f64::total_cmp);
        v[v.len() / 2]
    };
    let [mut sl, mut bs] = ns;
    (median(&mut bs), median(&mut sl), hits[1], hits[0])
}

/// Bytes of the files under `dir`, recursively (what `du --apparent-size` counts).
fn bytes_under(dir: &Path) -> u64 {
    std::fs::read_dir(dir)
        .into_iter()
        .flatten()
        .flatten()
        .map(|e| match e.file_type() {
            Ok(t) if t.is_dir() => bytes_under(&e.path()),
            Ok(t) if t.is_file() => e.metadata().map_or(0, |m| m.len()),
            _ => 0,
        })
        .sum()
}

/// What the demo leaves on disk in `dir`, and the command that removes it.
fn disk_of(dir: &Path) -> Disk {
    let folder = std::path::absolute(dir).unwrap_or_else(|_| dir.to_path_buf());
    Disk {
        folder: folder.to_string_lossy().into_owned(),
        bytes: bytes_under(dir),
        remove: format!("rm -r {}", shell_word(&folder.to_string_lossy())),
    }
}

/// The commands to try next on the database (`db_word`, quoted for a shell).
fn next_commands(db_word: &str) -> Vec<String> {
    vec![
        format!("bloomsled stats {db_word}"),
        format!("bloomsled verify {db_word}"),
        format!(
            "bloomsled check {db_word} {} {}",
            demo_url(0, "page"),
            demo_url(0, "missing")
        ),
    ]
}

/// Loads `items` URL-like keys into both stores, a batch at a time, behind a progress bar.
fn load(db: &bloomsled::Db, plain: &sled::Db, items: u64) -> CliResult<()> {
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
    Ok(())
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
    load(&db, &plain, items)?;

    let probes = items.min(100_000);
    let absent: Vec<String> = (0..probes).map(|j| demo_url(j, "missing")).collect();
    let present: Vec<String> = (0..probes)
        .map(|j| demo_url(j * 7 % items, "page"))
        .collect();
    let in_bloomsled = |k: &str| db.get(k).is_ok_and(|v| v.is_some());
    let in_sled = |k: &str| plain.get(k).is_ok_and(|v| v.is_some());
    let (bs_abs, sl_abs, _, _) = paired(&absent, in_bloomsled, in_sled);
    let (bs_pre, sl_pre, found, _) = paired(&present, in_bloomsled, in_sled);
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
    let disk = disk_of(&dir);
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
        next_commands: next_commands(&db_word),
        disk,
    };
    let outcome = outcome_text(&r.outcome);
    emit(json, &row, |v| demo_text(v, &dir, reopen, &outcome))?;
    Ok(ExitCode::SUCCESS)
}

/// The demo's report for a person: the two stores' lookups, the filter's figures, the
/// reopen, the commands to try next and what is left on disk.
fn demo_text(v: &DemoRow, dir: &Path, reopen: Duration, outcome: &str) -> String {
    format!(
        "{} URL-like keys in {}\n\n\
         {:<22}{:>12}{:>12}{:>10}\n\
         {:<22}{:>9.0} ns{:>9.0} ns{:>9.1}x\n\
         {:<22}{:>9.0} ns{:>9.0} ns{:>9.2}x\n\
         (both warm, timed in alternating chunks of the same keys; present keys cost a \
         sled lookup either way)\n\n\
         store lookups skipped: {} of {}\n\
         false positives: {:.3}% measured, {:.3}% target\n\n\
         reopened in {:.1?}: filter {} ({} keys scanned, {} snapshot bytes verified)\n\n\
         database: {}\n\
         next, try:\n  {}\n\n\
         left on disk: {:.0} MB in {} (both databases); remove it with:\n  {}",
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
        outcome,
        v.reopen.keys_scanned,
        v.reopen.bytes_verified,
        v.database,
        v.next_commands.join("\n  "),
        v.disk.bytes as f64 / 1e6,
        v.disk.folder,
        v.disk.remove,
    )
}

//! The opt-in reproducers of `tests/power_cut.rs`: what sled loses at a cut, and what the
//! crash journal's boot id guards against.

use std::time::Duration;

use bloomsled_powercut::{run_child, Fault};

use super::common::child;
use super::common::rng::Rng;
use super::{case, config, key, last_flushed, Kind, Tally, CHILD_ENV};

/// sled 0.34.7's `flush()` is not durable against power loss (spacejam/sled#1452, and
/// #1351): it ends in `sync_file_range(2)`, which commits neither the file's size nor the
/// disk's cache, so keys a returned `flush()` covered are lost at a cut (only the
/// background flusher's `sync_all`, every `flush_every_ms`, is a real fsync). Run with
/// `BLOOMSLED_POWER_CUT_SLED_REPRO=1 cargo test --test power_cut`: it fails until sled
/// fixes it. The child is plain sled (no bloomsled in it), with its background flusher off;
/// bloomsled's own flush adds an fsync of sled's log, and the main run fails on any key a
/// returned bloomsled flush covered that is gone.
pub fn sled_flush_survives_a_power_cut() -> Result<(), String> {
    let base = tempfile::tempdir().unwrap();
    let run = run_child(
        base.path(),
        |mnt| {
            let mut cmd = child::command(CHILD_ENV, mnt.join("db"), None);
            cmd.env("BLOOMSLED_POWER_CUT_KIND", "Plain")
                .env("BLOOMSLED_POWER_CUT_CHILD_SEED", "1")
                .env("BLOOMSLED_POWER_CUT_PLAIN_SLED", "1");
            cmd
        },
        "flushed",
        Duration::from_millis(2),
        Duration::from_secs(60),
        Fault::PowerCut(1),
    )
    .expect("the run");
    let flushed = last_flushed(&run.lines).ok_or("the child never flushed")?;
    // bloomsled's open, which completes sled's torn `conf` (sled's other power-cut bug,
    // src/store/repair/torn_conf.rs), so that this shows the flush bug alone.
    let db = config(&base.path().join("data/db"), Kind::Plain)
        .open()
        .map_err(|e| format!("open: {e}"))?;
    let lost = (0..flushed)
        .filter(|&i| db.get_unfiltered(key(i)).unwrap().is_none())
        .count();
    if lost > 0 {
        return Err(format!(
            "sled lost {lost} of the {flushed} keys its flush() covered"
        ));
    }
    Ok(())
}

/// The reproducer's child: plain sled 0.34, no background flusher, sled's `flush()` every
/// 25 keys or so, printing `flushed N` once it returned with keys `0..N` written.
pub fn plain_sled_child(dir: &std::path::Path, rng: &mut Rng) {
    let db = sled::Config::new()
        .path(dir)
        .flush_every_ms(None)
        .open()
        .unwrap();
    for i in 0u64.. {
        db.insert(key(i), vec![b'v'; rng.index(100)]).unwrap();
        if rng.below(25) == 0 {
            db.flush().unwrap();
            println!("flushed {}", i + 1);
        }
    }
}

/// What the boot id guards against, shown on the file system: after a power cut the
/// crash journal's pages are gone (never fsynced) while sled's flusher made keys durable,
/// so a journal trusted anyway (the reopen keeps the writer's boot id, as if the machine had
/// not rebooted) denies stored keys. Run with `BLOOMSLED_POWER_CUT_JOURNAL_REPRO=1 cargo
/// test --test power_cut`: it fails when it finds a false negative (the proof), and passes
/// only if no cut of this run happened to drop a journaled key sled kept.
pub fn journal_after_a_cut_in_the_same_boot() {
    let cuts: u64 = std::env::var("BLOOMSLED_POWER_CUTS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(20);
    let mut tally = Tally::default();
    let mut seeds = Rng(0x5A3E_B007);
    for _ in 0..cuts {
        let seed = seeds.next();
        case(Kind::Plain, seed, Fault::PowerCut(seed), true, &mut tally);
    }
    println!(
        "journal trusted after a power cut (same boot id): {} cuts, {} trees replayed, {} \
         false negatives",
        tally.cuts,
        tally.replays,
        tally.failed.len()
    );
    for f in &tally.failed {
        println!("  {f}");
    }
    if tally.failed.is_empty() {
        println!("power_cut: 1 passed, 0 failed");
    } else {
        println!("power_cut: 0 passed, 1 failed");
        std::process::exit(1);
    }
}

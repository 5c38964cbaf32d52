//! Crash torture: a child process (this binary, re-executed) writes at random — inserts,
//! removes, batches, compare-and-swap, transactions over two trees, snapshots, rebuilds —
//! and the parent kills it with SIGKILL at a random instant: mid-write, mid-batch,
//! mid-snapshot, mid-rebuild or mid-resize (the filters start small, so automatic resizes
//! run too), mid-open. Then the parent reopens the database and checks that every key sled
//! recovered is `may_contain` in its tree's filter.
//!
//! Cycles alternate between a plain-mode and a counting-mode database. In counting mode a
//! counter left short by a crash might not show as a false negative yet (another key still
//! holds it up), so the parent then removes a third of the keys and checks the rest again.
//!
//! `cargo test` runs 50 cycles; `cargo test --test crash -- --ignored` runs 1,000
//! (`BLOOMSLED_CRASH_CYCLES` overrides either).

mod common;

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use bloomsled::{Batch, Config, Db, RecoveryOutcome, Transactional};
use common::child;
use common::rng::Rng;

const CHILD_ENV: &str = "BLOOMSLED_CRASH_CHILD_DIR";
const SEED_ENV: &str = "BLOOMSLED_CRASH_SEED";
const COUNTING_ENV: &str = "BLOOMSLED_CRASH_COUNTING";

fn config(dir: &Path, counting: bool) -> Config {
    Config::new()
        .path(dir)
        .counting(counting)
        // Small and crowded, with small pages: many pages, many collisions.
        .expected_items(2_000)
        .bits_per_key(8.0)
        .snapshot_page_size(1024)
        .flush_every_ms(Some(5))
}

fn key(rng: &mut Rng) -> Vec<u8> {
    let k = rng.below(20_000);
    format!(
        "https://crawl.example.com/{k:05}/{}",
        "x".repeat((k % 40) as usize)
    )
    .into_bytes()
}

/// The child: random writes until killed.
fn child(dir: &Path, seed: u64, counting: bool) -> ! {
    let mut rng = Rng(seed);
    let db = config(dir, counting).open().expect("child open");
    let other = db.open_tree("other").expect("child open_tree");
    loop {
        match rng.below(100) {
            0..=39 => {
                db.insert(key(&mut rng), &b"v"[..]).unwrap();
            }
            40..=49 => {
                other.insert(key(&mut rng), &b"o"[..]).unwrap();
            }
            50..=59 => {
                db.remove(key(&mut rng)).unwrap();
            }
            60..=69 => {
                let mut b = Batch::default();
                for _ in 0..rng.below(50) {
                    if rng.below(4) == 0 {
                        b.remove(key(&mut rng));
                    } else {
                        b.insert(key(&mut rng), &b"b"[..]);
                    }
                }
                db.apply_batch(b).unwrap();
            }
            70..=79 => {
                let k = key(&mut rng);
                let _ = db
                    .compare_and_swap(k, None::<&[u8]>, Some(&b"c"[..]))
                    .unwrap();
            }
            80..=87 => {
                let (k1, k2) = (key(&mut rng), key(&mut rng));
                let r: bloomsled::transaction::TransactionResult<()> =
                    (&*db, &other).transaction(|(a, b)| {
                        a.insert(k1.clone(), &b"t"[..])?;
                        b.insert(k2.clone(), &b"t"[..])?;
                        Ok(())
                    });
                r.unwrap();
            }
            88..=89 => {
                db.rebuild().unwrap();
            }
            90..=93 => {
                db.snapshot().unwrap();
                if rng.below(2) == 0 {
                    other.snapshot().unwrap();
                }
            }
            94..=96 => {
                db.flush().unwrap();
            }
            _ => {
                let k = key(&mut rng);
                db.update_and_fetch(k, |old| match old {
                    Some(_) => None,
                    None => Some(vec![1]),
                })
                .unwrap();
            }
        }
    }
}

/// Reopens after a kill and checks the invariant; returns (keys checked, trees loaded,
/// trees replayed from their crash journals).
fn verify(dir: &Path, counting: bool) -> Result<(usize, usize, usize), String> {
    let db: Db = config(dir, counting)
        .open()
        .map_err(|e| format!("reopen failed: {e}"))?;
    let other = db
        .open_tree("other")
        .map_err(|e| format!("open_tree failed: {e}"))?;
    let mut checked = 0;
    let mut loaded = 0;
    let mut replayed = 0;
    for tree in [&*db, &other] {
        let report = tree.recovery_report();
        match report.outcome {
            RecoveryOutcome::Loaded => loaded += 1,
            // The filter must be in use at once: no scan behind it.
            RecoveryOutcome::Replayed { .. } if report.rebuilding.is_none() => replayed += 1,
            RecoveryOutcome::Rebuilt { .. } | RecoveryOutcome::Created => {}
            ref o => return Err(format!("unexpected outcome {o:?}")),
        }
        for kv in tree.iter().keys() {
            let k = kv.map_err(|e| format!("iter: {e}"))?;
            if !tree.may_contain(&k) {
                return Err(format!(
                    "FALSE NEGATIVE in {:?}: {:?} ({report:?})",
                    report.tree,
                    String::from_utf8_lossy(&k)
                ));
            }
            checked += 1;
        }
        if counting {
            let keys: Vec<_> = tree.iter().keys().collect::<Result<_, _>>().unwrap();
            for k in keys.iter().step_by(3) {
                tree.remove(k).map_err(|e| format!("remove: {e}"))?;
            }
            for (i, k) in keys.iter().enumerate() {
                if i % 3 != 0 && !tree.may_contain(k) {
                    return Err(format!(
                        "SHORT COUNTER in {:?}: {:?} denied after removing other keys \
                         ({report:?})",
                        report.tree,
                        String::from_utf8_lossy(k)
                    ));
                }
            }
        }
    }
    Ok((checked, loaded, replayed))
}

fn main() {
    if let Some(dir) = child::role(CHILD_ENV) {
        let seed = std::env::var(SEED_ENV)
            .ok()
            .and_then(|s| s.parse().ok())
            .unwrap_or(1);
        child(
            Path::new(&dir),
            seed,
            std::env::var_os(COUNTING_ENV).is_some(),
        );
    }
    let args: Vec<String> = std::env::args().skip(1).collect();
    // Honour a name filter like the standard harness: run only if it matches.
    if let Some(filter) = args.iter().find(|a| !a.starts_with('-')) {
        if !"crash_torture".contains(filter.as_str()) {
            println!("crash: 0 passed, 0 failed");
            return;
        }
    }
    let ignored = args
        .iter()
        .any(|a| a == "--ignored" || a == "--include-ignored");
    let cycles: u64 = std::env::var("BLOOMSLED_CRASH_CYCLES")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(if ignored { 1_000 } else { 50 });

    let dirs = [tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap()];
    let mut rng = Rng(0xC0FFEE);
    let started = Instant::now();
    let (mut passed, mut failed, mut keys, mut loads) = (0u64, 0u64, 0usize, 0usize);
    let mut replays = 0usize;
    for cycle in 0..cycles {
        let counting = cycle % 2 == 1;
        let dir = &dirs[usize::from(counting)];
        let mut cmd = child::command(CHILD_ENV, dir.path(), None);
        if counting {
            cmd.env(COUNTING_ENV, "1");
        }
        let mut child = cmd
            .env(SEED_ENV, rng.next().to_string())
            .stdout(Stdio::null())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("spawn child");
        // From right after exec (often mid-open) to well into the write loop.
        std::thread::sleep(Duration::from_millis(rng.below(250)));
        if let Ok(Some(status)) = child.try_wait() {
            eprintln!("cycle {cycle}: child exited by itself: {status}");
            failed += 1;
            continue;
        }
        child::kill(&mut child);
        // With BLOOMSLED_CRASH_EVIDENCE set, the database as the kill left it (before the
        // reopen changes it) is kept for a failing cycle.
        let evidence = std::env::var("BLOOMSLED_CRASH_EVIDENCE").ok().map(|to| {
            let to = Path::new(&to).join(format!("cycle-{cycle}"));
            let _ = Command::new("cp")
                .arg("-a")
                .arg(dir.path())
                .arg(&to)
                .status();
            to
        });
        match verify(dir.path(), counting) {
            Ok((n, l, r)) => {
                if let Some(to) = &evidence {
                    let _ = std::fs::remove_dir_all(to);
                }
                passed += 1;
                keys += n;
                loads += l;
                replays += r;
            }
            Err(e) => {
                eprintln!("cycle {cycle}: {e}");
                failed += 1;
                if let Some(to) = evidence {
                    eprintln!("cycle {cycle}: database copied to {}", to.display());
                    if failed >= 3 {
                        break;
                    }
                }
            }
        }
    }
    println!(
        "crash torture: {cycles} kill -9 cycles (half plain, half counting) in {:.1?}, {keys} \
         recovered keys checked, {loads} trees loaded from snapshot, {replays} replayed from \
         their crash journals (rest rebuilt)",
        started.elapsed()
    );
    println!("crash: {passed} passed, {failed} failed");
    if failed > 0 {
        std::process::exit(1);
    }
}

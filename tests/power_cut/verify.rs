//! The checks after each fault of `tests/power_cut.rs`: reopen what the disk holds and
//! hold it against what the child had flushed (no false negative, no stale snapshot
//! trusted, a window's ring whole).

use std::path::Path;

use bloomsled::clock::ManualClock;
use bloomsled::{Config, Db};

use super::{config, key, removed, window_config, Kind, G, PER_ROUND, T0, W};

/// What one check found wrong: a false negative or another fault of bloomsled's, or a key
/// a returned flush covered that is gone (also a failure: bloomsled's flush fsyncs sled's
/// log; counted apart, as the "sled losses" column).
#[derive(Debug)]
#[allow(dead_code)] // the messages are read through Debug
pub(crate) enum Finding {
    Bloomsled(String),
    Sled(String),
}

/// Opens what the disk holds after the fault and checks the invariants; returns the keys
/// checked and the trees replayed from their crash journals. After a cut (`reboot`) the
/// process believes in a new boot id, as after a real power loss, and a replay is a fault.
pub(crate) fn verify(
    dir: &Path,
    kind: Kind,
    flushed: Option<u64>,
    reboot: bool,
) -> Result<(u64, u64), Finding> {
    if kind == Kind::Window {
        return verify_window(dir, flushed).map(|n| (n, 0));
    }
    let db: Db = config(dir, kind)
        .open()
        .map_err(|e| Finding::Bloomsled(format!("reopen failed: {e}")))?;
    let other = db
        .open_tree("other")
        .map_err(|e| Finding::Bloomsled(format!("open_tree failed: {e}")))?;
    flushed_keys_kept(&db, &other, kind, flushed)?;
    let mut checked = 0;
    let mut replayed = 0;
    for tree in [&*db, &other] {
        let report = tree.recovery_report();
        if report.replayed() {
            if reboot {
                return Err(Finding::Bloomsled(format!(
                    "a crash journal was replayed after a power cut ({report:?})"
                )));
            }
            replayed += 1;
        }
        let keys: Vec<_> = tree
            .iter()
            .keys()
            .collect::<Result<_, _>>()
            .map_err(|e| Finding::Bloomsled(format!("iter: {e}")))?;
        for k in &keys {
            if !tree.may_contain(k) {
                return Err(Finding::Bloomsled(format!(
                    "FALSE NEGATIVE in {:?}: {:?} ({report:?})",
                    report.tree,
                    String::from_utf8_lossy(k)
                )));
            }
            checked += 1;
        }
        if kind == Kind::Counting {
            for k in keys.iter().step_by(3) {
                tree.remove(k)
                    .map_err(|e| Finding::Bloomsled(format!("remove: {e}")))?;
            }
            for (n, k) in keys.iter().enumerate() {
                if n % 3 != 0 && !tree.may_contain(k) {
                    return Err(Finding::Bloomsled(format!(
                        "SHORT COUNTER in {:?}: {:?} ({report:?})",
                        report.tree,
                        String::from_utf8_lossy(k)
                    )));
                }
            }
        }
    }
    db.close()
        .map_err(|e| Finding::Bloomsled(format!("close: {e}")))?;
    Ok((checked, replayed))
}

/// bloomsled's promise: every key a returned flush covered (`0..flushed`) is in the store
/// (batches and transactions put some keys in `other`, so look in both). In counting mode
/// the keys the writer removes (`removed`) are skipped: a removal after the flush may be
/// durable too. Checked before anything is removed here.
fn flushed_keys_kept(
    db: &Db,
    other: &bloomsled::Tree,
    kind: Kind,
    flushed: Option<u64>,
) -> Result<(), Finding> {
    let Some(n) = flushed else { return Ok(()) };
    let mut lost = Vec::new();
    for i in 0..n {
        if kind == Kind::Counting && removed(i) {
            continue;
        }
        let k = key(i);
        let there = db
            .get_unfiltered(&k)
            .map_err(|e| Finding::Bloomsled(e.to_string()))?
            .is_some()
            || other
                .get_unfiltered(&k)
                .map_err(|e| Finding::Bloomsled(e.to_string()))?
                .is_some();
        if !there {
            lost.push(i);
        }
    }
    match lost.first() {
        None => Ok(()),
        Some(first) => Err(Finding::Sled(format!(
            "{} of the {n} keys a returned flush covered are gone (the first: key {first})",
            lost.len()
        ))),
    }
}

fn verify_window(dir: &Path, flushed: Option<u64>) -> Result<u64, Finding> {
    let cur = flushed.map_or(0, |r| r + 1);
    let clock = ManualClock::new(T0 + cur * W);
    let db = Config::new()
        .path(dir)
        .open()
        .map_err(|e| Finding::Bloomsled(format!("reopen failed: {e}")))?;
    let w = db
        .open_window("cut", window_config(&clock))
        .map_err(|e| Finding::Bloomsled(format!("window open failed: {e}")))?;
    let mut checked = 0;
    // Every key a generation tree holds is in the window's filter.
    for (_, tree) in w
        .generation_trees()
        .map_err(|e| Finding::Bloomsled(format!("generation_trees: {e}")))?
    {
        for k in tree.iter().keys() {
            let k = k.map_err(|e| Finding::Bloomsled(format!("iter: {e}")))?;
            if !w.may_contain(&k) {
                return Err(Finding::Bloomsled(format!(
                    "FALSE NEGATIVE in the window: {:?}",
                    String::from_utf8_lossy(&k)
                )));
            }
            checked += 1;
        }
    }
    // Every flushed round inside the horizon is found.
    if let Some(last) = flushed {
        for round in 0..=last {
            if cur >= round + u64::from(G) {
                continue;
            }
            for i in 0..PER_ROUND {
                let k = key(round * PER_ROUND + i);
                let found = w
                    .contains_key(&k)
                    .map_err(|e| Finding::Bloomsled(format!("contains_key: {e}")))?;
                if !found {
                    return Err(Finding::Sled(format!(
                        "window lost flushed round {round} key {i} (rounds 0..={last} flushed)"
                    )));
                }
            }
        }
    }
    drop(w);
    db.close()
        .map_err(|e| Finding::Bloomsled(format!("close: {e}")))?;
    Ok(checked)
}

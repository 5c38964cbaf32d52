//! Power cuts on the project's file system that forgets (`bloomsled-powercut`): a child
//! process commits transactions to a `bloomsled-redb` database on the mount (durable and
//! not, clean closes between runs, filters growing by rebuild as keys pile up) and the power
//! is cut at a random instant 0–250 ms after its first open (seeded, printed): every write
//! no fsync covered is dropped, and every create or rename no folder fsync made durable is
//! undone — by ext4's default
//! ordering in half the cuts, by the letter of POSIX in the other half. Every sixth cut
//! starts a new database file, so the cut often finds a file whose name is young. The parent
//! then opens what a reboot would find and checks:
//!
//! * every key of every `Durability::Immediate` commit that returned (the child prints it
//!   after `commit` returns), in this run and every earlier run on the same file, is found
//!   by `get` and by `Database::get_latest` — a file that vanished with such a key in it is
//!   a failure;
//! * every key the tables hold is found by `get`: no false negative, so no filter that the
//!   cut made stale was trusted.
//!
//! The child also removes keys of its last durable commit now and then (saying so before
//! that commit, so those keys are no longer owed), and every other database file is in
//! counting mode (`Builder::set_counting`: removals counted out of the filter, counting
//! filters stored at a clean close), opened so by the parent too: a counting filter that
//! a cut left behind its data must never be trusted.
//!
//! One run in ten ends with `kill -9` and no cut instead: the control. Without FUSE the test
//! skips loudly, or fails under `CI=true`. `BLOOMSLED_REDB_POWER_CUTS` sets the runs (default
//! 30, 240 under `BLOOMSLED_CI_FULL`), `BLOOMSLED_REDB_POWER_CUT_SEED` the seed.

mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use bloomsled_powercut::{Fault, Model, run_child_with};
use bloomsled_redb::{
    Builder, Database, Durability, ReadableDatabase, ReadableTable, TableDefinition, TableError,
};
use common::rng::Rng;

const CHILD_ENV: &str = "BLOOMSLED_REDB_POWER_CUT_CHILD";
const TABLES: [TableDefinition<&str, u64>; 3] = [
    TableDefinition::new("a"),
    TableDefinition::new("b"),
    TableDefinition::new("c"),
];

/// Opens (or creates) the database at `path`, in counting mode if `counting`.
fn open(path: &Path, counting: bool) -> Result<Database, bloomsled_redb::DatabaseError> {
    Builder::new().set_counting(counting).create(path)
}

/// The child: transactions on `path` until the power goes. Prints `open` once the first
/// open returned, `w <table> <first> <count>` after a durable commit of keys
/// `<run>/<first..first+count>` returned, `x <table> <first> <count>` before the commit
/// of a removal of such keys (no longer owed from then on), `s` before a clean close.
fn child(path: &Path, run: u64, seed: u64, counting: bool) -> ! {
    let mut rng = Rng(seed);
    let mut next = 0u64;
    // The last durable commit's table, first key and count: what a removal takes from.
    let mut last: Option<(usize, u64, u64)> = None;
    loop {
        let db = open(path, counting).unwrap();
        println!("open");
        for _ in 0..rng.below(30) + 1 {
            if let Some((table, first, count)) = last.filter(|_| rng.below(5) == 0) {
                let n = rng.below(count) + 1;
                let w = db.begin_write().unwrap();
                {
                    let mut t = w.open_table(TABLES[table]).unwrap();
                    for i in first..first + n {
                        t.remove(format!("{run}/{i}").as_str()).unwrap();
                    }
                }
                println!("x {table} {first} {n}");
                w.commit().unwrap();
                last = None;
                continue;
            }
            let mut w = db.begin_write().unwrap();
            let durable = rng.below(4) != 0;
            if !durable {
                w.set_durability(Durability::None).unwrap();
            }
            let table = rng.below(3) as usize;
            // Now and then a large commit, so filters outgrow their size and rebuild.
            let count = if rng.below(8) == 0 {
                1_000
            } else {
                rng.below(40) + 1
            };
            {
                let mut t = w.open_table(TABLES[table]).unwrap();
                for i in next..next + count {
                    t.insert(format!("{run}/{i}").as_str(), i).unwrap();
                }
            }
            if rng.below(12) == 0 {
                w.abort().unwrap();
                continue;
            }
            w.commit().unwrap();
            if durable {
                println!("w {table} {next} {count}");
                last = Some((table, next, count));
            }
            next += count;
        }
        println!("s");
        drop(db);
    }
}

/// The durable keys a run's printed lines vouch for, per table (a removal's keys are no
/// longer owed once the child said it would commit it).
fn durable_keys(run: u64, lines: &[String], into: &mut BTreeMap<usize, BTreeSet<String>>) {
    for line in lines {
        let f: Vec<&str> = line.split_whitespace().collect();
        if let [op @ ("w" | "x"), t, first, count] = f.as_slice() {
            let (first, count): (u64, u64) = (first.parse().unwrap(), count.parse().unwrap());
            let keys = into.entry(t.parse().unwrap()).or_default();
            let range = (first..first + count).map(|i| format!("{run}/{i}"));
            if *op == "w" {
                keys.extend(range);
            } else {
                for k in range {
                    keys.remove(&k);
                }
            }
        }
    }
}

/// Opens what a reboot finds at `path` and checks both rules; returns the keys checked.
fn verify(
    path: &Path,
    durable: &BTreeMap<usize, BTreeSet<String>>,
    counting: bool,
) -> Result<usize, String> {
    if !path.exists() {
        let n: usize = durable.values().map(BTreeSet::len).sum();
        return if n == 0 {
            Ok(0)
        } else {
            Err(format!("the database file is gone, with {n} durable keys"))
        };
    }
    let db = open(path, counting).map_err(|e| format!("reopen: {e:?}"))?;
    let r = db.begin_read().map_err(|e| format!("begin_read: {e:?}"))?;
    let mut checked = 0;
    for (i, def) in TABLES.iter().enumerate() {
        let want = durable.get(&i);
        let t = match r.open_table(*def) {
            Ok(t) => t,
            Err(TableError::TableDoesNotExist(_)) if want.is_none_or(BTreeSet::is_empty) => {
                continue;
            }
            Err(e) => return Err(format!("table {i}: {e:?}")),
        };
        for key in want.into_iter().flatten() {
            let found = t.get(key.as_str()).map_err(|e| format!("get: {e:?}"))?;
            let latest = db
                .get_latest(*def, key.as_str())
                .map_err(|e| format!("{e:?}"))?;
            if found.is_none() || latest.is_none() {
                return Err(format!(
                    "table {i}: durable key {key} lost (get {}, get_latest {})",
                    found.is_some(),
                    latest.is_some()
                ));
            }
            checked += 1;
        }
        for entry in t.iter().map_err(|e| format!("iter: {e:?}"))? {
            let (k, _) = entry.map_err(|e| format!("iter: {e:?}"))?;
            let key = k.value();
            if t.get(key).map_err(|e| format!("get: {e:?}"))?.is_none() {
                return Err(format!(
                    "table {i}: stored key {key} denied (a false negative)"
                ));
            }
            checked += 1;
        }
    }
    Ok(checked)
}

fn runs() -> u64 {
    if let Ok(n) = std::env::var("BLOOMSLED_REDB_POWER_CUTS") {
        return n.parse().expect("BLOOMSLED_REDB_POWER_CUTS: a number");
    }
    // 240 runs: about 216 cuts and 24 kills, past the 200 cuts issue 58 asks for.
    if std::env::var_os("BLOOMSLED_CI_FULL").is_some() {
        240
    } else {
        30
    }
}

fn main() {
    if let Ok(path) = std::env::var(CHILD_ENV) {
        let run = std::env::var("BLOOMSLED_REDB_POWER_CUT_RUN")
            .unwrap()
            .parse()
            .unwrap();
        let seed = std::env::var("BLOOMSLED_REDB_POWER_CUT_CHILD_SEED")
            .unwrap()
            .parse()
            .unwrap();
        let counting = std::env::var_os("BLOOMSLED_REDB_POWER_CUT_COUNTING").is_some();
        child(Path::new(&path), run, seed, counting);
    }
    let args: Vec<String> = std::env::args().skip(1).collect();
    if args.iter().any(|a| a == "--list") {
        println!("power_cut: test");
        return;
    }
    if let Some(filter) = args.iter().find(|a| !a.starts_with('-'))
        && !"power_cut".contains(filter.as_str())
    {
        println!("power_cut: 0 passed, 0 failed");
        return;
    }
    if let Err(why) = bloomsled_powercut::available() {
        if std::env::var("CI").as_deref() == Ok("true") {
            eprintln!("power_cut: FAILED: no FUSE on this machine under CI=true: {why}");
            std::process::exit(1);
        }
        eprintln!(
            "\n\n*** redb power_cut: SKIPPED, this machine cannot mount FUSE: {why} ***\n\
             *** (apt-get install -y fuse3; under CI=true this fails) ***\n"
        );
        println!("power_cut: 0 passed, 0 failed");
        return;
    }
    let seed = std::env::var("BLOOMSLED_REDB_POWER_CUT_SEED")
        .ok()
        .map(|s| s.parse().expect("BLOOMSLED_REDB_POWER_CUT_SEED: a number"))
        .unwrap_or_else(|| {
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap()
                .as_nanos() as u64
        });
    println!("redb power_cut: seed {seed} (BLOOMSLED_REDB_POWER_CUT_SEED={seed} reproduces it)");
    let base =
        std::env::temp_dir().join(format!("bloomsled-redb-power-cut-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&base);
    let exe = std::env::current_exe().unwrap();
    let mut rng = Rng(seed);
    let start = Instant::now();
    let (mut cuts, mut posix, mut kills, mut checked, mut failures) = (0, 0, 0, 0usize, 0);
    let mut durable = BTreeMap::<String, BTreeMap<usize, BTreeSet<String>>>::new();
    // A new file every sixth run, and after a failure (whose losses would repeat).
    let mut generation = 0;
    for run in 0..runs() {
        if run > 0 && run % 6 == 0 {
            generation += 1;
        }
        let file = format!("db-{generation}.redb");
        // Every other file in counting mode, opened so by the child and the check alike.
        let counting = generation % 2 == 1;
        let model = if rng.below(2) == 1 {
            Model::Posix
        } else {
            Model::Ext4Ordered
        };
        let fault = if run % 10 == 9 {
            Fault::Kill
        } else {
            Fault::PowerCut(rng.next())
        };
        let child_seed = rng.next();
        let then = Duration::from_millis(rng.below(250));
        let ended = run_child_with(
            model,
            &base,
            |mnt| {
                let mut c = Command::new(&exe);
                c.env(CHILD_ENV, mnt.join(&file))
                    .env("BLOOMSLED_REDB_POWER_CUT_RUN", run.to_string())
                    .env(
                        "BLOOMSLED_REDB_POWER_CUT_CHILD_SEED",
                        child_seed.to_string(),
                    );
                if counting {
                    c.env("BLOOMSLED_REDB_POWER_CUT_COUNTING", "1");
                }
                c
            },
            "open",
            then,
            Duration::from_secs(60),
            fault,
        )
        .unwrap_or_else(|e| panic!("run {run}: {e}"));
        assert!(
            ended.reached,
            "run {run}: the child never opened its database"
        );
        match fault {
            Fault::Kill => kills += 1,
            Fault::PowerCut(_) => {
                cuts += 1;
                posix += u64::from(model == Model::Posix);
            }
        }
        let keys = durable.entry(file.clone()).or_default();
        durable_keys(run, &ended.lines, keys);
        match verify(&base.join("data").join(&file), keys, counting) {
            Ok(n) => checked += n,
            Err(e) => {
                failures += 1;
                generation += 1;
                println!("run {run} ({model:?}, {fault:?}, {then:?} after open, {file}): {e}");
            }
        }
    }
    let _ = std::fs::remove_dir_all(&base);
    println!(
        "redb power_cut: {cuts} cuts ({posix} by POSIX's rule), {kills} kill -9 controls, \
         {checked} keys checked, {failures} failures in {:.1?}",
        start.elapsed()
    );
    // CI's full pass promises issue 58's 200 cuts: fewer is a failure, not a quiet pass.
    let short = std::env::var_os("BLOOMSLED_CI_FULL").is_some()
        && std::env::var_os("BLOOMSLED_REDB_POWER_CUTS").is_none()
        && cuts < 200;
    if short {
        println!("redb power_cut: only {cuts} cuts in the full pass (200 promised)");
    }
    if failures > 0 || short {
        println!("power_cut: 0 passed, 1 failed");
        std::process::exit(1);
    }
    println!("power_cut: 1 passed, 0 failed");
}

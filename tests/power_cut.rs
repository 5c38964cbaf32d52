//! Power cuts, proven on a file system that forgets (the `bloomsled-powercut` crate): a
//! child process writes to a database on the mount — plain or counting inserts, batches
//! and transactions, snapshots, rebuilds (explicit, and the one an open after a crash runs
//! in the background), window rotations — and the power is cut at a random instant (seeded,
//! printed): every write not fsynced is dropped, every folder change not made durable is
//! undone (by ext4's default ordering, or in one cut of three by the letter of POSIX). The parent then opens what a reboot would find and checks:
//! - every key sled kept is `may_contain` (no false negative, so no stale snapshot was
//!   trusted), and in counting mode still is after a third of the keys are removed;
//! - every key the child saw a user-facing flush return for (`Db::flush`, `Tree::flush`,
//!   `flush_async`, a transaction's `flush()`, `Window::flush`) is in the store: bloomsled's
//!   flush is sled's plus an fsync of sled's log, so a loss is a failure (the "sled losses"
//!   column must read 0; half the cases run with sled's background flusher off, whose
//!   `sync_all` would otherwise hide a flush that is not durable);
//! - a window opens with its ring whole and finds every flushed key inside its horizon.
//!
//! The same harness with `kill -9` and no cut is the control. Without FUSE the test
//! skips loudly, or fails under `CI=true`. `BLOOMSLED_POWER_CUTS` sets the cuts per kind of
//! writer (default 12, 35 under `BLOOMSLED_CI_FULL`), `BLOOMSLED_POWER_CUT_SEED` the first
//! seed.
//!
//! To hunt a failing control: `BLOOMSLED_POWER_CUT_CONTROLS=Snapshots,Plain` runs only
//! `kill -9` controls of those kinds, `BLOOMSLED_POWER_CUTS` of each (seeded as above), and
//! with `BLOOMSLED_POWER_CUT_NO_FUSE=1` on a plain folder (no mount), to tell a FUSE
//! artifact from a bug in bloomsled or sled. `BLOOMSLED_POWER_CUT_EVIDENCE=<dir>` keeps a
//! copy of each database that fails.

mod common;
// The opt-in reproducers (sled's flush; a journal trusted after a cut).
#[path = "power_cut/repro.rs"]
mod repro;
#[path = "power_cut/torn_conf.rs"]
mod torn_conf;
#[path = "power_cut/verify.rs"]
mod verify;

use verify::{verify, Finding};

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use bloomsled::clock::ManualClock;
use bloomsled::persist::set_boot_id;
use bloomsled::window::WindowConfig;
use bloomsled::{Batch, Config, Transactional, TreeConfig};
use bloomsled_powercut::{run_child, run_child_with, Fault, Model};
use common::child;
use common::rng::Rng;

const CHILD_ENV: &str = "BLOOMSLED_POWER_CUT_CHILD";

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Plain,
    Counting,
    Batches,
    Snapshots,
    Rebuilds,
    Window,
}

const KINDS: [Kind; 6] = [
    Kind::Plain,
    Kind::Counting,
    Kind::Batches,
    Kind::Snapshots,
    Kind::Rebuilds,
    Kind::Window,
];

impl Kind {
    fn parse(s: &str) -> Kind {
        *KINDS
            .iter()
            .find(|k| format!("{k:?}") == s)
            .expect("a kind")
    }
}

fn config(dir: &Path, kind: Kind) -> Config {
    Config::new()
        .path(dir)
        .counting(kind == Kind::Counting)
        .expected_items(2_000)
        .bits_per_key(8.0)
        .snapshot_page_size(1024)
        .flush_every_ms(flusher())
}

/// sled's background flusher (a real `sync_all` every 10 ms) in the child, or none (the
/// case says, by `BLOOMSLED_POWER_CUT_FLUSHER`): without it only the user's flushes make
/// the keys durable.
fn flusher() -> Option<u64> {
    match std::env::var("BLOOMSLED_POWER_CUT_FLUSHER").as_deref() {
        Ok("off") => None,
        _ => Some(10),
    }
}

/// The user-facing flushes the child calls, in turn: each must be durable on return.
fn flush_any(db: &bloomsled::Db, other: &bloomsled::Tree, how: u64, next: &mut u64) {
    match how % 4 {
        0 => drop(db.flush().unwrap()),
        1 => drop(other.flush().unwrap()),
        2 => {
            let rt = tokio::runtime::Builder::new_current_thread()
                .build()
                .unwrap();
            rt.block_on(db.flush_async()).unwrap();
        }
        _ => {
            // A transaction that writes one more key and asks for a flush at its commit.
            let k = key(*next);
            let r: bloomsled::transaction::TransactionResult<()> = db.transaction(|tx| {
                tx.insert(k.clone(), &b"f"[..])?;
                tx.flush();
                Ok(())
            });
            r.unwrap();
            *next += 1;
        }
    }
}

fn key(i: u64) -> Vec<u8> {
    format!(
        "https://cut.example.com/{i:06}/{}",
        "p".repeat((i % 37) as usize)
    )
    .into_bytes()
}

/// Key `i` is removed (by the counting writer) when the writer reaches `i + 7`.
fn removed(i: u64) -> bool {
    i.is_multiple_of(5)
}

// Window: generations of 1 s, 3 of them, a round of 50 keys per generation.
const W: u64 = 1_000;
const G: u32 = 3;
const T0: u64 = 1_700_000_000_000;
const PER_ROUND: u64 = 50;

fn window_config(clock: &ManualClock) -> WindowConfig {
    WindowConfig::new(Duration::from_millis(W * u64::from(G)), G)
        .tree_config(TreeConfig::new().expected_items(500))
        .clock(clock.clone())
}

/// The child: writes key 0, 1, 2, … in the way its kind says, and prints `flushed N` each
/// time a `flush()` returned with keys `0..N` written, until the power goes.
fn child(dir: &Path, kind: Kind, seed: u64) {
    let mut rng = Rng(seed);
    println!("start");
    if std::env::var_os("BLOOMSLED_POWER_CUT_PLAIN_SLED").is_some() {
        return repro::plain_sled_child(dir, &mut rng);
    }
    if kind == Kind::Window {
        let db = Config::new()
            .path(dir)
            .flush_every_ms(flusher())
            .open()
            .unwrap();
        let clock = ManualClock::new(T0);
        let w = db.open_window("cut", window_config(&clock)).unwrap();
        for round in 0.. {
            clock.set(T0 + round * W);
            for i in 0..PER_ROUND {
                w.insert(key(round * PER_ROUND + i), &b"w"[..]).unwrap();
            }
            w.flush().unwrap();
            println!("flushed {round}");
        }
        return;
    }
    let db = config(dir, kind).open().unwrap();
    let other = db.open_tree("other").unwrap();
    // A snapshot first, so that every kind's writes go to crash journals: the kill -9
    // controls replay them; after a cut (another boot) they must be refused.
    if db.stats().filter_in_use {
        db.snapshot().unwrap();
        other.snapshot().unwrap();
    }
    let mut i = 0u64;
    loop {
        match kind {
            Kind::Batches if rng.below(2) == 0 => {
                let mut b = Batch::default();
                for _ in 0..1 + rng.below(20) {
                    b.insert(key(i), &b"b"[..]);
                    i += 1;
                }
                db.apply_batch(b).unwrap();
            }
            Kind::Batches => {
                let (k1, k2) = (key(i), key(i + 1));
                i += 2;
                let r: bloomsled::transaction::TransactionResult<()> =
                    (&*db, &other).transaction(|(a, b)| {
                        a.insert(k1.clone(), &b"t"[..])?;
                        b.insert(k2.clone(), &b"t"[..])?;
                        Ok(())
                    });
                r.unwrap();
            }
            _ => {
                db.insert(key(i), vec![b'v'; rng.index(100)]).unwrap();
                i += 1;
            }
        }
        if kind == Kind::Counting && i >= 7 && removed(i - 7) {
            db.remove(key(i - 7)).unwrap();
        }
        if kind == Kind::Snapshots && rng.below(40) == 0 {
            db.snapshot().unwrap();
            other.snapshot().unwrap();
        }
        if kind == Kind::Rebuilds && rng.below(300) == 0 {
            db.rebuild().unwrap();
        }
        if rng.below(25) == 0 {
            flush_any(&db, &other, rng.next(), &mut i);
            println!("flushed {i}");
        }
    }
}

fn last_flushed(lines: &[String]) -> Option<u64> {
    lines
        .iter()
        .rev()
        .find_map(|l| l.split("flushed ").nth(1))
        .map(|n| n.parse().unwrap())
}

#[derive(Default)]
struct Tally {
    cuts: u64,
    kills: u64,
    /// Trees the kill -9 controls replayed from their crash journals.
    replays: u64,
    keys: u64,
    undone: u64,
    failed: Vec<String>,
    sled: Vec<String>,
    /// Databases whose sled crash debris open repaired (a torn `conf` completed, a torn
    /// snapshot moved aside: src/store/repair/).
    repaired: u64,
}

/// One case: a fresh database, a child on the mount ended by `fault`, then the checks. The
/// rebuild kind first crashes a child (kill -9) so that the next child's open rebuilds in
/// the background while it writes, and the cut can land in that rebuild.
fn case(kind: Kind, seed: u64, fault: Fault, same_boot: bool, tally: &mut Tally) {
    let base = tempfile::tempdir().unwrap();
    let data = base.path().join("data");
    let mut rng = Rng(seed);
    // Half the cases without sled's background flusher (see `flusher`).
    let flusher_state = if seed.is_multiple_of(2) { "off" } else { "on" };
    let spawn = |mnt: &Path, seed: u64| {
        let mut cmd = child::command(CHILD_ENV, mnt.join("db"), None);
        cmd.env("BLOOMSLED_POWER_CUT_KIND", format!("{kind:?}"))
            .env("BLOOMSLED_POWER_CUT_CHILD_SEED", seed.to_string())
            .env("BLOOMSLED_POWER_CUT_FLUSHER", flusher_state);
        cmd
    };
    let limit = Duration::from_secs(60);
    // A control on a plain folder (no mount), to tell a FUSE artifact from a real bug.
    let plain = fault == Fault::Kill && std::env::var_os("BLOOMSLED_POWER_CUT_NO_FUSE").is_some();
    let kill_plain = |seed: u64, marker: &str, then: Duration| {
        std::fs::create_dir_all(&data).unwrap();
        let k = child::kill_after(spawn(&data, seed), marker, then, Some(limit));
        bloomsled_powercut::ChildRun {
            lines: k.lines,
            cut: None,
            reached: k.reached,
        }
    };
    if kind == Kind::Rebuilds {
        let first = rng.next();
        let then = Duration::from_millis(50 + rng.below(150));
        let run = if plain {
            kill_plain(first, "flushed", then)
        } else {
            run_child(
                base.path(),
                |mnt| spawn(mnt, first),
                "flushed",
                then,
                limit,
                Fault::Kill,
            )
            .expect("the first run")
        };
        assert!(run.reached, "seed {seed}: the first child never flushed");
    }
    let child_seed = rng.next();
    // From the child's start (often inside open) to well into its writes.
    let then = Duration::from_millis(rng.below(400));
    // One cut in three on the letter of POSIX (a name durable only by its folder's fsync),
    // the rest on ext4's default ordering.
    let model = if rng.below(3) == 0 {
        Model::Posix
    } else {
        Model::Ext4Ordered
    };
    // A window's first rotation comes after its first flushed round.
    let marker = if kind == Kind::Window {
        "flushed"
    } else {
        "start"
    };
    let run = if plain {
        kill_plain(child_seed, marker, then)
    } else {
        run_child_with(
            model,
            base.path(),
            |mnt| spawn(mnt, child_seed),
            marker,
            then,
            limit,
            fault,
        )
        .expect("the power-cut run")
    };
    if !run.reached {
        tally
            .failed
            .push(format!("{kind:?} seed {seed}: the child never started"));
        return;
    }
    match fault {
        Fault::PowerCut(_) => {
            tally.cuts += 1;
            let c = run.cut.as_ref().expect("a cut report");
            tally.undone += (c.writes_undone + c.names_undone) as u64;
        }
        Fault::Kill => tally.kills += 1,
    }
    let flushed = last_flushed(&run.lines);
    // A real power cut reboots: the reopen believes in another boot id (unless the
    // journal reproducer keeps it, to show what the boot id guards against).
    let reboot = matches!(fault, Fault::PowerCut(_)) && !same_boot;
    set_boot_id(reboot.then(|| {
        let mut id = [0u8; 16];
        id[..8].copy_from_slice(&seed.to_le_bytes());
        id[8] = 0xB0;
        id
    }));
    let verdict = verify(&data.join("db"), kind, flushed, reboot);
    set_boot_id(None);
    let debris = ["sled-torn-conf", "sled-torn-snapshots"];
    if debris.iter().any(|d| {
        data.join("db")
            .join(bloomsled::persist::DIR_NAME)
            .join(d)
            .exists()
    }) {
        tally.repaired += 1;
    }
    match verdict {
        Ok((n, replays)) => {
            tally.keys += n;
            tally.replays += replays;
        }
        Err(f) => {
            let keep = std::env::var("BLOOMSLED_POWER_CUT_EVIDENCE").ok();
            let mut where_ = String::new();
            if let Some(to) = keep {
                let to = PathBuf::from(to).join(format!("{kind:?}-{seed}"));
                let _ = Command::new("cp").arg("-a").arg(&data).arg(&to).status();
                where_ = format!(" (disk copied to {})", to.display());
            }
            let line = format!(
                "{kind:?} seed {seed} {fault:?} {model:?} then {then:?}: {f:?}{where_} {:?}",
                run.cut
            );
            eprintln!("{line}");
            match f {
                Finding::Bloomsled(_) => tally.failed.push(line),
                Finding::Sled(_) => tally.sled.push(line),
            }
        }
    }
}

fn main() {
    if let Some(dir) = child::role(torn_conf::CONF_CHILD_ENV) {
        torn_conf::conf_child(Path::new(&dir));
        return;
    }
    if let Some(dir) = child::role(CHILD_ENV) {
        let kind = Kind::parse(&std::env::var("BLOOMSLED_POWER_CUT_KIND").unwrap());
        let seed = std::env::var("BLOOMSLED_POWER_CUT_CHILD_SEED")
            .unwrap()
            .parse()
            .unwrap();
        child(Path::new(&dir), kind, seed);
        return;
    }
    let args: Vec<String> = std::env::args().skip(1).collect();
    if let Some(filter) = args.iter().find(|a| !a.starts_with('-')) {
        if !"power_cut".contains(filter.as_str()) {
            println!("power_cut: 0 passed, 0 failed");
            return;
        }
    }
    if args.iter().any(|a| a == "--list") {
        println!("power_cut: test");
        return;
    }
    // Deterministic, before any mount: the shape the failing control left.
    for (name, check) in [
        (
            "a_kill_inside_sleds_creation_of_conf_does_not_brick_the_folder",
            torn_conf::a_kill_inside_sleds_creation_of_conf_does_not_brick_the_folder as fn() -> _,
        ),
        (
            "a_real_kill_between_sleds_two_writes_of_conf",
            torn_conf::a_real_kill_between_sleds_two_writes_of_conf,
        ),
    ] {
        if let Err(e) = check() {
            println!("{name}: {e}");
            println!("power_cut: 0 passed, 1 failed");
            std::process::exit(1);
        }
    }
    let sled_repro = std::env::var_os("BLOOMSLED_POWER_CUT_SLED_REPRO").is_some();
    let no_fuse = std::env::var_os("BLOOMSLED_POWER_CUT_NO_FUSE").is_some();
    let controls = std::env::var("BLOOMSLED_POWER_CUT_CONTROLS").ok();
    // Controls on a plain folder (BLOOMSLED_POWER_CUT_NO_FUSE) need no FUSE.
    let plain_controls = no_fuse && controls.is_some();
    if let Err(why) = bloomsled_powercut::available() {
        if plain_controls {
        } else if std::env::var("CI").as_deref() == Ok("true") {
            eprintln!("power_cut: FAILED: no FUSE on this machine under CI=true: {why}");
            std::process::exit(1);
        } else {
            eprintln!(
                "\n\n*** power_cut: SKIPPED, this machine cannot mount FUSE: {why} ***\n\
                 *** (apt-get install -y fuse3; under CI=true this fails) ***\n"
            );
            println!("power_cut: 0 passed, 0 failed");
            return;
        }
    }
    if !no_fuse {
        if let Err(e) = torn_conf::a_power_cut_after_a_flush_keeps_sleds_conf() {
            println!("a_power_cut_after_a_flush_keeps_sleds_conf: {e}");
            println!("power_cut: 0 passed, 1 failed");
            std::process::exit(1);
        }
    }
    if std::env::var_os("BLOOMSLED_POWER_CUT_JOURNAL_REPRO").is_some() {
        repro::journal_after_a_cut_in_the_same_boot();
        return;
    }
    if sled_repro {
        // The ignored reproducer of sled's own bug (see its doc).
        match repro::sled_flush_survives_a_power_cut() {
            Ok(()) => println!("power_cut: 1 passed, 0 failed"),
            Err(e) => {
                println!("sled_flush_survives_a_power_cut: {e} (spacejam/sled#1452)");
                println!("power_cut: 0 passed, 1 failed");
                std::process::exit(1);
            }
        }
        return;
    }
    // The full pass (`BLOOMSLED_CI_FULL`) runs 35 per kind; a plain `cargo test` a sample.
    let per_kind: u64 = std::env::var("BLOOMSLED_POWER_CUTS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(if std::env::var_os("BLOOMSLED_CI_FULL").is_some() {
            35
        } else {
            12
        });
    let first: u64 = std::env::var("BLOOMSLED_POWER_CUT_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| {
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap()
                .as_nanos() as u64
        });
    println!("power_cut: seed {first} (BLOOMSLED_POWER_CUT_SEED={first} reproduces this run)");
    let started = Instant::now();
    let mut seeds = Rng(first);
    let mut total = Tally::default();
    // Only controls of the kinds named (a hunt), or every kind with one control in seven.
    let kinds: Vec<Kind> = match &controls {
        Some(list) => list.split(',').map(|k| Kind::parse(k.trim())).collect(),
        None => KINDS.to_vec(),
    };
    let cases = match controls {
        Some(_) => per_kind,
        None => per_kind + per_kind.div_ceil(6),
    };
    if plain_controls {
        println!("power_cut: controls on a plain folder (no FUSE)");
    }
    for kind in kinds {
        let t = Instant::now();
        let mut tally = Tally::default();
        for n in 0..cases {
            let seed = seeds.next();
            // One case in seven is the control: kill -9, no cut.
            let fault = if n % 7 == 6 || controls.is_some() {
                Fault::Kill
            } else {
                Fault::PowerCut(seed)
            };
            case(kind, seed, fault, false, &mut tally);
        }
        println!(
            "power_cut: {kind:?}: {} cuts, {} kill -9 controls ({} trees replayed from their \
             crash journals), {} changes undone, {} keys checked, {} failures, {} sled losses, \
             {} repairs of sled's crash debris in {:.1?}",
            tally.cuts,
            tally.kills,
            tally.replays,
            tally.undone,
            tally.keys,
            tally.failed.len(),
            tally.sled.len(),
            tally.repaired,
            t.elapsed()
        );
        total.cuts += tally.cuts;
        total.kills += tally.kills;
        total.replays += tally.replays;
        total.keys += tally.keys;
        total.undone += tally.undone;
        total.failed.extend(tally.failed);
        total.sled.extend(tally.sled);
    }
    println!(
        "power_cut: {} cuts and {} controls in {:.1?}; {} keys checked",
        total.cuts,
        total.kills,
        started.elapsed(),
        total.keys
    );
    for f in total.failed.iter().chain(&total.sled) {
        println!("  {f}");
    }
    // sled's own losses are sled 0.34.7's bug (spacejam/sled#1452: `flush()` ends in
    // sync_file_range(2), no fsync), reported here and reproduced by the ignored test
    // `sled_flush_survives_a_power_cut`; bloomsled's promises do not rest on them.
    // The controls must exercise the crash journal (a kill before the child's first
    // snapshot, or inside a rebuild, rebuilds instead; most do not).
    if total.kills > 0 && total.replays == 0 {
        total
            .failed
            .push("no kill -9 control was replayed from a crash journal".into());
    }
    // A key a returned flush covered that is gone fails the run too (bloomsled's flush is
    // durable); the column says how many cases lost some.
    let failed = total.failed.len() + total.sled.len();
    println!(
        "power_cut: {} passed, {failed} failed",
        total.cuts + total.kills - failed as u64
    );
    if failed > 0 {
        std::process::exit(1);
    }
}

//! Windows (src/window/): keys inside their horizon are always found, across rotations,
//! concurrent writers, restarts, a clock going back and `kill -9` in the middle of a
//! rotation; keys past it are forgotten, with nothing left on disk.

mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::Duration;

use common::child;

use bloomsled::clock::ManualClock;
use bloomsled::window::{RotationStep, WindowConfig};
use bloomsled::{Config, Db, Error, TreeConfig};

/// Generations of 1 s, 3 of them; times start far from 0 (real generation indexes are large).
const W: u64 = 1_000;
const G: u32 = 3;
const T0: u64 = 1_700_000_000_000;
const CHILD_ENV: &str = "BLOOMSLED_WINDOW_CHILD";
const PREFIX: &[u8] = b"__bloomsled_window:";

fn window_config(clock: &ManualClock, per_gen: u64) -> WindowConfig {
    WindowConfig::new(Duration::from_millis(W * u64::from(G)), G)
        .tree_config(TreeConfig::new().expected_items(per_gen))
        .clock(clock.clone())
}

fn key(round: u64, i: u64) -> Vec<u8> {
    format!("https://example.com/r{round}/page/{i}").into_bytes()
}

fn open(dir: &Path) -> Db {
    Config::new().path(dir).open().unwrap()
}

/// Whether generation `e` is live when the newest is `cur` (the documented rule).
fn live(e: u64, cur: u64) -> bool {
    cur < e + u64::from(G)
}

#[test]
fn concurrent_writers_across_many_rotations_never_lose_a_key_inside_its_horizon() {
    let db = Config::new().temporary(true).open().unwrap();
    let clock = ManualClock::new(T0);
    let w = db
        .open_window("crawl", window_config(&clock, 4_000))
        .unwrap();
    // (key, clock before the insert, clock after it).
    let written: Mutex<Vec<(Vec<u8>, u64, u64)>> = Mutex::new(vec![]);
    let span = W * u64::from(G);
    for round in 0..12u64 {
        std::thread::scope(|s| {
            for t in 0..3u64 {
                let (w, clock, written) = (&w, &clock, &written);
                s.spawn(move || {
                    for i in 0..300 {
                        let k = key(round, t * 1_000 + i);
                        let before = clock.now_ms_for_test();
                        w.insert(&k, &b"v"[..]).unwrap();
                        let after = clock.now_ms_for_test();
                        // Just written: found at once, whatever the clock does meanwhile
                        // (it moves by less than the horizon during one round).
                        assert!(w.contains_key(&k).unwrap(), "lost at once: {k:?}");
                        written.lock().unwrap().push((k, before, after));
                    }
                });
            }
            // The clock moves while they write: rotations race the writes.
            let clock = &clock;
            s.spawn(move || {
                for _ in 0..5 {
                    std::thread::sleep(Duration::from_millis(2));
                    clock.advance(Duration::from_millis(W / 5));
                }
            });
        });
        let now = clock.now_ms_for_test();
        let trees = w.generation_trees().unwrap();
        for (k, before, after) in written.lock().unwrap().iter() {
            if now < before + span - W {
                assert!(w.contains_key(k).unwrap(), "false negative {k:?} at {now}");
                assert_eq!(w.get(k).unwrap().as_deref(), Some(&b"v"[..]));
            }
            if now >= after + span {
                assert!(
                    trees.iter().all(|(_, t)| !t.contains_key(k).unwrap()),
                    "{k:?} written by {after} still stored at {now}"
                );
                assert!(!w.contains_key(k).unwrap());
            }
        }
        // The batched forms agree with the single ones.
        let sample: Vec<Vec<u8>> = written
            .lock()
            .unwrap()
            .iter()
            .map(|x| x.0.clone())
            .collect();
        let one: Vec<bool> = sample.iter().map(|k| w.contains_key(k).unwrap()).collect();
        assert_eq!(w.contains_many(&sample).unwrap(), one);
        let got: Vec<bool> = w
            .get_many(&sample)
            .unwrap()
            .iter()
            .map(Option::is_some)
            .collect();
        assert_eq!(got, one);
        let maybe = sample.iter().filter(|k| w.may_contain(k)).count();
        assert!(maybe >= one.iter().filter(|x| **x).count());
        assert!(w.tree_names().len() <= G as usize);
    }
    assert!(w.stats().live.len() <= G as usize);
}

/// `ManualClock::now_ms` through the trait, in one place.
trait Now {
    fn now_ms_for_test(&self) -> u64;
}
impl Now for ManualClock {
    fn now_ms_for_test(&self) -> u64 {
        bloomsled::clock::Clock::now_ms(self)
    }
}

#[test]
fn keys_past_the_horizon_are_forgotten_to_the_target_rate() {
    let dir = tempfile::tempdir().unwrap();
    let db = open(dir.path());
    let clock = ManualClock::new(T0);
    let n = 20_000u64;
    let w = db
        .open_window(
            "old",
            WindowConfig::new(Duration::from_millis(W * u64::from(G)), G)
                .tree_config(
                    TreeConfig::new()
                        .expected_items(n)
                        .false_positive_rate(0.01),
                )
                .clock(clock.clone()),
        )
        .unwrap();
    for i in 0..n {
        w.insert(key(0, i), &b""[..]).unwrap();
    }
    let old_tree = w.tree_names()[0].clone();
    clock.advance(Duration::from_millis(W * u64::from(G) - 1));
    assert!((0..n).all(|i| w.may_contain(key(0, i))), "forgotten early");
    clock.advance(Duration::from_millis(1)); // t + span has passed
                                             // One full generation of other keys, so the rate is that of a full filter.
    for i in 0..n {
        w.insert(key(1, i), &b""[..]).unwrap();
    }
    let maybe = (0..n).filter(|&i| w.may_contain(key(0, i))).count() as f64 / n as f64;
    assert!(
        (0.003..0.02).contains(&maybe),
        "forgotten keys answer maybe at {maybe}, the target is 0.01"
    );
    assert!((0..n).all(|i| !w.contains_key(key(0, i)).unwrap()));
    // The old generation is gone whole: its tree, record and file.
    assert!(!w.tree_names().contains(&old_tree));
    drop(w);
    db.close().unwrap();
    let leftovers = Leftovers::read(dir.path(), b"old");
    // The lookups at t + span - 1 made the generation of that time (an empty one).
    let e0 = T0 / W;
    assert_eq!(
        leftovers.trees,
        [e0 + 2, e0 + 3].into_iter().collect(),
        "{leftovers:?}"
    );
    leftovers.assert_clean();
}

#[test]
fn restart_keeps_the_ring_and_its_times() {
    let dir = tempfile::tempdir().unwrap();
    let clock = ManualClock::new(T0);
    {
        let db = open(dir.path());
        let w = db.open_window("r", window_config(&clock, 1_000)).unwrap();
        for round in 0..3 {
            clock.set(T0 + round * W);
            for i in 0..100 {
                w.insert(key(round, i), &b"x"[..]).unwrap();
            }
        }
        assert_eq!(w.stats().live.len(), 3);
    }
    // Same time: every generation is back, with its keys, and no scan was needed.
    let db = open(dir.path());
    assert_eq!(db.window_names().unwrap(), vec![sled::IVec::from("r")]);
    let w = db.open_window("r", window_config(&clock, 1_000)).unwrap();
    let s = w.stats();
    let indexes: Vec<u64> = s.live.iter().map(|g| g.index).collect();
    let e0 = T0 / W;
    assert_eq!(indexes, vec![e0 + 2, e0 + 1, e0]);
    for g in &s.live {
        assert_eq!(g.expires_at_ms, (g.index + u64::from(G)) * W);
        assert_eq!(g.recovery.keys_scanned, 0, "{:?}", g.recovery);
    }
    for round in 0..3 {
        assert!((0..100).all(|i| w.contains_key(key(round, i)).unwrap()));
    }
    // Its times came back too: one generation later the first one expires.
    clock.set(T0 + 3 * W);
    assert!((0..100).all(|i| !w.contains_key(key(0, i)).unwrap()));
    assert!((0..100).all(|i| w.contains_key(key(1, i)).unwrap()));
    // Another partition would misplace the keys: refused, and nothing changes.
    let other = WindowConfig::new(Duration::from_millis(4 * W), 4).clock(clock.clone());
    drop(w);
    assert!(matches!(
        db.open_window("r", other.clone()),
        Err(Error::InvalidConfig { .. })
    ));
    let w = db.open_window("r", window_config(&clock, 1_000)).unwrap();
    assert!(matches!(
        db.open_window("r", other),
        Err(Error::InvalidConfig { .. })
    ));
    // A tool opens it as recorded.
    let again = db.open_existing_window("r").unwrap();
    assert_eq!((again.generations(), again.span()), (G, w.span()));
}

#[test]
fn a_clock_going_back_expires_nothing_and_writes_to_the_newest_generation() {
    let db = Config::new().temporary(true).open().unwrap();
    let clock = ManualClock::new(T0 + 10 * W);
    let w = db.open_window("b", window_config(&clock, 1_000)).unwrap();
    w.insert("late", "1").unwrap();
    clock.set(T0); // ten generations back
    w.insert("early", "2").unwrap();
    assert!(w.contains_key("late").unwrap() && w.contains_key("early").unwrap());
    let s = w.stats();
    assert_eq!(s.live.len(), 1, "no generation made for the past");
    assert_eq!(s.newest_index, (T0 + 10 * W) / W);
    // Forward again, up to the newest generation's horizon: both kept until then.
    clock.set(T0 + 12 * W + W - 1);
    assert!(w.contains_key("late").unwrap() && w.contains_key("early").unwrap());
    clock.set(T0 + 13 * W);
    assert!(!w.contains_key("late").unwrap() && !w.contains_key("early").unwrap());
}

/// A window's lookup probes every generation's filter in one validated pass; here each
/// generation's filter is rebuilt online (a new filter published, the old one retired, then
/// zeroed and reused by the next rebuild) again and again while readers look every stored
/// key up and a writer adds to the newest generation: no lookup ever misses a key.
#[test]
fn lookups_never_miss_a_key_while_the_generations_filters_are_rebuilt() {
    use std::sync::atomic::{AtomicBool, Ordering};
    let db = Config::new().temporary(true).open().unwrap();
    let clock = ManualClock::new(T0);
    let w = db.open_window("rb", window_config(&clock, 2_000)).unwrap();
    let mut keys = vec![];
    for g in 0..u64::from(G) {
        clock.set(T0 + g * W);
        for i in 0..400 {
            let k = key(g, i);
            w.insert(&k, &b"v"[..]).unwrap();
            keys.push(k);
        }
    }
    let trees = w.generation_trees().unwrap();
    assert_eq!(trees.len(), G as usize);
    let done = AtomicBool::new(false);
    let lookups = std::thread::scope(|s| {
        let readers: Vec<_> = (0..2)
            .map(|r| {
                let (w, keys, done) = (&w, &keys, &done);
                s.spawn(move || {
                    let mut n = 0u64;
                    while !done.load(Ordering::Relaxed) {
                        for k in keys {
                            let found = match r {
                                0 => w.may_contain(k),
                                _ => w.contains_key(k).unwrap() && w.get(k).unwrap().is_some(),
                            };
                            assert!(found, "false negative for {k:?}");
                            n += 1;
                        }
                    }
                    n
                })
            })
            .collect();
        let (w, done) = (&w, &done);
        let writer = s.spawn(move || {
            for i in 0..2_000 {
                let k = key(99, i);
                w.insert(&k, &b"v"[..]).unwrap();
                assert!(w.may_contain(&k) && w.contains_key(&k).unwrap(), "{k:?}");
            }
        });
        for _ in 0..15 {
            for (_, t) in &trees {
                t.rebuild().unwrap();
            }
        }
        writer.join().unwrap();
        done.store(true, Ordering::Relaxed);
        readers.into_iter().map(|r| r.join().unwrap()).sum::<u64>()
    });
    assert!(lookups > 0);
    assert!((0..2_000).all(|i| w.contains_key(key(99, i)).unwrap()));
    // And the rejections still come from the filters: most absent keys are ruled out.
    let maybe = (0..1_000).filter(|i| w.may_contain(key(7, *i))).count();
    assert!(
        maybe < 100,
        "{maybe} of 1,000 absent keys passed the filters"
    );
}

#[test]
fn bad_input_is_a_clear_error() {
    let db = Config::new().temporary(true).open().unwrap();
    let bad = |cfg: WindowConfig, name: &str| match db.open_window(name, cfg) {
        Err(Error::InvalidConfig { what }) => what,
        other => panic!("{other:?}"),
    };
    let sec = Duration::from_secs(1);
    assert!(bad(WindowConfig::new(Duration::ZERO, 3), "w").contains("longer than zero"));
    assert!(bad(WindowConfig::new(sec, 0), "w").contains("at least 1"));
    assert!(bad(WindowConfig::new(sec, 1_000_000), "w").contains("at most"));
    assert!(bad(WindowConfig::new(sec, 7), "w").contains("left over"));
    assert!(bad(WindowConfig::new(sec, 4), "").contains("empty"));
    let zero = TreeConfig::new().expected_items(0);
    assert!(matches!(
        db.open_window("w", WindowConfig::new(sec, 4).tree_config(zero)),
        Err(Error::InvalidConfig { .. })
    ));
    // Generation trees are the window's: reserved and hidden.
    let w = db
        .open_window("w/with:odd\0bytes", WindowConfig::new(sec, 4))
        .unwrap();
    w.insert("k", "v").unwrap();
    let gen = w.tree_names()[0].clone();
    assert!(gen.starts_with(PREFIX));
    assert!(matches!(
        db.open_tree(&gen),
        Err(Error::ReservedName { .. })
    ));
    assert!(matches!(
        db.drop_tree(&gen),
        Err(Error::ReservedName { .. })
    ));
    assert!(db.tree_names().iter().all(|n| !n.starts_with(PREFIX)));
    assert!(w.contains_key("k").unwrap());
}

#[test]
fn remove_takes_a_key_out_of_every_generation_and_get_returns_the_newest() {
    let db = Config::new().temporary(true).open().unwrap();
    let clock = ManualClock::new(T0);
    let w = db.open_window("rm", window_config(&clock, 1_000)).unwrap();
    w.insert("k", "old").unwrap();
    clock.advance(Duration::from_millis(W));
    w.insert("k", "new").unwrap();
    assert_eq!(w.get("k").unwrap().as_deref(), Some(&b"new"[..]));
    assert_eq!(w.remove("k").unwrap().as_deref(), Some(&b"new"[..]));
    assert_eq!(w.get("k").unwrap(), None);
    assert_eq!(w.remove("k").unwrap(), None);
}

/// What a database folder holds for window `name` once closed, read with plain sled.
#[derive(Debug)]
struct Leftovers {
    /// Generation trees in sled, by index.
    trees: BTreeSet<u64>,
    /// Trust records of generation trees, by index.
    records: BTreeSet<u64>,
    /// Snapshot files whose tree has no trust record, and temporary files.
    stray_files: Vec<String>,
    /// The window's record: (live indexes, dropping indexes).
    ring: Option<(Vec<u64>, Vec<u64>)>,
}

fn parse_index(tree: &[u8], window: &[u8]) -> Option<u64> {
    let rest = tree.strip_prefix(PREFIX)?;
    let want = format!("{}:", window.len());
    let rest = rest.strip_prefix(want.as_bytes())?.strip_prefix(window)?;
    std::str::from_utf8(rest.strip_prefix(b":")?)
        .ok()?
        .parse()
        .ok()
}

impl Leftovers {
    fn read(dir: &Path, window: &[u8]) -> Leftovers {
        let db = common::sled_open(dir).unwrap();
        let trees = db
            .tree_names()
            .iter()
            .filter_map(|n| parse_index(n, window))
            .collect();
        let meta = db.open_tree(bloomsled::persist::META_TREE).unwrap();
        let mut records = BTreeSet::new();
        let mut ids = BTreeSet::new();
        for kv in meta.scan_prefix(b"t/") {
            let (k, v) = kv.unwrap();
            if let Some(e) = parse_index(&k[2..], window) {
                records.insert(e);
            }
            if let Ok(r) = bloomsled::format::TreeRecord::decode(&v) {
                ids.insert(
                    r.tree_id
                        .iter()
                        .map(|b| format!("{b:02x}"))
                        .collect::<String>(),
                );
            }
        }
        let ring = meta
            .get([&b"w/"[..], window].concat())
            .unwrap()
            .map(|v| bloomsled::window::record::WindowRecord::decode(&v).unwrap())
            .map(|r| (r.live, r.dropping));
        let mut stray_files = vec![];
        if let Ok(rd) = std::fs::read_dir(dir.join(bloomsled::persist::DIR_NAME)) {
            for e in rd {
                let name = e.unwrap().file_name().to_string_lossy().into_owned();
                // A tree's snapshot `<id>.snap` and crash journals `<id>.<generation>.jnl`.
                let stem = name
                    .strip_suffix(".snap")
                    .or_else(|| name.strip_suffix(".jnl").and_then(|n| n.split('.').next()));
                match stem {
                    Some(stem) if ids.contains(stem) => {}
                    _ => stray_files.push(name),
                }
            }
        }
        Leftovers {
            trees,
            records,
            stray_files,
            ring,
        }
    }

    /// Every generation tree is listed live by the ring, nothing is being dropped, every
    /// record has its tree, every file its record.
    fn assert_clean(&self) {
        let (live, dropping) = self.ring.clone().expect("the window has a record");
        assert_eq!(self.trees, live.iter().copied().collect(), "{self:?}");
        assert!(dropping.is_empty(), "{self:?}");
        assert!(self.records.is_subset(&self.trees), "{self:?}");
        assert!(self.stray_files.is_empty(), "{self:?}");
    }
}

/// The crash child: writes round after round, one generation each, flushing after each
/// and saying so; then, per its spec, stops at one step of one rotation (and waits to be
/// killed) or runs on until killed at a random point.
#[test]
fn window_child() {
    let Some(spec) = child::role(CHILD_ENV) else {
        return;
    };
    let mut parts = spec.split('|');
    let dir = PathBuf::from(parts.next().unwrap());
    let stop_round: u64 = parts.next().unwrap().parse().unwrap();
    let stop_step = parts.next().unwrap().to_string();
    let db = open(&dir);
    let clock = ManualClock::new(T0);
    let armed = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let a = armed.clone();
    let cfg = window_config(&clock, 2_000).rotation_hook(move |step: RotationStep| {
        let name = match step {
            RotationStep::Dropped { .. } => "Dropped".to_string(),
            other => format!("{other:?}"),
        };
        if a.load(std::sync::atomic::Ordering::SeqCst) && name == stop_step {
            println!("at {name}");
            std::thread::sleep(Duration::from_secs(60));
            std::process::exit(3);
        }
    });
    let w = db.open_window("crash", cfg).unwrap();
    for round in 0.. {
        if round == stop_round {
            armed.store(true, std::sync::atomic::Ordering::SeqCst);
        }
        clock.set(T0 + round * W);
        for i in 0..200 {
            w.insert(key(round, i), &b"c"[..]).unwrap();
        }
        w.flush().unwrap();
        println!("flushed {round}");
    }
}

/// Runs the child until it prints a line with `until` and returns the last round it
/// flushed; `then_kill_after` lets it run on that long first.
fn run_child(dir: &Path, spec: &str, until: &str, then_kill_after: Duration) -> Option<u64> {
    let cmd = child::command(
        CHILD_ENV,
        format!("{}|{spec}", dir.display()),
        Some("window_child"),
    );
    let killed = child::kill_after(cmd, until, then_kill_after, Some(Duration::from_secs(60)));
    assert!(
        killed.reached,
        "the child reached its stop: {:?}",
        killed.lines
    );
    // libtest's "test window_child ... " may precede the first line.
    killed
        .lines
        .iter()
        .rev()
        .find_map(|line| line.split("flushed ").nth(1))
        .map(|r| r.parse::<u64>().unwrap())
}

/// After a kill: reopen at the time of the rotation that was cut, check every flushed key
/// inside its horizon, and that nothing is left of the dropped generations.
fn check_after_kill(dir: &Path, last_flushed: u64) -> BTreeMap<&'static str, usize> {
    let cur = last_flushed + 1;
    let clock = ManualClock::new(T0 + cur * W);
    let db = open(dir);
    let w = db
        .open_window("crash", window_config(&clock, 2_000))
        .unwrap();
    let mut counts = BTreeMap::new();
    let e0 = T0 / W;
    for round in 0..=last_flushed {
        for i in 0..200 {
            let k = key(round, i);
            if live(e0 + round, e0 + cur) {
                assert!(
                    w.contains_key(&k).unwrap(),
                    "false negative: round {round} key {i}"
                );
                *counts.entry("found").or_default() += 1;
            } else {
                assert!(!w.contains_key(&k).unwrap(), "round {round} not forgotten");
                *counts.entry("forgotten").or_default() += 1;
            }
        }
    }
    drop(w);
    db.close().unwrap();
    let left = Leftovers::read(dir, b"crash");
    left.assert_clean();
    assert!(left.trees.iter().all(|&e| live(e, e0 + cur)), "{left:?}");
    counts
}

#[test]
fn kill_9_at_each_step_of_a_rotation_loses_nothing_and_leaks_nothing() {
    for step in ["Recorded", "Created", "Published", "Dropped", "Done"] {
        let dir = tempfile::tempdir().unwrap();
        // Rounds 0..=4 are written; the rotation to round 5 drops generation 2.
        let last = run_child(dir.path(), &format!("5|{step}"), "at ", Duration::ZERO);
        assert_eq!(last, Some(4), "step {step}");
        let counts = check_after_kill(dir.path(), 4);
        assert_eq!(counts["found"], 2 * 200, "step {step}: {counts:?}");
    }
}

#[test]
fn kill_9_at_random_points_of_a_loop_of_rotations() {
    let mut seed = 0x9e37_79b9_7f4a_7c15u64;
    for _ in 0..4 {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        let dir = tempfile::tempdir().unwrap();
        // Never armed: runs until killed, some ms after its first flush.
        let after = Duration::from_millis(5 + seed % 60);
        let last = run_child(dir.path(), "18446744073709551615|none", "flushed ", after)
            .expect("flushed at least once");
        check_after_kill(dir.path(), last);
    }
}

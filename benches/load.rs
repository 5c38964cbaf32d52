//! Bulk loads through `apply_batch`, bloomsled beside plain sled: the bench behind issue 46's
//! "`apply_batch` at sled's rate".
//!
//! Each variant opens a bloomsled database and a plain sled database in two folders of one
//! temporary directory, both with the `cache_capacity` of `BLOOMSLED_LOAD_CACHE` (default
//! bloomsled's, 1 GiB: then left unset on bloomsled), and loads
//! both with the same URL-like keys (`common::write_key`, 40..=80 bytes, an 8-byte value)
//! in batches of 10,000 keys, up to `BLOOMSLED_LOAD_KEYS` keys (default 2,000,000). The two
//! loads are interleaved batch by batch so both see the same machine: batch `c` goes to
//! bloomsled then sled when `c` is even, to sled then bloomsled when it is odd. The keys are
//! made beforehand; what is timed is what a loader pays per batch, building the store's
//! `Batch` from them and `apply_batch` (a `sled::Batch` is a sorted map, so building one
//! is part of sled's cost: bloomsled's `Batch` builds it inside `apply_batch`), in wall
//! time and in the calling thread's CPU time.
//!
//! The variants (`BLOOMSLED_LOAD_VARIANTS`, a comma list, default all four):
//!
//! * `persistent`: what users run. bloomsled on disk at its default settings except
//!   `expected_items(n)`: the crash journal, the dirty mark and the automatic snapshot when
//!   a journal is half full are all on;
//! * `nojournal`: the same with `crash_journal(false)` (dirty mark on, no journal, hence no
//!   snapshot during the load): the journal's share of the cost;
//! * `temporary`: both databases `temporary(true)`: bloomsled keeps no dirty mark, journal or
//!   snapshot then (its tree has no persistence state), so only the filter's insert (and
//!   the false-positive memory's forget) stands between the two;
//! * `sled`: two plain sled databases on disk, the first in bloomsled's column: what the
//!   ratio reads when the two stores do the same work (the measurement's own spread).
//!
//! For each slice of the load (`BLOOMSLED_LOAD_SLICE` keys, default 1,000,000) the table
//! gives each store's keys/s (keys over the summed batch times), the ratio bloomsled/sled,
//! the slowest batch of each, and both stores' calling-thread CPU µs per batch; then the
//! whole load, with the median of the per-slice ratios and the overall ratio. The final
//! `flush` of each is timed after the load, outside the figures. The databases live in a
//! temporary directory under `BLOOMSLED_LOAD_DIR` (default: the system's temporary folder,
//! which should be a disk, not a memory file system, for `persistent`).
//!
//! Two sled 0.34 stores loaded side by side hold about 6 GB per million keys, so 5M keys
//! (issue 46's size) do not fit a 24 GB machine that way: `BLOOMSLED_LOAD_ONLY=bloomsled`
//! (or `sled`) loads the one store alone and prints its keys/s, and `load-5m.sh` beside this
//! file alternates the two in fresh processes.
//!
//! ```text
//! cargo bench --bench load                                            # 2M keys, all variants
//! BLOOMSLED_LOAD_VARIANTS=persistent cargo bench --bench load         # what issue 46 measures
//! BLOOMSLED_LOAD_KEYS=2000000 BLOOMSLED_LOAD_SLICE=500000 cargo bench --bench load
//! bash benches/load-5m.sh                                             # 5M keys, one store a process
//! ```

use std::time::{Duration, Instant};

use common::rounds::{median, thread_cpu_time};
use common::{env_count, load_chunks, size_label, write_key};

mod common;

const CHUNK: u64 = 10_000;
const VALUE: &[u8] = b"payload!";
/// bloomsled's default `cache_capacity` (sled's).
const DEFAULT_CACHE: u64 = 1 << 30;

/// How a variant opens bloomsled, and whether sled is temporary too.
#[derive(Clone, Copy)]
enum Variant {
    Persistent,
    NoJournal,
    Temporary,
    SledTwice,
}

/// The first store of a variant: bloomsled, or a second plain sled (`sled`).
enum Store {
    Bloom(bloomsled::Db),
    Sled(sled::Db),
}

impl Store {
    /// Builds the store's batch of `keys` and applies it.
    fn load(&self, keys: &[Vec<u8>]) {
        match self {
            Store::Bloom(db) => {
                let mut b = bloomsled::Batch::default();
                for k in keys {
                    b.insert(&k[..], VALUE);
                }
                db.apply_batch(b).expect("bloomsled batch");
            }
            Store::Sled(db) => sled_load(db, keys),
        }
    }

    fn flush(&self) {
        match self {
            Store::Bloom(db) => db.flush().map(drop).expect("flush"),
            Store::Sled(db) => db.flush().map(drop).expect("flush"),
        }
    }

    fn len(&self) -> usize {
        match self {
            Store::Bloom(db) => db.len(),
            Store::Sled(db) => db.len(),
        }
    }
}

/// Builds a `sled::Batch` of `keys` and applies it to `db`.
fn sled_load(db: &sled::Db, keys: &[Vec<u8>]) {
    let mut b = sled::Batch::default();
    for k in keys {
        b.insert(&k[..], VALUE);
    }
    db.apply_batch(b).expect("sled batch");
}

impl Variant {
    fn parse(s: &str) -> Variant {
        match s.trim() {
            "persistent" => Variant::Persistent,
            "nojournal" => Variant::NoJournal,
            "temporary" => Variant::Temporary,
            "sled" => Variant::SledTwice,
            other => panic!("unknown variant {other:?} (persistent, nojournal, temporary, sled)"),
        }
    }

    fn name(self) -> &'static str {
        match self {
            Variant::Persistent => "persistent",
            Variant::NoJournal => "nojournal",
            Variant::Temporary => "temporary",
            Variant::SledTwice => "sled",
        }
    }

    fn open(self, dir: &std::path::Path, n: u64, cache: u64) -> (Store, sled::Db) {
        let config = bloomsled::Config::new().expected_items(n);
        // Left at bloomsled's default unless the run asks for another.
        let config = if cache == DEFAULT_CACHE {
            config
        } else {
            config.cache_capacity(cache)
        };
        // A fresh config each (sled's `path` panics on a config shared with a clone).
        let sled_config = || sled::Config::new().cache_capacity(cache);
        let db = match self {
            Variant::Persistent => config.path(dir.join("bloomsled")),
            Variant::NoJournal => config.path(dir.join("bloomsled")).crash_journal(false),
            Variant::Temporary => config.temporary(true),
            Variant::SledTwice => {
                let db = sled_config().path(dir.join("sled-a")).open();
                return (
                    Store::Sled(db.expect("sled")),
                    self.sled(dir, sled_config()),
                );
            }
        }
        .open()
        .expect("bloomsled");
        (Store::Bloom(db), self.sled(dir, sled_config()))
    }

    /// The plain sled store of the variant.
    fn sled(self, dir: &std::path::Path, sled_config: sled::Config) -> sled::Db {
        match self {
            Variant::Temporary => sled_config.temporary(true),
            _ => sled_config.path(dir.join("sled")),
        }
        .open()
        .expect("sled")
    }
}

/// One store's figures over a stretch of batches.
#[derive(Default, Clone, Copy)]
struct Tally {
    keys: u64,
    wall: Duration,
    cpu: Duration,
    slowest: Duration,
    batches: u64,
}

impl Tally {
    fn add(&mut self, keys: u64, wall: Duration, cpu: Duration) {
        self.keys += keys;
        self.wall += wall;
        self.cpu += cpu;
        self.slowest = self.slowest.max(wall);
        self.batches += 1;
    }

    fn merge(&mut self, o: &Tally) {
        self.keys += o.keys;
        self.wall += o.wall;
        self.cpu += o.cpu;
        self.slowest = self.slowest.max(o.slowest);
        self.batches += o.batches;
    }

    fn keys_per_s(&self) -> f64 {
        self.keys as f64 / self.wall.as_secs_f64()
    }

    fn cpu_us_per_batch(&self) -> f64 {
        self.cpu.as_secs_f64() * 1e6 / self.batches as f64
    }
}

/// Times `f` in wall and calling-thread CPU time.
fn timed(f: impl FnOnce()) -> (Duration, Duration) {
    let (t, c) = (Instant::now(), thread_cpu_time());
    f();
    (t.elapsed(), thread_cpu_time() - c)
}

/// Loads both stores of `variant` with `n` keys; returns the table rows and the overall
/// ratio line.
fn run(variant: Variant, n: u64, slice: u64, cache: u64) -> String {
    let parent = std::env::var_os("BLOOMSLED_LOAD_DIR").map_or_else(std::env::temp_dir, Into::into);
    let dir = tempfile::tempdir_in(parent).expect("tempdir");
    let (db, raw) = variant.open(dir.path(), n, cache);
    let only = Only::from_env();
    let mut slices: Vec<(Tally, Tally)> = Vec::new();
    let mut c = 0u64;
    load_chunks(n, CHUNK, |ids, buf| {
        let keys = ids.end - ids.start;
        let batch: Vec<Vec<u8>> = ids
            .clone()
            .map(|i| {
                write_key(buf, i);
                buf.clone()
            })
            .collect();
        // Each store's batch is built inside its timing: what a loader pays per batch.
        let a = || timed(|| db.load(&batch));
        let b = || timed(|| sled_load(&raw, &batch));
        let zero = (Duration::ZERO, Duration::ZERO);
        let (ta, tb) = if let Some(only) = only {
            match only {
                Only::First => (a(), zero),
                Only::Sled => (zero, b()),
            }
        } else if c.is_multiple_of(2) {
            let ta = a();
            (ta, b())
        } else {
            let tb = b();
            (a(), tb)
        };
        let s = (ids.start / slice) as usize;
        while slices.len() <= s {
            slices.push(Default::default());
        }
        slices[s].0.add(keys, ta.0, ta.1);
        slices[s].1.add(keys, tb.0, tb.1);
        c += 1;
    });
    let (fa, _) = timed(|| db.flush());
    let (fb, _) = timed(|| {
        raw.flush().expect("flush");
    });
    eprintln!(
        "[{} {}] final flush: bloomsled {fa:.1?}, sled {fb:.1?}",
        variant.name(),
        size_label(n)
    );
    match only {
        Some(which) => only_line(variant, which, n, &slices),
        None => {
            assert_eq!(db.len(), n as usize);
            table(variant, n, slice, &slices)
        }
    }
}

/// `BLOOMSLED_LOAD_ONLY`: one store of the variant loaded alone, for sizes at which two
/// do not fit in memory together (sled 0.34 holds about 3 GB per million keys of a batch
/// load here).
#[derive(Clone, Copy)]
enum Only {
    /// The variant's first store (bloomsled, or the first plain sled of `sled`).
    First,
    /// The plain sled store.
    Sled,
}

impl Only {
    fn from_env() -> Option<Only> {
        match std::env::var("BLOOMSLED_LOAD_ONLY").ok()?.trim() {
            "" => None,
            "bloomsled" => Some(Only::First),
            "sled" => Some(Only::Sled),
            other => panic!("BLOOMSLED_LOAD_ONLY={other:?}: bloomsled or sled"),
        }
    }
}

/// The one line of a load of one store alone: its keys/s overall and per slice.
fn only_line(variant: Variant, which: Only, n: u64, slices: &[(Tally, Tally)]) -> String {
    let pick = |s: &(Tally, Tally)| match which {
        Only::First => s.0,
        Only::Sled => s.1,
    };
    let mut all = Tally::default();
    let per: Vec<String> = slices
        .iter()
        .map(|s| {
            all.merge(&pick(s));
            format!("{:.0}", pick(s).keys_per_s())
        })
        .collect();
    format!(
        "\n{} load of {} keys, {} alone: {:.0} keys/s overall; per slice {}\n",
        variant.name(),
        size_label(n),
        match which {
            Only::First => "bloomsled",
            Only::Sled => "sled",
        },
        all.keys_per_s(),
        per.join(", ")
    )
}

fn row(label: &str, a: &Tally, b: &Tally) -> String {
    format!(
        "| {label} | {:.0} | {:.0} | {:.3}× | {:.1?} | {:.1?} | {:.0} | {:.0} |\n",
        a.keys_per_s(),
        b.keys_per_s(),
        a.keys_per_s() / b.keys_per_s(),
        a.slowest,
        b.slowest,
        a.cpu_us_per_batch(),
        b.cpu_us_per_batch(),
    )
}

fn table(variant: Variant, n: u64, slice: u64, slices: &[(Tally, Tally)]) -> String {
    let mut out = format!(
        "\n{} load of {} keys in {}-key batches\n\n\
         | keys | bloomsled keys/s | sled keys/s | ratio | slowest batch (bloomsled) \
         | slowest batch (sled) | CPU µs/batch (bloomsled) | CPU µs/batch (sled) |\n\
         |---|--:|--:|--:|--:|--:|--:|--:|\n",
        variant.name(),
        size_label(n),
        CHUNK
    );
    let (mut all_a, mut all_b) = (Tally::default(), Tally::default());
    let mut ratios = Vec::new();
    for (i, (a, b)) in slices.iter().enumerate() {
        let from = i as u64 * slice;
        let to = (from + slice).min(n);
        out += &row(&format!("{}–{}", size_label(from), size_label(to)), a, b);
        all_a.merge(a);
        all_b.merge(b);
        ratios.push(a.keys_per_s() / b.keys_per_s());
    }
    out += &row("all", &all_a, &all_b);
    out += &format!(
        "\n{}: median of per-slice ratios {:.3}×, overall {:.3}×\n",
        variant.name(),
        median(ratios),
        all_a.keys_per_s() / all_b.keys_per_s()
    );
    out
}

fn main() {
    let n = env_count("BLOOMSLED_LOAD_KEYS", 2_000_000);
    let slice = env_count("BLOOMSLED_LOAD_SLICE", 1_000_000).max(CHUNK);
    let cache = env_count("BLOOMSLED_LOAD_CACHE", DEFAULT_CACHE);
    let variants = std::env::var("BLOOMSLED_LOAD_VARIANTS")
        .unwrap_or_else(|_| "persistent,nojournal,temporary,sled".into());
    let mut report = String::new();
    for v in variants.split(',').filter(|s| !s.trim().is_empty()) {
        let t = Instant::now();
        let part = run(Variant::parse(v), n, slice, cache);
        eprintln!("{part}[{v}] {:.1?}", t.elapsed());
        report += &part;
    }
    println!("{report}");
}

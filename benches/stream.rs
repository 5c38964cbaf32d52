//! The stream benchmark: keys as requests bring them, each hashed and probed in turn.
//!
//! Query keys are separately allocated `Vec<u8>`s (URL-like, 40..=80 bytes), made before any
//! filter or store is built, and iterated in order: each pass hashes every key with xxh3-64
//! and probes it, one after the other. In one process, for absent keys, present keys and a
//! 50/50 mix of the two in random order (where a probe that branches on what it loads
//! guesses wrong half the time):
//!
//! * `fastbloom` 0.17 fed the same xxh3-64 hash (`contains_hash`), the baseline of every ratio;
//! * `bloomsled::Filter::contains`, and the `bloomfilter` crate (its own SipHash), the same
//!   number of bits;
//! * with a store (sizes up to `BLOOMSLED_STREAM_STORE_UPTO`, default 2,000,000):
//!   `Tree::may_contain`, `Tree::get` (absent keys, the absent keys the filter rejects, present
//!   keys), sled's own `get` on the same store (`Tree::get_unfiltered`), and plain sled's
//!   `get` on a second store loaded with the same keys; past that size, `Tree::may_contain` on
//!   a tree whose filter is sized for the same number of keys (the same bytes: the probe has
//!   no branch on what it reads), holding the present query keys;
//! * with a store, a window of 7 generations (`Window::may_contain`) holding the same keys,
//!   loaded the same way: generation `g` holds the keys `n·g/7 .. n·(g+1)/7`, written while
//!   a `ManualClock` stands in it, its filter sized for its share at the tree's 10 bits per
//!   key (the same bits in all); its ratio is to `Tree::may_contain` in the same rounds
//!   (issue 29's bound: ≤ 3× for absent keys);
//! * present `get` against sled's `get` on the same store, and absent `get` against its
//!   measured bound, each pair run in alternating chunks of the same keys so that both see
//!   the same cache state (as separate contenders each inherits whatever ran before it);
//! * the absent-`get` bound three ways: `may_contain` + FPR × sled's absent `get` (tight loop,
//!   same store); the same with sled's `get` as it costs in the stream (the keys the filter
//!   passes, looked up where they come, after hashing the keys between them, no filter
//!   probed); and measured: `may_contain`, then sled's `get` for the keys it passes, paired
//!   with `get` and, as its own contender, against the first bound (what a `get` adding
//!   nothing to its two parts would read). Beside them, those keys' sled lookups back to
//!   back, in the stream with no filter, and after bloomsled's probes; as many other absent
//!   keys' back to back, contiguous in memory or spread like them; and fastbloom in front of
//!   the same store against the formula with its own figures: whether the filter or the
//!   stream makes sled's lookups slower there;
//! * the by-hash hot loop (hashes computed beforehand), the second view;
//! * with `--features metrics`, `Tree::may_contain` and an absent `Tree::get` on the same
//!   store while a recorder is installed and the store's series are recorded every 10 ms
//!   (issue 35's bound: ≤ 1.03× the same without);
//! * inserts of fresh keys: `Filter::insert` beside fastbloom's (`BloomFilter`, `&mut self`,
//!   plain stores, and `AtomicBloomFilter`, `&self` like ours) and bloomfilter's, and
//!   `Tree::insert` beside sled's.
//!
//! Every contender runs once per round, the first one rotating (`BLOOMSLED_STREAM_ROUNDS`,
//! default 9); figures are medians over rounds, ratios the median of per-round ratios
//! against fastbloom (or sled) measured in the same rounds, with the min–max over rounds.
//!
//! ```text
//! cargo bench --bench stream                                   # 2M keys, with the store
//! BLOOMSLED_STREAM_KEYS=50000000 cargo bench --bench stream    # 50M keys, filters only
//! BLOOMSLED_STREAM_BPK=0,12,16 cargo bench --bench stream       # stores at the default, 12, 16 bits/key
//! ```
//! `BLOOMSLED_STREAM_KEYS` is a comma list of sizes (default 2,000,000; empty: none). The
//! table is printed; `BLOOMSLED_STREAM_DOCS=1` also writes it into docs/benchmarks.md
//! between the `bench-stream` markers.
//!
//! Before it, the per-kernel table: for each size of `BLOOMSLED_STREAM_KERNEL_KEYS` (default
//! 2,000,000; empty: no table) and each probe kernel of `BLOOMSLED_STREAM_KERNELS` (default
//! `scalar,avx2,avx512`), a child process of this bench run with `BLOOMSLED_KERNEL` set to
//! it measures fastbloom + xxh3, `Filter::contains` and `Tree::may_contain` on absent and
//! present keys (a kernel the CPU cannot run says so); and, on a tree at default settings
//! holding the keys (its false-positive memory on, then off), each absent lookup (`get`,
//! `contains_key`) beside its parts: that tree's `may_contain` plus the share of keys its
//! filter passes times sled's own `get` on the same store, measured in the same rounds (issue
//! 46's bound: ≤ 1.15×), and present `get`, `get_many` (one call per chunk of 1,024) and
//! `may_contain` then sled's `get` by hand, each against sled's `get` of the same keys.
//! Written between the `bench-stream-kernels` markers.
//!
//! ```text
//! # every kernel at 2M and 50M keys, nothing else:
//! BLOOMSLED_STREAM_KEYS= BLOOMSLED_STREAM_KERNEL_KEYS=2000000,50000000 cargo bench --bench stream
//! ```

//!
//! The code: this file holds the knobs, the shared helpers and the order of one size's run
//! ([`run_size`]); `stream/kernels.rs` the per-kernel table and its child processes,
//! `stream/load.rs` the stores and the window, `stream/setup.rs` the query keys, filters and
//! stores of one size, `stream/contenders.rs` the contenders by group (lookups, bounds,
//! inserts), `stream/table.rs` the table.

use std::hint::black_box;
use std::time::Duration;

use common::env_count;
use common::rounds::{fmt_ns, median, median_ratio, ns_per, spread, timed};

mod common;
#[path = "stream/contenders.rs"]
mod contenders;
#[path = "stream/kernels.rs"]
mod kernels;
#[path = "stream/load.rs"]
mod load;
#[cfg(feature = "metrics")]
#[path = "stream/recording.rs"]
mod recording;
#[path = "stream/setup.rs"]
mod setup;
#[path = "stream/table.rs"]
mod table;

/// Query keys of each kind (absent, present) per size.
const Q: usize = 1 << 20;
/// Store gets of plain sled take microseconds: they run over the first `Q_SLED` keys.
const Q_SLED: usize = 1 << 16;
/// Fresh keys inserted per round.
const Q_INSERT: usize = 1 << 14;
const ABSENT_BASE: u64 = 1 << 40;
const FRESH_BASE: u64 = 1 << 41;
const CHUNK: u64 = 10_000;
const VALUE: &[u8] = b"payload!";
/// Generations of the window measured beside the tree.
const GENERATIONS: u32 = 7;

fn env_list(name: &str, default: &str) -> Vec<u64> {
    std::env::var(name)
        .unwrap_or_else(|_| default.into())
        .split(',')
        .filter(|s| !s.trim().is_empty())
        .map(|s| {
            s.trim()
                .replace('_', "")
                .parse()
                .expect("a comma list of numbers")
        })
        .collect()
}

/// How many of `keys` `f` holds true for: one pass of the stream.
fn count<K: AsRef<[u8]>>(keys: &[K], mut f: impl FnMut(&[u8]) -> bool) -> u64 {
    keys.iter().filter(|k| f(k.as_ref())).count() as u64
}

/// ns per key of sled's own `get` on `db`'s store (`Tree::get_unfiltered`), the keys back
/// to back.
fn sled_gets<K: AsRef<[u8]>>(db: &bloomsled::Db, keys: &[K]) -> f64 {
    ns_per(keys.len(), || {
        count(keys, |k| db.get_unfiltered(k).unwrap().is_some())
    })
}

/// One contender: times one pass and returns its ns per key.
type Run<'a> = Box<dyn FnMut() -> f64 + 'a>;

/// The lookup contenders, by name, in the order they run in a round.
#[derive(Default)]
struct Contenders<'a> {
    names: Vec<String>,
    runs: Vec<Run<'a>>,
}

impl<'a> Contenders<'a> {
    /// Adds a contender under `name`.
    fn add(&mut self, name: impl Into<String>, run: impl FnMut() -> f64 + 'a) {
        self.names.push(name.into());
        self.runs.push(Box::new(run));
    }

    /// The names and the contenders, in the same order.
    fn into_parts(self) -> (Vec<String>, Vec<Run<'a>>) {
        (self.names, self.runs)
    }
}

/// One table row: a contender's medians (absent, present) and ratios against the baseline.
struct Row {
    what: String,
    cells: Vec<String>,
}

/// `12.3 ns (0.91×, 0.85–0.97)`: median, and the per-round ratio to the baseline.
fn cell(per: &[f64], base: Option<&[f64]>) -> String {
    let m = median(per.to_vec());
    match base {
        Some(b) => {
            let ratios: Vec<f64> = b.iter().zip(per).map(|(b, p)| p / b).collect();
            let (lo, hi) = spread(&ratios);
            format!(
                "{} ({:.2}×, {lo:.2}–{hi:.2})",
                fmt_ns(m),
                median_ratio(b, per)
            )
        }
        None => fmt_ns(m),
    }
}

fn main() {
    let rounds = env_count("BLOOMSLED_STREAM_ROUNDS", 9) as usize;
    if std::env::var_os(kernels::KERNEL_CHILD).is_some() {
        // A child of `kernel_table`: this process's kernel (`BLOOMSLED_KERNEL`), one size.
        kernels::kernel_child(env_count("BLOOMSLED_STREAM_KERNEL_N", 2_000_000), rounds);
        return;
    }
    let sizes = env_list("BLOOMSLED_STREAM_KEYS", "2000000");
    let store_upto = env_count("BLOOMSLED_STREAM_STORE_UPTO", 2_000_000);
    // 0 stands for the default sizing (`DEFAULT_FALSE_POSITIVE_RATE`), measured by default.
    let bpk_extra = env_list("BLOOMSLED_STREAM_BPK", "0");
    let mut out = String::new();
    for &n in &sizes {
        out += &run_size(n, n <= store_upto, rounds, &bpk_extra);
    }
    let kernel_sizes = env_list("BLOOMSLED_STREAM_KERNEL_KEYS", "2000000");
    if !kernel_sizes.is_empty() {
        let table = kernels::kernel_table(&kernel_sizes, rounds);
        println!("{table}");
        if std::env::var_os("BLOOMSLED_STREAM_DOCS").is_some() {
            common::write_docs_table("bench-stream-kernels", &table);
        }
    }
    println!("{out}");
    if std::env::var_os("BLOOMSLED_STREAM_DOCS").is_some() && !out.is_empty() {
        common::write_docs_table("bench-stream", &out);
    }
}

/// One size: the query keys first (as a service receives them), then the stores, window and
/// filters, the lookup contenders in interleaved rounds, `get` paired with what it is held
/// to, the inserts, and the table.
fn run_size(n: u64, with_store: bool, rounds: usize, bpk_extra: &[u64]) -> String {
    let queries = setup::Queries::make(n, rounds);
    let mut s = setup::Setup::load(n, with_store, bpk_extra, &queries);
    let passed = setup::Passed::sort(&s, &queries);
    let lookups = contenders::lookup_rounds(&s, &queries, &passed, rounds);
    let pairs = s
        .stores
        .as_ref()
        .map(|(db, _)| contenders::paired_gets(n, db, &queries, rounds));
    let ins = contenders::insert_rounds(&mut s, &queries, rounds);
    let table = table::render(
        &s,
        &queries,
        &passed,
        &lookups,
        pairs.as_ref(),
        &ins,
        rounds,
    );
    black_box(&s.fb);
    table
}

/// Two contenders on one key set, finely interleaved: the keys are cut into chunks of
/// `chunk`, and in round `r` chunk `c` goes to contender `(c + r) % 2`. Each chunk then
/// follows one of the other contender's, so both run in the same cache state, on disjoint
/// halves of the keys in a round, every key going to each in alternate rounds. Per round,
/// the ns per key of `a` and of `b`.
fn paired<K>(
    keys: &[K],
    chunk: usize,
    rounds: usize,
    mut a: impl FnMut(&[K]) -> u64,
    mut b: impl FnMut(&[K]) -> u64,
) -> (Vec<f64>, Vec<f64>) {
    let (mut va, mut vb) = (Vec::with_capacity(rounds), Vec::with_capacity(rounds));
    for r in 0..rounds {
        let (mut ta, mut tb) = (Duration::ZERO, Duration::ZERO);
        let (mut na, mut nb) = (0usize, 0usize);
        for (c, ks) in keys.chunks(chunk).enumerate() {
            if (c + r) % 2 == 0 {
                ta += timed(|| a(ks));
                na += ks.len();
            } else {
                tb += timed(|| b(ks));
                nb += ks.len();
            }
        }
        va.push(ta.as_nanos() as f64 / na as f64);
        vb.push(tb.as_nanos() as f64 / nb as f64);
    }
    (va, vb)
}

/// `bound (get 1.02×, 0.98–1.05)`: the bound's median, and `get`'s per-round ratio to it.
fn bound_cell(bound: &[f64], get: &[f64]) -> String {
    let ratios: Vec<f64> = bound.iter().zip(get).map(|(b, g)| g / b).collect();
    let (lo, hi) = spread(&ratios);
    format!(
        "{} (`get` {:.2}× it, {lo:.2}–{hi:.2})",
        fmt_ns(median(bound.to_vec())),
        median(ratios)
    )
}

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
//! present keys (a kernel the CPU cannot run says so). Written between the
//! `bench-stream-kernels` markers.
//!
//! ```text
//! # every kernel at 2M and 50M keys, nothing else:
//! BLOOMSLED_STREAM_KEYS= BLOOMSLED_STREAM_KERNEL_KEYS=2000000,50000000 cargo bench --bench stream
//! ```

use std::hint::black_box;
use std::time::{Duration, Instant};

use bloomsled::hash::hash_key;
use bloomsled::window::{ManualClock, Window, WindowConfig};
use bloomsled::{Config, Filter, TreeConfig};
use common::rounds::{fmt_ns, interleave, median, median_ratio, ns_per, spread, timed};
use common::{env_count, key, load_chunks, size_label, splitmix64, write_key};

mod common;

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

/// With `--features metrics`: a real recorder installed (metrics-util's
/// `DebuggingRecorder`) and a thread that records the store's series every 10 ms while a
/// contender runs under [`Recording::during`] (as `Config::metrics_interval` would, 1,000×
/// as often as a 10 s scrape); idle otherwise, so the rows without metrics run without it.
#[cfg(feature = "metrics")]
struct Recording {
    on: std::sync::Arc<std::sync::atomic::AtomicBool>,
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
}

#[cfg(feature = "metrics")]
impl Recording {
    fn start(db: bloomsled::Db) -> Recording {
        use std::sync::atomic::{AtomicBool, Ordering::Relaxed};
        use std::sync::Arc;
        // Installed once per process; a second size's store reuses it.
        let _ = metrics_util::debugging::DebuggingRecorder::new().install();
        let (on, stop) = (
            Arc::new(AtomicBool::new(false)),
            Arc::new(AtomicBool::new(false)),
        );
        let (flag, end) = (on.clone(), stop.clone());
        std::thread::spawn(move || {
            while !end.load(Relaxed) {
                std::thread::sleep(Duration::from_millis(10));
                if flag.load(Relaxed) {
                    db.record_metrics();
                }
            }
        });
        Recording { on, stop }
    }

    /// Runs `f` with the recording on.
    fn during(&self, f: impl FnOnce() -> f64) -> f64 {
        use std::sync::atomic::Ordering::Relaxed;
        self.on.store(true, Relaxed);
        let v = f();
        self.on.store(false, Relaxed);
        v
    }
}

#[cfg(feature = "metrics")]
impl Drop for Recording {
    fn drop(&mut self) {
        self.stop.store(true, std::sync::atomic::Ordering::Relaxed);
    }
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
    if std::env::var_os(KERNEL_CHILD).is_some() {
        // A child of `kernel_table`: this process's kernel (`BLOOMSLED_KERNEL`), one size.
        kernel_child(env_count("BLOOMSLED_STREAM_KERNEL_N", 2_000_000), rounds);
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
        let table = kernel_table(&kernel_sizes, rounds);
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

/// Set in a child process of [`kernel_table`].
const KERNEL_CHILD: &str = "BLOOMSLED_STREAM_KERNEL_CHILD";

/// The per-kernel table: for each size and each kernel of `BLOOMSLED_STREAM_KERNELS`
/// (default `scalar,avx2,avx512`), a child process of this bench with `BLOOMSLED_KERNEL` set
/// to it (the variable is read once per process) measures fastbloom + xxh3,
/// `Filter::contains` and `Tree::may_contain` on the same absent and present key streams, in
/// interleaved rounds. A kernel this CPU cannot run is reported as such, not measured.
fn kernel_table(sizes: &[u64], rounds: usize) -> String {
    let kernels =
        std::env::var("BLOOMSLED_STREAM_KERNELS").unwrap_or_else(|_| "scalar,avx2,avx512".into());
    let cpu = std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|c| {
            c.lines()
                .find(|l| l.starts_with("model name"))
                .and_then(|l| l.split(':').nth(1))
                .map(|m| m.trim().to_string())
        })
        .unwrap_or_else(|| "unknown CPU".into());
    let mut out = format!(
        "#### The probe kernels, each forced in its own process (`BLOOMSLED_KERNEL`), 10 bits/key\n\n\
         CPU: {cpu} ({}). Medians of {rounds} interleaved rounds per process; in brackets the \
         median per-round ratio to fastbloom 0.17 + xxh3-64 measured in the same rounds, and its \
         min–max. `Tree::may_contain`: a tree whose filter is sized for the keys (the same \
         bytes), holding the present query keys.\n\n\
         | keys | kernel | fastbloom absent | `Filter::contains` absent | `Tree::may_contain` absent \
         | fastbloom present | `Filter::contains` present | `Tree::may_contain` present |\n\
         |---|---|---:|---:|---:|---:|---:|---:|\n",
        cpu_features()
    );
    for &n in sizes {
        for kernel in kernels.split(',').map(str::trim).filter(|k| !k.is_empty()) {
            let t = Instant::now();
            let child = std::process::Command::new(std::env::current_exe().expect("own path"))
                .env(KERNEL_CHILD, "1")
                .env("BLOOMSLED_KERNEL", kernel)
                .env("BLOOMSLED_STREAM_KERNEL_N", n.to_string())
                .env("BLOOMSLED_STREAM_ROUNDS", rounds.to_string())
                .stderr(std::process::Stdio::inherit())
                .output()
                .expect("spawn the bench's child");
            assert!(child.status.success(), "{kernel}: the child failed");
            let text = String::from_utf8_lossy(&child.stdout);
            let mut ran = None;
            let mut per: Vec<(String, Vec<f64>)> = Vec::new();
            for line in text.lines() {
                if let Some(k) = line.strip_prefix("kernel\t") {
                    ran = Some(k.to_string());
                } else if let Some(rest) = line.strip_prefix("row\t") {
                    let (name, values) = rest.split_once('\t').expect("name and values");
                    let v = values.split(',').map(|x| x.parse().expect("ns")).collect();
                    per.push((name.to_string(), v));
                }
            }
            let ran = ran.expect("the child names its kernel");
            eprintln!(
                "[{}] kernel {kernel} measured in {:.1?}",
                size_label(n),
                t.elapsed()
            );
            if !ran.eq_ignore_ascii_case(kernel) {
                out += &format!(
                    "| {} | {kernel} | not on this CPU (it ran {ran}) | | | | | |\n",
                    size_label(n)
                );
                continue;
            }
            let get = |name: &str| -> &[f64] {
                &per.iter()
                    .find(|(x, _)| x == name)
                    .expect("a measured row")
                    .1
            };
            let mut row = format!("| {} | **{kernel}** |", size_label(n));
            for tag in ["absent", "present"] {
                let base = get(&format!("fastbloom/{tag}"));
                row += &format!(" {} |", cell(base, None));
                for what in ["filter", "may_contain"] {
                    row += &format!(" {} |", cell(get(&format!("{what}/{tag}")), Some(base)));
                }
            }
            out += &row;
            out += "\n";
        }
    }
    out
}

/// The CPU's vector extensions that the kernels use, as "AVX2 yes, AVX-512 F/DQ yes".
fn cpu_features() -> String {
    #[cfg(target_arch = "x86_64")]
    {
        let yes = |b: bool| if b { "yes" } else { "no" };
        format!(
            "AVX2 {}, AVX-512 F/DQ {}",
            yes(std::is_x86_feature_detected!("avx2")),
            yes(std::is_x86_feature_detected!("avx512f")
                && std::is_x86_feature_detected!("avx512dq"))
        )
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        std::env::consts::ARCH.to_string()
    }
}

/// One process of [`kernel_table`]: `n` keys, this process's kernel; prints `kernel\t<name>`
/// and a `row\t<contender>\t<ns per key, round by round>` line per contender.
fn kernel_child(n: u64, rounds: usize) {
    println!("kernel\t{}", bloomsled::probe_kernel());
    let absent: Vec<Vec<u8>> = (0..Q as u64).map(|j| key(ABSENT_BASE + j)).collect();
    let present: Vec<Vec<u8>> = (0..Q as u64)
        .map(|j| key(splitmix64(j ^ 0xA5A5_5A5A) % n))
        .collect();
    let tree = load_sized(n, &present);
    let f = Filter::with_bits_per_key(n, 10.0).expect("filter");
    let mut fb =
        fastbloom::BloomFilter::with_num_bits(f.num_bits() as usize).hashes(f.num_hashes());
    let seed = f.seed();
    load_chunks(n, CHUNK, |ids, buf| {
        for i in ids {
            write_key(buf, i);
            let h = hash_key(buf, seed);
            f.insert_hash(h);
            fb.insert_hash(h);
        }
    });
    assert_eq!(
        count(&present, |k| f.contains(k)),
        Q as u64,
        "false negative"
    );
    let mut c = Contenders::default();
    for (tag, keys) in [("absent", &absent), ("present", &present)] {
        let (f, fb, tree) = (&f, &fb, &tree);
        c.add(format!("fastbloom/{tag}"), move || {
            ns_per(Q, || count(keys, |k| fb.contains_hash(hash_key(k, seed))))
        });
        c.add(format!("filter/{tag}"), move || {
            ns_per(Q, || count(keys, |k| f.contains(k)))
        });
        c.add(format!("may_contain/{tag}"), move || {
            ns_per(Q, || count(keys, |k| tree.may_contain(k)))
        });
    }
    let (names, mut runs) = c.into_parts();
    let mut refs: Vec<&mut dyn FnMut() -> f64> = runs.iter_mut().map(|b| &mut **b as _).collect();
    let per = interleave(rounds, &mut refs);
    for (name, v) in names.iter().zip(&per) {
        let v: Vec<String> = v.iter().map(|x| format!("{x:.3}")).collect();
        println!("row\t{name}\t{}", v.join(","));
    }
}

fn run_size(n: u64, with_store: bool, rounds: usize, bpk_extra: &[u64]) -> String {
    // Query keys first, each its own allocation, as a service receives them.
    let t = Instant::now();
    let absent: Vec<Vec<u8>> = (0..Q as u64).map(|j| key(ABSENT_BASE + j)).collect();
    let present: Vec<Vec<u8>> = (0..Q as u64)
        .map(|j| key(splitmix64(j ^ 0xA5A5_5A5A) % n))
        .collect();
    // Half absent (ids past the absent set's), half present, in random order.
    let mixed: Vec<Vec<u8>> = (0..Q as u64)
        .map(|j| match splitmix64(j ^ 0x3C3C) & 1 {
            0 => key(ABSENT_BASE + Q as u64 + j),
            _ => key(splitmix64(j ^ 0x5A5A_A5A5) % n),
        })
        .collect();
    let fresh: Vec<Vec<Vec<u8>>> = (0..rounds as u64)
        .map(|r| {
            (0..Q_INSERT as u64)
                .map(|j| key(FRESH_BASE + r * Q_INSERT as u64 + j))
                .collect()
        })
        .collect();
    eprintln!("[{}] query keys made in {:.1?}", size_label(n), t.elapsed());

    // The store, then the filters, loaded with the keys 0..n.
    let stores = with_store.then(|| load_stores(n, 10.0));
    // Past the store sizes, `Tree::may_contain` still gets a row: a tree whose filter is
    // sized for `n` keys (the same bytes, so the same cache misses: the probe has no branch
    // on what it reads), holding the present query keys.
    let sized = (!with_store).then(|| load_sized(n, &present));
    // Stores at more bits per key, measured in the same rounds as the 10 bits/key one.
    let denser: Vec<(u64, bloomsled::Db)> = match with_store {
        true => bpk_extra
            .iter()
            .map(|&b| {
                let t = Instant::now();
                let db = load_bloomsled(n, b as f64);
                eprintln!(
                    "[{}] store at {b} bits/key in {:.1?}",
                    size_label(n),
                    t.elapsed()
                );
                (b, db)
            })
            .collect(),
        false => Vec::new(),
    };
    let tree: Option<&bloomsled::Db> = stores.as_ref().map(|(db, _)| db).or(sized.as_ref());
    let window = with_store.then(|| load_window(n, 10.0));
    let t = Instant::now();
    let f = Filter::with_bits_per_key(n, 10.0).expect("filter");
    let bits = f.num_bits() as usize;
    let mut fb = fastbloom::BloomFilter::with_num_bits(bits).hashes(f.num_hashes());
    let mut bf = bloomfilter::Bloom::<[u8]>::new_with_seed(bits / 8, n as usize, &[7; 32])
        .expect("bloomfilter");
    let seed = f.seed();
    load_chunks(n, CHUNK, |ids, buf| {
        for i in ids {
            write_key(buf, i);
            let h = hash_key(buf, seed);
            f.insert_hash(h);
            fb.insert_hash(h);
            bf.set(buf);
        }
    });
    eprintln!(
        "[{}] filters built in {:.1?}: {bits} bits, k = {} (bloomfilter k = {})",
        size_label(n),
        t.elapsed(),
        f.num_hashes(),
        bf.number_of_hash_functions()
    );
    let ah: Vec<u64> = absent.iter().map(|k| hash_key(k, seed)).collect();
    let ph: Vec<u64> = present.iter().map(|k| hash_key(k, seed)).collect();
    let mh: Vec<u64> = mixed.iter().map(|k| hash_key(k, seed)).collect();
    assert_eq!(
        count(&present, |k| f.contains(k)),
        Q as u64,
        "false negative"
    );
    let fpr = |c: &dyn Fn(&[u8]) -> bool| count(&absent, c) as f64 / Q as f64;
    let fpr_bs = fpr(&|k| f.contains(k));
    let fpr_fb = fpr(&|k| fb.contains_hash(hash_key(k, seed)));
    let fpr_bf = fpr(&|k| bf.check(k));

    // --- lookups: absent and present streams, by key and by hash ------------------------
    let passes: Vec<bool> = match &stores {
        Some((db, _)) => absent.iter().map(|k| db.may_contain(k)).collect(),
        None => Vec::new(),
    };
    let pick = |pass: bool| -> Vec<&Vec<u8>> {
        absent
            .iter()
            .zip(&passes)
            .filter(|&(_, &p)| p == pass)
            .map(|(k, _)| k)
            .collect()
    };
    let (negatives, fps) = (pick(false), pick(true));
    #[cfg(feature = "metrics")]
    let recording = stores.as_ref().map(|(db, _)| Recording::start(db.clone()));
    // Every `spread_step`-th absent key: as many keys as the filter passes, spread like them.
    let spread_step = (Q / fps.len().max(1)).max(1);
    let mut c = Contenders::default();
    for (tag, keys, hashes) in [
        ("absent", &absent, &ah),
        ("present", &present, &ph),
        ("mixed", &mixed, &mh),
    ] {
        let (f, fb, bf) = (&f, &fb, &bf);
        c.add(format!("fastbloom/{tag}"), move || {
            ns_per(Q, || count(keys, |k| fb.contains_hash(hash_key(k, seed))))
        });
        c.add(format!("filter/{tag}"), move || {
            ns_per(Q, || count(keys, |k| f.contains(k)))
        });
        c.add(format!("bloomfilter/{tag}"), move || {
            ns_per(Q, || count(keys, |k| bf.check(k)))
        });
        c.add(format!("fastbloom_hash/{tag}"), move || {
            ns_per(Q, || {
                hashes.iter().filter(|&&h| fb.contains_hash(h)).count() as u64
            })
        });
        c.add(format!("filter_hash/{tag}"), move || {
            ns_per(Q, || {
                hashes.iter().filter(|&&h| f.contains_hash(h)).count() as u64
            })
        });
        if let Some(db) = tree {
            c.add(format!("may_contain/{tag}"), move || {
                ns_per(Q, || count(keys, |k| db.may_contain(k)))
            });
        }
        if let Some((_, w)) = &window {
            c.add(format!("window/{tag}"), move || {
                ns_per(Q, || count(keys, |k| w.may_contain(k)))
            });
        }
        if let Some((db, raw)) = &stores {
            if tag == "mixed" {
                continue;
            }
            let q = if tag == "absent" { Q } else { Q_SLED };
            c.add(format!("get/{tag}"), move || {
                ns_per(q, || count(&keys[..q], |k| db.get(k).unwrap().is_some()))
            });
            c.add(format!("sled_get/{tag}"), move || {
                ns_per(Q_SLED, || {
                    count(&keys[..Q_SLED], |k| raw.get(k).unwrap().is_some())
                })
            });
            c.add(format!("unfiltered/{tag}"), move || {
                sled_gets(db, &keys[..Q_SLED])
            });
        }
    }
    if let Some((db, _)) = &stores {
        // The bound, measured: the filter, then sled's own get for the keys it passes.
        let absent = &absent;
        c.add("composed/absent", move || {
            ns_per(Q, || {
                count(absent, |k| {
                    db.may_contain(k) && db.get_unfiltered(k).unwrap().is_some()
                })
            })
        });
        // The same for fastbloom in front of the same store: what any filter's false
        // positives cost sled once the filter's probes run between them.
        let fb = &fb;
        c.add("fastbloom_composed/absent", move || {
            ns_per(Q, || {
                count(absent, |k| {
                    fb.contains_hash(hash_key(k, seed)) && db.get_unfiltered(k).unwrap().is_some()
                })
            })
        });
        // What the false positives' sled lookups cost, on the same keys: back to back, and
        // spread through the stream as they come, after hashing the keys between them with
        // no filter probed (minus the hashing alone). Against `composed` (after bloomsled's
        // probes) this says whether the filter or the stream makes them slower.
        let (passes, fps) = (&passes, &fps);
        c.add("fp/tight", move || sled_gets(db, fps));
        // As many other absent keys, back to back: the first ones (contiguous in memory,
        // like the tight loop's) and every `spread_step`-th (spread through memory like the
        // passed keys). Whether the passed keys' back-to-back cost is about how many lookups
        // run, or about where their bytes live.
        let (first, spread_keys) = (
            &absent[..fps.len()],
            absent
                .iter()
                .step_by(spread_step)
                .take(fps.len())
                .collect::<Vec<_>>(),
        );
        c.add("fp/first", move || sled_gets(db, first));
        c.add("fp/spread", move || sled_gets(db, &spread_keys));
        c.add("fp/hashed", move || {
            ns_per(Q, || {
                let mut x = 0u64;
                let mut found = 0u64;
                for (k, &pass) in absent.iter().zip(passes) {
                    x ^= hash_key(k, seed);
                    if pass {
                        found += db.get_unfiltered(k).unwrap().is_some() as u64;
                    }
                }
                black_box(x) ^ found
            })
        });
        c.add("hash/absent", move || {
            ns_per(Q, || absent.iter().fold(0, |x, k| x ^ hash_key(k, seed)))
        });
        let negatives = &negatives;
        c.add("may_contain/rejected", move || {
            ns_per(negatives.len(), || count(negatives, |k| db.may_contain(k)))
        });
        c.add("get/rejected", move || {
            ns_per(negatives.len(), || {
                count(negatives, |k| db.get(k).unwrap().is_some())
            })
        });
        // The same calls, the answer matched in place instead of moved out by `unwrap`:
        // what the caller's copy of the 40-byte `Option<IVec>` out of the `Result` costs.
        c.add("get_matched/rejected", move || {
            ns_per(negatives.len(), || {
                count(negatives, |k| matches!(db.get(k), Ok(Some(_))))
            })
        });
    }
    // With `--features metrics`: the same store's filter path and absent `get` while its
    // series are being recorded (issue 35's bound: ≤ 1.03× without).
    #[cfg(feature = "metrics")]
    if let (Some((db, _)), Some(rec)) = (&stores, &recording) {
        for (tag, keys) in [("absent", &absent), ("present", &present)] {
            c.add(format!("may_contain_metrics/{tag}"), move || {
                rec.during(|| ns_per(Q, || count(keys, |k| db.may_contain(k))))
            });
        }
        let absent = &absent;
        c.add("get_metrics/absent", move || {
            rec.during(|| ns_per(Q, || count(absent, |k| db.get(k).unwrap().is_some())))
        });
    }
    for (b, db) in &denser {
        let absent = &absent;
        c.add(format!("may_contain@{b}/absent"), move || {
            ns_per(Q, || count(absent, |k| db.may_contain(k)))
        });
        c.add(format!("get@{b}/absent"), move || {
            ns_per(Q, || count(absent, |k| db.get(k).unwrap().is_some()))
        });
    }
    let (names, mut runs) = c.into_parts();
    let mut refs: Vec<&mut dyn FnMut() -> f64> = runs.iter_mut().map(|b| &mut **b as _).collect();
    let t = Instant::now();
    let per = interleave(rounds, &mut refs);
    drop(refs);
    drop(runs);
    eprintln!("[{}] lookup rounds in {:.1?}", size_label(n), t.elapsed());
    let get = |name: &str| -> Option<&[f64]> {
        names.iter().position(|x| x == name).map(|i| &per[i][..])
    };

    // --- `get` and what it is held to, in alternating chunks of the same keys ------------
    // Run as separate contenders, each starts from the cache state the one before it left
    // (a 1M-key stream, another store's lookups), and a 5% question drowns in that. Paired,
    // each chunk follows a chunk of the other contender.
    let pairs = stores.as_ref().map(|(db, _)| {
        let t = Instant::now();
        let present_get = paired(
            &present[..Q_SLED],
            256,
            rounds,
            |ks| count(ks, |k| db.get(k).unwrap().is_some()),
            |ks| count(ks, |k| db.get_unfiltered(k).unwrap().is_some()),
        );
        let absent_get = paired(
            &absent,
            4096,
            rounds,
            |ks| count(ks, |k| db.get(k).unwrap().is_some()),
            |ks| {
                count(ks, |k| {
                    db.may_contain(k) && db.get_unfiltered(k).unwrap().is_some()
                })
            },
        );
        eprintln!("[{}] paired rounds in {:.1?}", size_label(n), t.elapsed());
        (present_get, absent_get)
    });

    // --- inserts of fresh keys -----------------------------------------------------------
    // Contenders: fastbloom, fastbloom atomic, filter, bloomfilter, then (with a store) tree
    // and sled. The atomic fastbloom is loaded like the others first.
    let fba = fastbloom::AtomicBloomFilter::with_num_bits(bits).hashes(f.num_hashes());
    load_chunks(n, CHUNK, |ids, buf| {
        for i in ids {
            write_key(buf, i);
            fba.insert_hash(hash_key(buf, seed));
        }
    });
    let mut round = [0usize; 6];
    let fbm = std::cell::RefCell::new(fb);
    let bfm = std::cell::RefCell::new(bf);
    let mut ins_runs: Vec<Run<'_>> = Vec::new();
    for (c, r) in round.iter_mut().enumerate() {
        let (f, fba, fbm, bfm, fresh, stores) = (&f, &fba, &fbm, &bfm, &fresh, &stores);
        if c >= 4 && stores.is_none() {
            break;
        }
        ins_runs.push(Box::new(move || {
            let keys = &fresh[*r % fresh.len()];
            *r += 1;
            ns_per(keys.len(), || match c {
                0 => {
                    let mut fb = fbm.borrow_mut();
                    count(keys, |k| fb.insert_hash(hash_key(k, seed)))
                }
                1 => count(keys, |k| fba.insert_hash(hash_key(k, seed))),
                2 => count(keys, |k| f.insert(k)),
                3 => {
                    let mut bf = bfm.borrow_mut();
                    count(keys, |k| bf.check_and_set(k))
                }
                4 => {
                    let db = &stores.as_ref().unwrap().0;
                    count(keys, |k| db.insert(k, VALUE).unwrap().is_some())
                }
                _ => {
                    let raw = &stores.as_ref().unwrap().1;
                    count(keys, |k| raw.insert(k, VALUE).unwrap().is_some())
                }
            })
        }));
    }
    let mut refs: Vec<&mut dyn FnMut() -> f64> =
        ins_runs.iter_mut().map(|b| &mut **b as _).collect();
    let ins = interleave(rounds, &mut refs);
    drop(refs);
    drop(ins_runs);

    // --- the table -----------------------------------------------------------------------
    const TAGS: [&str; 3] = ["absent", "present", "mixed"];
    let fb_of = |tag: &str| get(&format!("fastbloom/{tag}"));
    // One cell per column, each against fastbloom's figure of that column.
    let vs_fastbloom = |name: &str| -> Vec<String> {
        TAGS.iter()
            .map(|t| match get(&format!("{name}/{t}")) {
                Some(v) => cell(v, fb_of(t)),
                None => String::new(),
            })
            .collect()
    };
    let mut rows = vec![
        Row {
            what: "fastbloom 0.17 + xxh3-64 (`contains_hash`), baseline".into(),
            cells: TAGS.iter().map(|t| cell(fb_of(t).unwrap(), None)).collect(),
        },
        Row {
            what: "**bloomsled `Filter::contains`**".into(),
            cells: vs_fastbloom("filter"),
        },
    ];
    if tree.is_some() {
        rows.push(Row {
            what: match sized {
                None => "**bloomsled `Tree::may_contain`**".into(),
                Some(_) => format!(
                    "**bloomsled `Tree::may_contain`**: a tree whose filter is sized for {} keys \
                     (the same bytes), holding the present query keys",
                    size_label(n)
                ),
            },
            cells: vs_fastbloom("may_contain"),
        });
    }
    if let Some((_, w)) = &window {
        assert_eq!(
            count(&present, |k| w.may_contain(k)),
            Q as u64,
            "false negative"
        );
        let fpr_window = count(&absent, |k| w.may_contain(k)) as f64 / Q as f64;
        rows.push(Row {
            what: format!(
                "**bloomsled `Window::may_contain`**: {GENERATIONS} generations of {} keys \
                 (10 bits/key each, FPR {:.3}%), the same keys (ratio: to `Tree::may_contain` \
                 in the same rounds)",
                size_label(n / u64::from(GENERATIONS)),
                100.0 * fpr_window
            ),
            cells: TAGS
                .iter()
                .map(|t| {
                    cell(
                        get(&format!("window/{t}")).unwrap(),
                        get(&format!("may_contain/{t}")),
                    )
                })
                .collect(),
        });
    }
    rows.push(Row {
        what: "`bloomfilter` 3 (SipHash, its own k)".into(),
        cells: vs_fastbloom("bloomfilter"),
    });
    let fbh = |t: &str| get(&format!("fastbloom_hash/{t}"));
    rows.push(Row {
        what: "by hash (hashes made beforehand): fastbloom `contains_hash`".into(),
        cells: TAGS.iter().map(|t| cell(fbh(t).unwrap(), None)).collect(),
    });
    rows.push(Row {
        what: "by hash: bloomsled `Filter::contains_hash`".into(),
        cells: TAGS
            .iter()
            .map(|t| cell(get(&format!("filter_hash/{t}")).unwrap(), fbh(t)))
            .collect(),
    });
    let mut extra = String::new();
    if let Some((db, _)) = &stores {
        let sled_abs = get("sled_get/absent").unwrap();
        let sled_pre = get("sled_get/present").unwrap();
        let own_abs = get("unfiltered/absent").unwrap();
        let own_pre = get("unfiltered/present").unwrap();
        let (get_abs, get_pre) = (get("get/absent").unwrap(), get("get/present").unwrap());
        rows.push(Row {
            what: "sled's `get` on bloomsled's store (`Tree::get_unfiltered`)".into(),
            cells: vec![cell(own_abs, None), cell(own_pre, None), String::new()],
        });
        rows.push(Row {
            what: "**bloomsled `Tree::get`** (ratio: to sled's `get` on the same store)".into(),
            cells: vec![
                cell(get_abs, Some(own_abs)),
                cell(get_pre, Some(own_pre)),
                String::new(),
            ],
        });
        rows.push(Row {
            what: "plain sled 0.34 `get`, a second store of the same keys (ratio: \
                   bloomsled `Tree::get` to it)"
                .into(),
            cells: vec![
                format!(
                    "{} ({:.2}×)",
                    fmt_ns(median(sled_abs.to_vec())),
                    median_ratio(sled_abs, get_abs)
                ),
                format!(
                    "{} ({:.2}×)",
                    fmt_ns(median(sled_pre.to_vec())),
                    median_ratio(sled_pre, get_pre)
                ),
                String::new(),
            ],
        });
        rows.push(Row {
            what: "bloomsled `Tree::get`, absent keys the filter rejects, `.unwrap().is_some()` \
                   (ratio: to `may_contain` on the same keys)"
                .into(),
            cells: vec![
                cell(get("get/rejected").unwrap(), get("may_contain/rejected")),
                String::new(),
                String::new(),
            ],
        });
        rows.push(Row {
            what: "the same, the answer matched in place: `matches!(get(k), Ok(Some(_)))` \
                   (ratio: to `may_contain` on the same keys)"
                .into(),
            cells: vec![
                cell(
                    get("get_matched/rejected").unwrap(),
                    get("may_contain/rejected"),
                ),
                String::new(),
                String::new(),
            ],
        });
        // The absent-get bound: filter path + FPR × sled's absent get, per round.
        // `path` + `fpr` × `sled`, round by round.
        let formula = |path: &[f64], fpr: f64, sled: &[f64]| -> Vec<f64> {
            path.iter().zip(sled).map(|(m, s)| m + fpr * s).collect()
        };
        let store_fpr = 1.0 - negatives.len() as f64 / Q as f64;
        let bound = formula(get("may_contain/absent").unwrap(), store_fpr, own_abs);
        rows.push(Row {
            what: format!(
                "bound: `may_contain` + FPR ({:.3}%) × sled's absent `get` in a tight loop \
                 (ratio: `get` to it)",
                100.0 * store_fpr
            ),
            cells: vec![bound_cell(&bound, get_abs), String::new(), String::new()],
        });
        // The false positives' sled lookups, per false positive, round by round.
        let per_fp = |with: &[f64], without: &[f64]| -> Vec<f64> {
            let scale = Q as f64 / fps.len() as f64;
            with.iter()
                .zip(without)
                .map(|(w, o)| (w - o) * scale)
                .collect()
        };
        let fp_hashed = per_fp(get("fp/hashed").unwrap(), get("hash/absent").unwrap());
        let fp_probed = per_fp(
            get("composed/absent").unwrap(),
            get("may_contain/absent").unwrap(),
        );
        let fp_tight = get("fp/tight").unwrap();
        extra += &format!(
            "- sled's `get` of the {} absent keys the filter passes: {} back to back; spread \
             through the stream as they come, after hashing the keys between them with no filter \
             probed, {} ({:.2}× back to back); after bloomsled's probes of those keys, {} \
             ({:.2}×).\n",
            fps.len(),
            fmt_ns(median(fp_tight.to_vec())),
            fmt_ns(median(fp_hashed.clone())),
            median_ratio(fp_tight, &fp_hashed),
            fmt_ns(median(fp_probed.clone())),
            median_ratio(fp_tight, &fp_probed),
        );
        extra += &format!(
            "- sled's `get` of as many other absent keys, back to back: the first {} (contiguous \
             in memory, like the tight loop's {}) {}; one in {} (spread through memory like the \
             passed keys) {}.\n",
            fps.len(),
            Q_SLED,
            fmt_ns(median(get("fp/first").unwrap().to_vec())),
            spread_step,
            fmt_ns(median(get("fp/spread").unwrap().to_vec())),
        );
        let stream_bound = formula(get("may_contain/absent").unwrap(), store_fpr, &fp_hashed);
        rows.push(Row {
            what: "bound with sled's `get` as it costs in the stream: `may_contain` + FPR × \
                   sled's `get` of the passed keys after hashing the keys between them, no \
                   filter probed (ratio: `get` to it)"
                .into(),
            cells: vec![
                bound_cell(&stream_bound, get_abs),
                String::new(),
                String::new(),
            ],
        });
        let ((pg, ps), (ag, ac)) = pairs.as_ref().unwrap();
        rows.push(Row {
            what: "bound measured: `may_contain`, then sled's `get` for the keys it passes; \
                   paired with `get` in alternating chunks of 4,096 keys (ratio: `get` to it)"
                .into(),
            cells: vec![bound_cell(ac, ag), String::new(), String::new()],
        });
        rows.push(Row {
            what: "**bloomsled `Tree::get`** paired with sled's `get` on the same store, \
                   alternating chunks of 256 keys (ratio: to sled's)"
                .into(),
            cells: vec![String::new(), cell(pg, Some(ps)), String::new()],
        });
        // The composition itself against the formula: what a `get` that added nothing to
        // `may_contain` and sled's `get` would read, so how much of the bound is left for it.
        rows.push(Row {
            what: format!(
                "bloomsled `may_contain`, then sled's `get` for the keys it passes (ratio: to \
                 `may_contain` + FPR ({:.3}%) × sled's absent `get` in a tight loop)",
                100.0 * store_fpr
            ),
            cells: vec![
                cell(get("composed/absent").unwrap(), Some(&bound)),
                String::new(),
                String::new(),
            ],
        });
        // fastbloom's own bound by the same formula, and its measured composition against it.
        let fb_bound = formula(fb_of("absent").unwrap(), fpr_fb, own_abs);
        rows.push(Row {
            what: format!(
                "for comparison: fastbloom + xxh3, then sled's `get` for the keys it passes \
                 (ratio: to fastbloom + FPR ({:.3}%) × sled's absent `get` in a tight loop)",
                100.0 * fpr_fb
            ),
            cells: vec![
                cell(get("fastbloom_composed/absent").unwrap(), Some(&fb_bound)),
                String::new(),
                String::new(),
            ],
        });
        #[cfg(feature = "metrics")]
        {
            rows.push(Row {
                what: "with `metrics` on: **`Tree::may_contain`** while a recorder is installed \
                       and the store's series are recorded every 10 ms (ratio: to \
                       `Tree::may_contain` without, same rounds)"
                    .into(),
                cells: vec![
                    cell(
                        get("may_contain_metrics/absent").unwrap(),
                        get("may_contain/absent"),
                    ),
                    cell(
                        get("may_contain_metrics/present").unwrap(),
                        get("may_contain/present"),
                    ),
                    String::new(),
                ],
            });
            rows.push(Row {
                what: "with `metrics` on: **`Tree::get`** of absent keys, the same recording \
                       (ratio: to `Tree::get` without, same rounds)"
                    .into(),
                cells: vec![
                    cell(get("get_metrics/absent").unwrap(), get("get/absent")),
                    String::new(),
                    String::new(),
                ],
            });
        }
        rows.push(Row {
            what: "`insert` of a fresh key: sled / **bloomsled `Tree::insert`**".into(),
            cells: vec![
                cell(&ins[5], None),
                cell(&ins[4], Some(&ins[5])),
                String::new(),
            ],
        });
        let s = db.stats();
        extra += &format!(
            "- Store: {} keys, {:.2} bits/key, k = {}.\n",
            s.items, s.bits_per_key, s.num_hashes
        );
        // What more bits per key buy, every store in the same rounds.
        extra += "\n| bits/key | k | filter | FPR | `may_contain` | absent `get` | bound: \
                  `may_contain` + FPR × sled's absent `get` in a tight loop (`get` ÷ it) | \
                  absent `get`: speed-up over sled's |\n\
                  |---:|---:|---:|---:|---:|---:|---:|---:|\n";
        let mut bpk_line = |d: &bloomsled::Db, mc: &[f64], g: &[f64], fpr: f64, default: bool| {
            let s = d.stats();
            let bound = formula(mc, fpr, own_abs);
            extra += &format!(
                "| {:.1}{} | {} | {:.1} MB | {:.3}% | {} | {} | {} | {:.0}× |\n",
                s.bits_per_key,
                if default { " (default)" } else { "" },
                s.num_hashes,
                s.num_bits as f64 / 8e6,
                100.0 * fpr,
                fmt_ns(median(mc.to_vec())),
                fmt_ns(median(g.to_vec())),
                bound_cell(&bound, g),
                median_ratio(g, own_abs),
            );
        };
        bpk_line(
            db,
            get("may_contain/absent").unwrap(),
            get_abs,
            store_fpr,
            false,
        );
        for (b, d) in &denser {
            let fpr = count(&absent, |k| d.may_contain(k)) as f64 / Q as f64;
            let mc = get(&format!("may_contain@{b}/absent")).unwrap();
            let g = get(&format!("get@{b}/absent")).unwrap();
            bpk_line(d, mc, g, fpr, *b == 0);
        }
    }
    rows.push(Row {
        what: "`insert` of a fresh key: fastbloom `BloomFilter` (`&mut self`) / **bloomsled \
               `Filter::insert`**"
            .into(),
        cells: vec![
            cell(&ins[0], None),
            cell(&ins[2], Some(&ins[0])),
            String::new(),
        ],
    });
    rows.push(Row {
        what: "`insert` of a fresh key: fastbloom `AtomicBloomFilter` (`&self`, like ours) / \
               **bloomsled `Filter::insert`**"
            .into(),
        cells: vec![
            cell(&ins[1], None),
            cell(&ins[2], Some(&ins[1])),
            String::new(),
        ],
    });
    rows.push(Row {
        what: "`insert`: `bloomfilter` `check_and_set` (ratio: to fastbloom `BloomFilter`)".into(),
        cells: vec![cell(&ins[3], Some(&ins[0])), String::new(), String::new()],
    });
    let mut table = format!(
        "#### {} keys in the filter, 10 bits/key, {} absent, {} present and {} mixed query keys\n\n\
         bloomsled's probe kernel: {} (`BLOOMSLED_KERNEL`). Medians of {rounds} interleaved rounds; in brackets the median per-round ratio to \
         the baseline of its section and its min–max. False-positive rate: bloomsled \
         {:.3}%, fastbloom {:.3}%, bloomfilter {:.3}%.\n\n\
         | per key | absent keys | present keys | 50/50 mix |\n|---|---:|---:|---:|\n",
        size_label(n),
        Q,
        Q,
        Q,
        bloomsled::probe_kernel(),
        100.0 * fpr_bs,
        100.0 * fpr_fb,
        100.0 * fpr_bf
    );
    for r in rows {
        table += &format!("| {} | {} |\n", r.what, r.cells.join(" | "));
    }
    table += &format!("\n{extra}\n");
    black_box(&fbm);
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

/// A bloomsled store and a plain sled holding the keys `0..n`, both read once.
fn load_stores(n: u64, bpk: f64) -> (bloomsled::Db, sled::Db) {
    let t = Instant::now();
    let raw = sled::Config::new()
        .temporary(true)
        .cache_capacity(4 << 30)
        .open()
        .expect("sled");
    load_chunks(n, CHUNK, |ids, buf| {
        let mut b = sled::Batch::default();
        for i in ids {
            write_key(buf, i);
            b.insert(&buf[..], VALUE);
        }
        raw.apply_batch(b).expect("sled batch");
    });
    raw.flush().expect("flush");
    black_box(raw.iter().count());
    let db = load_bloomsled(n, bpk);
    eprintln!("[{}] stores loaded in {:.1?}", size_label(n), t.elapsed());
    (db, raw)
}

/// An empty bloomsled store sized for `n` keys at `bpk` bits per key (0: the default rate,
/// as `Config::new()` sizes a tree).
fn open_store(n: u64, bpk: f64) -> bloomsled::Db {
    let config = Config::new()
        .temporary(true)
        .cache_capacity(4 << 30)
        .expected_items(n)
        .auto_rebuild(false);
    let config = if bpk > 0.0 {
        config.bits_per_key(bpk)
    } else {
        config
    };
    config.open().expect("bloomsled")
}

fn load_bloomsled(n: u64, bpk: f64) -> bloomsled::Db {
    let db = open_store(n, bpk);
    load_chunks(n, CHUNK, |ids, buf| {
        let mut b = bloomsled::Batch::default();
        for i in ids {
            write_key(buf, i);
            b.insert(&buf[..], VALUE);
        }
        db.apply_batch(b).expect("bloomsled batch");
    });
    db.flush().expect("flush");
    black_box(db.iter().count());
    db
}

/// A window of [`GENERATIONS`] generations holding the keys `0..n` (in a database of its
/// own), loaded as the store is (a batch per chunk): generation `g` holds the keys
/// `n·g/G .. n·(g+1)/G`, written while its `ManualClock` stands in that generation, and its
/// filter is sized for its share at `bpk` bits per key.
fn load_window(n: u64, bpk: f64) -> (bloomsled::Db, Window) {
    const WIDTH_MS: u64 = 60_000;
    const T0: u64 = 1_700_000_000_000;
    let t = Instant::now();
    let g_count = u64::from(GENERATIONS);
    let db = Config::new()
        .temporary(true)
        .cache_capacity(4 << 30)
        .auto_rebuild(false)
        .open()
        .expect("bloomsled");
    let clock = ManualClock::new(T0);
    let window = db
        .open_window(
            "stream",
            WindowConfig::new(Duration::from_millis(WIDTH_MS * g_count), GENERATIONS)
                .tree_config(
                    TreeConfig::new()
                        .expected_items(n.div_ceil(g_count))
                        .bits_per_key(bpk),
                )
                .clock(clock.clone()),
        )
        .expect("window");
    for g in 0..g_count {
        clock.set(T0 + g * WIDTH_MS);
        let (from, to) = (n * g / g_count, n * (g + 1) / g_count);
        // The current generation's tree, loaded directly.
        let (_, tree) = window.generation_trees().expect("ring").remove(0);
        load_chunks(to - from, CHUNK, |ids, buf| {
            let mut b = bloomsled::Batch::default();
            for i in ids {
                write_key(buf, from + i);
                b.insert(&buf[..], VALUE);
            }
            tree.apply_batch(b).expect("bloomsled batch");
        });
    }
    db.flush().expect("flush");
    assert_eq!(window.stats().live.len(), GENERATIONS as usize);
    eprintln!(
        "[{}] window of {GENERATIONS} generations loaded in {:.1?}",
        size_label(n),
        t.elapsed()
    );
    (db, window)
}

/// A bloomsled tree whose filter is sized for `n` keys at 10 bits/key, holding `keys`.
fn load_sized(n: u64, keys: &[Vec<u8>]) -> bloomsled::Db {
    let t = Instant::now();
    let db = open_store(n, 10.0);
    for chunk in keys.chunks(CHUNK as usize) {
        let mut b = bloomsled::Batch::default();
        for k in chunk {
            b.insert(&k[..], VALUE);
        }
        db.apply_batch(b).expect("bloomsled batch");
    }
    assert!(keys.iter().all(|k| db.may_contain(k)), "false negative");
    eprintln!(
        "[{}] tree with a filter sized for {} keys, {} keys in it, loaded in {:.1?}",
        size_label(n),
        size_label(n),
        keys.len(),
        t.elapsed()
    );
    db
}

//! The per-kernel table: one child process of this bench per kernel and size, each with
//! `BLOOMSLED_KERNEL` set (the variable is read once per process).
//!
//! Passes are timed in the thread's CPU time (`CLOCK_THREAD_CPUTIME_ID`) unless
//! `BLOOMSLED_STREAM_CLOCK=wall`: the lookups run on one thread with no I/O and no waiting,
//! so on a quiet machine the two clocks agree, while on a shared one the time slices other
//! processes take in the middle of a pass no longer land on whichever contender ran then
//! (their effect on the caches still does).

use std::time::Instant;

use bloomsled::hash::hash_key;
use bloomsled::{Filter, DEFAULT_FALSE_POSITIVE_MEMORY as MEMORY};

use crate::common::rounds::{cpu_ns_per, fmt_ns, interleave, median, ns_per, spread};
use crate::common::{key, load_chunks, size_label, splitmix64, write_key};
use crate::{cell, count, load, Contenders, ABSENT_BASE, CHUNK, Q, Q_SLED};

/// True unless `BLOOMSLED_STREAM_CLOCK=wall`: the kernel table times passes in the thread's
/// CPU time.
fn cpu_clock() -> bool {
    std::env::var("BLOOMSLED_STREAM_CLOCK").map_or(true, |c| !c.trim().eq_ignore_ascii_case("wall"))
}

/// ns per key of one pass of `f` over `n` keys, by the table's clock ([`cpu_clock`]).
fn per_key(n: usize, f: impl FnOnce() -> u64) -> f64 {
    if cpu_clock() {
        cpu_ns_per(n, f)
    } else {
        ns_per(n, f)
    }
}

/// Set in a child process of [`kernel_table`].
pub const KERNEL_CHILD: &str = "BLOOMSLED_STREAM_KERNEL_CHILD";

/// One child's measurements: the kernel it ran, and each contender's ns per key, round by
/// round.
struct ChildRows {
    ran: String,
    per: Vec<(String, Vec<f64>)>,
    /// Per default tree (`on`, `off`: its false-positive memory), the share of the absent
    /// keys its filter passes on to sled.
    rates: Vec<(String, f64)>,
}

impl ChildRows {
    /// A measured row of the child's.
    fn get(&self, name: &str) -> &[f64] {
        &self
            .per
            .iter()
            .find(|(x, _)| x == name)
            .expect("a measured row")
            .1
    }

    /// The pass rate of the default tree `tag` (`on`, `off`).
    fn rate(&self, tag: &str) -> f64 {
        self.rates
            .iter()
            .find(|(x, _)| x == tag)
            .expect("a measured rate")
            .1
    }
}

/// The per-kernel table: for each size and each kernel of `BLOOMSLED_STREAM_KERNELS`
/// (default `scalar,avx2,avx512`), a child process of this bench with `BLOOMSLED_KERNEL` set
/// to it (the variable is read once per process) measures fastbloom + xxh3,
/// `Filter::contains` and `Tree::may_contain` on the same absent and present key streams, in
/// interleaved rounds. A kernel this CPU cannot run is reported as such, not measured.
pub fn kernel_table(sizes: &[u64], rounds: usize) -> String {
    let kernels =
        std::env::var("BLOOMSLED_STREAM_KERNELS").unwrap_or_else(|_| "scalar,avx2,avx512".into());
    let clock = if cpu_clock() {
        "the thread's CPU time (`CLOCK_THREAD_CPUTIME_ID`)"
    } else {
        "wall time"
    };
    let mut out = format!(
        "#### The probe kernels, each forced in its own process (`BLOOMSLED_KERNEL`), 10 bits/key\n\n\
         CPU: {} ({}). Medians of {rounds} interleaved rounds per process, timed in {clock}; \
         in brackets the median per-round ratio to fastbloom 0.17 + xxh3-64 measured in the \
         same rounds, and its min–max. `Tree::may_contain`: a tree whose filter is sized for \
         the keys (the same bytes), holding the present query keys. Absent `get`: \
         `Tree::get` of absent keys on a tree at default settings (0.1% FPR) holding all the \
         keys, against sled's own `get` on that store (`Tree::get_unfiltered`): in a stream \
         (the rounds of the parts table below, memory on), and in alternating \
         chunks of 1,024 of the same keys (each `get` chunk right after 1,024 of sled's \
         `get`s, whose reads evict the filter from the caches and the TLB); in brackets how \
         many times faster, median per round and min–max.\n\n\
         | keys | kernel | fastbloom absent | `Filter::contains` absent | `Tree::may_contain` absent \
         | fastbloom present | `Filter::contains` present | `Tree::may_contain` present \
         | absent `get` in a stream (vs sled's) | absent `get` after sled's, alternating chunks |\n\
         |---|---|---:|---:|---:|---:|---:|---:|---:|---:|\n",
        cpu_model(),
        cpu_features()
    );
    let mut parts = parts_header(rounds, clock);
    for &n in sizes {
        for kernel in kernels.split(',').map(str::trim).filter(|k| !k.is_empty()) {
            let t = Instant::now();
            let child = run_child(n, kernel, rounds);
            eprintln!(
                "[{}] kernel {kernel} measured in {:.1?}",
                size_label(n),
                t.elapsed()
            );
            out += &kernel_row(n, kernel, &child);
            parts += &parts_rows(n, kernel, &child);
        }
    }
    out + "\n" + &parts
}

/// The header of the parts table: each absent lookup beside what its parts cost.
fn parts_header(rounds: usize, clock: &str) -> String {
    format!(
        "#### The absent lookup at the cost of its parts, per kernel\n\n\
         A tree at default settings (0.1% FPR) sized for and holding the keys (loaded in \
         batches of 10,000), with the false-positive memory on (the default) and off. Per \
         round ({rounds}, medians, timed in {clock}), the same 1M absent keys through \
         `may_contain`, `get`, `contains_key` and the two parts composed by hand \
         (`may_contain`, then sled's `get` for the keys it passes), sharing each chunk of \
         65,536 keys in an order that rotates (each follows each as often), then sled's own \
         absent `get` on that store (`Tree::get_unfiltered`) back to back over 65,536 of \
         them. Parts: `may_contain` plus \
         the share of the keys the filter passes times sled's `get`, both from the same \
         round; in brackets each call's median per-round ratio to its \
         parts, and its min–max. (With the memory on, the false positives are remembered \
         after their first `get`, and later rounds skip their sled reads: the bound still \
         counts them; the parts composed by hand pay them every round.) The composition \
         costs more than the formula when sled's lookups, spread through the stream, cost \
         more than back to back: `get` adding nothing to its parts reads the composition's \
         ratio. Present keys (131,072 of them): `Tree::get`, `Tree::get_many` (one call per \
         chunk), the parts composed by hand (`may_contain`, then sled's `get`) and sled's own \
         `get` on the same store (`Tree::get_unfiltered`) share the keys in chunks of 1,024, \
         each run of four chunks dealt one to each call in a random order; in brackets each \
         call's median per-round ratio to sled's \
         `get` and its min–max. The composed parts price the filter's cache miss before \
         sled's walk, which a `get` that answers absent keys without the store cannot \
         hide: present `get` adding nothing to its parts reads their ratio.\n\n\
         | keys | kernel | false-positive memory | `may_contain` | sled's absent `get` \
         | passed to sled | parts | absent `get` (÷ parts) | absent `contains_key` (÷ parts) \
         | the parts composed by hand (÷ parts) | present: the parts composed by hand \
         (÷ sled's) | present `get` (÷ sled's) | present `get_many` (÷ sled's) |\n\
         |---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n"
    )
}

/// The parts table's rows of one child (memory on and off), or that the CPU cannot run
/// `kernel`.
fn parts_rows(n: u64, kernel: &str, child: &ChildRows) -> String {
    if !child.ran.eq_ignore_ascii_case(kernel) {
        return format!(
            "| {} | {kernel} | not on this CPU (it ran {}) | | | | | | | | | | |\n",
            size_label(n),
            child.ran
        );
    }
    let mut rows = String::new();
    for tag in ["on", "off"] {
        let (may, sled, rate) = (
            child.get(&format!("may/{tag}")),
            child.get(&format!("sled/{tag}")),
            child.rate(tag),
        );
        let parts: Vec<f64> = may.iter().zip(sled).map(|(m, s)| m + rate * s).collect();
        rows += &format!(
            "| {} | **{kernel}** | {tag} | {} | {} | {:.3}% | {} |",
            size_label(n),
            fmt_ns(median(may.to_vec())),
            fmt_ns(median(sled.to_vec())),
            rate * 100.0,
            fmt_ns(median(parts.clone())),
        );
        for call in ["get", "contains_key", "composed"] {
            rows += &format!(
                " {} |",
                cell(child.get(&format!("{call}/{tag}")), Some(&parts))
            );
        }
        for call in ["composed", "get", "many"] {
            rows += &format!(
                " {} |",
                cell(
                    child.get(&format!("present_{call}/{tag}")),
                    Some(child.get(&format!("present_sled/{tag}")))
                )
            );
        }
        rows += "\n";
    }
    rows
}

/// The CPU's model name, from /proc/cpuinfo.
fn cpu_model() -> String {
    std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|c| {
            c.lines()
                .find(|l| l.starts_with("model name"))
                .and_then(|l| l.split(':').nth(1))
                .map(|m| m.trim().to_string())
        })
        .unwrap_or_else(|| "unknown CPU".into())
}

/// Runs this bench as a [`kernel_child`] of `n` keys under `kernel`, and reads its rows.
fn run_child(n: u64, kernel: &str, rounds: usize) -> ChildRows {
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
    let mut rates = Vec::new();
    for line in text.lines() {
        if let Some(k) = line.strip_prefix("kernel\t") {
            ran = Some(k.to_string());
        } else if let Some(rest) = line.strip_prefix("rate\t") {
            let (tag, r) = rest.split_once('\t').expect("tag and rate");
            rates.push((tag.to_string(), r.parse().expect("a rate")));
        } else if let Some(rest) = line.strip_prefix("row\t") {
            let (name, values) = rest.split_once('\t').expect("name and values");
            let v = values.split(',').map(|x| x.parse().expect("ns")).collect();
            per.push((name.to_string(), v));
        }
    }
    let ran = ran.expect("the child names its kernel");
    ChildRows { ran, per, rates }
}

/// The table row of one child: its medians and ratios, or that the CPU cannot run `kernel`.
fn kernel_row(n: u64, kernel: &str, child: &ChildRows) -> String {
    let ran = &child.ran;
    if !ran.eq_ignore_ascii_case(kernel) {
        return format!(
            "| {} | {kernel} | not on this CPU (it ran {ran}) | | | | | | | |\n",
            size_label(n)
        );
    }
    let mut row = format!("| {} | **{kernel}** |", size_label(n));
    for tag in ["absent", "present"] {
        let base = child.get(&format!("fastbloom/{tag}"));
        row += &format!(" {} |", cell(base, None));
        for what in ["filter", "may_contain"] {
            row += &format!(
                " {} |",
                cell(child.get(&format!("{what}/{tag}")), Some(base))
            );
        }
    }
    for (get, sled) in [("get/on", "sled/on"), ("get/absent", "sled_get/absent")] {
        let (get, sled) = (child.get(get), child.get(sled));
        let faster: Vec<f64> = sled.iter().zip(get).map(|(s, g)| s / g).collect();
        let (lo, hi) = spread(&faster);
        row += &format!(
            " {} vs {} ({:.0}× faster, {lo:.0}–{hi:.0}) |",
            fmt_ns(median(get.to_vec())),
            fmt_ns(median(sled.to_vec())),
            median(faster.clone())
        );
    }
    row + "\n"
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
pub fn kernel_child(n: u64, rounds: usize) {
    println!("kernel\t{}", bloomsled::probe_kernel());
    let absent: Vec<Vec<u8>> = (0..Q as u64).map(|j| key(ABSENT_BASE + j)).collect();
    let present: Vec<Vec<u8>> = (0..Q as u64)
        .map(|j| key(splitmix64(j ^ 0xA5A5_5A5A) % n))
        .collect();
    let tree = load::load_sized(n, 10.0, &present, MEMORY);
    // The tree users run: default settings (0.1%, the false-positive memory on), sized for
    // and holding the keys `0..n` (the present query keys are drawn from them), loaded in
    // batches; and the same without the memory, where every false positive reads sled.
    let trees = [
        ("on", load::load_bloomsled_with(n, 0.0, MEMORY)),
        ("off", load::load_bloomsled_with(n, 0.0, 0)),
    ];
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
            per_key(Q, || count(keys, |k| fb.contains_hash(hash_key(k, seed))))
        });
        c.add(format!("filter/{tag}"), move || {
            per_key(Q, || count(keys, |k| f.contains(k)))
        });
        c.add(format!("may_contain/{tag}"), move || {
            per_key(Q, || count(keys, |k| tree.may_contain(k)))
        });
    }
    for (_, db) in &trees {
        // Before the default trees' lookups (after the interleaved rounds): sled's first reads of the absent keys' leaves are slower by up to 10× (measured:
        // 47, 29, 14, 5.3, 4.5 µs in five rounds without this pass): read them once, untimed.
        count(&absent[..Q_SLED], |k| {
            db.get_unfiltered(k).unwrap().is_some()
        });
    }
    let (names, mut runs) = c.into_parts();
    let mut refs: Vec<&mut dyn FnMut() -> f64> = runs.iter_mut().map(|b| &mut **b as _).collect();
    let mut per = interleave(rounds, &mut refs);
    let mut names = names;
    // Each default tree's absent lookups and their parts (see `absent_parts`).
    for (tag, db) in &trees {
        let passed = count(&absent, |k| db.may_contain(k));
        println!("rate\t{tag}\t{}", passed as f64 / Q as f64);
        for (call, v) in ["may", "get", "contains_key", "composed", "sled"]
            .iter()
            .zip(absent_parts(db, &absent, rounds))
        {
            names.push(format!("{call}/{tag}"));
            per.push(v);
        }
    }
    let got = chunked(
        &trees[0].1,
        &absent[..Q_SLED],
        rounds,
        &[Chunked::Get, Chunked::Sled],
        false,
    );
    names.extend(["get/absent".to_string(), "sled_get/absent".to_string()]);
    per.extend(got);
    // Present `get` against sled's own on the same store, the same keys in shuffled chunks:
    // what the filter and the false-positive memory add to a lookup sled answers, beside
    // what the filter's part alone adds (`may_contain` then sled's `get`, by hand).
    for (tag, db) in &trees {
        let calls = [
            Chunked::Get,
            Chunked::GetMany,
            Chunked::Composed,
            Chunked::Sled,
        ];
        for (call, v) in ["get", "many", "composed", "sled"].iter().zip(chunked(
            db,
            &present[..2 * Q_SLED],
            rounds,
            &calls,
            true,
        )) {
            names.push(format!("present_{call}/{tag}"));
            per.push(v);
        }
    }
    for (name, v) in names.iter().zip(&per) {
        let v: Vec<String> = v.iter().map(|x| format!("{x:.3}")).collect();
        println!("row\t{name}\t{}", v.join(","));
    }
}

/// Per round, ns per key of `db`'s absent lookups as users make them, over all of `absent`
/// (its filter answers nearly every key; sled is read for the ~0.1% it passes): in order,
/// `Tree::may_contain`, `Tree::get`, `Tree::contains_key`, the two parts composed by hand
/// (`may_contain`, then sled's `get` for the keys it passes), then sled's own `get` of the
/// first [`Q_SLED`] keys (`Tree::get_unfiltered`, back to back). The first four share each
/// chunk of 65,536 keys, in an order that rotates with the chunk and the round, so that each
/// follows each as often and all see the same caches; sled's pass closes the round.
fn absent_parts(db: &bloomsled::Db, absent: &[Vec<u8>], rounds: usize) -> [Vec<f64>; 5] {
    const CALLS: usize = 4;
    let mut per: [Vec<f64>; CALLS + 1] = Default::default();
    for r in 0..rounds {
        let mut t = [0.0; CALLS];
        for (c, ks) in absent.chunks(1 << 16).enumerate() {
            for j in 0..CALLS {
                let call = (r + c + j) % CALLS;
                t[call] += per_key(1, || match call {
                    0 => count(ks, |k| db.may_contain(k)),
                    1 => count(ks, |k| db.get(k).unwrap().is_some()),
                    2 => count(ks, |k| db.contains_key(k).unwrap()),
                    _ => count(ks, |k| {
                        db.may_contain(k) && db.get_unfiltered(k).unwrap().is_some()
                    }),
                });
            }
        }
        for (v, t) in per.iter_mut().zip(t) {
            v.push(t / absent.len() as f64);
        }
        per[CALLS].push(per_key(Q_SLED, || {
            count(&absent[..Q_SLED], |k| {
                db.get_unfiltered(k).unwrap().is_some()
            })
        }));
    }
    per
}

/// A call timed by [`chunked`].
#[derive(Clone, Copy)]
enum Chunked {
    /// `Tree::get`, key by key.
    Get,
    /// One `Tree::get_many` call per chunk.
    GetMany,
    /// The filter's part and sled's composed by hand: `Tree::may_contain`, then sled's `get`
    /// of the keys it passes (`Tree::get_unfiltered`).
    Composed,
    /// sled's own `get` (`Tree::get_unfiltered`).
    Sled,
}

/// Per round, ns per key of each of `calls` over `db`'s `keys`, sharing them in chunks of
/// 1,024: each run of `calls.len()` chunks gives one to each call, in the calls' order
/// turned by the round (chunk `c` of round `r` to call `(c + r) % n`: two calls alternate,
/// as `crate::paired` does), or if `shuffle` in an order drawn at random per run and round,
/// so that no call always follows the same one. (A fixed order of four did not do: `get`,
/// `get_many`, composed, sled's `get` read present `get` at 0.92–0.96× sled's, where two
/// calls alternating read 1.05×; the random order reads as the latter.)
fn chunked(
    db: &bloomsled::Db,
    keys: &[Vec<u8>],
    rounds: usize,
    calls: &[Chunked],
    shuffle: bool,
) -> Vec<Vec<f64>> {
    const GET_CHUNK: usize = 1 << 10;
    let mut per = vec![Vec::new(); calls.len()];
    for r in 0..rounds {
        let (mut t, mut n) = (vec![0.0; calls.len()], vec![0; calls.len()]);
        let mut order: Vec<usize> = (0..calls.len()).map(|i| (i + r) % calls.len()).collect();
        for (c, ks) in keys.chunks(GET_CHUNK).enumerate() {
            if shuffle && c % calls.len() == 0 {
                // Fisher–Yates, seeded by the round and the run.
                for j in (1..order.len()).rev() {
                    let z = splitmix64(((r as u64) << 32) ^ (c * order.len() + j) as u64);
                    order.swap(j, (z % (j as u64 + 1)) as usize);
                }
            }
            let i = order[c % calls.len()];
            t[i] += per_key(1, || match calls[i] {
                Chunked::Get => count(ks, |k| db.get(k).unwrap().is_some()),
                Chunked::GetMany => {
                    let got = db.get_many(ks).unwrap();
                    got.iter().filter(|v| v.is_some()).count() as u64
                }
                Chunked::Composed => count(ks, |k| {
                    db.may_contain(k) && db.get_unfiltered(k).unwrap().is_some()
                }),
                Chunked::Sled => count(ks, |k| db.get_unfiltered(k).unwrap().is_some()),
            });
            n[i] += ks.len();
        }
        for (v, (t, n)) in per.iter_mut().zip(t.iter().zip(&n)) {
            v.push(t / *n as f64);
        }
    }
    per
}

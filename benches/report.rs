//! The headline comparisons in one process, written as the markdown table in docs/benchmarks.md
//! (between the `bench-report` markers) and printed.
//!
//! `cargo bench --bench report` (BLOOMSLED_REPORT_KEYS sets the key count, default 1,000,000;
//! BLOOMSLED_REPORT_NO_WRITE=1 prints without touching docs/benchmarks.md; BLOOMSLED_REPORT_DEBUG=1
//! also splits absent gets into false positives and filter negatives).
//!
//! Each figure is the median of 7 timed rounds over the same keys (21 interleaved rounds for
//! the comparisons of a few percent); ratios compare numbers from the same run. The criterion benches (`lookup`, `persist`) measure the same things
//! with confidence intervals.

use std::hint::black_box;
use std::time::Instant;

use bloomsled::hash::hash_key;
use bloomsled::{Batch, Config, Filter};
use common::rounds::{fmt_ns, interleaved, timed, Paired};

mod common;

const ROUNDS: usize = 7;
/// Rounds of the interleaved comparisons, whose differences are a few percent.
const PAIRED_ROUNDS: usize = 21;
const BITS_PER_KEY: f64 = 10.0;

fn url(i: u64, tag: &str) -> Vec<u8> {
    format!(
        "https://h{}.example.com/{tag}/{:016x}/index.html",
        i % 100,
        i.wrapping_mul(0x9E37_79B9_7F4A_7C15)
    )
    .into_bytes()
}

/// How many of `keys` `f` holds true for.
fn count_true<K: AsRef<[u8]>>(f: &dyn Fn(&[u8]) -> bool, keys: &[K]) -> u64 {
    keys.iter().filter(|k| f(k.as_ref())).count() as u64
}

/// Median ns per item of `f` run over `n` items, `ROUNDS` times.
fn median_ns(n: usize, mut f: impl FnMut() -> u64) -> f64 {
    let mut v: Vec<f64> = (0..ROUNDS)
        .map(|_| {
            let t = Instant::now();
            black_box(f());
            t.elapsed().as_nanos() as f64 / n as f64
        })
        .collect();
    v.sort_by(f64::total_cmp);
    v[ROUNDS / 2]
}

/// `a` against `b`, each returning the duration of a round over `n` items, measured in
/// `PAIRED_ROUNDS` interleaved rounds (see [`interleaved`]). Returns the median ns per item
/// of each and the median of the per-round ratios `b / a`, which drift moves less than the
/// ratio of the two medians.
fn paired(
    n: usize,
    mut a: impl FnMut() -> std::time::Duration,
    mut b: impl FnMut() -> std::time::Duration,
) -> Paired {
    let [va, vb] = interleaved(PAIRED_ROUNDS, n, &mut [&mut a, &mut b]);
    Paired::of(va, vb)
}

fn main() {
    // `cargo bench` passes `--bench`; nothing else to parse.
    let n: u64 = std::env::var("BLOOMSLED_REPORT_KEYS")
        .ok()
        .and_then(|s| s.replace('_', "").parse().ok())
        .unwrap_or(1_000_000);
    let q = 16_384usize; // query keys: a cache-resident pool, as a just-received key is

    // Query keys, made before the stores so that they sit together in a few pages, as a
    // service's just-received keys do. (Made after loading sled, they were strewn over a
    // heap of gigabytes, one page each: every get then paid a TLB miss, and the hashing
    // alone measured 38 ns per key instead of 4.)
    //
    // Absent keys look like the stored ones (same hosts, same path shape), so they fall
    // between stored keys all over the tree, as a crawler's next URL does. (Keys under a
    // path of their own would all sort into the same few leaves, which sled then serves
    // from a hot path: 0.9 µs per absent get here instead of 4-5 µs.)
    let absent: Vec<Vec<u8>> = (0..q as u64).map(|i| url(n + i, "in")).collect();
    let present: Vec<Vec<u8>> = (0..q as u64).map(|i| url(i * 61 % n, "in")).collect();
    // The filter-alone stream: 1M absent and 1M present keys, each its own allocation, made
    // before anything is loaded, hashed and probed one after the other.
    let stream_absent: Vec<Vec<u8>> = (0..1u64 << 20).map(|i| url(i, "probe")).collect();
    let stream_present: Vec<Vec<u8>> = (0..1u64 << 20).map(|i| url(i * 7 % n, "in")).collect();

    // --- store: bloomsled vs plain sled holding the same keys --------------------------
    let bs = Config::new()
        .temporary(true)
        .expected_items(n)
        .bits_per_key(BITS_PER_KEY)
        // The insert rounds take the tree past its capacity; a background resize in the
        // middle of them would be measured as insert cost (the rebuild is timed apart).
        .auto_rebuild(false)
        .open()
        .unwrap();
    let raw = sled::Config::new().temporary(true).open().unwrap();
    // A second, identical sled: how far two instances of the same data differ (A/A).
    let raw2 = sled::Config::new().temporary(true).open().unwrap();
    for start in (0..n).step_by(10_000) {
        let (mut b, mut r, mut r2) = (
            Batch::default(),
            sled::Batch::default(),
            sled::Batch::default(),
        );
        for i in start..(start + 10_000).min(n) {
            b.insert(url(i, "in"), &b"v"[..]);
            r.insert(url(i, "in"), &b"v"[..]);
            r2.insert(url(i, "in"), &b"v"[..]);
        }
        bs.apply_batch(b).unwrap();
        raw.apply_batch(r).unwrap();
        raw2.apply_batch(r2).unwrap();
    }
    // sled reads slowly until every leaf was read once: warm all three. Then flush them, so
    // that their background flushers are not still writing out the load (on two cores, a
    // busy flusher takes turns with the measuring thread).
    black_box(raw.iter().count() + raw2.iter().count() + bs.iter().count());
    raw.flush().unwrap();
    raw2.flush().unwrap();
    bs.flush().unwrap();
    let get_round = |db: &dyn Fn(&[u8]) -> bool, keys: &[Vec<u8>]| timed(|| count_true(db, keys));
    let sled_get = |k: &[u8]| raw.get(k).unwrap().is_some();
    let bs_get = |k: &[u8]| bs.get(k).unwrap().is_some();
    // Absent keys: each store's rounds back to back (a bloomsled round right after a sled
    // round would find the filter evicted by sled's page walks: the present-key rows
    // below show that cost).
    let abs_sled = median_ns(q, || count_true(&sled_get, &absent));
    let abs_bs = median_ns(q, || count_true(&bs_get, &absent));
    let negatives: Vec<&Vec<u8>> = absent.iter().filter(|k| !bs.may_contain(k)).collect();
    let neg_bs = median_ns(negatives.len(), || count_true(&bs_get, &negatives));
    let pre = paired(
        q,
        || get_round(&sled_get, &present),
        || get_round(&bs_get, &present),
    );
    let sled2_get = |k: &[u8]| raw2.get(k).unwrap().is_some();
    let aa = paired(
        q,
        || get_round(&sled_get, &present),
        || get_round(&sled2_get, &present),
    );
    // The floor for any filter in front of sled: one read of a random cache line in an
    // array the size of the filter, then sled's get. sled's walk evicts the filter from the
    // caches, so a present key's probe is a cache miss; this row prices that miss alone.
    let floor_words = bs.stats().num_bits.div_ceil(64) as usize;
    let floor_array: Vec<u64> = vec![1; floor_words.max(8)];
    let floor_get = |k: &[u8]| {
        // Multiply-shift, as the filter picks its block.
        let i = ((hash_key(k, 7) as u128 * floor_array.len() as u128) >> 64) as usize;
        black_box(floor_array[i]) != 0 && raw.get(k).unwrap().is_some()
    };
    let floor = paired(
        q,
        || get_round(&sled_get, &present),
        || get_round(&floor_get, &present),
    );
    // Fresh keys for every round, formatted before the clock starts; both stores get the
    // same sequence.
    let fresh = |round: u64| -> Vec<Vec<u8>> {
        (0..q as u64)
            .map(|i| url(round * q as u64 + i, "new"))
            .collect()
    };
    let insert_round = |round: &mut u64, insert: &dyn Fn(&[u8])| {
        *round += 1;
        let keys = fresh(*round);
        let t = Instant::now();
        for k in &keys {
            insert(k);
        }
        t.elapsed()
    };
    // The second sled instance takes the same inserts in the same rounds: the A/A row shows
    // how far inserts into two identical stores differ with no filter at all.
    let (mut r_sled, mut r_bs, mut r_sled2) = (0, 0, 0);
    let [sled1, bloom, sled2] = interleaved(
        PAIRED_ROUNDS,
        q,
        &mut [
            &mut || {
                insert_round(&mut r_sled, &|k| {
                    raw.insert(k, &b"v"[..]).unwrap();
                })
            },
            &mut || {
                insert_round(&mut r_bs, &|k| {
                    bs.insert(k, &b"v"[..]).unwrap();
                })
            },
            &mut || {
                insert_round(&mut r_sled2, &|k| {
                    raw2.insert(k, &b"v"[..]).unwrap();
                })
            },
        ],
    );
    drop(raw2);
    let ins = Paired::of(sled1.clone(), bloom);
    let ins_aa = Paired::of(sled1, sled2);
    let rebuild = bs.rebuild().unwrap();
    let store_fpr = bs.stats().observed_fpr();
    if std::env::var_os("BLOOMSLED_REPORT_DEBUG").is_some() {
        let fps: Vec<&Vec<u8>> = absent.iter().filter(|k| bs.may_contain(k)).collect();
        let negs: Vec<&Vec<u8>> = absent.iter().filter(|k| !bs.may_contain(k)).collect();
        let fp_raw = median_ns(fps.len(), || count_true(&sled_get, &fps));
        let fp_bs = median_ns(fps.len(), || count_true(&bs_get, &fps));
        let neg_bs = median_ns(negs.len(), || count_true(&bs_get, &negs));
        eprintln!("{} fp keys: raw sled {fp_raw:.0} ns, bloomsled {fp_bs:.0} ns; negatives via bloomsled {neg_bs:.1} ns", fps.len());
    }

    // --- filter alone: bloomsled vs fastbloom fed the same xxh3 hash -------------------
    let f = Filter::with_bits_per_key(n, BITS_PER_KEY).unwrap();
    let bits = f.num_bits() as usize;
    let mut fb = fastbloom::BloomFilter::with_num_bits(bits).hashes(f.num_hashes());
    for i in 0..n {
        let h = hash_key(&url(i, "in"), f.seed());
        f.insert_hash(h);
        fb.insert_hash(h);
    }
    let probe: Vec<u64> = (0..1u64 << 20)
        .map(|i| hash_key(&url(i, "probe"), f.seed()))
        .collect();
    let seed = f.seed();
    let stream = |keys: &[Vec<u8>]| {
        paired(
            keys.len(),
            || timed(|| count_true(&|k| fb.contains_hash(hash_key(k, seed)), keys)),
            || timed(|| count_true(&|k| f.contains(k), keys)),
        )
    };
    let (con_abs, con_pre) = (stream(&stream_absent), stream(&stream_present));
    let single = median_ns(probe.len(), || {
        probe.iter().filter(|&&h| f.contains_hash(h)).count() as u64
    });
    let mut out = vec![false; probe.len()];
    let c_many = median_ns(probe.len(), || {
        f.contains_hash_many(&probe, &mut out);
        out.iter().filter(|b| **b).count() as u64
    });
    let fpr_bs = probe.iter().filter(|&&h| f.contains_hash(h)).count() as f64 / probe.len() as f64;
    let fpr_fb = probe.iter().filter(|&&h| fb.contains_hash(h)).count() as f64 / probe.len() as f64;

    let table = format!(
        "Measured by `cargo bench --bench report` ({n} URL-like keys, {BITS_PER_KEY} bits/key; \
         median of {ROUNDS} rounds, one process; present-key gets, inserts and `contains` \
         in {PAIRED_ROUNDS} rounds alternating with the baseline's, their ratio the median \
         of the per-round ratios):\n\n\
         | operation | bloomsled | baseline | ratio |\n\
         |---|---:|---:|---:|\n\
         | absent-key `get` (false positives included) | {} | sled {} | {:.1}× faster |\n\
         | absent-key `get` the filter rejects | {} | sled {} | {:.1}× faster |\n\
         | present-key `get` | {} | sled {} | {:+.1}% |\n\
         | present-key `get`, two identical sled instances (A/A) | | sled {} vs {} | {:+.1}% |\n\
         | present-key `get` floor: one uncached read of a filter-sized array, then sled's `get` | | {} vs sled {} | {:+.1}% |\n\
         | `insert` of a new key | {} | sled {} | {:+.1}% |\n\
         | `insert`, two identical sled instances (A/A) | | sled {} vs {} | {:+.1}% |\n\
         | `Filter::contains`, a stream of absent keys (hashing included) | {} | fastbloom + xxh3 (same hash, bits, k) {} | {:.2}× |\n\
         | `Filter::contains`, a stream of present keys | {} | fastbloom + xxh3 {} | {:.2}× |\n\
         | `contains_hash_many` per key | {} | single `contains_hash` {} | {:.2}× |\n\
         | false-positive rate | {:.3}% (filter), {:.3}% (store gets) | fastbloom {:.3}% | |\n\
         | online `rebuild` of the tree | {:.2}M keys/s ({} keys in {:.2?}) | | |\n\
         | memory | {:.2} bits/key, k = {} | | |\n",
        fmt_ns(abs_bs),
        fmt_ns(abs_sled),
        abs_sled / abs_bs,
        fmt_ns(neg_bs),
        fmt_ns(abs_sled),
        abs_sled / neg_bs,
        fmt_ns(pre.b),
        fmt_ns(pre.a),
        100.0 * (pre.ratio - 1.0),
        fmt_ns(aa.b),
        fmt_ns(aa.a),
        100.0 * (aa.ratio - 1.0),
        fmt_ns(floor.b),
        fmt_ns(floor.a),
        100.0 * (floor.ratio - 1.0),
        fmt_ns(ins.b),
        fmt_ns(ins.a),
        100.0 * (ins.ratio - 1.0),
        fmt_ns(ins_aa.b),
        fmt_ns(ins_aa.a),
        100.0 * (ins_aa.ratio - 1.0),
        fmt_ns(con_abs.b),
        fmt_ns(con_abs.a),
        con_abs.ratio,
        fmt_ns(con_pre.b),
        fmt_ns(con_pre.a),
        con_pre.ratio,
        fmt_ns(c_many),
        fmt_ns(single),
        c_many / single,
        100.0 * fpr_bs,
        100.0 * store_fpr,
        100.0 * fpr_fb,
        rebuild.keys_scanned as f64 / rebuild.duration.as_secs_f64() / 1e6,
        rebuild.keys_scanned,
        rebuild.duration,
        f.bits_per_key(),
        f.num_hashes(),
    );
    println!("{table}");
    if std::env::var_os("BLOOMSLED_REPORT_NO_WRITE").is_some() {
        return;
    }
    common::write_docs_table("bench-report", &table);
}

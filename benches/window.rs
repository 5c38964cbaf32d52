//! The window benchmark: what a lookup costs on a window of 7 generations, against one
//! tree holding the same keys and against the bare filter, in the stream of
//! `benches/stream.rs` (URL-like keys, each its own `Vec<u8>`, made before anything is
//! loaded, iterated in order).
//!
//! `n` keys (`BLOOMSLED_WINDOW_KEYS`, default 1,000,000) at 10 bits per key: one tree and
//! one bare [`Filter`] sized for all `n`; a window of 7 generations, each sized for and
//! loaded with `n / 7` of them (the same bits in total). Query keys: `2^18` absent ones,
//! `2^18` present ones drawn from all `n` (so from every generation). Contenders, each once
//! per round, the first rotating (`BLOOMSLED_WINDOW_ROUNDS`, default 9); figures are
//! medians, ratios medians of per-round ratios against `Tree::may_contain` measured in the
//! same rounds, and the best round's figures beside them:
//!
//! * one key at a time: `Filter::contains`, `Tree::may_contain`, `Window::may_contain`, and
//!   seven bare filters of one generation each probed with one hash (the probes' own cost);
//!   `Tree::contains_key` and `Window::contains_key` (the store read where a filter passes);
//! * batched: `Filter::contains_many`, `Window::may_contain_many` (every generation's filter
//!   in one pass, blocks prefetched together), `Tree::contains_many`,
//!   `Window::contains_many`;
//! * values: `Window::get` one key at a time and `Window::get_many` (the batch above, then
//!   the stores' values).
//!
//! ```text
//! cargo bench --bench window
//! BLOOMSLED_WINDOW_KEYS=7000000 cargo bench --bench window
//! ```

use std::time::{Duration, Instant};

use bloomsled::clock::ManualClock;
use bloomsled::hash::hash_key;
use bloomsled::window::WindowConfig;
use bloomsled::{Batch, Config, Filter, TreeConfig};
use common::rounds::{fmt_ns, interleave, median, median_ratio, ns_per, spread};
use common::{env_count, key, load_chunks, size_label, splitmix64, write_key};

mod common;

const Q: usize = 1 << 18;
const ABSENT_BASE: u64 = 1 << 40;
const G: u32 = 7;
const W: u64 = 60_000;
const T0: u64 = 1_700_000_000_000;
const CHUNK: u64 = 10_000;
const VALUE: &[u8] = b"payload!";

fn count<K: AsRef<[u8]>>(keys: &[K], mut f: impl FnMut(&[u8]) -> bool) -> u64 {
    keys.iter().filter(|k| f(k.as_ref())).count() as u64
}

fn trues(v: &[bool]) -> u64 {
    v.iter().filter(|m| **m).count() as u64
}

fn main() {
    let n = env_count("BLOOMSLED_WINDOW_KEYS", 1_000_000);
    let rounds = env_count("BLOOMSLED_WINDOW_ROUNDS", 9) as usize;
    let per_gen = n / u64::from(G);
    let n = per_gen * u64::from(G);

    let absent: Vec<Vec<u8>> = (0..Q as u64).map(|j| key(ABSENT_BASE + j)).collect();
    let present: Vec<Vec<u8>> = (0..Q as u64)
        .map(|j| key(splitmix64(j ^ 0xA5A5_5A5A) % n))
        .collect();

    let t = Instant::now();
    let db = Config::new()
        .temporary(true)
        .cache_capacity(2 << 30)
        .expected_items(n)
        .bits_per_key(10.0)
        .auto_rebuild(false)
        .open()
        .expect("bloomsled");
    let filter = Filter::with_bits_per_key(n, 10.0).expect("filter");
    load_chunks(n, CHUNK, |ids, buf| {
        let mut b = Batch::default();
        for i in ids {
            write_key(buf, i);
            b.insert(&buf[..], VALUE);
            filter.insert(buf);
        }
        db.apply_batch(b).expect("batch");
    });
    // Seven bare filters of one generation each, for the probe's own cost.
    let filters7: Vec<Filter> = (0..G)
        .map(|_| Filter::with_bits_per_key(per_gen, 10.0).expect("filter"))
        .collect();
    for (g, f7) in filters7.iter().enumerate() {
        load_chunks(per_gen, CHUNK, |ids, buf| {
            for i in ids {
                write_key(buf, g as u64 * per_gen + i);
                f7.insert(buf);
            }
        });
    }
    let seed = filter.seed();
    let clock = ManualClock::new(T0);
    let window = db
        .open_window(
            "recent",
            WindowConfig::new(Duration::from_millis(W * u64::from(G)), G)
                .tree_config(TreeConfig::new().expected_items(per_gen).bits_per_key(10.0))
                .clock(clock.clone()),
        )
        .expect("window");
    for g in 0..u64::from(G) {
        clock.set(T0 + g * W);
        // The current generation's tree, loaded directly (a batch per chunk).
        let (_, tree) = window.generation_trees().expect("ring").remove(0);
        load_chunks(per_gen, CHUNK, |ids, buf| {
            let mut b = Batch::default();
            for i in ids {
                write_key(buf, g * per_gen + i);
                b.insert(&buf[..], VALUE);
            }
            tree.apply_batch(b).expect("batch");
        });
    }
    db.flush().expect("flush");
    assert_eq!(window.stats().live.len(), G as usize);
    assert_eq!(
        count(&present, |k| window.may_contain(k)),
        Q as u64,
        "false negative"
    );
    assert_eq!(
        count(&present, |k| db.may_contain(k)),
        Q as u64,
        "false negative"
    );
    let fpr = |c: &dyn Fn(&[u8]) -> bool| count(&absent, c) as f64 / Q as f64;
    let (fpr_tree, fpr_window) = (fpr(&|k| db.may_contain(k)), fpr(&|k| window.may_contain(k)));
    eprintln!(
        "[{}] loaded in {:.1?}; FPR: tree {:.3}%, window {:.3}%",
        size_label(n),
        t.elapsed(),
        100.0 * fpr_tree,
        100.0 * fpr_window
    );

    type Run<'a> = Box<dyn FnMut() -> f64 + 'a>;
    let mut names: Vec<String> = vec![];
    let mut runs: Vec<Run<'_>> = vec![];
    let (f, d, w, f7) = (&filter, &db, &window, &filters7);
    for (tag, keys) in [("absent", &absent), ("present", &present)] {
        macro_rules! add {
            ($name:expr, $run:expr) => {{
                names.push(format!("{}/{tag}", $name));
                runs.push(Box::new($run));
            }};
        }
        add!("Filter::contains", move || ns_per(Q, || count(keys, |k| f
            .contains(k))));
        add!("Tree::may_contain", move || ns_per(Q, || count(
            keys,
            |k| d.may_contain(k)
        )));
        add!("Window::may_contain", move || ns_per(Q, || count(
            keys,
            |k| w.may_contain(k)
        )));
        add!("7 × Filter::contains_hash", move || {
            ns_per(Q, || {
                count(keys, |k| {
                    let h = hash_key(k, seed);
                    f7.iter().any(|f| f.contains_hash(h))
                })
            })
        });
        add!("Tree::contains_key", move || {
            ns_per(Q, || count(keys, |k| d.contains_key(k).unwrap()))
        });
        add!("Window::contains_key", move || {
            ns_per(Q, || count(keys, |k| w.contains_key(k).unwrap()))
        });
        add!("Filter::contains_many", move || {
            ns_per(Q, || trues(&f.contains_many(keys)))
        });
        add!("Window::may_contain_many", move || {
            ns_per(Q, || trues(&w.may_contain_many(keys)))
        });
        add!("Tree::contains_many", move || {
            ns_per(Q, || trues(&d.contains_many(keys).unwrap()))
        });
        add!("Window::contains_many", move || {
            ns_per(Q, || trues(&w.contains_many(keys).unwrap()))
        });
        add!("Window::get", move || {
            ns_per(Q, || count(keys, |k| w.get(k).unwrap().is_some()))
        });
        add!("Window::get_many", move || {
            ns_per(Q, || {
                let got = w.get_many(keys).unwrap();
                got.iter().filter(|v| v.is_some()).count() as u64
            })
        });
    }
    let mut refs: Vec<&mut dyn FnMut() -> f64> = runs.iter_mut().map(|b| &mut **b as _).collect();
    let per = interleave(rounds, &mut refs);
    let get = |name: &str| &per[names.iter().position(|n| n == name).expect(name)];

    let mut out = format!(
        "\n### Window lookups, {} keys ({} generations of {}), 10 bits/key, {rounds} rounds\n\n\
         FPR of absent keys: one tree {:.3}%, the window {:.3}%.\n\n\
         Per key: median over rounds, the median of per-round ratios to `Tree::may_contain` \
         (min–max), and the best round's figure with its ratio to `Tree::may_contain`'s best \
         round (on a shared machine the best round is the least disturbed one).\n\n\
         | lookup | absent | ratio | best | present | ratio | best |\n\
         |---|---|---|---|---|---|---|\n",
        size_label(n),
        G,
        size_label(per_gen),
        100.0 * fpr_tree,
        100.0 * fpr_window
    );
    for name in [
        "Filter::contains",
        "Tree::may_contain",
        "Window::may_contain",
        "7 × Filter::contains_hash",
        "Filter::contains_many",
        "Window::may_contain_many",
        "Tree::contains_key",
        "Window::contains_key",
        "Tree::contains_many",
        "Window::contains_many",
        "Window::get",
        "Window::get_many",
    ] {
        out += &format!("| `{name}` |");
        for tag in ["absent", "present"] {
            let v = get(&format!("{name}/{tag}"));
            let base = get(&format!("Tree::may_contain/{tag}"));
            let (lo, hi) = spread(&v.iter().zip(base).map(|(a, b)| a / b).collect::<Vec<_>>());
            let best = |v: &[f64]| v.iter().copied().fold(f64::INFINITY, f64::min);
            out += &format!(
                " {} | {:.2}× ({lo:.2}–{hi:.2}) | {} ({:.2}×) |",
                fmt_ns(median(v.clone())),
                median_ratio(base, v),
                fmt_ns(best(v)),
                best(v) / best(base)
            );
        }
        out += "\n";
    }
    println!("{out}");
}

//! redb and bloomsled-redb on the same keys, loaded the same way: issue 58's figures.
//!
//! Both databases (two files in one temporary directory, `BLOOMSLED_REDB_DIR` or the system's
//! temporary folder) are loaded with the same URL-like keys (`common::write_key`, 40..=80
//! bytes, an 8-byte value) in write transactions of 10,000 inserts at redb's default
//! durability (`Immediate`), `BLOOMSLED_REDB_KEYS` keys in all (default 1,000,000), the two
//! loads interleaved transaction by transaction (the first store alternating). Then, in
//! `BLOOMSLED_REDB_ROUNDS` interleaved rounds (default 5; medians), over
//! `BLOOMSLED_REDB_SAMPLE` keys each (default 200,000, made before the load), each timed
//! pass right after an untimed one of the same contender (see `interleaved`):
//!
//! * absent `get` on an open table (`ReadOnlyTable::get` of keys never inserted);
//! * the per-request path: bloomsled-redb's `Database::get_latest` against redb's
//!   `begin_read` + `open_table` + `get`, absent keys;
//! * present `get` on an open table;
//! * absent and present `get` in a write transaction (one per pass, aborted after it);
//! * the same handle, keys in the order that costs the hit bypass most
//!   (`Builder::set_bypass_after_hits`): runs of 64 present keys, each followed by an absent
//!   one, which arrives during a bypass and reads redb.
//!
//! `BLOOMSLED_REDB_COUNTING=1` opens bloomsled-redb in counting mode
//! (`Builder::set_counting`) throughout; redb is unchanged.
//!
//! Last, after the reopen, the present `get` once more with the bypass off
//! (`set_bypass_after_hits(0)`: the filter asked for every key), so the bypass's share of
//! the present row shows.
//!
//! The lookups run twice: right after the load (a filter grown from empty by rebuilds)
//! and after both files are reopened (the filter loaded at first use from what the clean
//! close wrote; the time of that first use is printed). Last, the core's `Filter::contains` alone on the same absent keys, at
//! the size a build gives a table: the floor of an absent `get` on this machine.

use std::hint::black_box;
use std::io::Write as _;
use std::time::{Duration, Instant};

const T: redb::TableDefinition<&[u8], u64> = redb::TableDefinition::new("urls");
const B: bloomsled_redb::TableDefinition<&[u8], u64> = bloomsled_redb::TableDefinition::new("urls");
const TXN: u64 = 10_000;

fn env_count(name: &str, default: u64) -> u64 {
    std::env::var(name).map_or(default, |s| {
        s.replace('_', "")
            .parse()
            .unwrap_or_else(|_| panic!("{name}={s:?} is not a number"))
    })
}

fn size_label(n: u64) -> String {
    match n {
        n if n >= 1_000_000 && n % 1_000_000 == 0 => format!("{}M", n / 1_000_000),
        n if n >= 1_000 && n % 1_000 == 0 => format!("{}K", n / 1_000),
        n => n.to_string(),
    }
}

fn splitmix64(x: u64) -> u64 {
    let mut z = x.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// Key number `id`: `https://hNN.example.com/<16 hex digits>/<path>`, 40..=80 bytes, spread
/// over the key space (present and absent keys land in the same B-tree leaves).
fn write_key(buf: &mut Vec<u8>, id: u64) {
    buf.clear();
    let token = splitmix64(id);
    let m = splitmix64(token);
    write!(buf, "https://h{:02}.example.com/{token:016x}/", m % 100).unwrap();
    let len = 40 + (m >> 32) as usize % 41;
    let mut x = m;
    while buf.len() < len {
        x = x.wrapping_mul(0x9E37_79B9_7F4A_7C15).wrapping_add(1);
        buf.push(b"abcdefghijklmnopqrstuvwxyz0123456789"[(x >> 58) as usize % 36]);
    }
}

fn key(id: u64) -> Vec<u8> {
    let mut buf = Vec::with_capacity(80);
    write_key(&mut buf, id);
    buf
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

/// Each contender once per round, the first one alternating; ns per item, round by round.
///
/// Each timed pass follows an untimed pass of the same contender over the same keys, so
/// every round of a contender starts from the cache state its own lookups leave (a stream's
/// steady state), whatever ran before it. Without it the rounds were bimodal: a pass right
/// after the other contender's (which evicts the last-level cache) paid a miss on each of
/// the filter's lines (2.4 MB at 1M keys: 38,000 misses, +14 ns per lookup over 200K
/// lookups, 35 against 21 ns), one right after its own pass did not, and the alternating
/// order gives each contender both kinds; so the median of an odd number of rounds was
/// set by round 0's state: cold after the load, warm after a reopen (the filter just
/// read in), which read as a grown filter ~35% slower than a loaded one.
fn interleaved(
    rounds: usize,
    n: usize,
    mut a: impl FnMut() -> Duration,
    mut b: impl FnMut() -> Duration,
) -> [Vec<f64>; 2] {
    let (mut va, mut vb) = (Vec::new(), Vec::new());
    let per = |d: Duration| d.as_nanos() as f64 / n as f64;
    let warm = |f: &mut dyn FnMut() -> Duration| {
        f();
        per(f())
    };
    for r in 0..rounds {
        if r % 2 == 0 {
            va.push(warm(&mut a));
            vb.push(warm(&mut b));
        } else {
            vb.push(warm(&mut b));
            va.push(warm(&mut a));
        }
    }
    [va, vb]
}

fn load(n: u64, ours: &bloomsled_redb::Database, theirs: &redb::Database) -> (f64, f64) {
    let (mut t_ours, mut t_theirs) = (Duration::ZERO, Duration::ZERO);
    let mut buf = Vec::with_capacity(80);
    for (c, start) in (0..n).step_by(TXN as usize).enumerate() {
        let ids = start..(start + TXN).min(n);
        let mut run_ours = |buf: &mut Vec<u8>| {
            let t0 = Instant::now();
            let w = ours.begin_write().unwrap();
            {
                let mut t = w.open_table(B).unwrap();
                for id in ids.clone() {
                    write_key(buf, id);
                    t.insert(buf.as_slice(), id).unwrap();
                }
            }
            w.commit().unwrap();
            t_ours += t0.elapsed();
        };
        let mut run_theirs = |buf: &mut Vec<u8>| {
            let t0 = Instant::now();
            let w = theirs.begin_write().unwrap();
            {
                let mut t = w.open_table(T).unwrap();
                for id in ids.clone() {
                    write_key(buf, id);
                    t.insert(buf.as_slice(), id).unwrap();
                }
            }
            w.commit().unwrap();
            t_theirs += t0.elapsed();
        };
        if c % 2 == 0 {
            run_ours(&mut buf);
            run_theirs(&mut buf);
        } else {
            run_theirs(&mut buf);
            run_ours(&mut buf);
        }
    }
    // Growth rebuilds run in the background: the load counts them to their end
    // (conservative), and the lookups that follow measure the grown filter.
    let t0 = Instant::now();
    ours.wait_for_filters();
    t_ours += t0.elapsed();
    (
        n as f64 / t_ours.as_secs_f64(),
        n as f64 / t_theirs.as_secs_f64(),
    )
}

/// Rows of (what, bloomsled-redb ns, redb ns, speed-up).
fn lookups(
    rounds: usize,
    ours: &bloomsled_redb::Database,
    theirs: &redb::Database,
    absent: &[Vec<u8>],
    present: &[Vec<u8>],
) -> Vec<(String, f64, f64, f64)> {
    use bloomsled_redb::ReadableDatabase as _;
    use redb::ReadableDatabase as _;
    let n = absent.len();
    let r_ours = ours.begin_read().unwrap();
    let t_ours = r_ours.open_table(B).unwrap();
    let r_theirs = theirs.begin_read().unwrap();
    let t_theirs = r_theirs.open_table(T).unwrap();
    assert!(t_ours.filter_in_use());
    let mut rows = Vec::new();
    let mut row = |what: &str, [a, b]: [Vec<f64>; 2]| {
        let ratios: Vec<f64> = a.iter().zip(&b).map(|(x, y)| y / x).collect();
        rows.push((what.to_string(), median(a), median(b), median(ratios)));
    };
    let get_ours = |keys: &[Vec<u8>]| {
        timed(|| {
            keys.iter()
                .filter(|k| t_ours.get(k.as_slice()).unwrap().is_some())
                .count()
        })
    };
    let get_theirs = |keys: &[Vec<u8>]| {
        timed(|| {
            keys.iter()
                .filter(|k| t_theirs.get(k.as_slice()).unwrap().is_some())
                .count()
        })
    };
    row(
        "absent `get`, open table",
        interleaved(rounds, n, || get_ours(absent), || get_theirs(absent)),
    );
    let latest_ours = || {
        timed(|| {
            absent
                .iter()
                .filter(|k| ours.get_latest(B, k.as_slice()).unwrap().is_some())
                .count()
        })
    };
    let latest_theirs = || {
        timed(|| {
            absent
                .iter()
                .filter(|k| {
                    let r = theirs.begin_read().unwrap();
                    let t = r.open_table(T).unwrap();
                    t.get(k.as_slice()).unwrap().is_some()
                })
                .count()
        })
    };
    row(
        "per request, absent (`get_latest` / `begin_read`+`open_table`+`get`)",
        interleaved(rounds, n, latest_ours, latest_theirs),
    );
    row(
        "present `get`, open table",
        interleaved(
            rounds,
            present.len(),
            || get_ours(present),
            || get_theirs(present),
        ),
    );
    // One write transaction over `keys`, aborted after: the same code for both stores
    // (their types differ, so a macro, not a function).
    macro_rules! gets_in_write {
        ($db:expr, $def:expr, $keys:expr) => {{
            use bloomsled_redb::ReadableTable as _;
            let w = $db.begin_write().unwrap();
            let n = {
                let t = w.open_table($def).unwrap();
                $keys
                    .iter()
                    .filter(|k| t.get(k.as_slice()).unwrap().is_some())
                    .count()
            };
            w.abort().unwrap();
            n
        }};
    }
    let in_write = |keys: &[Vec<u8>], ours_side: bool| {
        timed(|| match ours_side {
            true => gets_in_write!(ours, B, keys),
            false => gets_in_write!(theirs, T, keys),
        })
    };
    row(
        "absent `get` in a write transaction",
        interleaved(
            rounds,
            n,
            || in_write(absent, true),
            || in_write(absent, false),
        ),
    );
    row(
        "present `get` in a write transaction",
        interleaved(
            rounds,
            present.len(),
            || in_write(present, true),
            || in_write(present, false),
        ),
    );
    let worst = worst_order(present, absent);
    row(
        "64 present, 1 absent, repeated (the bypass's worst order)",
        interleaved(
            rounds,
            worst.len(),
            || get_ours(&worst),
            || get_theirs(&worst),
        ),
    );
    rows
}

/// Runs of [`bloomsled_redb::DEFAULT_BYPASS_AFTER_HITS`] present keys, each followed by an
/// absent one: every absent key arrives when the handle has just begun to skip the filter,
/// so each reads redb; as many keys as `present`.
fn worst_order(present: &[Vec<u8>], absent: &[Vec<u8>]) -> Vec<Vec<u8>> {
    let run = bloomsled_redb::DEFAULT_BYPASS_AFTER_HITS as usize;
    let mut absent = absent.iter().cycle();
    present
        .chunks(run)
        .flat_map(|c| c.iter().chain(absent.next()).cloned().collect::<Vec<_>>())
        .take(present.len())
        .collect()
}

/// The present `get` of bloomsled-redb opened with `set_bypass_after_hits(0)` against redb's.
fn present_without_bypass(
    rounds: usize,
    ours: &bloomsled_redb::Database,
    theirs: &redb::Database,
    present: &[Vec<u8>],
) -> (String, f64, f64, f64) {
    use bloomsled_redb::ReadableDatabase as _;
    use redb::ReadableDatabase as _;
    let t_ours = ours.begin_read().unwrap().open_table(B).unwrap();
    let t_theirs = theirs.begin_read().unwrap().open_table(T).unwrap();
    assert!(t_ours.filter_in_use());
    let get = |f: &dyn Fn(&[u8]) -> bool| timed(|| present.iter().filter(|k| f(k)).count());
    let [a, b] = interleaved(
        rounds,
        present.len(),
        || get(&|k| t_ours.get(k).unwrap().is_some()),
        || get(&|k| t_theirs.get(k).unwrap().is_some()),
    );
    let ratios: Vec<f64> = a.iter().zip(&b).map(|(x, y)| y / x).collect();
    (
        "present `get`, bypass off (`set_bypass_after_hits(0)`)".to_string(),
        median(a),
        median(b),
        median(ratios),
    )
}

/// The core's filter alone, sized as a build sizes a table's (twice the keys), probed with
/// the same absent keys: what an absent `get` cannot beat on this machine.
fn filter_alone(rounds: usize, n: u64, absent: &[Vec<u8>]) -> f64 {
    // The rate bloomsled-redb sizes its tables' filters for (`redb/src/filters.rs`).
    let f = bloomsled::FilterConfig::new(2 * n)
        .false_positive_rate(bloomsled::DEFAULT_FALSE_POSITIVE_RATE)
        .build()
        .unwrap();
    let mut buf = Vec::with_capacity(80);
    for id in 0..n {
        write_key(&mut buf, id);
        f.insert(&buf);
    }
    let per_round: Vec<f64> = (0..rounds)
        .map(|_| {
            let d = timed(|| absent.iter().filter(|k| f.contains(k)).count());
            d.as_nanos() as f64 / absent.len() as f64
        })
        .collect();
    median(per_round)
}

fn timed(f: impl FnOnce() -> usize) -> Duration {
    let t0 = Instant::now();
    black_box(f());
    t0.elapsed()
}

fn print(rows: &[(String, f64, f64, f64)]) {
    println!("| lookup | bloomsled-redb | redb 4.6 | speed-up |");
    println!("|---|---:|---:|---:|");
    for (what, a, b, r) in rows {
        // Below 2×, two decimals: the present-key bar is a ratio near 1.
        let r = if *r < 2.0 {
            format!("{r:.2}× (ours {:.3}× redb's time)", 1.0 / r)
        } else {
            format!("{r:.1}×")
        };
        println!("| {what} | {a:.0} ns | {b:.0} ns | {r} |");
    }
}

fn main() {
    let n = env_count("BLOOMSLED_REDB_KEYS", 1_000_000);
    let rounds = env_count("BLOOMSLED_REDB_ROUNDS", 5) as usize;
    let sample = env_count("BLOOMSLED_REDB_SAMPLE", 200_000).min(n);
    let step = (n / sample).max(1);
    let present: Vec<Vec<u8>> = (0..sample).map(|i| key(i * step)).collect();
    let absent: Vec<Vec<u8>> = (0..sample).map(|i| key(n + i * step + (1 << 40))).collect();
    let dir = match std::env::var_os("BLOOMSLED_REDB_DIR") {
        Some(d) => tempfile::tempdir_in(d),
        None => tempfile::tempdir(),
    }
    .unwrap();
    let (p_ours, p_theirs) = (
        dir.path().join("bloomsled.redb"),
        dir.path().join("redb.redb"),
    );
    let counting = std::env::var_os("BLOOMSLED_REDB_COUNTING").is_some_and(|v| v == "1");
    let builder = || {
        let mut b = bloomsled_redb::Builder::new();
        b.set_counting(counting);
        b
    };
    let ours = builder().create(&p_ours).unwrap();
    let theirs = redb::Database::create(&p_theirs).unwrap();
    let (k_ours, k_theirs) = load(n, &ours, &theirs);
    println!(
        "## {} keys, transactions of {TXN}, {rounds} rounds of {} lookups{}\n",
        size_label(n),
        size_label(sample),
        if counting {
            ", bloomsled-redb in counting mode"
        } else {
            ""
        }
    );
    println!(
        "load: bloomsled-redb {:.0} keys/s, redb {:.0} keys/s, ratio {:.3}\n",
        k_ours,
        k_theirs,
        k_ours / k_theirs
    );
    println!("### after the load (filter grown from empty by rebuilds)\n");
    print(&lookups(rounds, &ours, &theirs, &absent, &present));
    let t0 = Instant::now();
    drop(ours);
    let close = t0.elapsed();
    drop(theirs);
    let ours = builder().open(&p_ours).unwrap();
    let theirs = redb::Database::open(&p_theirs).unwrap();
    let t0 = Instant::now();
    {
        use bloomsled_redb::ReadableDatabase as _;
        let r = ours.begin_read().unwrap();
        let t = r.open_table(B).unwrap();
        assert!(t.filter_in_use());
    }
    let first_use = t0.elapsed();
    let stats = ours.filter_stats();
    println!(
        "\n### after reopening (clean close {:.0} ms; first use of the table: {:.0} ms for {} \
         keys, filter {})\n",
        close.as_secs_f64() * 1e3,
        first_use.as_secs_f64() * 1e3,
        size_label(n),
        if stats.loaded == 1 {
            "loaded from the clean close"
        } else {
            "built from a scan"
        }
    );
    print(&lookups(rounds, &ours, &theirs, &absent, &present));
    drop(ours);
    let ours = builder().set_bypass_after_hits(0).open(&p_ours).unwrap();
    println!("\n### reopened with the bypass off\n");
    print(&[present_without_bypass(rounds, &ours, &theirs, &present)]);
    println!(
        "\nthe filter alone (`Filter::contains`, {} keys, absent keys): {:.0} ns",
        size_label(n),
        filter_alone(rounds, n, &absent)
    );
}

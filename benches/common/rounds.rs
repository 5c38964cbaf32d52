//! Timing in interleaved rounds: every contender once per round, the starting one rotating,
//! so drift in the machine (caches, sled's background threads, other tenants) hits all
//! alike; figures are medians over rounds, ratios the median of per-round ratios.

use std::hint::black_box;
use std::time::{Duration, Instant};

/// Runs every contender once per round for `rounds` rounds, starting each round one
/// contender further along. Each contender returns its ns per item for that round; the
/// result holds each contender's figures, round by round.
pub fn interleave(rounds: usize, contenders: &mut [&mut dyn FnMut() -> f64]) -> Vec<Vec<f64>> {
    let k = contenders.len();
    let mut per: Vec<Vec<f64>> = (0..k).map(|_| Vec::with_capacity(rounds)).collect();
    for r in 0..rounds {
        for j in 0..k {
            let c = (r + j) % k;
            let ns = contenders[c]();
            per[c].push(ns);
        }
    }
    per
}

/// [`interleave`] for a fixed number of contenders that each return a round's duration over
/// `n` items.
pub fn interleaved<const K: usize>(
    rounds: usize,
    n: usize,
    contenders: &mut [&mut dyn FnMut() -> Duration; K],
) -> [Vec<f64>; K] {
    let mut per_item: Vec<Box<dyn FnMut() -> f64 + '_>> = contenders
        .iter_mut()
        .map(|c| Box::new(move || c().as_nanos() as f64 / n as f64) as Box<dyn FnMut() -> f64>)
        .collect();
    let mut refs: Vec<&mut dyn FnMut() -> f64> =
        per_item.iter_mut().map(|b| &mut **b as _).collect();
    let per = interleave(rounds, &mut refs);
    per.try_into().expect("one result per contender")
}

/// The median of `v` (the upper one for an even count).
pub fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

/// The median of the per-round ratios `b[r] / a[r]`.
pub fn median_ratio(a: &[f64], b: &[f64]) -> f64 {
    median(a.iter().zip(b).map(|(a, b)| b / a).collect())
}

/// `(min, max)` of `v`.
pub fn spread(v: &[f64]) -> (f64, f64) {
    v.iter()
        .fold((f64::INFINITY, f64::NEG_INFINITY), |(lo, hi), &x| {
            (lo.min(x), hi.max(x))
        })
}

/// Two contenders measured in the same rounds.
pub struct Paired {
    /// Median ns per item of the first contender (the baseline).
    pub a: f64,
    /// Median ns per item of the second.
    pub b: f64,
    /// Median of the per-round ratios, second over first.
    pub ratio: f64,
}

impl Paired {
    /// Medians of two contenders' per-round figures (same rounds), and of their ratios.
    pub fn of(va: Vec<f64>, vb: Vec<f64>) -> Paired {
        let ratio = median_ratio(&va, &vb);
        Paired {
            a: median(va),
            b: median(vb),
            ratio,
        }
    }
}

/// The duration of `f`.
pub fn timed(f: impl FnOnce() -> u64) -> Duration {
    let t = Instant::now();
    black_box(f());
    t.elapsed()
}

/// ns per item of one pass of `f` over `n` items.
pub fn ns_per(n: usize, f: impl FnOnce() -> u64) -> f64 {
    timed(f).as_nanos() as f64 / n as f64
}

/// The time this thread has run on a CPU (`CLOCK_THREAD_CPUTIME_ID`; wall time where there
/// is no such clock): on a shared machine, the time slices other processes take while a pass
/// runs are not counted, while their effect on the caches still is.
pub fn thread_cpu_time() -> Duration {
    #[cfg(target_os = "linux")]
    {
        let mut ts = libc::timespec {
            tv_sec: 0,
            tv_nsec: 0,
        };
        // SAFETY: `ts` is a valid, writable `timespec`; the call writes only it.
        #[allow(unsafe_code)]
        let rc = unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
        assert_eq!(rc, 0, "clock_gettime(CLOCK_THREAD_CPUTIME_ID)");
        Duration::new(ts.tv_sec as u64, ts.tv_nsec as u32)
    }
    #[cfg(not(target_os = "linux"))]
    {
        static START: std::sync::OnceLock<Instant> = std::sync::OnceLock::new();
        START.get_or_init(Instant::now).elapsed()
    }
}

/// ns per item of one pass of `f` over `n` items, in this thread's CPU time
/// ([`thread_cpu_time`]).
pub fn cpu_ns_per(n: usize, f: impl FnOnce() -> u64) -> f64 {
    let t = thread_cpu_time();
    black_box(f());
    (thread_cpu_time() - t).as_nanos() as f64 / n as f64
}

/// `12.3 ns` or `4.56 µs`.
pub fn fmt_ns(ns: f64) -> String {
    if ns >= 1000.0 {
        format!("{:.2} µs", ns / 1000.0)
    } else {
        format!("{ns:.1} ns")
    }
}

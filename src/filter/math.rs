//! Sizing and false-positive-rate models: pure functions (with a memo of the costly ones).
//!
//! Two models are kept side by side: the classic formula for a standard Bloom filter
//! (`standard_fpr`, `bits_for`, `optimal_k`) that users know from the literature, and the
//! model of bloomsled's cache-line-blocked layout (`blocked_fpr`), which is what the filter
//! is actually sized with. A blocked filter needs slightly more bits than a standard one for
//! the same rate, because keys spread unevenly over blocks (Poisson); sizing with the classic
//! formula would silently miss the requested rate.

use std::sync::Mutex;

use super::BLOCK_BITS;

/// Number of bits of a standard Bloom filter for `n` items at false-positive rate `p`:
/// ⌈−n·ln p / (ln 2)²⌉.
///
/// ```
/// // The textbook figure: 1% needs about 9.59 bits per key.
/// assert_eq!(bloomsled::bits_for(1_000_000, 0.01), 9_585_059);
/// ```
pub fn bits_for(n: u64, p: f64) -> u64 {
    let ln2 = std::f64::consts::LN_2;
    (-(n as f64) * p.ln() / (ln2 * ln2)).ceil() as u64
}

/// Optimal number of hash functions of a standard Bloom filter of `m` bits holding `n`
/// items: ⌈m/n · ln 2⌉ (at least 1).
///
/// This is the rounded-up convention of the classic Bloom filter classes. Where m/n · ln 2
/// has a small fractional part, the integer that minimises [`standard_fpr`] is one lower:
/// at m = 9n this returns 7 (1.35%), while k = 6 gives 1.33%. From 8 bits per key up, that
/// costs at most about 3% of the rate; at very few bits per key more (12% near 1.44 bits per
/// key, where it returns 2 instead of 1). bloomsled's own filters do not use this: they pick
/// `k` by the blocked model (see [`blocked_fpr`]).
///
/// ```
/// assert_eq!(bloomsled::optimal_k(10_000, 1_000), 7);
/// assert_eq!(bloomsled::optimal_k(20_000, 1_000), 14);
/// // Rounded up: at m = 9n, k = 6 is slightly better than the 7 returned.
/// assert_eq!(bloomsled::optimal_k(9_000, 1_000), 7);
/// let fpr = |k| bloomsled::standard_fpr(9_000, 1_000, k);
/// assert!(fpr(6) < fpr(7) && fpr(7) < 1.02 * fpr(6));
/// ```
pub fn optimal_k(m: u64, n: u64) -> u32 {
    if n == 0 {
        return 1;
    }
    ((m as f64 / n as f64) * std::f64::consts::LN_2)
        .ceil()
        .max(1.0) as u32
}

/// False-positive rate of a standard Bloom filter: (1 − e^(−k·n/m))^k.
///
/// ```
/// // The classic reference point: k = 10, m = 20n.
/// let p = bloomsled::standard_fpr(20_000, 1_000, 10);
/// assert!((p - 8.89e-5).abs() < 0.01e-5);
/// ```
pub fn standard_fpr(m: u64, n: u64, k: u32) -> f64 {
    if m == 0 {
        return 1.0;
    }
    let k = f64::from(k);
    (1.0 - (-k * n as f64 / m as f64).exp()).powf(k)
}

/// Expected false-positive rate of bloomsled's blocked layout at `bits_per_key`, with `k`
/// bits per key drawn (repeats allowed) inside one 512-bit block.
///
/// The number of keys in a block is Poisson with mean 512/bits_per_key; a block holding `j`
/// keys has on average S = 512·(1 − (1 − 1/512)^(k·j)) bits set. A query for an absent key
/// draws `k` positions, `d` of them distinct with the probability `distinct_draws(k)[d]`,
/// and all `d` are set with probability ∏ (S − i)/(512 − i).
///
/// ```
/// let p = bloomsled::blocked_fpr(10.0, 6);
/// assert!(p > 0.0095 && p < 0.0096);
/// ```
pub fn blocked_fpr(bits_per_key: f64, k: u32) -> f64 {
    if bits_per_key.is_nan() || bits_per_key <= 0.0 || k == 0 {
        return 1.0;
    }
    let block = BLOCK_BITS as f64;
    let lambda = block / bits_per_key;
    let unset_per_key = (1.0 - 1.0 / block).powf(f64::from(k));
    let distinct = distinct_draws(k);
    // Sum the Poisson terms in log space so large means do not underflow.
    let ln_lambda = lambda.ln();
    let mut ln_p = -lambda;
    let upper = (lambda + 12.0 * lambda.sqrt() + 40.0).ceil() as u64;
    let mut total = 0.0;
    for j in 0..=upper {
        if j > 0 {
            ln_p += ln_lambda - (j as f64).ln();
        }
        let set = block * (1.0 - unset_per_key.powf(j as f64));
        total += ln_p.exp() * all_set_probability(set, &distinct);
    }
    total.min(1.0)
}

/// The chance that a query's `k` draws all hit set bits in a block with `set` of its 512
/// bits set: over the number `d` of distinct draws (weights `distinct`, from
/// [`distinct_draws`]), the chance that `d` distinct random bits are all set.
pub(crate) fn all_set_probability(set: f64, distinct: &[f64]) -> f64 {
    let block = BLOCK_BITS as f64;
    let mut all = 1.0;
    let mut total = 0.0;
    for (d, &w) in distinct.iter().enumerate() {
        if d > 0 {
            let i = (d - 1) as f64;
            all *= ((set - i) / (block - i)).max(0.0);
        }
        total += w * all;
    }
    total
}

/// `p[d]`, the probability that `k` uniform draws from a block's 512 bits name exactly `d`
/// distinct bits (`d` in `0..=k`; `p[0]` is 1 for `k = 0`, else 0).
pub(crate) fn distinct_draws(k: u32) -> Vec<f64> {
    let block = BLOCK_BITS as f64;
    let mut p = vec![0.0; k as usize + 1];
    p[0] = 1.0;
    for _ in 0..k {
        for d in (0..p.len()).rev() {
            let stay = p[d] * d as f64 / block;
            let grow = if d > 0 {
                p[d - 1] * (block - (d - 1) as f64) / block
            } else {
                0.0
            };
            p[d] = stay + grow;
        }
    }
    p
}

/// The number of bits per key (k) for `bits_per_key`: the smallest `k` whose
/// [`blocked_fpr`] is within 1% of the minimum over all `k`.
///
/// Near the optimum the rate is flat (at 10 bits/key the model gives 0.9576% for k = 6 and
/// 0.9571% for k = 7), while every bit more is work on each insert and lookup; the 1% is
/// below the model's own error (`tests/fpr.rs` checks the model against measured rates).
pub(crate) fn blocked_optimal_k(bits_per_key: f64) -> u32 {
    let rates: Vec<f64> = (1..=super::MAX_HASHES)
        .map(|k| blocked_fpr(bits_per_key, k))
        .collect();
    let best = rates.iter().copied().fold(f64::INFINITY, f64::min);
    rates
        .iter()
        .position(|&p| p <= best * 1.01)
        .map_or(1, |i| i as u32 + 1)
}

/// What a remembered model figure depends on: `k` (or 0), an `f64`'s bits, and a tag that
/// names the figure.
pub(crate) type ModelKey = (u32, u64, u8);

/// `compute()`, remembered under `key` (a figure of the model that depends on `key`
/// alone; the caller's tag in its last field keeps different figures apart): the model
/// sums a series per call, which thousands of trees opening at once should not each pay.
pub(crate) fn remembered(key: ModelKey, compute: impl FnOnce() -> f64) -> f64 {
    static SEEN: Mutex<Vec<(ModelKey, f64)>> = Mutex::new(Vec::new());
    let known = SEEN
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .iter()
        .find(|(k, _)| *k == key)
        .map(|&(_, v)| v);
    if let Some(v) = known {
        return v;
    }
    let v = compute();
    let mut seen = SEEN.lock().unwrap_or_else(|p| p.into_inner());
    if seen.len() < 256 {
        seen.push((key, v));
    }
    v
}

/// Smallest bits-per-key (to 1/100) at which the blocked layout, with its best `k`, reaches
/// false-positive rate `p`; `None` when no size up to [`MAX_BITS_PER_KEY`] reaches it.
pub(crate) fn bits_per_key_for(p: f64) -> Option<f64> {
    // The default rate's answer, known without the search (about 6 ms: a fresh process
    // opening a database of the default sizing would pay it before its first answer);
    // `the_default_rates_answer_is_the_searchs` keeps it equal to the search.
    if p == crate::filter::DEFAULT_FALSE_POSITIVE_RATE {
        return Some(DEFAULT_RATE_BITS_PER_KEY);
    }
    // NaN (none) is remembered as such.
    let bpk = remembered((0, p.to_bits(), 3), || {
        search_bits_per_key(p).unwrap_or(f64::NAN)
    });
    (!bpk.is_nan()).then_some(bpk)
}

fn search_bits_per_key(p: f64) -> Option<f64> {
    let reaches = |bpk: f64| blocked_fpr(bpk, blocked_optimal_k(bpk)) <= p;
    if !reaches(MAX_BITS_PER_KEY) {
        return None;
    }
    let (mut lo, mut hi) = (0.0_f64, MAX_BITS_PER_KEY);
    while hi - lo > 0.005 {
        let mid = (lo + hi) / 2.0;
        if reaches(mid) {
            hi = mid;
        } else {
            lo = mid;
        }
    }
    Some((hi * 100.0).ceil() / 100.0)
}

/// [`bits_per_key_for`] of the default false-positive rate.
const DEFAULT_RATE_BITS_PER_KEY: f64 = 15.5;

/// The largest bits-per-key bloomsled accepts (a 512-bit block then holds about 4 keys).
pub(crate) const MAX_BITS_PER_KEY: f64 = 128.0;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_default_rates_answer_is_the_searchs() {
        assert_eq!(
            search_bits_per_key(crate::filter::DEFAULT_FALSE_POSITIVE_RATE),
            Some(DEFAULT_RATE_BITS_PER_KEY)
        );
    }

    #[test]
    fn classic_reference_point() {
        // k = 10, m = 20n: (1 - e^-0.5)^10 = 8.894e-5 (the Broder–Mitzenmacher table's 8.89e-5).
        let p = standard_fpr(20_000_000, 1_000_000, 10);
        assert!((p - 8.8942e-5).abs() < 1e-9, "{p}");
        assert_eq!(optimal_k(20, 1), 14);
    }

    #[test]
    fn classic_sizing_round_trips() {
        for &p in &[0.1, 0.01, 0.001, 1e-6] {
            let n = 100_000;
            let m = bits_for(n, p);
            let k = optimal_k(m, n);
            let got = standard_fpr(m, n, k);
            // ceil(k) is close to, not exactly, optimal: allow 10%.
            assert!(got <= p * 1.1, "p={p} m={m} k={k} got={got}");
        }
    }

    #[test]
    fn blocked_model_at_ten_bits_per_key() {
        // RocksDB's cache-line Bloom (also 512-bit blocks, 6 probes that may repeat, the
        // same layout) reaches 0.957% at 10 bits/key.
        let p = blocked_fpr(10.0, 6);
        assert!((p - 0.00957).abs() < 0.00003, "{p}");
        assert_eq!(blocked_optimal_k(10.0), 6);
        // Blocking costs: always worse than the standard filter at the same size.
        assert!(p > standard_fpr(10, 1, 7));
    }

    #[test]
    fn readme_sizing_table() {
        // (bits/key, blocked k, blocked FPR, standard FPR at k = round(b ln 2)), as printed.
        let rows = [
            (6.0, 4, 0.0575, 0.0561),
            (8.0, 5, 0.0231, 0.0216),
            (10.0, 6, 0.00958, 0.00819),
            (12.0, 7, 0.00409, 0.00314),
            (16.0, 9, 0.00083, 0.00046),
            (20.0, 11, 0.000192, 0.000067),
        ];
        for (b, k, blocked, standard) in rows {
            assert_eq!(blocked_optimal_k(b), k, "b={b}");
            let got = blocked_fpr(b, k);
            assert!((got - blocked).abs() / blocked < 0.01, "b={b}: {got}");
            let m = (b * 1000.0) as u64;
            let std_k = (b * std::f64::consts::LN_2).round() as u32;
            let got = standard_fpr(m, 1000, std_k);
            assert!((got - standard).abs() / standard < 0.02, "b={b}: {got}");
        }
    }

    #[test]
    fn blocked_sizing_reaches_target() {
        for &p in &[0.5, 0.1, 0.01, 0.001, 1e-4, 1e-5] {
            let bpk = bits_per_key_for(p).unwrap();
            let k = blocked_optimal_k(bpk);
            assert!(blocked_fpr(bpk, k) <= p, "p={p} bpk={bpk}");
            assert!(
                blocked_fpr(bpk - 0.02, blocked_optimal_k(bpk - 0.02)) > p,
                "p={p}"
            );
        }
        assert!(bits_per_key_for(1e-30).is_none());
    }
}

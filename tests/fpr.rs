//! Statistical false-positive test, fixed seeds: accuracy is tested here, speed in benches.

use bloomsled::{blocked_fpr, Filter, FilterConfig};

fn url(i: u64, tag: &str) -> String {
    format!(
        "https://site{}.example.com/{tag}/{:016x}?page={i}",
        i % 1009,
        i.wrapping_mul(0x9E37_79B9_7F4A_7C15)
    )
}

/// The blocked layout's false-positive rate without the mean-fill approximation of
/// [`blocked_fpr`], and the standard deviation of one block's rate. A block's load is
/// Poisson with mean `lambda`; for each load, the number of set bits has its exact
/// distribution (every key draws `k` of the 512 bits, repeats allowed), and a query's `k`
/// draws all hit set bits with probability (set/512)^k. The mean-fill model puts the mean of
/// the set bits in that power, which by Jensen's inequality reads low.
fn exact_blocked_fpr(lambda: f64, k: u32) -> (f64, f64) {
    const B: usize = 512;
    // set[x]: the chance that a block of the current load has x bits set.
    let mut set = vec![0.0f64; B + 1];
    set[0] = 1.0;
    let (mut m1, mut m2) = (0.0, 0.0);
    let mut load_p = (-lambda).exp();
    let upper = (lambda + 12.0 * lambda.sqrt() + 40.0) as usize;
    for load in 0..=upper {
        if load > 0 {
            load_p *= lambda / load as f64;
            for _ in 0..k {
                for x in (0..=B).rev() {
                    let grow = match x {
                        0 => 0.0,
                        _ => set[x - 1] * (B - x + 1) as f64 / B as f64,
                    };
                    set[x] = set[x] * x as f64 / B as f64 + grow;
                }
            }
        }
        for (x, &p) in set.iter().enumerate() {
            let f = (x as f64 / B as f64).powi(k as i32);
            m1 += load_p * p * f;
            m2 += load_p * p * f * f;
        }
    }
    (m1, (m2 - m1 * m1).max(0.0).sqrt())
}

/// Four filters of 250k keys at 10 bits/key, 1M absent queries each, against the exact
/// model of the layout: within four standard deviations, counting both the queries'
/// sampling error and how much a filter's rate varies with its keys (its blocks' loads).
///
/// At 10 bits/key and k = 6 the exact model gives 0.9665%, and the mean-fill model that
/// sizes filters ([`blocked_fpr`]) 0.958%. So "≤ 0.96%" is not this layout's expectation:
/// these four seeds measure 0.953%, the stream bench's 2M- and 50M-key filters 0.981% and
/// 0.969% (`cargo bench --bench stream` prints them).
#[test]
fn ten_bits_per_key_matches_the_exact_blocked_model() {
    const N: u64 = 250_000;
    const Q: u64 = 1_000_000;
    const SEEDS: [u64; 4] = [11, 22, 33, 44];
    let (mut fp, mut total) = (0u64, 0u64);
    let (mut k, mut bits) = (0, 0);
    for seed in SEEDS {
        let f = FilterConfig::new(N)
            .bits_per_key(10.0)
            .seed(seed)
            .build()
            .unwrap();
        (k, bits) = (f.num_hashes(), f.num_bits());
        for i in 0..N {
            f.insert(url(i, "in").as_bytes());
        }
        for i in 0..N {
            assert!(f.contains(url(i, "in").as_bytes()));
        }
        fp += (0..Q)
            .filter(|&i| f.contains(url(i, "out").as_bytes()))
            .count() as u64;
        total += Q;
    }
    let measured = fp as f64 / total as f64;
    let model = blocked_fpr(10.0, k);
    let blocks = bits / 512;
    let (exact, block_sd) = exact_blocked_fpr(N as f64 / blocks as f64, k);
    let sd = (block_sd.powi(2) / (SEEDS.len() as u64 * blocks) as f64
        + exact * (1.0 - exact) / total as f64)
        .sqrt();
    eprintln!(
        "k={k} measured {:.4}%, exact model {:.4}% (sd {:.4}), mean-fill model {:.4}%",
        measured * 100.0,
        exact * 100.0,
        sd * 100.0,
        model * 100.0
    );
    assert_eq!(k, 6);
    assert!(
        (exact - 0.009665).abs() < 0.000005,
        "exact model at 10 bits/key: {exact}"
    );
    assert!(
        (measured - exact).abs() <= 4.0 * sd,
        "measured {measured} vs exact model {exact} (sd {sd})"
    );
    assert!(
        (measured - model).abs() <= 0.1 * model,
        "measured {measured} vs mean-fill model {model}"
    );
}

/// The live estimate from the bits agrees with what is measured.
#[test]
fn estimated_fpr_tracks_measured() {
    let f = Filter::new(100_000, 0.02).unwrap();
    for i in 0..100_000 {
        f.insert(url(i, "in").as_bytes());
    }
    let q = 500_000;
    let measured = (0..q)
        .filter(|&i| f.contains(url(i, "out").as_bytes()))
        .count() as f64
        / q as f64;
    let est = f.estimated_fpr();
    assert!(measured <= 0.02 * 1.1, "measured {measured}");
    assert!(
        (measured - est).abs() <= 0.1 * est,
        "measured {measured} vs estimate {est}"
    );
    assert!(f.fill_ratio() > 0.3 && f.fill_ratio() < 0.6);
    let items = f.items();
    assert!(items > 97_000 && items <= 100_000, "{items}");
}

/// Sized by rate, the filter delivers the rate (the classic formula would not).
///
/// The rate is a promise about a filter whose seed is secret (a new one per filter), so it
/// is checked on the mean of several filters: one filter's rate varies with its seed (which
/// keys share a block) besides the sampling of the queries. A single filter measured against
/// 1.1× the rate failed once in CI (0.001121 at p = 0.001). Measured in release, 15 runs of
/// four filters at p = 0.001: means 0.96–1.08× p, about 1.03× on average, single filters up
/// to 1.11×; so the mean of eight is held to 1.15× (five of its standard deviations above
/// 1.03×) and each filter to 1.35×.
#[test]
fn sized_by_rate_delivers_rate() {
    const FILTERS: usize = 8;
    for p in [0.05, 0.001] {
        let n = 50_000;
        let q = 500_000;
        let mut rates = Vec::new();
        for s in 0..FILTERS {
            let f = Filter::new(n, p).unwrap();
            for i in 0..n {
                f.insert(url(i, "in").as_bytes());
            }
            let out = format!("out{s}");
            let hits = (0..q)
                .filter(|&i| f.contains(url(i, &out).as_bytes()))
                .count();
            rates.push(hits as f64 / q as f64);
        }
        let mean = rates.iter().sum::<f64>() / FILTERS as f64;
        eprintln!("p={p}: {rates:?}, mean {mean}");
        assert!(mean <= p * 1.15, "p={p} measured {rates:?}, mean {mean}");
        assert!(
            rates.iter().all(|&r| r <= p * 1.35),
            "p={p} measured {rates:?}"
        );
    }
}

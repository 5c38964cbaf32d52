//! Every kernel against the reference probe of `filter::layout`, for every `k` and fill.

use super::*;
use crate::filter::layout::{self, block_index};
use crate::hash::hash_key;

/// The kernels of `k` of every kind this CPU runs, with their kind.
fn every_kernel(k: u32) -> impl Iterator<Item = (KernelKind, Kernel)> {
    assert!(Kernel::for_k(0).is_none() && Kernel::for_kind(KernelKind::Scalar, 0).is_none());
    KernelKind::supported().map(move |kind| {
        (
            kind,
            Kernel::for_kind(kind, k).expect("a kernel for every valid k"),
        )
    })
}

/// What `BLOOMSLED_KERNEL` selects: the kind it names where the CPU runs it; the best
/// kind the CPU runs, with a warning, for a kind it does not or a name that is none;
/// the best, silently, when unset or blank.
#[test]
fn the_environment_selects_a_supported_kernel_or_warns() {
    use KernelKind::*;
    let all = |_: KernelKind| true;
    let no512 = |k: KernelKind| k != Avx512;
    let scalar_only = |k: KernelKind| k == Scalar;
    assert_eq!(choose(None, all), (Avx512, None));
    assert_eq!(choose(None, no512), (Avx2, None));
    assert_eq!(choose(Some("  "), scalar_only), (Scalar, None));
    for (value, want) in [("scalar", Scalar), ("avx2", Avx2), ("avx512", Avx512)] {
        assert_eq!(choose(Some(value), all), (want, None));
    }
    assert_eq!(choose(Some(" AVX2\n"), all), (Avx2, None));
    assert_eq!(choose(Some("scalar"), scalar_only), (Scalar, None));
    let (kind, warning) = choose(Some("avx512"), no512);
    assert_eq!(kind, Avx2);
    let warning = warning.expect("a warning");
    assert!(warning.contains("BLOOMSLED_KERNEL=avx512") && warning.contains("using avx2"));
    let (kind, warning) = choose(Some("avx2"), scalar_only);
    assert_eq!(kind, Scalar);
    assert!(warning
        .expect("a warning")
        .contains("cannot run the avx2 probe"));
    for bogus in ["neon", "avx", "avx-512", "1", "sse2"] {
        let (kind, warning) = choose(Some(bogus), no512);
        assert_eq!(kind, Avx2, "{bogus}");
        assert!(warning
            .expect("a warning")
            .contains("is not a probe kernel"));
    }
    // This process's choice is one this CPU runs, and the one filters get.
    let selected = KernelKind::selected();
    assert!(selected.is_supported());
    assert_eq!(crate::filter::probe_kernel(), selected.name());
    assert!(KernelKind::supported().any(|k| k == Scalar));
    for kind in KernelKind::ALL {
        assert_eq!(KernelKind::from_name(kind.name()), Some(kind));
    }
}

/// The filter's operations with every kernel this CPU runs, on random hashes, against
/// the layout's reference probe over the filter's own words: `insert_hash` (new iff a
/// bit was unset), `contains`/`contains_hash`, `contains_many` and `contains_hash_many`
/// (which prefetch), and a counting filter's inserts, removes and lookups.
#[test]
fn every_kernel_answers_as_the_reference_through_the_filter() {
    use crate::filter::{CountingFilter, Filter, FilterConfig};
    let mut x = 0x5eed_u64;
    let mut next = move || {
        x = x.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = x;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    };
    let reference = |f: &Filter, h: u64| {
        let words = f.words();
        let blk = block_index(h, f.num_blocks());
        layout::all_set(h, f.num_hashes(), |j| words[blk * 8 + j])
    };
    for kind in KernelKind::supported() {
        for k in [1u32, 3, 6, 8, 9, 10, 16, 17, 24] {
            // Small filters (64 blocks) so that the fill goes from empty to dense.
            let shape = FilterConfig::new(1_000)
                .bits_per_key(32.0)
                .num_hashes(k)
                .shape()
                .unwrap();
            let f = Filter::with_shape(shape, 1_000).unwrap().with_kernel(kind);
            let (mut yes, mut no) = (0, 0);
            for round in 0..6 {
                let inserted: Vec<u64> = (0..200).map(|_| next()).collect();
                for &h in &inserted {
                    let want_new = !reference(&f, h);
                    assert_eq!(f.insert_hash(h), want_new, "{kind:?}, k = {k}");
                }
                let queries: Vec<u64> = (0..500)
                    .map(|i| {
                        if i % 4 == 0 {
                            inserted[i % 200]
                        } else {
                            next()
                        }
                    })
                    .collect();
                let want: Vec<bool> = queries.iter().map(|&h| reference(&f, h)).collect();
                let got: Vec<bool> = queries.iter().map(|&h| f.contains_hash(h)).collect();
                assert_eq!(got, want, "{kind:?}, k = {k}, round {round}");
                let mut many = vec![false; queries.len()];
                f.contains_hash_many(&queries, &mut many);
                assert_eq!(many, want, "{kind:?}, k = {k}: contains_hash_many");
                // By key: `contains` and the hashing, prefetching `contains_many`.
                let keys: Vec<Vec<u8>> = (0..300u64)
                    .map(|_| next().to_le_bytes().repeat(1 + round))
                    .collect();
                f.insert_many(&keys[..100]);
                let want: Vec<bool> = keys.iter().map(|k| reference(&f, f.hash(k))).collect();
                assert_eq!(f.contains_many(&keys), want, "{kind:?}, k = {k}");
                assert!(keys.iter().zip(&want).all(|(key, &w)| f.contains(key) == w));
                assert!(
                    keys.iter()
                        .zip(&want)
                        .all(|(key, &w)| f.contains_hash_for_lookup(f.hash(key)) == w),
                    "{kind:?}, k = {k}: Filter::contains_hash_for_lookup"
                );
                yes += want.iter().filter(|&&w| w).count();
                no += want.iter().filter(|&&w| !w).count();
            }
            assert!(yes > 0 && no > 0, "{kind:?}, k = {k}: {yes} yes, {no} no");
            // Counting mode looks up through the same bits, removes clear them.
            let c = CountingFilter::with_shape(shape, 1_000)
                .unwrap()
                .with_kernel(kind);
            let hs: Vec<u64> = (0..300).map(|_| next()).collect();
            hs.iter().for_each(|&h| c.insert_hash(h));
            assert!(
                hs.iter().all(|&h| c.contains_hash(h)),
                "{kind:?}: false negative"
            );
            hs[..150].iter().for_each(|&h| {
                c.remove_hash(h);
            });
            for &h in &hs {
                assert_eq!(
                    c.contains_hash(h),
                    reference(c.bits(), h),
                    "{kind:?}, k = {k}"
                );
            }
            assert!(hs[150..].iter().all(|&h| c.contains_hash(h)));
        }
    }
}

/// Every `k`'s kernels set exactly the documented bits and test them like the generic
/// probe does, on blocks full of other keys too.
#[test]
fn every_k_sets_and_tests_the_layouts_bits() {
    assert!(Kernel::for_k(0).is_none());
    assert!(Kernel::for_k(MAX_HASHES + 1).is_none());
    let every = (1..=MAX_HASHES).flat_map(|k| every_kernel(k).map(move |kern| (k, kern)));
    for (k, (kind, kern)) in every {
        let b = Blocks::zeroed(4).unwrap();
        for i in 0..300u64 {
            let h = hash_key(&i.to_le_bytes(), u64::from(k));
            let blk = block_index(h, 4);
            let before: Vec<u64> = b.words().collect();
            let generic = layout::all_set(h, k, |j| before[blk * 8 + j]);
            assert_eq!(kern.contains(b.block(blk), h), generic, "{kind:?}, k = {k}");
            assert_eq!(
                kern.contains_for_lookup(b.block(blk), h),
                generic,
                "{kind:?}, k = {k}: the probe for lookups"
            );
            let new = kern.insert(b.block(blk), h);
            assert_eq!(new, !generic, "insert says new iff a bit was unset");
            let after: Vec<u64> = b.words().collect();
            let masks = layout::block_masks(h, k);
            for j in 0..8 {
                assert_eq!(after[blk * 8 + j], before[blk * 8 + j] | masks[j]);
            }
            assert!(kern.contains(b.block(blk), h));
            assert!(kern.contains_for_lookup(b.block(blk), h));
            assert!(!kern.insert(b.block(blk), h), "a second insert is not new");
        }
    }
}

/// Every `k`'s several-block probe (vector and scalar) answers what the single-block
/// probes answer or-ed, for any number of blocks, on blocks from empty to full.
#[test]
fn the_several_block_probe_ors_the_single_ones() {
    let every = (1..=MAX_HASHES).flat_map(|k| every_kernel(k).map(move |kern| (k, kern)));
    for (k, (kind, kern)) in every {
        let b = Blocks::zeroed(6).unwrap();
        // Block i holds about 4^i keys' bits: empty, sparse, ..., saturated.
        for i in 0..6u64 {
            for j in 0..4u64.pow(i as u32) {
                kern.insert(b.block(i as usize), hash_key(&j.to_le_bytes(), i + 100));
            }
        }
        let blocks: Vec<&Block> = (0..6).map(|i| b.block(i)).collect();
        let (mut yes, mut no) = (0, 0);
        for j in 0..400u64 {
            // Keys inserted into block 1 or 2, and others (blocks 0 to 2, empty to
            // sparse, must then give both answers).
            let h = match j % 3 {
                0 => hash_key(&(j % 4).to_le_bytes(), 101),
                1 => hash_key(&(j % 16).to_le_bytes(), 102),
                _ => hash_key(&j.to_be_bytes(), 7),
            };
            for n in 0..=blocks.len() {
                for from in 0..=(blocks.len() - n) {
                    let some = &blocks[from..from + n];
                    let want = some.iter().any(|blk| kern.contains(blk, h));
                    let got = kern.contains_any(some, h);
                    assert_eq!(got, want, "{kind:?}, k = {k}, {n} blocks");
                    if (n, from) == (3, 0) {
                        if want {
                            yes += 1;
                        } else {
                            no += 1;
                        }
                    }
                }
            }
        }
        assert!(yes > 0 && no > 0, "k = {k}: {yes} yes, {no} no");
    }
}

/// Every vector probe (AVX2, AVX-512) is offered exactly where this CPU runs it, for
/// `k` in `1..=16`, and answers exactly as the layout's reference probe, alone and over
/// several blocks, on blocks empty, sparse, half-full and saturated. (Where the CPU runs
/// neither, there is none to run: filters keep the scalar probe, tested above.)
#[test]
fn every_vector_probe_equals_the_reference_on_every_fill() {
    use crate::filter::layout::BLOCK_WORDS;
    for kind in [KernelKind::Avx2, KernelKind::Avx512] {
        assert_eq!(Kernel::vector_for(kind, 6).is_some(), kind.is_supported());
        if !kind.is_supported() {
            continue;
        }
        assert!(Kernel::vector_for(kind, 17).is_none() && Kernel::vector_for(kind, 0).is_none());
        for k in 1..=16u32 {
            let kern = Kernel::vector_for(kind, k).expect("a vector probe for k <= 16");
            for fill in [0usize, 3, 40, 200, 4_000] {
                // Eight blocks holding `fill` keys' bits, set by the layout's masks.
                let mut words = vec![0u64; 8 * BLOCK_WORDS];
                for i in 0..fill as u64 {
                    let h = hash_key(&i.to_le_bytes(), 99);
                    let blk = block_index(h, 8);
                    for (w, m) in words[blk * BLOCK_WORDS..]
                        .iter_mut()
                        .zip(layout::block_masks(h, k))
                    {
                        *w |= m;
                    }
                }
                let b = Blocks::from_words(&words).unwrap();
                let blocks: Vec<&Block> = (0..8).map(|i| b.block(i)).collect();
                let (mut yes, mut no) = (0, 0);
                // The inserted keys (all present) and 3,000 others (mostly absent).
                let inserted = (0..fill.min(1_000) as u64).map(|i| hash_key(&i.to_le_bytes(), 99));
                let others = (0..3_000u64).map(|i| hash_key(&i.to_be_bytes(), u64::from(k)));
                for h in inserted.chain(others) {
                    let blk = block_index(h, 8);
                    let want = layout::all_set(h, k, |j| words[blk * 8 + j]);
                    assert_eq!(
                        kern.contains(b.block(blk), h),
                        want,
                        "{kind:?}, k = {k}, fill {fill}"
                    );
                    assert_eq!(kern.contains_for_lookup(b.block(blk), h), want, "{kind:?}");
                    let any_want = (0..8).any(|i| layout::all_set(h, k, |j| words[i * 8 + j]));
                    assert_eq!(kern.contains_any(&blocks, h), any_want, "{kind:?}, k = {k}");
                    if want {
                        yes += 1;
                    } else {
                        no += 1;
                    }
                }
                // The comparison saw both answers wherever both can occur.
                if (1..=200).contains(&fill) {
                    assert!(yes > 0 && no > 0, "{kind:?}, k = {k}: {yes} yes, {no} no");
                }
            }
        }
    }
}

/// Threads inserting the same new keys at once: every key is then present, and each
/// key was reported new by at least one thread. Keys are picked one per block, so no
/// other key can have set their bits: "new" is the only right answer for the first.
#[test]
fn concurrent_inserts_of_one_key_tell_at_least_one_thread_it_is_new() {
    use std::sync::atomic::{AtomicU32, Ordering::Relaxed};
    const BLOCKS: usize = 4096;
    let kern = Kernel::for_k(6).unwrap();
    let b = Blocks::zeroed(BLOCKS).unwrap();
    let mut taken = vec![false; BLOCKS];
    let keys: Vec<u64> = (0..100_000u64)
        .map(|i| hash_key(&i.to_le_bytes(), 5))
        .filter(|&h| !std::mem::replace(&mut taken[block_index(h, BLOCKS as u64)], true))
        .collect();
    assert!(keys.len() > 4_000);
    let told_new: Vec<AtomicU32> = keys.iter().map(|_| AtomicU32::new(0)).collect();
    let start = std::sync::Barrier::new(4);
    std::thread::scope(|s| {
        for _ in 0..4 {
            s.spawn(|| {
                start.wait();
                for (h, t) in keys.iter().zip(&told_new) {
                    if kern.insert(b.block(block_index(*h, BLOCKS as u64)), *h) {
                        t.fetch_add(1, Relaxed);
                    }
                }
            });
        }
    });
    for (h, t) in keys.iter().zip(&told_new) {
        assert!(kern.contains(b.block(block_index(*h, BLOCKS as u64)), *h));
        assert!(t.load(Relaxed) >= 1, "no thread was told {h:#x} is new");
    }
}

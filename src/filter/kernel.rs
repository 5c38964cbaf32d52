//! The probe and the insert of one block, compiled once for every `k` and picked once per
//! filter.
//!
//! `k` is a filter's constant, but a run-time value to the compiler: a probe written over
//! `0..k` keeps a loop, its trip count and a bound on `k` in every lookup. Here each `k` in
//! `1..=MAX_HASHES` has its own copy with the draws unrolled ([`layout::all_set_k`]), and a
//! filter keeps pointers to the two copies of its `k`. A lookup makes one indirect call,
//! whose target never changes and is always predicted (a `match` on `k` at every lookup
//! would do as well; the loop over `0..k` does not).
//!
//! The probe comes in three kinds ([`KernelKind`]), all testing exactly the bits of
//! `filter::layout`: the unrolled scalar one here, on every CPU; eight draws per 256-bit
//! vector with AVX2 (`filter::avx2`); eight per 512-bit vector with AVX-512 (`filter::simd`).
//! A filter takes the fastest this CPU runs, detected at run time, unless `BLOOMSLED_KERNEL`
//! names another ([`KernelKind::selected`]); a vector probe is handed out only by its module,
//! after checking the CPU. Inserts are scalar in every kind.
//!
//! A lookup that branches on the answer anyway (`Tree::get`, `Tree::contains_key`, which go
//! on to the store on a "maybe") probes with [`Kernel::contains_early`]: the scalar probe of
//! `k` > 4 then tests four draws, branches once on them, and only then the rest
//! (`layout::all_set_k_early`), which spares an absent key most of its draws; with every
//! kind, since it beat the vector probes there too. Callers that count answers without
//! branching keep the branch-free [`Kernel::contains`] of their kind.
//!
//! Inserts ([`Kernel::insert`]) first run the probe: a key whose bits are all set writes
//! nothing, and never takes the line away from other cores. Otherwise every draw's bit gets
//! a locked `or` whose result is unused (`lock or`), with no branch on which bits were
//! missing: a branch per draw, to set only the missing bits, would go either way about half
//! the time, and `fetch_or` with its result read compiles to a compare-and-swap loop on x86.
//! (The insert's cost beside fastbloom's is in `benches/stream.rs`.)

use super::bits::Block;
#[cfg(test)]
use super::bits::Blocks;
use super::layout::MAX_HASHES;

/// Tests hash `h` against its block. `unsafe` because a vector probe runs only on a CPU with
/// its features: a [`Kernel`] holds only probes this CPU runs, and its methods are the only
/// callers (see [`Kernel::contains`]).
type ContainsFn = unsafe fn(&Block, u64) -> bool;
/// Inserts hash `h` into its block; true if it was new (see [`Kernel::insert`]).
type InsertFn = fn(&Block, u64) -> bool;
/// Tests hash `h` against several blocks, each its own filter's block for `h` (filters of
/// one `k`): true if any of them holds all of `h`'s bits. `unsafe` as [`ContainsFn`].
type ContainsAnyFn = unsafe fn(&[&Block], u64) -> bool;

/// The kernels of one `k`: the probe, the several-block probe and the insert.
///
/// The vector probes are stored as pointers to their `#[target_feature]` functions
/// themselves, not to safe wrappers around them (a wrapper cost a jump per lookup): the
/// pointers are `unsafe fn`, private to this module, set only by [`Kernel::for_kind`] after
/// the CPU check, and called only by the methods below.
#[derive(Clone, Copy)]
pub(crate) struct Kernel {
    contains: ContainsFn,
    /// The probe for a caller that branches on the answer: the scalar early-exit one in every
    /// kind (see [`Kernel::contains_early`]).
    contains_early: fn(&Block, u64) -> bool,
    /// The probe of one key in the blocks of several filters (a window's generations): one
    /// call for all of them, no early exit, so their loads overlap.
    contains_any: ContainsAnyFn,
    insert: InsertFn,
}

fn contains_k<const K: usize>(b: &Block, h: u64) -> bool {
    b.contains_k::<K>(h)
}

fn contains_early_k<const K: usize>(b: &Block, h: u64) -> bool {
    b.contains_k_early::<K>(h)
}

fn contains_any_k<const K: usize>(blocks: &[&Block], h: u64) -> bool {
    // `|`, not `||`: no branch on what a load returned.
    blocks
        .iter()
        .fold(false, |any, b| any | b.contains_k::<K>(h))
}

fn insert_k<const K: usize>(b: &Block, h: u64) -> bool {
    if b.contains_k::<K>(h) {
        return false;
    }
    b.set_k::<K>(h);
    true
}

macro_rules! kernels {
    ($k:expr; $($n:literal)*) => {
        match $k {
            $($n => Some(Kernel {
                contains: contains_k::<$n>,
                contains_early: contains_early_k::<$n>,
                contains_any: contains_any_k::<$n>,
                insert: insert_k::<$n>,
            }),)*
            _ => None,
        }
    };
}

/// The vector probes of `kind` for `k`, if `kind` has them for this `k` (they stop at 16)
/// and this CPU runs them: the one place a vector probe is handed out. Each vector module
/// (`filter::avx2`, `filter::simd`) has the same two functions, `all_set::<K>` and
/// `any_all_set::<K>`, `K` in `1..=16`.
fn vector(kind: KernelKind, k: u32) -> Option<(ContainsFn, ContainsAnyFn)> {
    if !kind.is_supported() {
        return None;
    }
    #[allow(unused_macros)]
    macro_rules! arms {
        ($module:ident; $($n:literal)*) => {
            match k {
                $($n => Some((
                    super::$module::all_set::<$n> as ContainsFn,
                    super::$module::any_all_set::<$n> as ContainsAnyFn,
                )),)*
                _ => None,
            }
        };
    }
    // (Not under loom: its atomics are not the bytes the vector loads read.)
    match kind {
        KernelKind::Scalar => None,
        #[cfg(all(target_arch = "x86_64", not(bloomsled_loom)))]
        KernelKind::Avx2 => arms!(avx2; 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16),
        #[cfg(all(target_arch = "x86_64", not(bloomsled_loom)))]
        KernelKind::Avx512 => arms!(simd; 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16),
        #[cfg(not(all(target_arch = "x86_64", not(bloomsled_loom))))]
        KernelKind::Avx2 | KernelKind::Avx512 => {
            let _ = k;
            None
        }
    }
}

impl Kernel {
    /// Inserts hash `h` into block `b`; true if it was new (some bit was unset when read).
    ///
    /// When several threads insert the same new key at once, each bit is unset when the
    /// first of them reads it (a thread's probe of a word comes before its own `or` into it),
    /// so at least one of them is told the key is new. Bits are never cleared here (only
    /// counting mode clears, under the block's lock).
    #[inline(always)]
    pub(crate) fn insert(&self, b: &Block, h: u64) -> bool {
        (self.insert)(b, h)
    }

    /// The kernels for `k` bits per key; `None` outside `1..=MAX_HASHES`. The probe is the
    /// one [`KernelKind::selected`] names (the best this CPU runs, or `BLOOMSLED_KERNEL`'s).
    pub(crate) fn for_k(k: u32) -> Option<Kernel> {
        Kernel::for_kind(KernelKind::selected(), k)
    }

    /// The kernels of `kind` for `k`; `None` outside `1..=MAX_HASHES`. Where `kind` has no
    /// probe for this `k` (the vector probes stop at 16) or this CPU cannot run it, the
    /// scalar one: a vector probe is handed out only after its module checked the CPU.
    pub(crate) fn for_kind(kind: KernelKind, k: u32) -> Option<Kernel> {
        let scalar = Kernel::for_scalar(k)?;
        Some(match vector(kind, k) {
            Some((contains, contains_any)) => Kernel {
                contains,
                contains_any,
                ..scalar
            },
            None => scalar,
        })
    }

    /// The kernels of `kind` for `k` if `kind` has a vector probe for this `k` that this CPU
    /// runs (not the scalar fallback [`Kernel::for_kind`] gives otherwise).
    #[cfg(test)]
    pub(crate) fn vector_for(kind: KernelKind, k: u32) -> Option<Kernel> {
        let (contains, contains_any) = vector(kind, k)?;
        Some(Kernel {
            contains,
            contains_any,
            ..Kernel::for_scalar(k)?
        })
    }

    /// True if hash `h`'s bits are all set in block `b`.
    #[inline(always)]
    pub(crate) fn contains(&self, b: &Block, h: u64) -> bool {
        // SAFETY: `contains` is a scalar probe (a safe function) or a vector probe that
        // `vector` handed out after checking that this CPU runs it; the field is private to
        // this module and set nowhere else.
        #[allow(unsafe_code)]
        unsafe {
            (self.contains)(b, h)
        }
    }

    /// [`Kernel::contains`] for a caller that branches on the answer (a lookup that goes on
    /// to the store): the same answer; the scalar probe of `k` > 4 tests the first four
    /// draws, branches once, then the rest (`layout::all_set_k_early`). Every kind uses this
    /// scalar probe here: in a stream of absent `get`s at `k` = 10 it beat the vector probes
    /// (2M keys: AVX2 44.5 → 36.6 ns, AVX-512 40.0 → 37.0 ns per `get`, issue 37).
    #[inline(always)]
    pub(crate) fn contains_early(&self, b: &Block, h: u64) -> bool {
        (self.contains_early)(b, h)
    }

    /// True if some block of `blocks` (each its filter's block for `h`, filters of this
    /// `k`) holds all of `h`'s bits.
    #[inline(always)]
    pub(crate) fn contains_any(&self, blocks: &[&Block], h: u64) -> bool {
        // SAFETY: as in `Kernel::contains`.
        #[allow(unsafe_code)]
        unsafe {
            (self.contains_any)(blocks, h)
        }
    }

    /// The scalar kernels for `k`, on any CPU.
    pub(crate) fn for_scalar(k: u32) -> Option<Kernel> {
        const _: () = assert!(MAX_HASHES == 32, "one arm per k below");
        kernels!(k; 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 18 19 20 21 22 23 24 25 26 27 28 29 30 31 32)
    }
}

/// The environment variable that forces a probe kernel: `scalar`, `avx2` or `avx512` (the
/// names of [`KernelKind::name`]; a contract, outside checks use them).
#[cfg_attr(bloomsled_loom, allow(dead_code))]
pub(crate) const KERNEL_ENV: &str = "BLOOMSLED_KERNEL";

/// The probe implementations a filter can run. Every one answers exactly as the layout's
/// reference probe (`layout::all_set`); they differ in speed only.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum KernelKind {
    /// The unrolled scalar probe, on every CPU.
    Scalar,
    /// Eight draws per 256-bit vector (`filter::avx2`), on x86-64 CPUs with AVX2.
    Avx2,
    /// Eight draws per 512-bit vector (`filter::simd`), on x86-64 CPUs with AVX-512 F and DQ.
    Avx512,
}

impl KernelKind {
    /// Every kind, from the slowest to the fastest where all run.
    pub(crate) const ALL: [KernelKind; 3] =
        [KernelKind::Scalar, KernelKind::Avx2, KernelKind::Avx512];

    /// The kind's name, as `BLOOMSLED_KERNEL` takes it.
    pub(crate) fn name(self) -> &'static str {
        match self {
            KernelKind::Scalar => "scalar",
            KernelKind::Avx2 => "avx2",
            KernelKind::Avx512 => "avx512",
        }
    }

    /// The kind named `name` (as [`KernelKind::name`] writes it, surrounding blanks and
    /// letter case ignored).
    #[cfg_attr(bloomsled_loom, allow(dead_code))]
    fn from_name(name: &str) -> Option<KernelKind> {
        let name = name.trim();
        KernelKind::ALL
            .into_iter()
            .find(|k| k.name().eq_ignore_ascii_case(name))
    }

    /// True if this CPU runs the kind's probe.
    pub(crate) fn is_supported(self) -> bool {
        match self {
            KernelKind::Scalar => true,
            #[cfg(all(target_arch = "x86_64", not(bloomsled_loom)))]
            KernelKind::Avx2 => super::avx2::has_avx2(),
            #[cfg(all(target_arch = "x86_64", not(bloomsled_loom)))]
            KernelKind::Avx512 => super::simd::has_avx512(),
            #[cfg(not(all(target_arch = "x86_64", not(bloomsled_loom))))]
            KernelKind::Avx2 | KernelKind::Avx512 => false,
        }
    }

    /// The kinds this CPU runs, the scalar one first.
    #[cfg(test)]
    pub(crate) fn supported() -> impl Iterator<Item = KernelKind> {
        KernelKind::ALL.into_iter().filter(|k| k.is_supported())
    }

    /// The kind new filters use: `BLOOMSLED_KERNEL`'s if set to a kind this CPU runs, the
    /// best one otherwise. The variable is read once, at the first filter made; an unknown
    /// or unsupported value is logged (`log::warn!`) and the best kind used instead.
    pub(crate) fn selected() -> KernelKind {
        #[cfg(not(bloomsled_loom))]
        {
            static SELECTED: std::sync::OnceLock<KernelKind> = std::sync::OnceLock::new();
            *SELECTED.get_or_init(|| {
                let value = std::env::var(KERNEL_ENV).ok();
                let (kind, warning) = choose(value.as_deref(), KernelKind::is_supported);
                if let Some(w) = warning {
                    log::warn!("{w}");
                }
                kind
            })
        }
        #[cfg(bloomsled_loom)]
        KernelKind::Scalar
    }
}

/// The kind `value` (of `BLOOMSLED_KERNEL`, `None` if unset) selects where `supported` says
/// which kinds the CPU runs, and a warning to log if it asked for one it cannot have.
#[cfg_attr(bloomsled_loom, allow(dead_code))]
fn choose(
    value: Option<&str>,
    supported: impl Fn(KernelKind) -> bool,
) -> (KernelKind, Option<String>) {
    let best = KernelKind::ALL
        .into_iter()
        .filter(|&k| supported(k))
        .last()
        .unwrap_or(KernelKind::Scalar);
    let Some(value) = value.filter(|v| !v.trim().is_empty()) else {
        return (best, None);
    };
    match KernelKind::from_name(value) {
        Some(kind) if supported(kind) => (kind, None),
        Some(kind) => (
            best,
            Some(format!(
                "{KERNEL_ENV}={value}: this CPU cannot run the {} probe; using {}",
                kind.name(),
                best.name()
            )),
        ),
        None => (
            best,
            Some(format!(
                "{KERNEL_ENV}={value:?} is not a probe kernel (scalar, avx2 or avx512); using {}",
                best.name()
            )),
        ),
    }
}

#[cfg(test)]
mod tests {
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
        assert_eq!(crate::probe_kernel(), selected.name());
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
                            .all(|(key, &w)| f.contains_early(key) == w),
                        "{kind:?}, k = {k}: Filter::contains_early"
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
                    kern.contains_early(b.block(blk), h),
                    generic,
                    "{kind:?}, k = {k}: the early-exit probe"
                );
                let new = kern.insert(b.block(blk), h);
                assert_eq!(new, !generic, "insert says new iff a bit was unset");
                let after: Vec<u64> = b.words().collect();
                let masks = layout::block_masks(h, k);
                for j in 0..8 {
                    assert_eq!(after[blk * 8 + j], before[blk * 8 + j] | masks[j]);
                }
                assert!(kern.contains(b.block(blk), h));
                assert!(kern.contains_early(b.block(blk), h));
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
            assert!(
                Kernel::vector_for(kind, 17).is_none() && Kernel::vector_for(kind, 0).is_none()
            );
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
                    let inserted =
                        (0..fill.min(1_000) as u64).map(|i| hash_key(&i.to_le_bytes(), 99));
                    let others = (0..3_000u64).map(|i| hash_key(&i.to_be_bytes(), u64::from(k)));
                    for h in inserted.chain(others) {
                        let blk = block_index(h, 8);
                        let want = layout::all_set(h, k, |j| words[blk * 8 + j]);
                        assert_eq!(
                            kern.contains(b.block(blk), h),
                            want,
                            "{kind:?}, k = {k}, fill {fill}"
                        );
                        assert_eq!(kern.contains_early(b.block(blk), h), want, "{kind:?}");
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
}

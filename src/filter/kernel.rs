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
//! on to the store on a "maybe") probes with [`Kernel::contains_for_lookup`]: in the scalar kind,
//! the probe of `k` > 4 that tests four draws, branches once on them, and only then the rest
//! (`layout::all_set_k_early`), which spares an absent key most of its draws; in the vector
//! kinds, their vector probe, which beats that early exit there (issue 46, measured in
//! `Tree::get` of absent keys at the default 0.1%, 1M keys, tenth percentiles of 64K-key
//! passes: scalar 25.0 ns with the branch-free probe against 17.5 early; AVX2 15.2 vector
//! against 17.3 early, AVX-512 13.6–14.3 against 16.6–21.0). Callers that count answers
//! without branching keep the branch-free [`Kernel::contains`] of their kind.
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
    /// The probe for a caller that branches on the answer (see [`Kernel::contains_for_lookup`]):
    /// the scalar early-exit one in the scalar kind, the vector probe in the others.
    /// `unsafe` as `contains`.
    contains_for_lookup: ContainsFn,
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
                contains_for_lookup: contains_early_k::<$n>,
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
                contains_for_lookup: contains,
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
            contains_for_lookup: contains,
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
    /// to the store): the same answer. The scalar kind's tests the first four draws of
    /// `k` > 4, branches once, then the rest (`layout::all_set_k_early`); a vector kind's is
    /// its vector probe (see the module docs for the measurements; issue 37 had found the
    /// early exit faster with every kind, in a `get` that also paid a store-forwarding stall
    /// on its answer, since removed).
    #[inline(always)]
    pub(crate) fn contains_for_lookup(&self, b: &Block, h: u64) -> bool {
        // SAFETY: as in `Kernel::contains`: a safe scalar probe, or the vector probe that
        // `vector` handed out after checking the CPU.
        #[allow(unsafe_code)]
        unsafe {
            (self.contains_for_lookup)(b, h)
        }
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
mod tests;

//! The probe with AVX-512, for CPUs that have it (checked at run time).
//!
//! The same test as [`layout::all_set_k`](super::layout::all_set_k), eight draws per vector
//! instruction: the `K` products `h · G^(i+1)` in one `vpmullq`, their top 9 bits the bit
//! positions, `vpermq` brings each draw's word of the block into its lane, and one
//! `vptestmq` checks every bit at once. About a dozen instructions for the whole probe
//! against about 45 for the unrolled scalar one at k = 6, so more keys fit in the CPU's
//! reorder window and more of their cache misses are in flight at once.
//!
//! `k` up to 16 (two vectors); larger `k` keeps the scalar probe. (Its cost against the
//! scalar probe and fastbloom's is measured in `benches/stream.rs`.)

#![allow(unsafe_code)]

use std::arch::asm;
use std::arch::x86_64::{
    __m512i, _mm512_and_si512, _mm512_loadu_si512, _mm512_mask_test_epi64_mask, _mm512_mullo_epi64,
    _mm512_permutexvar_epi64, _mm512_set1_epi64, _mm512_sllv_epi64, _mm512_srli_epi64,
};

use super::bits::Block;
use super::layout::GOLDEN_POWERS;

/// The probe's signature, as `filter::kernel` calls it.
type ContainsFn = fn(&Block, u64) -> bool;
/// The several-block probe's signature (`filter::kernel`'s `ContainsAnyFn`).
type ContainsAnyFn = fn(&[&Block], u64) -> bool;

/// True if this CPU runs the vector probes: AVX-512 F and DQ.
pub(super) fn has_avx512() -> bool {
    std::is_x86_feature_detected!("avx512f") && std::is_x86_feature_detected!("avx512dq")
}

/// The probe of `k` bits per key with AVX-512, if this CPU has AVX-512 F and DQ and
/// `k <= 16`.
pub(super) fn contains_for(k: u32) -> Option<ContainsFn> {
    if !has_avx512() {
        return None;
    }
    macro_rules! arms {
        ($($n:literal)*) => {
            match k {
                $($n => Some(contains_k::<$n> as ContainsFn),)*
                _ => None,
            }
        };
    }
    arms!(1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16)
}

/// The several-block probe of `k` bits per key with AVX-512 (`k <= 16`): `h`'s draws
/// (which word, which bit) are computed once for all the blocks, then each block costs a
/// load, a permute and a test.
pub(super) fn contains_any_for(k: u32) -> Option<ContainsAnyFn> {
    if !has_avx512() {
        return None;
    }
    macro_rules! arms {
        ($($n:literal)*) => {
            match k {
                $($n => Some(contains_any_k::<$n> as ContainsAnyFn),)*
                _ => None,
            }
        };
    }
    arms!(1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16)
}

fn contains_k<const K: usize>(b: &Block, h: u64) -> bool {
    // SAFETY: `contains_for` hands out this function only after checking that the CPU has
    // AVX-512 F and DQ, the features `all_set` is compiled for.
    unsafe { all_set::<K>(b, h) }
}

fn contains_any_k<const K: usize>(blocks: &[&Block], h: u64) -> bool {
    // SAFETY: `contains_any_for` hands out this function only after checking that the CPU
    // has AVX-512 F and DQ, the features `any_all_set` is compiled for.
    unsafe { any_all_set::<K>(blocks, h) }
}

/// The block's 64 bytes in one register.
///
/// # Safety
/// The CPU must have AVX-512 F.
#[target_feature(enable = "avx512f")]
#[inline]
unsafe fn load_block(b: &Block) -> __m512i {
    let words: __m512i;
    // SAFETY: `b` is a live, 64-byte aligned (`repr(align(64))`), 64-byte `Block`, so the
    // aligned load reads only its memory. The block's words are atomics that other threads
    // may `lock or` into at the same time: the load is an asm block, not a plain Rust read,
    // and on x86-64 a vector load reads each aligned 8-byte word single-copy atomically
    // (Intel SDM vol. 3 §9.1.1, AMD APM vol. 2 §7.3.2), so it behaves as the eight relaxed
    // atomic loads of the scalar probe, in some order. The asm writes no memory and leaves
    // the flags and the stack alone.
    unsafe {
        asm!(
            "vmovdqa64 {w}, zmmword ptr [{p}]",
            w = out(zmm_reg) words,
            p = in(reg) std::ptr::from_ref(b),
            options(nostack, preserves_flags, readonly),
        );
    }
    words
}

/// True if every one of `h`'s `K` bits is set in `b`.
///
/// # Safety
/// The CPU must have AVX-512 F and DQ.
#[target_feature(enable = "avx512f,avx512dq")]
#[inline]
unsafe fn all_set<const K: usize>(b: &Block, h: u64) -> bool {
    const { assert!(K >= 1 && K <= 16) };
    // SAFETY: the caller guarantees AVX-512 F and DQ, all that these need.
    unsafe {
        let words = load_block(b);
        let first = draws_set(words, h, 0, lane_mask(K.min(8)));
        if K <= 8 {
            first
        } else {
            // Both halves, ANDed without a branch between them.
            first & draws_set(words, h, 8, lane_mask(K - 8))
        }
    }
}

/// True if some block of `blocks` has every one of `h`'s `K` bits set.
///
/// # Safety
/// The CPU must have AVX-512 F and DQ.
#[target_feature(enable = "avx512f,avx512dq")]
#[inline]
unsafe fn any_all_set<const K: usize>(blocks: &[&Block], h: u64) -> bool {
    const { assert!(K >= 1 && K <= 16) };
    // SAFETY: the caller guarantees AVX-512 F and DQ, all that these need.
    unsafe {
        let first = draws(h, 0, lane_mask(K.min(8)));
        let second = draws(h, 8, if K > 8 { lane_mask(K - 8) } else { 0 });
        let mut any = false;
        for b in blocks {
            let words = load_block(b);
            let mut hit = first.set_in(words);
            if K > 8 {
                hit &= second.set_in(words);
            }
            // `|`: no branch on what a load returned, the blocks' loads overlap.
            any |= hit;
        }
        any
    }
}

/// Eight of a hash's draws, as lanes: the word of the block each one tests and its bit.
#[derive(Clone, Copy)]
struct Draws {
    word: __m512i,
    bit: __m512i,
    lanes: u8,
}

/// The draws `from..from + 8` of `h`, of which `lanes` are used.
///
/// # Safety
/// The CPU must have AVX-512 F and DQ.
#[target_feature(enable = "avx512f,avx512dq")]
#[inline]
unsafe fn draws(h: u64, from: usize, lanes: u8) -> Draws {
    let g = &GOLDEN_POWERS[from..from + 8];
    // SAFETY: `g` is 8 `u64`s, the 64 bytes the unaligned load reads; the caller guarantees
    // the CPU features.
    unsafe {
        let pos = _mm512_srli_epi64::<55>(_mm512_mullo_epi64(
            _mm512_set1_epi64(h as i64),
            _mm512_loadu_si512(g.as_ptr().cast()),
        ));
        let bit = _mm512_sllv_epi64(
            _mm512_set1_epi64(1),
            _mm512_and_si512(pos, _mm512_set1_epi64(63)),
        );
        Draws {
            word: _mm512_srli_epi64::<6>(pos),
            bit,
            lanes,
        }
    }
}

impl Draws {
    /// True if the draws' bits are all set in `words` (a block).
    ///
    /// # Safety
    /// The CPU must have AVX-512 F.
    #[target_feature(enable = "avx512f")]
    #[inline]
    unsafe fn set_in(&self, words: __m512i) -> bool {
        let word = _mm512_permutexvar_epi64(self.word, words);
        _mm512_mask_test_epi64_mask(self.lanes, word, self.bit) == self.lanes
    }
}

/// True if the draws `from..from + 8` of `h` that `lanes` selects all hit set bits of
/// `words` (a block).
///
/// # Safety
/// The CPU must have AVX-512 F and DQ.
#[target_feature(enable = "avx512f,avx512dq")]
#[inline]
unsafe fn draws_set(words: __m512i, h: u64, from: usize, lanes: u8) -> bool {
    // SAFETY: the caller guarantees the CPU features.
    unsafe { draws(h, from, lanes).set_in(words) }
}

/// The mask of the first `n` (1..=8) lanes.
const fn lane_mask(n: usize) -> u8 {
    (((1u16) << n) - 1) as u8
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::filter::bits::Blocks;
    use crate::filter::layout::{self, block_index, BLOCK_WORDS};
    use crate::hash::hash_key;

    /// On a CPU with AVX-512, every `k`'s vector probe answers exactly as the scalar
    /// reference, on empty, sparse, half-full and saturated blocks. (Elsewhere there is no
    /// vector probe to test: `contains_for` says so, and the filter keeps the scalar one.)
    #[test]
    fn vector_probe_equals_the_scalar_reference() {
        let has =
            std::is_x86_feature_detected!("avx512f") && std::is_x86_feature_detected!("avx512dq");
        // The vector probe is offered exactly where the CPU can run it (and `Kernel::for_k`
        // then takes it: `filter::kernel`'s tests run it on this CPU)...
        assert_eq!(contains_for(6).is_some(), has);
        if !has {
            // ...so on this CPU filters keep the scalar probe, tested in `filter::kernel`.
            return;
        }
        assert!(contains_for(17).is_none() && contains_for(0).is_none());
        for k in 1..=16u32 {
            let probe = contains_for(k).unwrap();
            for fill in [0usize, 3, 40, 200, 4_000] {
                // Eight blocks holding `fill` keys' bits, set by the layout's reference masks.
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
                let (mut yes, mut no) = (0, 0);
                // The inserted keys (all present) and 3,000 others (mostly absent).
                let inserted = (0..fill.min(1_000) as u64).map(|i| hash_key(&i.to_le_bytes(), 99));
                let others = (0..3_000u64).map(|i| hash_key(&i.to_be_bytes(), u64::from(k)));
                for h in inserted.chain(others) {
                    let blk = block_index(h, 8);
                    let want = layout::all_set(h, k, |j| words[blk * 8 + j]);
                    assert_eq!(
                        probe(b.block(blk), h),
                        want,
                        "k = {k}, fill {fill}, h = {h:#x}"
                    );
                    if want {
                        yes += 1;
                    } else {
                        no += 1;
                    }
                }
                // The comparison saw both answers wherever both can occur.
                if (1..=200).contains(&fill) {
                    assert!(yes > 0 && no > 0, "k = {k}: {yes} yes, {no} no");
                }
            }
        }
    }
}

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

/// True if this CPU runs the vector probes: AVX-512 F and DQ.
pub(super) fn has_avx512() -> bool {
    std::is_x86_feature_detected!("avx512f") && std::is_x86_feature_detected!("avx512dq")
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

/// True if every one of `h`'s `K` bits is set in `b`: the probe `filter::kernel` hands out
/// for the AVX-512 kind (a pointer to this function itself).
///
/// # Safety
/// The CPU must have AVX-512 F and DQ.
#[target_feature(enable = "avx512f,avx512dq")]
#[inline]
pub(super) unsafe fn all_set<const K: usize>(b: &Block, h: u64) -> bool {
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

/// True if some block of `blocks` has every one of `h`'s `K` bits set (the several-block
/// probe of the AVX-512 kind).
///
/// # Safety
/// The CPU must have AVX-512 F and DQ.
#[target_feature(enable = "avx512f,avx512dq")]
#[inline]
pub(super) unsafe fn any_all_set<const K: usize>(blocks: &[&Block], h: u64) -> bool {
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

//! The probe with AVX2 (x86-64-v3), for CPUs that have it (checked at run time).
//!
//! The same test as [`layout::all_set_k`](super::layout::all_set_k), the same bits, eight
//! draws per 256-bit vector. AVX2 has no 64-bit vector multiply and no permute across two
//! registers, so the draws are derived in 32-bit lanes:
//!
//! - A draw's position is the top 9 bits of `h · g mod 2^64` (`g` = `G^(i+1)`). Writing
//!   `h = hh·2^32 + hl` and `g = gh·2^32 + gl`, the top 32 bits of that product are
//!   `hi32(hl·gl) + lo32(hh·gl) + lo32(hl·gh)` (mod 2^32): two `vpmuludq` (the 64-bit
//!   products `hl·gl` of four draws each), two `vpmulld` and two adds give all eight.
//! - Bit `p` of a block is bit `p % 32` of its 32-bit word `p / 32` (words little-endian),
//!   and `p / 32` is the top 4 bits of that sum. `vpermd` picks each lane's word from the
//!   block's low half and from its high half (it reads only the low 3 bits of the index),
//!   and `vblendvps` takes the high half's where the sum's top bit (`p ≥ 256`) is set.
//! - `vpsllvd` by `31 − p % 32` moves each draw's bit into its lane's sign, and one
//!   `vmovmskps` gathers the eight signs: the key may be present if all are set.
//!
//! About 20 instructions for eight draws against about 45 for the unrolled scalar probe at
//! k = 6, with no data-dependent branch. `k` up to 16 (two vectors); larger `k` keeps the
//! scalar probe. (Its cost beside the other kernels and fastbloom's is measured in
//! `benches/stream.rs`.)

#![allow(unsafe_code)]

use std::arch::asm;
use std::arch::x86_64::{
    __m256i, _mm256_add_epi32, _mm256_and_si256, _mm256_andnot_si256, _mm256_blend_epi32,
    _mm256_blendv_ps, _mm256_castps_si256, _mm256_castsi256_ps, _mm256_loadu_si256,
    _mm256_movemask_ps, _mm256_mul_epu32, _mm256_mullo_epi32, _mm256_permutevar8x32_epi32,
    _mm256_set1_epi32, _mm256_sllv_epi32, _mm256_srli_epi32, _mm256_srli_epi64,
};

use super::bits::Block;
use super::layout::GOLDEN_POWERS;

/// True if this CPU runs the AVX2 probes.
pub(super) fn has_avx2() -> bool {
    std::is_x86_feature_detected!("avx2")
}

/// The 32-bit halves of the draws' multipliers, as the vectors load them: for the eight
/// draws starting at `8·v`, `lo[v]`/`hi[v]` the low/high halves of `G^(i+1)`, and
/// `lo_even[v]`/`lo_odd[v]` the low halves of the even/odd draws, one per 64-bit lane (the
/// operands of `vpmuludq`).
struct Multipliers {
    lo: [[u32; 8]; 2],
    hi: [[u32; 8]; 2],
    lo_even: [[u64; 4]; 2],
    lo_odd: [[u64; 4]; 2],
}

const MULTIPLIERS: Multipliers = {
    let mut m = Multipliers {
        lo: [[0; 8]; 2],
        hi: [[0; 8]; 2],
        lo_even: [[0; 4]; 2],
        lo_odd: [[0; 4]; 2],
    };
    let mut i = 0;
    while i < 16 {
        let (v, l) = (i / 8, i % 8);
        let g = GOLDEN_POWERS[i];
        m.lo[v][l] = g as u32;
        m.hi[v][l] = (g >> 32) as u32;
        if l % 2 == 0 {
            m.lo_even[v][l / 2] = g as u32 as u64;
        } else {
            m.lo_odd[v][l / 2] = g as u32 as u64;
        }
        i += 1;
    }
    m
};

/// The block's two 32-byte halves.
///
/// # Safety
/// The CPU must have AVX2.
#[target_feature(enable = "avx2")]
#[inline]
unsafe fn load_block(b: &Block) -> (__m256i, __m256i) {
    let (lo, hi): (__m256i, __m256i);
    // SAFETY: `b` is a live, 64-byte aligned (`repr(align(64))`), 64-byte `Block`, so the two
    // aligned 32-byte loads read only its memory. The block's words are atomics that other
    // threads may `lock or` into at the same time: the loads are an asm block, not a plain
    // Rust read, and on x86-64 a vector load reads each aligned 8-byte word single-copy
    // atomically (Intel SDM vol. 3 §9.1.1, AMD APM vol. 2 §7.3.2), so they behave as the
    // eight relaxed atomic loads of the scalar probe, in some order. The asm writes no
    // memory and leaves the flags and the stack alone.
    unsafe {
        asm!(
            "vmovdqa {lo}, ymmword ptr [{p}]",
            "vmovdqa {hi}, ymmword ptr [{p} + 32]",
            lo = out(ymm_reg) lo,
            hi = out(ymm_reg) hi,
            p = in(reg) std::ptr::from_ref(b),
            options(nostack, preserves_flags, readonly),
        );
    }
    (lo, hi)
}

/// Eight of a hash's draws, as 32-bit lanes: the top 32 bits of `h · G^(i+1)`, whose top 9
/// bits are the draw's position in the block.
#[derive(Clone, Copy)]
struct Draws {
    top: __m256i,
    /// The lanes in use, one bit each (`vmovmskps` order); the others always pass.
    lanes: u32,
}

/// The draws `8·v .. 8·v + 8` of `h`, of which the first `n` are used.
///
/// # Safety
/// The CPU must have AVX2.
#[target_feature(enable = "avx2")]
#[inline]
unsafe fn draws(h: u64, v: usize, n: usize) -> Draws {
    let m = &MULTIPLIERS;
    // SAFETY: each load reads one of `MULTIPLIERS`'s 32-byte arrays (`[u32; 8]`,
    // `[u64; 4]`), all of its bytes and no more; the caller guarantees AVX2.
    unsafe {
        let hl = _mm256_set1_epi32(h as i32);
        let hh = _mm256_set1_epi32((h >> 32) as i32);
        let lo = _mm256_loadu_si256(m.lo[v].as_ptr().cast());
        let hi = _mm256_loadu_si256(m.hi[v].as_ptr().cast());
        let lo_even = _mm256_loadu_si256(m.lo_even[v].as_ptr().cast());
        let lo_odd = _mm256_loadu_si256(m.lo_odd[v].as_ptr().cast());
        // hi32(hl·gl): the even draws' 64-bit products shifted down into the even lanes,
        // the odd draws' already in the odd lanes (`vpmuludq` reads the low lane of each
        // pair, `hl` is in every lane).
        let even = _mm256_srli_epi64::<32>(_mm256_mul_epu32(hl, lo_even));
        let odd = _mm256_mul_epu32(hl, lo_odd);
        let carry = _mm256_blend_epi32::<0b1010_1010>(even, odd);
        let cross = _mm256_add_epi32(_mm256_mullo_epi32(hh, lo), _mm256_mullo_epi32(hl, hi));
        Draws {
            top: _mm256_add_epi32(carry, cross),
            lanes: (1u32 << n) - 1,
        }
    }
}

impl Draws {
    /// The draws' bits of the block `(lo, hi)`, each moved into its lane's sign bit (lanes
    /// not in use keep whatever they get: [`Draws::all_set`] ignores them).
    ///
    /// # Safety
    /// The CPU must have AVX2.
    #[target_feature(enable = "avx2")]
    #[inline]
    unsafe fn signs(&self, lo: __m256i, hi: __m256i) -> __m256i {
        // The 32-bit word of each draw: `p / 32`, the top 4 bits of `top`; `vpermd` reads
        // the low 3, the top one (`p ≥ 256`) picks the half.
        let word = _mm256_srli_epi32::<28>(self.top);
        let from_lo = _mm256_permutevar8x32_epi32(lo, word);
        let from_hi = _mm256_permutevar8x32_epi32(hi, word);
        let w = _mm256_castps_si256(_mm256_blendv_ps(
            _mm256_castsi256_ps(from_lo),
            _mm256_castsi256_ps(from_hi),
            _mm256_castsi256_ps(self.top),
        ));
        // Shift by 31 − p % 32, where p % 32 is bits 23..28 of `top`.
        let shift = _mm256_andnot_si256(_mm256_srli_epi32::<23>(self.top), _mm256_set1_epi32(31));
        _mm256_sllv_epi32(w, shift)
    }

    /// True if every draw in use is set in `signs` (from [`Draws::signs`]).
    ///
    /// # Safety
    /// The CPU must have AVX2.
    #[target_feature(enable = "avx2")]
    #[inline]
    unsafe fn all_set(&self, signs: __m256i) -> bool {
        let got = _mm256_movemask_ps(_mm256_castsi256_ps(signs)) as u32;
        got & self.lanes == self.lanes
    }
}

/// True if every one of `h`'s `K` bits is set in `b`: the probe `filter::kernel` hands out
/// for the AVX2 kind (a pointer to this function itself).
///
/// # Safety
/// The CPU must have AVX2.
#[target_feature(enable = "avx2")]
#[inline]
pub(super) unsafe fn all_set<const K: usize>(b: &Block, h: u64) -> bool {
    const { assert!(K >= 1 && K <= 16) };
    // SAFETY: the caller guarantees AVX2, all that these need.
    unsafe {
        let (lo, hi) = load_block(b);
        let first = draws(h, 0, K.min(8));
        if K <= 8 {
            first.all_set(first.signs(lo, hi))
        } else {
            // Both halves' signs ANDed, one mask read: no branch between them. The second
            // vector's unused lanes are ignored by giving the first's their place.
            let second = draws(h, 1, K - 8);
            let both = _mm256_and_si256(first.signs(lo, hi), second.signs_padded(lo, hi));
            first.all_set(both)
        }
    }
}

impl Draws {
    /// [`Draws::signs`] with the lanes not in use set, so that ANDing it into another
    /// vector's signs keeps theirs.
    ///
    /// # Safety
    /// The CPU must have AVX2.
    #[target_feature(enable = "avx2")]
    #[inline]
    unsafe fn signs_padded(&self, lo: __m256i, hi: __m256i) -> __m256i {
        // SAFETY: the caller guarantees AVX2.
        let s = unsafe { self.signs(lo, hi) };
        let unused = UNUSED[self.lanes.count_ones() as usize];
        // SAFETY: `unused` is one `[i32; 8]`, the 32 bytes the load reads; AVX2 as above.
        unsafe { std::arch::x86_64::_mm256_or_si256(s, _mm256_loadu_si256(unused.as_ptr().cast())) }
    }
}

/// `UNUSED[n]`: all ones in the lanes `n..8`, zero in the first `n`.
const UNUSED: [[i32; 8]; 9] = {
    let mut u = [[0i32; 8]; 9];
    let mut n = 0;
    while n <= 8 {
        let mut l = n;
        while l < 8 {
            u[n][l] = -1;
            l += 1;
        }
        n += 1;
    }
    u
};

/// True if some block of `blocks` has every one of `h`'s `K` bits set (the several-block
/// probe of the AVX2 kind).
///
/// # Safety
/// The CPU must have AVX2.
#[target_feature(enable = "avx2")]
#[inline]
pub(super) unsafe fn any_all_set<const K: usize>(blocks: &[&Block], h: u64) -> bool {
    const { assert!(K >= 1 && K <= 16) };
    // SAFETY: the caller guarantees AVX2, all that these need.
    unsafe {
        let first = draws(h, 0, K.min(8));
        let second = draws(h, 1, if K > 8 { K - 8 } else { 1 });
        let mut any = false;
        for b in blocks {
            let (lo, hi) = load_block(b);
            let mut signs = first.signs(lo, hi);
            if K > 8 {
                signs = _mm256_and_si256(signs, second.signs_padded(lo, hi));
            }
            // `|`: no branch on what a load returned, the blocks' loads overlap.
            any |= first.all_set(signs);
        }
        any
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::filter::layout;
    use crate::hash::hash_key;

    /// The 32-bit derivation gives the layout's positions for every draw, on hashes with
    /// carries in every place (all ones, high half only, low half only, random).
    #[test]
    fn positions_derived_in_32_bit_lanes_are_the_layouts() {
        if !has_avx2() {
            return; // No AVX2 probe to run (`filter::kernel`'s tests check none is offered).
        }
        let mut hashes = vec![0, u64::MAX, 0xffff_ffff, 0xffff_ffff_0000_0000, 1 << 63];
        hashes.extend((0..5_000u64).map(|i| hash_key(&i.to_le_bytes(), 1)));
        for h in hashes {
            let want: Vec<usize> = layout::bit_positions(h, 16).collect();
            for v in 0..2 {
                // SAFETY: AVX2 checked above.
                let top: [u32; 8] = unsafe { std::mem::transmute(draws(h, v, 8).top) };
                for l in 0..8 {
                    assert_eq!((top[l] >> 23) as usize, want[8 * v + l], "h = {h:#x}");
                }
            }
        }
    }
}

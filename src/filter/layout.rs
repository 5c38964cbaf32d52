//! The block layout: which 512-bit block a key's hash selects, which bits it sets there, and
//! how a block is written as bytes. Every layer that maps a hash to bits calls these
//! functions — the local [`Filter`](super::Filter), the counting filter, the snapshot
//! format and the shared filter of `bloomsled-redis` — so a key means the same bits
//! everywhere. **API boundary**: this module is what another crate may rely on to lay a
//! filter out elsewhere (a Redis string, a file); it is versioned with the crate.
//!
//! ```
//! use bloomsled::layout::{block_index, block_masks, BLOCK_WORDS};
//! let f = bloomsled::Filter::new(1_000, 0.01).unwrap();
//! f.insert(b"k");
//! let h = bloomsled::hash::hash_key(b"k", f.seed());
//! let block = f.block_words(block_index(h, f.num_blocks()));
//! let masks: [u64; BLOCK_WORDS] = block_masks(h, f.num_hashes());
//! assert!(masks.iter().zip(block).all(|(m, w)| w & m == *m));
//! ```
//!
//! A change to anything here changes which bits a key sets: it is an on-disk format change
//! and must come with a new hash kind in `src/format` (snapshots of the old kind are
//! then rejected and rebuilt from the keys, never probed with the wrong pattern).
//!
//! The layout (hash kind `format::HASH_KIND_XXH3_BLOCK`), for a 64-bit key hash
//! `h` (xxh3-64 with the filter's seed, [`crate::hash::hash_key`]) and `k` bits per key:
//!
//! - **Block**: `(h · num_blocks) >> 64` (multiply-shift on 128 bits; the high bits of `h`).
//! - **Bits**: for `i` in `0..k`, bit `(h · G^(i+1) mod 2^64) >> 55` of the block, with
//!   `G = 0x9E37_79B9_7F4A_7C15` (2^64/φ, odd). Bit `p` (0..512) of a block is bit `p % 64` of
//!   its 64-bit word `p / 64`. Two of the `k` draws may name the same bit (about 3% of keys
//!   at k = 6): the key then sets `k − 1` bits. This is RocksDB's FastLocalBloom recipe: each
//!   position is an independent multiply, so a probe has no data-dependent branch or loop.
//! - **Bytes**: a block is its 8 words in order, each little-endian: bit `p` is bit `p % 8`
//!   (least significant first) of byte `p / 8`. (Redis numbers the bits of a byte from the
//!   most significant one: there bit `p` is at offset `8·(p / 8) + 7 − p % 8`.)

/// Bits in one block: one 64-byte cache line.
///
/// ```
/// assert_eq!(bloomsled::layout::BLOCK_BITS, 512);
/// ```
pub const BLOCK_BITS: usize = 512;

/// 64-bit words in one block.
///
/// ```
/// assert_eq!(bloomsled::layout::BLOCK_WORDS, 8);
/// ```
pub const BLOCK_WORDS: usize = BLOCK_BITS / 64;

/// Bytes in one block, as stored (see [`encode_block`]).
///
/// ```
/// assert_eq!(bloomsled::layout::BLOCK_BYTES, 64);
/// ```
pub const BLOCK_BYTES: usize = BLOCK_BITS / 8;

/// The most bits a key may set (`k`).
///
/// ```
/// assert_eq!(bloomsled::layout::MAX_HASHES, 32);
/// ```
pub const MAX_HASHES: u32 = 32;

/// 2^64 / φ, odd: the multiplier of the probe stream.
const GOLDEN: u64 = 0x9E37_79B9_7F4A_7C15;

/// `GOLDEN^1 ..= GOLDEN^MAX_HASHES` (mod 2^64): the multiplier of each draw.
pub(crate) const GOLDEN_POWERS: [u64; MAX_HASHES as usize] = {
    let mut p = [0u64; MAX_HASHES as usize];
    let mut acc = GOLDEN;
    let mut i = 0;
    while i < p.len() {
        p[i] = acc;
        acc = acc.wrapping_mul(GOLDEN);
        i += 1;
    }
    p
};

/// The block a hash selects among `num_blocks` (multiply-shift: no division, uses the high
/// bits of `h`). Always `< num_blocks` when `num_blocks > 0`.
///
/// ```
/// assert_eq!(bloomsled::layout::block_index(u64::MAX, 10), 9);
/// assert_eq!(bloomsled::layout::block_index(0, 10), 0);
/// ```
#[inline(always)]
pub fn block_index(h: u64, num_blocks: u64) -> usize {
    ((u128::from(h) * u128::from(num_blocks)) >> 64) as usize
}

/// The bit (0..512) that the draw with multiplier `g` (one of [`GOLDEN_POWERS`]) of hash `h`
/// names: the one definition of a position, which every probe and insert below uses.
#[inline(always)]
fn position(h: u64, g: u64) -> usize {
    (h.wrapping_mul(g) >> 55) as usize
}

/// The `k` draws of `h` (`k` ≤ [`MAX_HASHES`]), repeats included: the bits it sets.
///
/// ```
/// let bits: Vec<usize> = bloomsled::layout::bit_positions(42, 6).collect();
/// assert_eq!(bits.len(), 6);
/// assert!(bits.iter().all(|&p| p < 512));
/// ```
#[inline(always)]
pub fn bit_positions(h: u64, k: u32) -> impl Iterator<Item = usize> {
    GOLDEN_POWERS[..(k as usize).min(GOLDEN_POWERS.len())]
        .iter()
        .map(move |&g| position(h, g))
}

/// The bits `h` sets in its block, as the block's 8 words would hold them (`k` draws,
/// repeats merged). Built with no data-dependent branch.
///
/// ```
/// let masks = bloomsled::layout::block_masks(42, 6);
/// let set: u32 = masks.iter().map(|w| w.count_ones()).sum();
/// assert!((1..=6).contains(&set));
/// ```
#[inline(always)]
pub fn block_masks(h: u64, k: u32) -> [u64; BLOCK_WORDS] {
    let mut masks = [0u64; BLOCK_WORDS];
    for p in bit_positions(h, k) {
        masks[p >> 6] |= 1u64 << (p & 63);
    }
    masks
}

/// True if every one of `h`'s `k` bits is set in `block` (its 8 words, read through `word`).
/// No early exit and no data-dependent branch: all `k` bits are read and ANDed, so the
/// CPU never waits on a guess about what a load returned and runs on into the next key.
///
/// The filters probe with [`all_set_k`], the same test with `k` fixed at compile time; this
/// run-time-`k` form is the reference the tests hold it to.
#[cfg(test)]
pub(crate) fn all_set(h: u64, k: u32, word: impl Fn(usize) -> u64) -> bool {
    let mut all = 1u64;
    for p in bit_positions(h, k) {
        all &= word(p >> 6) >> (p & 63);
    }
    all & 1 != 0
}

/// [`all_set`] with `k` fixed at compile time: the `K` draws unrolled, with no loop, no
/// trip count and no bound on `k` to check (see `filter::kernel`, which picks the `K` of a
/// filter once, when it is made).
#[inline(always)]
pub(crate) fn all_set_k<const K: usize>(h: u64, word: impl Fn(usize) -> u64) -> bool {
    let mut all = 1u64;
    for &g in &GOLDEN_POWERS[..K] {
        let p = position(h, g);
        all &= word(p >> 6) >> (p & 63);
    }
    all & 1 != 0
}

/// Draws tested before [`all_set_k_early`] branches once on what they found.
pub(crate) const EARLY_DRAWS: usize = 4;

/// [`all_set_k`] for a caller that branches on the answer anyway (`Tree::get`,
/// `Tree::contains_key`): the first [`EARLY_DRAWS`] draws tested branch-free, one branch on
/// them, then the rest. The same bits and the same answer as [`all_set_k`]; for `K` ≤
/// `EARLY_DRAWS` it is [`all_set_k`].
///
/// An absent key's first draws already miss with high probability (at half the bits set,
/// all four are set for 1 key in 16), so in a stream of absent keys the branch goes the same
/// way nearly every time and the CPU skips the other `K − 4` draws' multiplies, loads and
/// shifts, leaving room in its window for the next keys' cache misses. The caller's own
/// branch on the answer mispredicts wherever this one does, so it adds no misprediction of
/// its own to a mixed stream; a caller that counts answers with no branch keeps
/// [`all_set_k`].
#[inline(always)]
pub(crate) fn all_set_k_early<const K: usize>(h: u64, word: impl Fn(usize) -> u64) -> bool {
    if K <= EARLY_DRAWS {
        return all_set_k::<K>(h, word);
    }
    let mut first = 1u64;
    for &g in &GOLDEN_POWERS[..EARLY_DRAWS] {
        let p = position(h, g);
        first &= word(p >> 6) >> (p & 63);
    }
    if first & 1 == 0 {
        return false;
    }
    let mut rest = 1u64;
    for &g in &GOLDEN_POWERS[EARLY_DRAWS..K] {
        let p = position(h, g);
        rest &= word(p >> 6) >> (p & 63);
    }
    rest & 1 != 0
}

/// Calls `set(word, bit)` for each of the `K` draws of `h` (repeats included), in draw
/// order, with `bit` the draw's single-bit mask in word `word` (0..8). No loop at run time.
#[inline(always)]
pub(crate) fn for_each_bit_k<const K: usize>(h: u64, mut set: impl FnMut(usize, u64)) {
    for &g in &GOLDEN_POWERS[..K] {
        let p = position(h, g);
        set(p >> 6, 1u64 << (p & 63));
    }
}

/// Appends the bytes of `words` (whole blocks or any run of words of the bitset) to `out`:
/// each word little-endian, in order, so bit `p` of a block is bit `p % 8` of its byte
/// `p / 8`. Snapshots, the serialized filter and the shared filter store bits this way.
#[inline]
pub(crate) fn encode_words(words: &[u64], out: &mut Vec<u8>) {
    out.reserve(words.len() * 8);
    for w in words {
        out.extend_from_slice(&w.to_le_bytes());
    }
}

/// The words of `bytes` as [`encode_words`] wrote them; a trailing partial word is ignored
/// (callers check lengths first).
#[inline]
pub(crate) fn decode_words(bytes: &[u8]) -> impl Iterator<Item = u64> + '_ {
    bytes
        .chunks_exact(8)
        .map(|c| u64::from_le_bytes(c.try_into().expect("8-byte chunk")))
}

/// One block's bytes: its 8 words in order, each little-endian, so bit `p` is bit `p % 8` of
/// byte `p / 8`.
///
/// ```
/// use bloomsled::layout::{decode_block, encode_block, BLOCK_BYTES};
/// let words = [1u64, 0, 0, 0, 0, 0, 0, 1 << 63];
/// let bytes = encode_block(&words);
/// assert_eq!((bytes[0], bytes[BLOCK_BYTES - 1]), (1, 0x80));
/// assert_eq!(decode_block(&bytes), words);
/// ```
#[inline]
pub fn encode_block(words: &[u64; BLOCK_WORDS]) -> [u8; BLOCK_BYTES] {
    let mut out = [0u8; BLOCK_BYTES];
    for (chunk, w) in out.chunks_exact_mut(8).zip(words) {
        chunk.copy_from_slice(&w.to_le_bytes());
    }
    out
}

/// The inverse of [`encode_block`].
///
/// ```
/// let bytes = [0xffu8; bloomsled::layout::BLOCK_BYTES];
/// assert_eq!(bloomsled::layout::decode_block(&bytes), [u64::MAX; 8]);
/// ```
#[inline]
pub fn decode_block(bytes: &[u8; BLOCK_BYTES]) -> [u64; BLOCK_WORDS] {
    let mut out = [0u64; BLOCK_WORDS];
    for (w, v) in out.iter_mut().zip(decode_words(bytes)) {
        *w = v;
    }
    out
}

/// Bit `n` set for each non-zero nibble `n` (0..16) of `w`: the bits of a block that a
/// counting filter's word of 16 four-bit counters stands for.
///
/// ```
/// assert_eq!(bloomsled::layout::nonzero_nibbles(0xf0_01), 0b1001);
/// ```
pub fn nonzero_nibbles(w: u64) -> u64 {
    let mut out = 0;
    for n in 0..16 {
        if (w >> (4 * n)) & 0xf != 0 {
            out |= 1 << n;
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A reference computation of the documented layout, written apart from the code above
    /// (one multiply chain instead of a table, positions as numbers instead of masks).
    fn reference_positions(h: u64, k: u32) -> Vec<usize> {
        let mut m = 1u64;
        (0..k)
            .map(|_| {
                m = m.wrapping_mul(0x9E37_79B9_7F4A_7C15);
                (h.wrapping_mul(m) >> 55) as usize
            })
            .collect()
    }

    #[test]
    fn masks_hold_exactly_the_reference_positions() {
        for k in 1..=MAX_HASHES {
            for i in 0..500u64 {
                let h = crate::hash::hash_key(&i.to_le_bytes(), 3);
                let want = reference_positions(h, k);
                let masks = block_masks(h, k);
                for &p in &want {
                    assert!(p < BLOCK_BITS);
                    assert_ne!(masks[p / 64] & (1 << (p % 64)), 0);
                }
                let mut distinct = want.clone();
                distinct.sort_unstable();
                distinct.dedup();
                let ones: u32 = masks.iter().map(|w| w.count_ones()).sum();
                assert_eq!(ones as usize, distinct.len());
                assert!(all_set(h, k, |j| masks[j]));
                // Clearing any one of its bits makes the probe fail.
                for &p in &distinct {
                    let mut m = masks;
                    m[p / 64] &= !(1 << (p % 64));
                    assert!(!all_set(h, k, |j| m[j]));
                }
            }
        }
    }

    #[test]
    fn fixed_k_versions_agree_with_the_generic_ones() {
        fn check<const K: usize>() {
            for i in 0..2_000u64 {
                let h = crate::hash::hash_key(&i.to_le_bytes(), 11);
                let masks = block_masks(h, K as u32);
                let mut built = [0u64; BLOCK_WORDS];
                for_each_bit_k::<K>(h, |w, bit| built[w] |= bit);
                assert_eq!(built, masks, "K = {K}, h = {h:#x}");
                assert!(all_set_k::<K>(h, |j| masks[j]));
                assert!(all_set_k_early::<K>(h, |j| masks[j]));
                // Against a block holding some other key's bits: the same answer both ways.
                let other = block_masks(h.rotate_left(17) ^ 0x55, 2 * K as u32 + 3);
                let want = all_set(h, K as u32, |j| other[j]);
                assert_eq!(all_set_k::<K>(h, |j| other[j]), want);
                assert_eq!(all_set_k_early::<K>(h, |j| other[j]), want);
                // Every one of the key's bits cleared in turn, the first draws' and the
                // others': the early-exit probe says no, as the reference does.
                for p in bit_positions(h, K as u32) {
                    let mut m = masks;
                    m[p / 64] &= !(1 << (p % 64));
                    assert_eq!(
                        all_set_k_early::<K>(h, |j| m[j]),
                        all_set(h, K as u32, |j| m[j])
                    );
                    assert!(!all_set_k_early::<K>(h, |j| m[j]));
                }
            }
        }
        check::<1>();
        check::<2>();
        check::<6>();
        check::<4>();
        check::<5>();
        check::<7>();
        check::<10>();
        check::<16>();
        check::<32>();
    }

    /// Values computed independently in Python 3 from the documented definition:
    /// `[(h * pow(G, i + 1, 2**64) % 2**64) >> 55 for i in range(8)]` and
    /// `(h * n) >> 64`, for the fixed hashes below (no xxh3 involved).
    #[test]
    fn golden_positions_and_blocks() {
        let cases: [(u64, [usize; 8]); 3] = [
            (
                0x0123_4567_89ab_cdef,
                [25, 152, 253, 214, 417, 108, 424, 78],
            ),
            (
                0xffff_ffff_ffff_ffff,
                [195, 65, 319, 77, 419, 360, 322, 498],
            ),
            (
                0x626c_6f6f_6d73_6c64,
                [381, 284, 331, 407, 101, 18, 452, 114],
            ),
        ];
        for (h, want) in cases {
            assert_eq!(bit_positions(h, 8).collect::<Vec<_>>(), want, "h = {h:#x}");
        }
        assert_eq!(block_index(0x0123_4567_89ab_cdef, 1_000), 4);
        assert_eq!(block_index(0xffff_ffff_ffff_ffff, 977), 976);
        assert_eq!(block_index(0x626c_6f6f_6d73_6c64, 1_000_003), 384_468);
        assert_eq!(block_index(0, 7), 0);
        // h = 0 sets bit 0 only, whatever k: a degenerate but valid pattern.
        assert_eq!(block_masks(0, 6), [1, 0, 0, 0, 0, 0, 0, 0]);
    }

    #[test]
    fn byte_encoding_is_little_endian_words_in_order() {
        let mut words = [0u64; BLOCK_WORDS];
        words[0] = 1; // bit 0
        words[1] = 1 << 9; // bit 73
        words[7] = 1 << 63; // bit 511
        let bytes = encode_block(&words);
        assert_eq!(bytes[0], 1);
        assert_eq!(bytes[73 / 8], 1 << (73 % 8));
        assert_eq!(bytes[63], 0x80);
        assert_eq!(bytes.iter().map(|b| b.count_ones()).sum::<u32>(), 3);
        assert_eq!(decode_block(&bytes), words);
        let mut v = Vec::new();
        encode_words(&words, &mut v);
        assert_eq!(v, bytes);
        assert_eq!(decode_words(&v).collect::<Vec<_>>(), words);
        let h = 0x0123_4567_89ab_cdef;
        let m = block_masks(h, 7);
        let b = encode_block(&m);
        for p in bit_positions(h, 7) {
            assert_ne!(b[p / 8] & (1 << (p % 8)), 0);
        }
    }
}

//! Stable key hashing.
//!
//! Filters are persisted, so the hash of a key must never change across versions, platforms
//! or processes. bloomsled uses xxh3-64 (from `xxhash-rust`, whose output is specified and
//! identical on every platform) with an explicit seed that is stored with the filter.
//! Golden-value tests below pin the exact outputs.

use xxhash_rust::xxh3::xxh3_64_with_seed;

pub mod classic;

/// The hash function bloomsled applies to keys: xxh3-64 with `seed`.
///
/// The same `(key, seed)` gives the same value on every platform and in every version of
/// bloomsled; a change here would be a format break.
///
/// ```
/// let h = bloomsled::hash::hash_key(b"hello", 0);
/// assert_eq!(h, bloomsled::hash::hash_key(b"hello", 0));
/// assert_ne!(h, bloomsled::hash::hash_key(b"hello", 1));
/// ```
#[inline]
pub fn hash_key(key: &[u8], seed: u64) -> u64 {
    xxh3_64_with_seed(key, seed)
}

/// The default seed of a new filter when none is configured: a fixed, documented value so that
/// filters built by different processes from the same keys are identical (and can be `union`ed).
pub const DEFAULT_SEED: u64 = 0x626c_6f6f_6d73_6c64; // "bloomsld"

// Which block and bits a hash selects is the block layout, in `crate::filter::layout`.

#[cfg(test)]
mod tests {
    use super::*;

    /// Values computed with the reference xxh3 implementation (Python `xxhash` 4.1,
    /// `xxh3_64_intdigest(data, seed)`), so a dependency update that changed the hash — as
    /// xxhash-rust 0.8.1 did for long inputs — fails here instead of silently invalidating
    /// every persisted filter.
    #[test]
    fn golden_values() {
        let long: Vec<u8> = (0..1000u32).map(|i| (i % 251) as u8).collect();
        let cases: &[(&[u8], u64, u64)] = &[
            (b"", 0, GOLDEN[0]),
            (b"a", 0, GOLDEN[1]),
            (b"hello world", 0, GOLDEN[2]),
            (b"hello world", DEFAULT_SEED, GOLDEN[3]),
            (b"https://example.com/some/path?query=1", 42, GOLDEN[4]),
            (&long[..200], 7, GOLDEN[5]),
            (&long[..], 7, GOLDEN[6]),
        ];
        for (i, (key, seed, want)) in cases.iter().enumerate() {
            assert_eq!(hash_key(key, *seed), *want, "golden case {i}");
        }
    }

    const GOLDEN: [u64; 7] = [
        0x2d06_8005_38d3_94c2,
        0xe6c6_32b6_1e96_4e1f,
        0xd447_b1ea_40e6_988b,
        0x39d1_bfb9_90b6_d6c3,
        0x3a75_a71c_e30c_491a,
        0x68de_cbfb_306e_bdf2,
        0x88c7_10a6_9b53_1698,
    ];
}

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

/// [`hash_key`] for one fixed seed, with the seed's part of the work done once.
///
/// xxh3 mixes the seed into its 192-byte secret; `hash_key` redoes that for every key (an
/// add or subtract per secret word the key uses, a 64-bit constant each). For 17..=128-byte
/// keys, hashing with the secret derived from the seed once (`const_custom_default_secret`)
/// gives exactly `hash_key`'s value, because those lengths read the secret only at 8-byte
/// aligned offsets, where the derived secret holds the seeded words. Other lengths read it
/// at other offsets (129..=240) or fold the seed in differently (0..=16), so they keep
/// `hash_key`. The tests check every length from 0 to 1,100 bytes against `hash_key`.
/// (What it saves per key is measured in `benches/stream.rs`, not here.)
#[derive(Clone)]
pub(crate) struct SeededHash {
    seed: u64,
    secret: [u8; 192],
}

impl SeededHash {
    pub(crate) fn new(seed: u64) -> SeededHash {
        SeededHash {
            seed,
            secret: xxhash_rust::const_xxh3::const_custom_default_secret(seed),
        }
    }

    /// The seed.
    #[inline(always)]
    pub(crate) fn seed(&self) -> u64 {
        self.seed
    }

    /// `hash_key(key, self.seed())`.
    #[inline(always)]
    pub(crate) fn hash(&self, key: &[u8]) -> u64 {
        if (17..=128).contains(&key.len()) {
            xxhash_rust::xxh3::xxh3_64_with_secret(key, &self.secret)
        } else {
            xxh3_64_with_seed(key, self.seed)
        }
    }
}

/// The seed every filter had when none was configured, before seeds were secret: a fixed,
/// public value ("bloomsld"). Trees made then keep it (their records store it); new
/// filters draw a [`secret_seed`] unless one is fixed. Public, so anyone can compute the
/// false positives of a filter with this seed from its keys: use it only where
/// reproducibility matters more than a chosen-key flood (tests, golden files).
///
/// ```
/// let old = bloomsled::FilterConfig::new(1_000).seed(bloomsled::hash::DEFAULT_SEED);
/// assert_eq!(old.get_seed(), Some(bloomsled::hash::DEFAULT_SEED));
/// ```
pub const DEFAULT_SEED: u64 = 0x626c_6f6f_6d73_6c64; // "bloomsld"

/// A seed from the operating system's random source (`getrandom`), as every new tree,
/// window, shared filter and unseeded [`crate::FilterConfig`] gets: secret, so nobody can
/// compute the filter's false positives from its keys.
///
/// ```
/// let a = bloomsled::hash::secret_seed()?;
/// let b = bloomsled::hash::secret_seed()?;
/// assert_ne!(a, b); // 2^-64 odds of a tie
/// # Ok::<(), bloomsled::Error>(())
/// ```
pub fn secret_seed() -> crate::error::Result<u64> {
    let mut b = [0u8; 8];
    getrandom::fill(&mut b)
        .map_err(|e| crate::error::Error::Io(std::io::Error::other(e.to_string())))?;
    Ok(u64::from_le_bytes(b))
}

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

    /// The once-derived secret gives `hash_key`'s value at every length, for the default
    /// seed, zero, and seeds with high bits set (the derivation adds and subtracts the seed).
    #[test]
    fn seeded_hash_equals_hash_key_at_every_length() {
        let data: Vec<u8> = (0..1_100u32)
            .map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8)
            .collect();
        for seed in [0, 1, DEFAULT_SEED, u64::MAX, 0x8000_0000_0000_0001, 42] {
            let s = SeededHash::new(seed);
            assert_eq!(s.seed(), seed);
            for len in 0..=data.len() {
                for start in [0, 1, 7] {
                    let key = &data[start..(start + len).min(data.len())];
                    assert_eq!(
                        s.hash(key),
                        hash_key(key, seed),
                        "seed {seed:#x}, len {len}"
                    );
                }
            }
        }
        // The golden cases through the derived secret too.
        let long: Vec<u8> = (0..1000u32).map(|i| (i % 251) as u8).collect();
        assert_eq!(
            SeededHash::new(42).hash(b"https://example.com/some/path?query=1"),
            GOLDEN[4]
        );
        assert_eq!(SeededHash::new(7).hash(&long[..200]), GOLDEN[5]);
        assert_eq!(SeededHash::new(7).hash(&long[..]), GOLDEN[6]);
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

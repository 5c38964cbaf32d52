//! The stable serialized form of a [`Filter`]: serde + bincode 2.0.1.
//!
//! This is the only module that touches bincode (unmaintained, RUSTSEC-2025-0141), so that
//! replacing it is a local change. The encoding is fixed: little-endian, fixed-width
//! integers, no length limit beyond the input's.
//!
//! Layout (all integers little-endian):
//!
//! ```text
//! offset  size  field
//!      0     8  magic  b"BLMFILT\x01" (last byte: format version)
//!      8     4  version (u32, = 2: the block layout of snapshot hash kind 2; a version-1
//!                 filter set other bits per key and is refused, never probed)
//!     12     4  num_hashes (u32)
//!     16     8  seed (u64)
//!     24     8  capacity (u64)
//!     32     8  items (u64)
//!     40     4  crc32 of bytes 8..40 and of the words (u32)
//!     44     8  word count (u64, bincode's sequence length)
//!     52   8·n  words (u64 each), 8 per 512-bit block
//! ```

use bincode::config::{Configuration, Fixint, LittleEndian, NoLimit};
use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};
use crate::filter::Filter;

/// First bytes of every serialized filter.
pub const MAGIC: [u8; 8] = *b"BLMFILT\x01";
/// The serialized-form version this build writes and reads. Version 1 used the retired
/// distinct-bits layout (snapshot hash kind 1): decoding it is an
/// [`Error::UnsupportedVersion`], since its keys' bits are not where this build looks.
pub const VERSION: u32 = 2;
/// Bytes before the words.
const HEADER_LEN: usize = 52;

const CONFIG: Configuration<LittleEndian, Fixint, NoLimit> = bincode::config::standard()
    .with_little_endian()
    .with_fixed_int_encoding()
    .with_no_limit();

/// The serde shape of a filter; [`Filter`]'s `Serialize`/`Deserialize` go through it.
#[derive(Serialize, Deserialize)]
pub(crate) struct Repr {
    magic: [u8; 8],
    version: u32,
    num_hashes: u32,
    seed: u64,
    capacity: u64,
    items: u64,
    crc32: u32,
    words: Vec<u64>,
}

impl Repr {
    /// CRC32 of every field but the magic and the CRC itself, integers little-endian.
    fn checksum(&self) -> u32 {
        let mut h = crc32fast::Hasher::new();
        h.update(&self.version.to_le_bytes());
        h.update(&self.num_hashes.to_le_bytes());
        h.update(&self.seed.to_le_bytes());
        h.update(&self.capacity.to_le_bytes());
        h.update(&self.items.to_le_bytes());
        words_crc(h, &self.words)
    }
}

fn words_crc(mut h: crc32fast::Hasher, words: &[u64]) -> u32 {
    let mut buf = Vec::with_capacity(8 * 1024);
    for chunk in words.chunks(1024) {
        buf.clear();
        crate::filter::layout::encode_words(chunk, &mut buf);
        h.update(&buf);
    }
    h.finalize()
}

impl Repr {
    pub(crate) fn from_filter(f: &Filter) -> Repr {
        let mut r = Repr {
            magic: MAGIC,
            version: VERSION,
            num_hashes: f.num_hashes(),
            seed: f.seed(),
            capacity: f.capacity(),
            items: f.items(),
            crc32: 0,
            words: f.words(),
        };
        r.crc32 = r.checksum();
        r
    }

    /// Validates in order: magic, version, checksum, shape.
    pub(crate) fn into_filter(self) -> Result<Filter> {
        if self.magic != MAGIC {
            return Err(Error::BadMagic {
                got: self.magic.to_vec(),
            });
        }
        if self.version != VERSION {
            return Err(Error::UnsupportedVersion {
                expected: VERSION,
                got: self.version,
            });
        }
        let got = self.checksum();
        if got != self.crc32 {
            return Err(Error::ChecksumMismatch {
                what: "serialized filter",
                expected: self.crc32,
                got,
            });
        }
        Filter::from_parts(
            &self.words,
            self.num_hashes,
            self.seed,
            self.capacity,
            self.items,
        )
    }
}

pub(crate) fn encode(f: &Filter) -> Vec<u8> {
    bincode::serde::encode_to_vec(Repr::from_filter(f), CONFIG)
        .expect("encoding plain integers into a Vec cannot fail")
}

pub(crate) fn decode(bytes: &[u8]) -> Result<Filter> {
    // Check what can be checked before decoding, so a foreign or truncated input gets a
    // precise error and a forged word count never drives a huge allocation.
    if bytes.len() < MAGIC.len() || bytes[..MAGIC.len()] != MAGIC {
        return Err(Error::BadMagic {
            got: bytes[..bytes.len().min(MAGIC.len())].to_vec(),
        });
    }
    if bytes.len() < HEADER_LEN {
        return Err(Error::Truncated {
            needed: HEADER_LEN as u64,
            got: bytes.len() as u64,
        });
    }
    let version = u32::from_le_bytes(bytes[8..12].try_into().expect("4 bytes"));
    if version != VERSION {
        return Err(Error::UnsupportedVersion {
            expected: VERSION,
            got: version,
        });
    }
    let n_words = u64::from_le_bytes(bytes[44..52].try_into().expect("8 bytes"));
    let needed = n_words
        .checked_mul(8)
        .and_then(|b| b.checked_add(HEADER_LEN as u64))
        .unwrap_or(u64::MAX);
    if needed != bytes.len() as u64 {
        return Err(if needed > bytes.len() as u64 {
            Error::Truncated {
                needed,
                got: bytes.len() as u64,
            }
        } else {
            Error::Corrupt(format!(
                "{} trailing bytes after the filter",
                bytes.len() as u64 - needed
            ))
        });
    }
    let (repr, _): (Repr, usize) = bincode::serde::decode_from_slice(bytes, CONFIG)
        .map_err(|e| Error::Corrupt(e.to_string()))?;
    repr.into_filter()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn serde_impls_round_trip_and_validate() {
        let f = Filter::with_bits_per_key(100, 10.0).unwrap();
        f.insert(b"k");
        // Through serde's generic path (not `to_bytes`), with the same bincode settings.
        let bytes = bincode::serde::encode_to_vec(&f, CONFIG).unwrap();
        assert_eq!(bytes, f.to_bytes());
        let (g, _): (Filter, usize) = bincode::serde::decode_from_slice(&bytes, CONFIG).unwrap();
        assert!(g.contains(b"k"));
        let mut bad = bytes.clone();
        *bad.last_mut().unwrap() ^= 1;
        let err = bincode::serde::decode_from_slice::<Filter, _>(&bad, CONFIG).unwrap_err();
        assert!(err.to_string().contains("checksum"), "{err}");
    }

    #[test]
    fn layout_is_as_documented() {
        let f = Filter::with_bits_per_key(100, 10.0).unwrap();
        f.insert(b"k");
        let b = f.to_bytes();
        assert_eq!(&b[..8], &MAGIC);
        assert_eq!(b.len(), HEADER_LEN + 8 * f.num_bits() as usize / 64);
        assert_eq!(
            u32::from_le_bytes(b[12..16].try_into().unwrap()),
            f.num_hashes()
        );
        assert_eq!(u64::from_le_bytes(b[16..24].try_into().unwrap()), f.seed());
    }

    #[test]
    fn every_truncation_and_flip_is_an_error() {
        let f = Filter::with_bits_per_key(200, 10.0).unwrap();
        for i in 0..200u32 {
            f.insert(&i.to_le_bytes());
        }
        let b = f.to_bytes();
        for len in 0..b.len() {
            assert!(Filter::from_bytes(&b[..len]).is_err(), "truncated at {len}");
        }
        for i in 0..b.len() {
            let mut c = b.clone();
            c[i] ^= 0x10;
            assert!(Filter::from_bytes(&c).is_err(), "flip at byte {i} accepted");
        }
        for other in [1u8, 3] {
            let mut c = b.clone();
            c[8] = other;
            assert!(matches!(
                Filter::from_bytes(&c),
                Err(Error::UnsupportedVersion { expected: 2, got }) if got == u32::from(other)
            ));
        }
        assert!(matches!(
            Filter::from_bytes(b"garbage!garbage!"),
            Err(Error::BadMagic { .. })
        ));
    }
}

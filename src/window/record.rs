//! The record of a window (a ring of generation trees, see `crate::window`), kept in the
//! meta tree under the window's name.
//!
//! ```text
//! WindowRecord (44 + 8 * (live + dropping) bytes)
//! offset size field
//!      0    8 magic        b"BLMSWNDW"
//!      8    4 version      1
//!     12    4 generations  G, the number of live generations
//!     16    8 width_ms     milliseconds each generation covers
//!     24    8 newest       the newest generation the window has reached (its high-water
//!                          mark: a clock that goes back never moves it back)
//!     32    4 live         number of live generation indexes that follow
//!     36    4 dropping     number of expired generation indexes that follow them
//!     40  8*n live indexes, ascending, each in newest - G + 1 ..= newest
//!      .  8*d dropping indexes, ascending: expired, being dropped (their trees may remain)
//!      .    4 crc          CRC32 of every byte before it
//! ```

use crate::error::{DecodeError, Result};
use crate::format::{checksum, RECORD_VERSION};
use crate::persist::Meta;

/// First bytes of a [`WindowRecord`].
pub const WINDOW_RECORD_MAGIC: [u8; 8] = *b"BLMSWNDW";
const FIXED_LEN: usize = 44;
/// Most indexes a record may list (live and dropping together): a bound on the bytes a
/// damaged count could make a parser expect.
const MAX_INDEXES: u32 = 1 << 20;

/// A window's ring: its partition, its newest generation, the generations that exist and
/// those being dropped.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WindowRecord {
    /// The number of live generations.
    pub generations: u32,
    /// Milliseconds per generation.
    pub width_ms: u64,
    /// The newest generation reached.
    pub newest: u64,
    /// Live generations (their trees exist or are about to), ascending.
    pub live: Vec<u64>,
    /// Expired generations whose trees may still exist, ascending.
    pub dropping: Vec<u64>,
}

impl WindowRecord {
    /// The record's bytes.
    pub fn encode(&self) -> Vec<u8> {
        let mut b = Vec::with_capacity(FIXED_LEN + 8 * (self.live.len() + self.dropping.len()));
        b.extend_from_slice(&WINDOW_RECORD_MAGIC);
        b.extend_from_slice(&RECORD_VERSION.to_le_bytes());
        b.extend_from_slice(&self.generations.to_le_bytes());
        b.extend_from_slice(&self.width_ms.to_le_bytes());
        b.extend_from_slice(&self.newest.to_le_bytes());
        b.extend_from_slice(&(self.live.len() as u32).to_le_bytes());
        b.extend_from_slice(&(self.dropping.len() as u32).to_le_bytes());
        for e in self.live.iter().chain(&self.dropping) {
            b.extend_from_slice(&e.to_le_bytes());
        }
        let crc = checksum(&[&b]);
        b.extend_from_slice(&crc.to_le_bytes());
        b
    }

    /// Parses a record: magic, version, length, CRC, then fields, in that order.
    pub fn decode(bytes: &[u8]) -> Result<WindowRecord, DecodeError> {
        let u32_at = |o: usize| u32::from_le_bytes(bytes[o..o + 4].try_into().expect("4 bytes"));
        let u64_at = |o: usize| u64::from_le_bytes(bytes[o..o + 8].try_into().expect("8 bytes"));
        if bytes.len() < 8 || bytes[..8] != WINDOW_RECORD_MAGIC {
            return Err(DecodeError::BadMagic {
                got: bytes[..bytes.len().min(8)].to_vec(),
            });
        }
        if bytes.len() < FIXED_LEN {
            return Err(DecodeError::Truncated {
                needed: FIXED_LEN as u64,
                got: bytes.len() as u64,
            });
        }
        let version = u32_at(8);
        if version != RECORD_VERSION {
            return Err(DecodeError::UnsupportedVersion {
                expected: RECORD_VERSION,
                got: version,
            });
        }
        let (n_live, n_dropping) = (u32_at(32), u32_at(36));
        if n_live.saturating_add(n_dropping) > MAX_INDEXES {
            return Err(DecodeError::Inconsistent(format!(
                "a window record listing {n_live} + {n_dropping} generations"
            )));
        }
        let len = FIXED_LEN + 8 * (n_live as usize + n_dropping as usize);
        if bytes.len() != len {
            return Err(DecodeError::Truncated {
                needed: len as u64,
                got: bytes.len() as u64,
            });
        }
        let stored = u32_at(len - 4);
        let computed = checksum(&[&bytes[..len - 4]]);
        if stored != computed {
            return Err(DecodeError::HeaderChecksum {
                expected: stored,
                got: computed,
            });
        }
        let indexes = |from: usize, n: u32| -> Vec<u64> {
            (0..n as usize).map(|i| u64_at(from + 8 * i)).collect()
        };
        let live = indexes(40, n_live);
        let dropping = indexes(40 + 8 * n_live as usize, n_dropping);
        let r = WindowRecord {
            generations: u32_at(12),
            width_ms: u64_at(16),
            newest: u64_at(24),
            live,
            dropping,
        };
        r.check().map_err(DecodeError::Inconsistent)?;
        Ok(r)
    }

    fn check(&self) -> Result<(), String> {
        if self.generations == 0 || self.width_ms == 0 {
            return Err(format!(
                "a window of {} generations of {} ms",
                self.generations, self.width_ms
            ));
        }
        let ascending = |v: &[u64]| v.windows(2).all(|p| p[0] < p[1]);
        if !ascending(&self.live) || !ascending(&self.dropping) {
            return Err("generation indexes are not strictly ascending".into());
        }
        let oldest_live = self.newest.saturating_sub(u64::from(self.generations) - 1);
        if let Some(e) = self
            .live
            .iter()
            .find(|&&e| e > self.newest || e < oldest_live)
        {
            return Err(format!(
                "live generation {e} is outside {oldest_live}..={}",
                self.newest
            ));
        }
        if let Some(e) = self.dropping.iter().find(|&&e| e >= oldest_live) {
            return Err(format!("generation {e} is being dropped but not expired"));
        }
        Ok(())
    }
}

/// Where the meta tree keeps windows' records: `w/<window name>`.
const RECORD_PREFIX: &[u8] = b"w/";

/// The record of window `name`: `None` if it has none, `Some(Err)` if it does not decode.
pub(crate) fn read(
    meta: &Meta,
    name: &[u8],
) -> Result<Option<std::result::Result<WindowRecord, DecodeError>>> {
    Ok(meta
        .read_layer_record(RECORD_PREFIX, name)?
        .map(|b| WindowRecord::decode(&b)))
}

/// Stores the record of window `name`; durable on return if `durable`.
pub(crate) fn write(meta: &Meta, name: &[u8], record: &WindowRecord, durable: bool) -> Result<()> {
    meta.write_layer_record(RECORD_PREFIX, name, record.encode(), durable)
}

/// The names of every window with a record.
pub(crate) fn names(meta: &Meta) -> Result<Vec<Vec<u8>>> {
    meta.layer_record_names(RECORD_PREFIX)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> WindowRecord {
        WindowRecord {
            generations: 7,
            width_ms: 86_400_000,
            newest: 20_000,
            live: vec![19_995, 19_998, 20_000],
            dropping: vec![19_990, 19_993],
        }
    }

    #[test]
    fn round_trips() {
        let r = sample();
        assert_eq!(WindowRecord::decode(&r.encode()).unwrap(), r);
        let empty = WindowRecord {
            live: vec![],
            dropping: vec![],
            ..sample()
        };
        assert_eq!(WindowRecord::decode(&empty.encode()).unwrap(), empty);
    }

    #[test]
    fn every_truncation_and_flip_is_an_error_never_a_panic() {
        let bytes = sample().encode();
        for n in 0..bytes.len() {
            assert!(
                WindowRecord::decode(&bytes[..n]).is_err(),
                "truncated at {n}"
            );
        }
        for i in 0..bytes.len() {
            for bit in 0..8 {
                let mut b = bytes.clone();
                b[i] ^= 1 << bit;
                assert!(WindowRecord::decode(&b).is_err(), "flip {i}.{bit}");
            }
        }
    }

    #[test]
    fn rejects_in_order() {
        assert!(matches!(
            WindowRecord::decode(b"BLMSTREE........"),
            Err(DecodeError::BadMagic { .. })
        ));
        let mut b = sample().encode();
        b[8] = 9;
        assert!(matches!(
            WindowRecord::decode(&b),
            Err(DecodeError::UnsupportedVersion { got: 9, .. })
        ));
        let mut b = sample().encode();
        b[32] = 0xff;
        assert!(matches!(
            WindowRecord::decode(&b),
            Err(DecodeError::Truncated { .. })
        ));
        let bad_fields = [
            WindowRecord {
                live: vec![20_001],
                ..sample()
            },
            WindowRecord {
                live: vec![19_993],
                ..sample()
            },
            WindowRecord {
                live: vec![19_998, 19_995],
                ..sample()
            },
            WindowRecord {
                dropping: vec![19_994],
                ..sample()
            },
            WindowRecord {
                generations: 0,
                ..sample()
            },
        ];
        for r in bad_fields {
            assert!(
                matches!(
                    WindowRecord::decode(&r.encode()),
                    Err(DecodeError::Inconsistent(_))
                ),
                "{r:?}"
            );
        }
    }
}

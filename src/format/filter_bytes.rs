//! A standalone [`Filter`]'s bytes: the snapshot format of [`super::snapshot`] with one page
//! (several past 1 GiB), no database, tree or snapshot ids and sequence 0. One binary
//! encoding for both uses, so one parser to fuzz and trust; serde goes through these bytes.

use serde::{Deserialize, Serialize};

use super::{decode, encode_to, mode_of_kind, SnapshotMeta, FILTER_KIND_BLOCKED};
use crate::error::{DecodeError, Error, Result};
use crate::filter::{Filter, FilterMode};

/// Largest page a standalone filter is written in.
const MAX_PAGE: u64 = 1 << 30;

impl Filter {
    /// The stable serialized form: a bloomsled snapshot (`src/format`) of this filter,
    /// with its shape, seed, items and CRC32s. Pages of zeros are not stored, so an empty or
    /// sparse filter serializes small.
    ///
    /// ```
    /// let f = bloomsled::Filter::new(100, 0.01)?;
    /// f.insert(b"x");
    /// let g = bloomsled::Filter::from_bytes(&f.to_bytes())?;
    /// assert!(g.contains(b"x"));
    /// # Ok::<(), bloomsled::Error>(())
    /// ```
    pub fn to_bytes(&self) -> Vec<u8> {
        let mut out = std::io::Cursor::new(Vec::new());
        self.write_bytes_to(&mut out)
            .expect("writes to memory do not fail");
        out.into_inner()
    }

    /// Writes [`Filter::to_bytes`]'s bytes to `out` (with one copy of the filter's words,
    /// not two); returns the bytes written.
    ///
    /// ```
    /// let f = bloomsled::Filter::new(1_000, 0.01)?;
    /// f.insert(b"key");
    /// let mut out = std::io::Cursor::new(Vec::new());
    /// let n = f.write_bytes_to(&mut out)?;
    /// assert_eq!(out.into_inner(), f.to_bytes());
    /// # let _ = n;
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn write_bytes_to<W: std::io::Write + std::io::Seek>(
        &self,
        out: &mut W,
    ) -> std::io::Result<u64> {
        let words = self.words();
        let payload = words.len() as u64 * 8;
        let meta = SnapshotMeta::of(self, FILTER_KIND_BLOCKED, self.items());
        encode_to(&meta, &words, payload.min(MAX_PAGE) as u32, out)
    }

    /// Parses [`Filter::to_bytes`] output; a foreign, truncated, corrupt or future-version
    /// input is an [`Error::Decode`], never a panic.
    pub fn from_bytes(bytes: &[u8]) -> Result<Filter> {
        let (h, words) = decode(bytes)?;
        let bad = |what: String| -> Result<Filter> { Err(DecodeError::Inconsistent(what).into()) };
        if mode_of_kind(h.filter_kind.get()) != Some(FilterMode::Plain) {
            return bad(format!(
                "filter kind {} is not a plain filter",
                h.filter_kind.get()
            ));
        }
        // Exactly what `to_bytes` writes (a tree's snapshot is not a standalone filter), so
        // that whatever parses re-serializes to the same bytes.
        if h.db_id != [0; 16] || h.tree_id != [0; 16] || h.snapshot_id != [0; 16] {
            return bad("ids set: a tree's snapshot, not a standalone filter".into());
        }
        if h.sequence.get() != 0 {
            return bad(format!("sequence {}", h.sequence.get()));
        }
        if u64::from(h.page_size.get()) != h.payload_len.get().min(MAX_PAGE) {
            return bad(format!("page size {}", h.page_size.get()));
        }
        Filter::of_snapshot(&h, &words)
    }

    /// The plain filter a decoded snapshot's header and words make (a standalone filter's
    /// or a store's stored one): parts the filter refuses are a decode fault, memory it
    /// cannot have is [`Error::OutOfMemory`].
    pub(crate) fn of_snapshot(h: &super::Header, words: &[u64]) -> Result<Filter> {
        Filter::from_parts(
            words,
            h.num_hashes.get(),
            h.seed.get(),
            h.capacity.get(),
            h.items.get(),
        )
        .map_err(|e| match e {
            Error::OutOfMemory { .. } => e,
            e => DecodeError::Inconsistent(e.to_string()).into(),
        })
    }
}

impl Serialize for Filter {
    /// As the bytes of [`Filter::to_bytes`].
    fn serialize<S: serde::Serializer>(&self, s: S) -> std::result::Result<S::Ok, S::Error> {
        s.serialize_bytes(&self.to_bytes())
    }
}

impl<'de> Deserialize<'de> for Filter {
    /// From the bytes of [`Filter::to_bytes`] (a byte string, or a sequence of bytes for
    /// formats without one), checked as [`Filter::from_bytes`] checks them.
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> std::result::Result<Self, D::Error> {
        struct Bytes;
        impl<'de> serde::de::Visitor<'de> for Bytes {
            type Value = Vec<u8>;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("the bytes of a bloomsled filter")
            }
            fn visit_bytes<E: serde::de::Error>(self, v: &[u8]) -> std::result::Result<Vec<u8>, E> {
                Ok(v.to_vec())
            }
            fn visit_byte_buf<E: serde::de::Error>(
                self,
                v: Vec<u8>,
            ) -> std::result::Result<Vec<u8>, E> {
                Ok(v)
            }
            fn visit_seq<A: serde::de::SeqAccess<'de>>(
                self,
                mut seq: A,
            ) -> std::result::Result<Vec<u8>, A::Error> {
                let mut out = Vec::new();
                while let Some(b) = seq.next_element::<u8>()? {
                    out.push(b);
                }
                Ok(out)
            }
        }
        let bytes = d.deserialize_bytes(Bytes)?;
        Filter::from_bytes(&bytes).map_err(serde::de::Error::custom)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bytes_and_serde_round_trip_and_reject_damage() {
        let f = Filter::with_bits_per_key(200, 10.0).unwrap();
        for i in 0..200u32 {
            f.insert(&i.to_le_bytes());
        }
        let b = f.to_bytes();
        assert_eq!(&b[..8], b"BLMSLED\0");
        let g = Filter::from_bytes(&b).unwrap();
        assert_eq!(g.to_bytes(), b);
        assert_eq!(
            (g.items(), g.capacity(), g.seed()),
            (f.items(), f.capacity(), f.seed())
        );
        for len in 0..b.len() {
            assert!(Filter::from_bytes(&b[..len]).is_err(), "truncated at {len}");
        }
        for i in 0..b.len() {
            let mut c = b.clone();
            c[i] ^= 0x10;
            assert!(Filter::from_bytes(&c).is_err(), "flip at byte {i} accepted");
        }
        assert!(matches!(
            Filter::from_bytes(b"garbage!garbage!"),
            Err(Error::Decode(DecodeError::BadMagic { .. }))
        ));
        // serde (JSON: bytes as a sequence) carries the same bytes and the same checks.
        let json = serde_json::to_string(&f).unwrap();
        let h: Filter = serde_json::from_str(&json).unwrap();
        assert_eq!(h.to_bytes(), b);
        let mut tampered: Vec<u8> = serde_json::from_str(&json).unwrap();
        let last = tampered.len() - 1;
        tampered[last] ^= 1;
        let bad = serde_json::to_string(&tampered).unwrap();
        let err = serde_json::from_str::<Filter>(&bad).unwrap_err();
        assert!(err.to_string().contains("checksum"), "{err}");
    }

    #[test]
    fn an_empty_filter_serializes_small() {
        let f = Filter::new(1_000_000, 0.01).unwrap();
        assert!(f.to_bytes().len() < 256, "{}", f.to_bytes().len());
        assert_eq!(
            Filter::from_bytes(&f.to_bytes()).unwrap().num_bits(),
            f.num_bits()
        );
    }
}

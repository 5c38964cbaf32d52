//! The files of a [`crate::FingerprintSet`]: bytes in, bytes out, no I/O.
//!
//! Every integer is little-endian; every structure carries a CRC32 ([`checksum`]) of
//! what it protects, seeded with the numbers that tie it to its place (the set's id, the
//! run's sequence number, the block's index, the log's generation), so a record copied from
//! another file or another set does not verify. Parsers check length, magic, version, CRC,
//! then fields, and return a [`DecodeError`], never panic.
//!
//! ## Manifest (`MANIFEST`)
//! Which runs and which log make up the set, and whether its saved filter is current:
//! layout and parser in `format/manifest.rs` ([`Manifest`]).
//!
//! ## Write-ahead log (`wal-<generation>.log`)
//! A [`WalHeader`] ([`WAL_HEADER_LEN`] bytes), then records of `width + 4` bytes: the
//! fingerprint and the CRC32 of (generation, fingerprint).
//!
//! ## Run (`run-<seq>.fps`): the sorted, deduplicated members of one flush or merge
//! ```text
//! header  RUN_HEADER_LEN  magic "BLSFRUN\0", version, width, set id, seq, count,
//!                         items per block, CRC32 of the header
//! blocks  ⌈count/B⌉ ×     up to B fingerprints in ascending order, then the CRC32 of
//!                         (seq, block index, fingerprints)
//! index   (blocks+1)·w+4  the first fingerprint of every block, the run's last
//!                         fingerprint, CRC32 of (seq, those bytes)
//! footer  RUN_FOOTER_LEN  magic "BLSFEND\0", number of blocks, CRC32 of (seq, both)
//! ```

use bloomsled::DecodeError;

mod manifest;

pub use manifest::{Manifest, RunEntry};

/// CRC32 (crc32fast, the IEEE polynomial) of `parts` read one after the other: the checksum
/// every structure of these files carries.
pub fn checksum(parts: &[&[u8]]) -> u32 {
    let mut h = crc32fast::Hasher::new();
    for p in parts {
        h.update(p);
    }
    h.finalize()
}

/// Format version of every file of a fingerprint set.
pub const FPSET_VERSION: u32 = 1;
/// First bytes of a manifest.
pub const MANIFEST_MAGIC: [u8; 8] = *b"BLSFMAN\0";
/// First bytes of a write-ahead log.
pub const WAL_MAGIC: [u8; 8] = *b"BLSFWAL\0";
/// First bytes of a run.
pub const RUN_MAGIC: [u8; 8] = *b"BLSFRUN\0";
/// First bytes of a run's footer.
pub const RUN_FOOTER_MAGIC: [u8; 8] = *b"BLSFEND\0";
/// Bytes of a manifest before its runs.
pub const MANIFEST_FIXED_LEN: usize = 76;
/// Bytes of a write-ahead log's header.
pub const WAL_HEADER_LEN: usize = 36;
/// Bytes of a run's header.
pub const RUN_HEADER_LEN: usize = 48;
/// Bytes of a run's footer.
pub const RUN_FOOTER_LEN: usize = 20;
/// Most members a run may hold (2^48): a larger count is damage, and every file offset
/// computed from a header stays far below `u64::MAX`.
pub const MAX_RUN_ITEMS: u64 = 1 << 48;
/// Widest fingerprint a set holds (a SHA-512 digest).
pub const MAX_WIDTH: usize = 64;

/// Little-endian reads at checked offsets of a slice already known to be long enough.
struct Fields<'a>(&'a [u8]);

impl Fields<'_> {
    fn u32(&self, at: usize) -> u32 {
        u32::from_le_bytes(self.0[at..at + 4].try_into().expect("4 bytes"))
    }
    fn u64(&self, at: usize) -> u64 {
        u64::from_le_bytes(self.0[at..at + 8].try_into().expect("8 bytes"))
    }
}

/// Checks magic, then length (at least `len`), then version (footers have none).
fn check_head(bytes: &[u8], len: usize, magic: &[u8; 8]) -> Result<(), DecodeError> {
    if bytes.len() < magic.len() || bytes[..magic.len()] != magic[..] {
        return Err(DecodeError::BadMagic {
            got: bytes[..bytes.len().min(magic.len())].to_vec(),
        });
    }
    if bytes.len() < len {
        return Err(DecodeError::Truncated {
            needed: len as u64,
            got: bytes.len() as u64,
        });
    }
    if magic != &RUN_FOOTER_MAGIC {
        let version = Fields(bytes).u32(8);
        if version != FPSET_VERSION {
            return Err(DecodeError::UnsupportedVersion {
                expected: FPSET_VERSION,
                got: version,
            });
        }
    }
    Ok(())
}

/// Checks the CRC32 in the last four of the first `len` bytes, over `seed` and the bytes
/// before it.
fn check_crc(bytes: &[u8], len: usize, seed: &[u8]) -> Result<(), DecodeError> {
    let stored = Fields(bytes).u32(len - 4);
    let computed = checksum(&[seed, &bytes[..len - 4]]);
    if stored != computed {
        return Err(DecodeError::HeaderChecksum {
            expected: stored,
            got: computed,
        });
    }
    Ok(())
}

/// [`check_head`] then [`check_crc`] for a structure of fixed length `len`.
fn check_frame(bytes: &[u8], len: usize, magic: &[u8; 8], seed: &[u8]) -> Result<(), DecodeError> {
    check_head(bytes, len, magic)?;
    check_crc(bytes, len, seed)
}

fn check_width(width: u32) -> Result<usize, DecodeError> {
    match width as usize {
        w @ 1..=MAX_WIDTH => Ok(w),
        w => Err(DecodeError::Inconsistent(format!("fingerprint width {w}"))),
    }
}

/// The header of a write-ahead log.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WalHeader {
    /// Fingerprint width in bytes.
    pub width: usize,
    /// The set's id.
    pub set_id: u64,
    /// The log's generation (its file is `wal-<generation>.log`).
    pub generation: u64,
}

impl WalHeader {
    /// The header's bytes.
    pub fn encode(&self) -> [u8; WAL_HEADER_LEN] {
        let mut b = [0u8; WAL_HEADER_LEN];
        b[..8].copy_from_slice(&WAL_MAGIC);
        b[8..12].copy_from_slice(&FPSET_VERSION.to_le_bytes());
        b[12..16].copy_from_slice(&(self.width as u32).to_le_bytes());
        b[16..24].copy_from_slice(&self.set_id.to_le_bytes());
        b[24..32].copy_from_slice(&self.generation.to_le_bytes());
        let crc = checksum(&[&b[..32]]);
        b[32..].copy_from_slice(&crc.to_le_bytes());
        b
    }

    /// Parses [`WalHeader::encode`]'s bytes (the first [`WAL_HEADER_LEN`] of `bytes`).
    pub fn decode(bytes: &[u8]) -> Result<WalHeader, DecodeError> {
        check_frame(bytes, WAL_HEADER_LEN, &WAL_MAGIC, &[])?;
        let f = Fields(bytes);
        Ok(WalHeader {
            width: check_width(f.u32(12))?,
            set_id: f.u64(16),
            generation: f.u64(24),
        })
    }
}

/// Bytes of one log record of a `width`-byte fingerprint.
pub const fn wal_record_len(width: usize) -> usize {
    width + 4
}

/// Appends the log record of `fp` (generation `generation`) to `out`.
pub fn encode_wal_record(generation: u64, fp: &[u8], out: &mut Vec<u8>) {
    out.extend_from_slice(fp);
    let crc = checksum(&[&generation.to_le_bytes(), fp]);
    out.extend_from_slice(&crc.to_le_bytes());
}

/// The fingerprint of a log record, or `None` if its CRC does not match.
pub fn decode_wal_record(generation: u64, record: &[u8]) -> Option<&[u8]> {
    let (fp, crc) = record.split_at(record.len().checked_sub(4)?);
    let stored = u32::from_le_bytes(crc.try_into().ok()?);
    (stored == checksum(&[&generation.to_le_bytes(), fp])).then_some(fp)
}

/// The header of a run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RunHeader {
    /// Fingerprint width in bytes.
    pub width: usize,
    /// The set's id.
    pub set_id: u64,
    /// The run's sequence number.
    pub seq: u64,
    /// Its members.
    pub count: u64,
    /// Fingerprints per block (the last block may hold fewer).
    pub block_items: u32,
}

impl RunHeader {
    /// The header's bytes.
    pub fn encode(&self) -> [u8; RUN_HEADER_LEN] {
        let mut b = [0u8; RUN_HEADER_LEN];
        b[..8].copy_from_slice(&RUN_MAGIC);
        b[8..12].copy_from_slice(&FPSET_VERSION.to_le_bytes());
        b[12..16].copy_from_slice(&(self.width as u32).to_le_bytes());
        b[16..24].copy_from_slice(&self.set_id.to_le_bytes());
        b[24..32].copy_from_slice(&self.seq.to_le_bytes());
        b[32..40].copy_from_slice(&self.count.to_le_bytes());
        b[40..44].copy_from_slice(&self.block_items.to_le_bytes());
        let crc = checksum(&[&b[..44]]);
        b[44..].copy_from_slice(&crc.to_le_bytes());
        b
    }

    /// Parses [`RunHeader::encode`]'s bytes (the first [`RUN_HEADER_LEN`] of `bytes`).
    pub fn decode(bytes: &[u8]) -> Result<RunHeader, DecodeError> {
        check_frame(bytes, RUN_HEADER_LEN, &RUN_MAGIC, &[])?;
        let f = Fields(bytes);
        let h = RunHeader {
            width: check_width(f.u32(12))?,
            set_id: f.u64(16),
            seq: f.u64(24),
            count: f.u64(32),
            block_items: f.u32(40),
        };
        // The bound keeps every offset computed from the header far from overflow.
        if h.block_items == 0 || h.count == 0 || h.count > MAX_RUN_ITEMS {
            return Err(DecodeError::Inconsistent(format!(
                "run of {} members in blocks of {}",
                h.count, h.block_items
            )));
        }
        Ok(h)
    }

    /// Number of blocks.
    pub fn blocks(&self) -> u64 {
        self.count.div_ceil(u64::from(self.block_items))
    }

    /// Fingerprints in block `i`.
    pub fn items_in_block(&self, i: u64) -> usize {
        let b = u64::from(self.block_items);
        (self.count - i * b).min(b) as usize
    }

    /// File offset of block `i`.
    pub fn block_offset(&self, i: u64) -> u64 {
        let full = (u64::from(self.block_items) * self.width as u64 + 4) * i;
        RUN_HEADER_LEN as u64 + full
    }

    /// File offset of the index.
    pub fn index_offset(&self) -> u64 {
        RUN_HEADER_LEN as u64 + self.count * self.width as u64 + 4 * self.blocks()
    }

    /// Bytes of the index, its CRC included.
    pub fn index_len(&self) -> u64 {
        (self.blocks() + 1) * self.width as u64 + 4
    }

    /// Exact length of the run's file.
    pub fn file_len(&self) -> u64 {
        self.index_offset() + self.index_len() + RUN_FOOTER_LEN as u64
    }
}

/// Appends the CRC32 that closes block `index` of run `seq`, whose fingerprints are
/// `block`, to `block` itself.
pub fn seal_block(seq: u64, index: u64, block: &mut Vec<u8>) {
    let crc = checksum(&[&seq.to_le_bytes(), &index.to_le_bytes(), block]);
    block.extend_from_slice(&crc.to_le_bytes());
}

/// The fingerprints of block `index` of run `seq` read as `bytes` (fingerprints then
/// CRC32), verified.
pub fn open_block(seq: u64, index: u64, bytes: &[u8]) -> Result<&[u8], DecodeError> {
    let (fps, crc) = bytes.split_at(bytes.len().saturating_sub(4));
    let stored = u32::from_le_bytes(crc.try_into().map_err(|_| DecodeError::Truncated {
        needed: 4,
        got: crc.len() as u64,
    })?);
    let computed = checksum(&[&seq.to_le_bytes(), &index.to_le_bytes(), fps]);
    if stored != computed {
        return Err(DecodeError::PageChecksum {
            page: index as u32,
            expected: stored,
            got: computed,
        });
    }
    Ok(fps)
}

/// Appends the CRC32 that closes the index of run `seq` to `index`.
pub fn seal_index(seq: u64, index: &mut Vec<u8>) {
    let crc = checksum(&[&seq.to_le_bytes(), index]);
    index.extend_from_slice(&crc.to_le_bytes());
}

/// The index bytes of run `seq` (first fingerprints, last fingerprint), verified.
pub fn open_index(seq: u64, bytes: &[u8]) -> Result<&[u8], DecodeError> {
    let (index, crc) = bytes.split_at(bytes.len().saturating_sub(4));
    let stored = u32::from_le_bytes(crc.try_into().map_err(|_| DecodeError::Truncated {
        needed: 4,
        got: crc.len() as u64,
    })?);
    let computed = checksum(&[&seq.to_le_bytes(), index]);
    if stored != computed {
        return Err(DecodeError::PayloadChecksum {
            expected: stored,
            got: computed,
        });
    }
    Ok(index)
}

/// A run's footer: its number of blocks, sealed with the run's sequence number.
pub fn encode_run_footer(seq: u64, blocks: u64) -> [u8; RUN_FOOTER_LEN] {
    let mut b = [0u8; RUN_FOOTER_LEN];
    b[..8].copy_from_slice(&RUN_FOOTER_MAGIC);
    b[8..16].copy_from_slice(&blocks.to_le_bytes());
    let crc = checksum(&[&seq.to_le_bytes(), &b[..16]]);
    b[16..].copy_from_slice(&crc.to_le_bytes());
    b
}

/// The number of blocks a run's footer records, verified against the run's `seq`.
pub fn decode_run_footer(seq: u64, bytes: &[u8]) -> Result<u64, DecodeError> {
    check_frame(bytes, RUN_FOOTER_LEN, &RUN_FOOTER_MAGIC, &seq.to_le_bytes())?;
    Ok(Fields(bytes).u64(8))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn headers_footers_and_records_round_trip_and_reject_flips() {
        let w = WalHeader {
            width: 20,
            set_id: 1,
            generation: 2,
        };
        assert_eq!(WalHeader::decode(&w.encode()).unwrap(), w);
        let r = RunHeader {
            width: 20,
            set_id: 1,
            seq: 2,
            count: 300,
            block_items: 128,
        };
        assert_eq!(RunHeader::decode(&r.encode()).unwrap(), r);
        assert_eq!(r.blocks(), 3);
        assert_eq!(r.items_in_block(2), 44);
        assert_eq!(decode_run_footer(2, &encode_run_footer(2, 3)).unwrap(), 3);
        assert!(decode_run_footer(3, &encode_run_footer(2, 3)).is_err());
        for i in 0..WAL_HEADER_LEN {
            let mut c = w.encode();
            c[i] ^= 1;
            assert!(WalHeader::decode(&c).is_err(), "wal flip {i}");
        }
        for i in 0..RUN_HEADER_LEN {
            let mut c = r.encode();
            c[i] ^= 1;
            assert!(RunHeader::decode(&c).is_err(), "run flip {i}");
        }
        let mut rec = Vec::new();
        encode_wal_record(5, &[9; 20], &mut rec);
        assert_eq!(decode_wal_record(5, &rec), Some(&[9u8; 20][..]));
        assert_eq!(
            decode_wal_record(6, &rec),
            None,
            "another generation's record"
        );
        let mut block = vec![1u8; 40];
        seal_block(2, 7, &mut block);
        assert_eq!(open_block(2, 7, &block).unwrap(), &[1u8; 40][..]);
        assert!(
            open_block(2, 8, &block).is_err(),
            "a block read at another index"
        );
        block[3] ^= 1;
        assert!(matches!(
            open_block(2, 7, &block),
            Err(DecodeError::PageChecksum { page: 7, .. })
        ));
    }
}

//! The on-disk snapshot format: bytes in, bytes out. No sled, no files: fuzzable alone.
//!
//! A snapshot is a [`Header`] followed by `page_count` pages, each a [`PageHeader`] and up to
//! `page_size` bytes of the bitset (the filter's 64-bit words, little-endian, block by block).
//!
//! ```text
//! Header (104 bytes, every integer little-endian)
//! offset size field
//!      0    8 magic        b"BLMSLED\0"
//!      8    4 version      format version (1)
//!     12    4 header_len   size of this header (104)
//!     16    4 filter_kind  1 = blocked Bloom, 512-bit blocks (payload: the bits)
//!                          2 = counting, 512 4-bit counters per block (payload: the counters;
//!                              the bits are derived: bit set ⇔ counter non-zero)
//!     20    4 hash_kind    2 = xxh3-64 with seed, k bits by independent multiplies, repeats
//!                              allowed (`filter::layout`); 1 (retired: distinct bits) is
//!                              rejected, so such a snapshot is rebuilt from the keys
//!     24    8 seed
//!     32    8 name_hash    xxh3-64 of the tree name: a snapshot copied onto another tree is refused
//!     40    8 num_blocks
//!     48    4 num_hashes   k
//!     52    4 page_size    payload bytes per page (last page may be shorter)
//!     56    8 capacity     items the filter is sized for
//!     64    8 items        items inserted
//!     72    8 generation   ties the snapshot to the dirty marker (see `persist`)
//!     80    8 payload_len  num_blocks · 64 (kind 1) or num_blocks · 256 (kind 2)
//!     88    4 page_count   ⌈payload_len / page_size⌉
//!     92    4 payload_crc  CRC32 of the whole bitset (combined from the page CRCs)
//!     96    4 reserved     zero
//!    100    4 header_crc   CRC32 of bytes 0..100
//!
//! PageHeader (16 bytes), then `len` payload bytes
//!      0    4 magic        b"BPG\0"
//!      4    4 index        page number, from 0
//!      8    4 len          payload bytes in this page
//!     12    4 crc          CRC32 of bytes 0..12 of this page header and of the payload
//! ```
//!
//! Parsing checks, in order: length, magic, version, header length, header CRC, kinds and
//! field ranges, total length; then each page's magic, index, length and CRC. Every failure is
//! a [`SnapshotFault`]; no input makes it panic.

use std::fmt;

use zerocopy::little_endian::{U32, U64};
use zerocopy::{FromBytes, Immutable, IntoBytes, KnownLayout, Unaligned};

use crate::filter::layout;

/// First bytes of a snapshot file.
pub const MAGIC: [u8; 8] = *b"BLMSLED\0";
/// The snapshot format version this build writes and reads.
pub const VERSION: u32 = 1;
/// Filter kind: blocked Bloom filter with 512-bit blocks.
pub const FILTER_KIND_BLOCKED: u32 = 1;
/// Filter kind: counting filter, 512 4-bit counters per block.
pub const FILTER_KIND_COUNTING: u32 = 2;
/// Retired hash kind: xxh3-64 with the stored seed, `k` *distinct* positions from the
/// golden-ratio stream (bloomsled before the branch-free probe). Its bit patterns differ
/// from [`HASH_KIND_XXH3_BLOCK`]'s, so probing such a snapshot with today's layout could
/// answer "absent" for a stored key: it is rejected with [`SnapshotFault::HashKind`].
pub const HASH_KIND_XXH3_GOLDEN: u32 = 1;
/// Hash kind this build writes and reads: xxh3-64 with the stored seed, block and bits as
/// `filter::layout` defines them (`k` independent multiplies, repeats allowed).
pub const HASH_KIND_XXH3_BLOCK: u32 = 2;
/// Default payload bytes per page: 1 MiB.
pub const DEFAULT_PAGE_SIZE: u32 = 1 << 20;
/// First bytes of a page.
pub const PAGE_MAGIC: [u8; 4] = *b"BPG\0";
/// First bytes of a dirty-marker record.
pub const STATE_MAGIC: [u8; 8] = *b"BLMSTATE";

const BLOCK_BYTES: u64 = layout::BLOCK_BYTES as u64;

/// The snapshot header. `#[repr(C)]` of byte-aligned little-endian fields: its in-memory
/// layout is its on-disk layout, read and written with zerocopy, no `unsafe`.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, FromBytes, IntoBytes, KnownLayout, Immutable, Unaligned,
)]
#[repr(C)]
pub struct Header {
    /// [`MAGIC`].
    pub magic: [u8; 8],
    /// [`VERSION`].
    pub version: U32,
    /// `size_of::<Header>()`.
    pub header_len: U32,
    /// [`FILTER_KIND_BLOCKED`] or [`FILTER_KIND_COUNTING`].
    pub filter_kind: U32,
    /// [`HASH_KIND_XXH3_BLOCK`].
    pub hash_kind: U32,
    /// Hash seed.
    pub seed: U64,
    /// xxh3-64 (seed 0) of the tree's name.
    pub name_hash: U64,
    /// Number of 512-bit blocks.
    pub num_blocks: U64,
    /// Bits set per key.
    pub num_hashes: U32,
    /// Payload bytes per page.
    pub page_size: U32,
    /// Items the filter is sized for.
    pub capacity: U64,
    /// Items inserted.
    pub items: U64,
    /// Snapshot generation.
    pub generation: U64,
    /// Bitset bytes.
    pub payload_len: U64,
    /// Number of pages.
    pub page_count: U32,
    /// CRC32 of the bitset.
    pub payload_crc: U32,
    /// Zero.
    pub reserved: U32,
    /// CRC32 of every byte before this field.
    pub header_crc: U32,
}

/// Size of [`Header`] on disk.
pub const HEADER_LEN: usize = std::mem::size_of::<Header>();
const HEADER_CRC_OFFSET: usize = HEADER_LEN - 4;

/// The header of one page of the bitset.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, FromBytes, IntoBytes, KnownLayout, Immutable, Unaligned,
)]
#[repr(C)]
pub struct PageHeader {
    /// [`PAGE_MAGIC`].
    pub magic: [u8; 4],
    /// Page number, from 0.
    pub index: U32,
    /// Payload bytes that follow.
    pub len: U32,
    /// CRC32 of the first 12 bytes of this header and the payload.
    pub crc: U32,
}

/// Size of [`PageHeader`] on disk.
pub const PAGE_HEADER_LEN: usize = std::mem::size_of::<PageHeader>();

/// The dirty marker: "the tree was written after the snapshot of `dirty_generation`".
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, FromBytes, IntoBytes, KnownLayout, Immutable, Unaligned,
)]
#[repr(C)]
pub struct StateRecord {
    /// [`STATE_MAGIC`].
    pub magic: [u8; 8],
    /// Highest generation written to since its snapshot copy.
    pub dirty_generation: U64,
    /// CRC32 of the first 16 bytes.
    pub crc: U32,
}

/// Size of [`StateRecord`] on disk.
pub const STATE_LEN: usize = std::mem::size_of::<StateRecord>();

/// Why a snapshot was not trusted: what failed, precisely enough to act on.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum SnapshotFault {
    /// There is no snapshot file.
    Missing,
    /// The file does not start with [`MAGIC`]: not a bloomsled snapshot.
    BadMagic {
        /// The bytes found.
        got: Vec<u8>,
    },
    /// Written by a format version this build does not read.
    UnsupportedVersion {
        /// The version this build reads.
        expected: u32,
        /// The version found.
        got: u32,
    },
    /// The bytes end before what the header describes.
    Truncated {
        /// Bytes needed.
        needed: u64,
        /// Bytes present.
        got: u64,
    },
    /// The header's CRC32 does not match its bytes.
    HeaderChecksum {
        /// Stored.
        expected: u32,
        /// Computed.
        got: u32,
    },
    /// A page's CRC32 does not match its bytes.
    PageChecksum {
        /// Page number.
        page: u32,
        /// Stored.
        expected: u32,
        /// Computed.
        got: u32,
    },
    /// The header's whole-payload CRC32 does not match the pages.
    PayloadChecksum {
        /// Stored.
        expected: u32,
        /// Computed.
        got: u32,
    },
    /// Well-framed, but a field is impossible or inconsistent (named in the message).
    Inconsistent(String),
    /// Written with another hash kind (e.g. [`HASH_KIND_XXH3_GOLDEN`], whose keys set other
    /// bits): probing it would give false negatives, so the filter is rebuilt from the keys.
    HashKind {
        /// The hash kind this build uses.
        expected: u32,
        /// The hash kind found.
        got: u32,
    },
    /// The tree was written after the snapshot was taken (or its marker says so).
    Stale {
        /// Generation of the snapshot.
        snapshot_generation: u64,
        /// Highest generation marked dirty.
        dirty_generation: u64,
    },
    /// The snapshot holds a filter of another mode than the database is opened with
    /// (`Config::counting`): the filter is rebuilt in the configured mode.
    ModeChanged {
        /// Mode of the snapshot ("plain" or "counting").
        snapshot: &'static str,
        /// Mode asked for.
        configured: &'static str,
    },
    /// The dirty-marker record is missing or unreadable, so staleness cannot be ruled out.
    StateUnreadable(String),
    /// Reading the snapshot failed.
    Io(String),
}

impl fmt::Display for SnapshotFault {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SnapshotFault::Missing => write!(f, "no snapshot"),
            SnapshotFault::BadMagic { got } => {
                write!(f, "not a bloomsled snapshot (magic {got:02x?})")
            }
            SnapshotFault::UnsupportedVersion { expected, got } => {
                write!(
                    f,
                    "snapshot format version {got}, this build reads {expected}"
                )
            }
            SnapshotFault::Truncated { needed, got } => {
                write!(f, "snapshot truncated: {got} bytes of {needed}")
            }
            SnapshotFault::HeaderChecksum { expected, got } => {
                write!(
                    f,
                    "header checksum mismatch (stored {expected:#010x}, computed {got:#010x})"
                )
            }
            SnapshotFault::PageChecksum {
                page,
                expected,
                got,
            } => write!(
                f,
                "page {page} checksum mismatch (stored {expected:#010x}, computed {got:#010x})"
            ),
            SnapshotFault::PayloadChecksum { expected, got } => {
                write!(
                    f,
                    "payload checksum mismatch (stored {expected:#010x}, computed {got:#010x})"
                )
            }
            SnapshotFault::Inconsistent(what) => write!(f, "inconsistent snapshot: {what}"),
            SnapshotFault::HashKind { expected, got } => write!(
                f,
                "snapshot written with hash kind {got}, whose keys set other bits than this \
                 build's hash kind {expected}"
            ),
            SnapshotFault::Stale {
                snapshot_generation,
                dirty_generation,
            } => write!(
                f,
                "stale snapshot: generation {snapshot_generation}, tree written after generation \
                 {dirty_generation}"
            ),
            SnapshotFault::ModeChanged {
                snapshot,
                configured,
            } => write!(
                f,
                "snapshot holds a {snapshot} filter, the database is opened in {configured} mode"
            ),
            SnapshotFault::StateUnreadable(why) => write!(f, "dirty marker unreadable: {why}"),
            SnapshotFault::Io(why) => write!(f, "snapshot unreadable: {why}"),
        }
    }
}

/// Payload bytes per 512-bit block for a filter kind (`None`: unknown kind).
pub fn block_bytes(filter_kind: u32) -> Option<u64> {
    match filter_kind {
        FILTER_KIND_BLOCKED => Some(BLOCK_BYTES),
        FILTER_KIND_COUNTING => Some(4 * BLOCK_BYTES),
        _ => None,
    }
}

/// What a snapshot holds besides the bits.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SnapshotMeta {
    /// [`FILTER_KIND_BLOCKED`] or [`FILTER_KIND_COUNTING`]: what the words are.
    pub filter_kind: u32,
    /// Hash seed.
    pub seed: u64,
    /// xxh3-64 of the tree name.
    pub name_hash: u64,
    /// Bits set per key.
    pub num_hashes: u32,
    /// Items the filter is sized for.
    pub capacity: u64,
    /// Items inserted.
    pub items: u64,
    /// Snapshot generation.
    pub generation: u64,
}

fn crc(parts: &[&[u8]]) -> u32 {
    let mut h = crc32fast::Hasher::new();
    for p in parts {
        h.update(p);
    }
    h.finalize()
}

/// Encodes a snapshot of `words` (8 per 512-bit block for the blocked kind, 32 for the
/// counting kind) in pages of `page_size` bytes.
///
/// # Panics
/// If `page_size` is not a positive multiple of 8 or the kind is unknown (programming
/// errors, not data errors).
pub fn encode(meta: &SnapshotMeta, words: &[u64], page_size: u32) -> Vec<u8> {
    assert!(
        page_size >= 8 && page_size % 8 == 0,
        "page size must be a positive multiple of 8"
    );
    let block_bytes = block_bytes(meta.filter_kind).expect("a known filter kind");
    let payload_len = words.len() as u64 * 8;
    let words_per_page = (page_size / 8) as usize;
    let page_count = words.len().div_ceil(words_per_page);
    let mut out =
        Vec::with_capacity(HEADER_LEN + page_count * PAGE_HEADER_LEN + payload_len as usize);
    out.resize(HEADER_LEN, 0);
    let mut payload_crc = crc32fast::Hasher::new();
    let mut page_bytes = Vec::with_capacity(page_size as usize);
    for (index, chunk) in words.chunks(words_per_page).enumerate() {
        page_bytes.clear();
        layout::encode_words(chunk, &mut page_bytes);
        let mut ph = PageHeader {
            magic: PAGE_MAGIC,
            index: U32::new(index as u32),
            len: U32::new(page_bytes.len() as u32),
            crc: U32::new(0),
        };
        ph.crc = U32::new(crc(&[&ph.as_bytes()[..12], &page_bytes]));
        out.extend_from_slice(ph.as_bytes());
        out.extend_from_slice(&page_bytes);
        payload_crc.update(&page_bytes);
    }
    let mut header = Header {
        magic: MAGIC,
        version: U32::new(VERSION),
        header_len: U32::new(HEADER_LEN as u32),
        filter_kind: U32::new(meta.filter_kind),
        hash_kind: U32::new(HASH_KIND_XXH3_BLOCK),
        seed: U64::new(meta.seed),
        name_hash: U64::new(meta.name_hash),
        num_blocks: U64::new(payload_len / block_bytes),
        num_hashes: U32::new(meta.num_hashes),
        page_size: U32::new(page_size),
        capacity: U64::new(meta.capacity),
        items: U64::new(meta.items),
        generation: U64::new(meta.generation),
        payload_len: U64::new(payload_len),
        page_count: U32::new(page_count as u32),
        payload_crc: U32::new(payload_crc.finalize()),
        reserved: U32::new(0),
        header_crc: U32::new(0),
    };
    header.header_crc = U32::new(crc(&[&header.as_bytes()[..HEADER_CRC_OFFSET]]));
    out[..HEADER_LEN].copy_from_slice(header.as_bytes());
    out
}

/// Parses and verifies the header alone (not the pages).
pub fn parse_header(bytes: &[u8]) -> Result<Header, SnapshotFault> {
    if bytes.len() < MAGIC.len() || bytes[..MAGIC.len()] != MAGIC {
        return Err(SnapshotFault::BadMagic {
            got: bytes[..bytes.len().min(MAGIC.len())].to_vec(),
        });
    }
    let Ok((header, _)) = Header::read_from_prefix(bytes) else {
        return Err(SnapshotFault::Truncated {
            needed: HEADER_LEN as u64,
            got: bytes.len() as u64,
        });
    };
    if header.version.get() != VERSION {
        return Err(SnapshotFault::UnsupportedVersion {
            expected: VERSION,
            got: header.version.get(),
        });
    }
    let computed = crc(&[&bytes[..HEADER_CRC_OFFSET]]);
    if computed != header.header_crc.get() {
        return Err(SnapshotFault::HeaderChecksum {
            expected: header.header_crc.get(),
            got: computed,
        });
    }
    let bad = |what: String| Err(SnapshotFault::Inconsistent(what));
    if header.header_len.get() as usize != HEADER_LEN {
        return bad(format!("header length {}", header.header_len.get()));
    }
    if header.hash_kind.get() != HASH_KIND_XXH3_BLOCK {
        return Err(SnapshotFault::HashKind {
            expected: HASH_KIND_XXH3_BLOCK,
            got: header.hash_kind.get(),
        });
    }
    let Some(block_bytes) = block_bytes(header.filter_kind.get()) else {
        return bad(format!("unknown filter kind {}", header.filter_kind.get()));
    };
    let page_size = header.page_size.get();
    if page_size < 8 || page_size % 8 != 0 {
        return bad(format!("page size {page_size}"));
    }
    let num_blocks = header.num_blocks.get();
    if num_blocks == 0 || num_blocks.checked_mul(block_bytes) != Some(header.payload_len.get()) {
        return bad(format!(
            "{num_blocks} blocks but {} payload bytes",
            header.payload_len.get()
        ));
    }
    if header.payload_len.get().div_ceil(u64::from(page_size)) != u64::from(header.page_count.get())
    {
        return bad(format!("page count {}", header.page_count.get()));
    }
    if !(1..=crate::filter::MAX_HASHES).contains(&header.num_hashes.get()) {
        return bad(format!("k = {}", header.num_hashes.get()));
    }
    if header.reserved.get() != 0 {
        return bad("reserved field not zero".into());
    }
    Ok(header)
}

/// Total snapshot size the header announces.
pub fn expected_len(header: &Header) -> u64 {
    HEADER_LEN as u64
        + u64::from(header.page_count.get()) * PAGE_HEADER_LEN as u64
        + header.payload_len.get()
}

/// Parses one page at the start of `bytes`, which must be page `index` with `len` bytes;
/// returns its payload and the rest.
pub fn parse_page(bytes: &[u8], index: u32, len: usize) -> Result<(&[u8], &[u8]), SnapshotFault> {
    let Ok((ph, rest)) = PageHeader::ref_from_prefix(bytes) else {
        return Err(SnapshotFault::Truncated {
            needed: PAGE_HEADER_LEN as u64,
            got: bytes.len() as u64,
        });
    };
    if ph.magic != PAGE_MAGIC {
        return Err(SnapshotFault::Inconsistent(format!(
            "page {index}: bad page magic"
        )));
    }
    if rest.len() < len {
        return Err(SnapshotFault::Truncated {
            needed: len as u64,
            got: rest.len() as u64,
        });
    }
    let (payload, rest) = rest.split_at(len);
    let computed = crc(&[&ph.as_bytes()[..12], payload]);
    if computed != ph.crc.get() {
        return Err(SnapshotFault::PageChecksum {
            page: index,
            expected: ph.crc.get(),
            got: computed,
        });
    }
    if ph.index.get() != index || ph.len.get() as usize != len {
        return Err(SnapshotFault::Inconsistent(format!(
            "page {index}: header says page {} of {} bytes",
            ph.index.get(),
            ph.len.get()
        )));
    }
    Ok((payload, rest))
}

/// Parses and verifies a whole snapshot; returns the header and the words.
pub fn decode(bytes: &[u8]) -> Result<(Header, Vec<u64>), SnapshotFault> {
    let header = parse_header(bytes)?;
    let needed = expected_len(&header);
    if (bytes.len() as u64) < needed {
        return Err(SnapshotFault::Truncated {
            needed,
            got: bytes.len() as u64,
        });
    }
    if bytes.len() as u64 > needed {
        return Err(SnapshotFault::Inconsistent(format!(
            "{} bytes after the last page",
            bytes.len() as u64 - needed
        )));
    }
    // The length check above bounds the allocation by the input's size.
    let mut words = Vec::with_capacity((header.payload_len.get() / 8) as usize);
    let mut rest = &bytes[HEADER_LEN..];
    let mut remaining = header.payload_len.get();
    let page_size = u64::from(header.page_size.get());
    let mut payload_crc = crc32fast::Hasher::new();
    for index in 0..header.page_count.get() {
        let len = remaining.min(page_size) as usize;
        let (payload, tail) = parse_page(rest, index, len)?;
        let mut page_crc = crc32fast::Hasher::new();
        page_crc.update(payload);
        payload_crc.combine(&page_crc);
        words.extend(layout::decode_words(payload));
        remaining -= len as u64;
        rest = tail;
    }
    let computed = payload_crc.finalize();
    if computed != header.payload_crc.get() {
        return Err(SnapshotFault::PayloadChecksum {
            expected: header.payload_crc.get(),
            got: computed,
        });
    }
    Ok((header, words))
}

/// Encodes a dirty marker.
pub fn encode_state(dirty_generation: u64) -> [u8; STATE_LEN] {
    let mut r = StateRecord {
        magic: STATE_MAGIC,
        dirty_generation: U64::new(dirty_generation),
        crc: U32::new(0),
    };
    r.crc = U32::new(crc(&[&r.as_bytes()[..16]]));
    let mut out = [0u8; STATE_LEN];
    out.copy_from_slice(r.as_bytes());
    out
}

/// Parses a dirty marker; returns its generation.
pub fn decode_state(bytes: &[u8]) -> Result<u64, SnapshotFault> {
    let Ok(r) = StateRecord::read_from_bytes(bytes) else {
        return Err(SnapshotFault::StateUnreadable(format!(
            "{} bytes",
            bytes.len()
        )));
    };
    if r.magic != STATE_MAGIC {
        return Err(SnapshotFault::StateUnreadable("bad magic".into()));
    }
    let computed = crc(&[&bytes[..16]]);
    if computed != r.crc.get() {
        return Err(SnapshotFault::StateUnreadable(format!(
            "checksum mismatch (stored {:#010x}, computed {computed:#010x})",
            r.crc.get()
        )));
    }
    Ok(r.dirty_generation.get())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample(words: usize, page_size: u32) -> (SnapshotMeta, Vec<u64>, Vec<u8>) {
        let meta = SnapshotMeta {
            filter_kind: FILTER_KIND_BLOCKED,
            seed: 7,
            name_hash: 99,
            num_hashes: 6,
            capacity: 1000,
            items: 123,
            generation: 5,
        };
        let w: Vec<u64> = (0..words as u64)
            .map(|i| i.wrapping_mul(0x9E37_79B9_7F4A_7C15))
            .collect();
        let bytes = encode(&meta, &w, page_size);
        (meta, w, bytes)
    }

    #[test]
    fn layout_matches_the_documented_offsets() {
        assert_eq!(HEADER_LEN, 104);
        assert_eq!(PAGE_HEADER_LEN, 16);
        assert_eq!(STATE_LEN, 20);
        assert_eq!(std::mem::offset_of!(Header, generation), 72);
        assert_eq!(std::mem::offset_of!(Header, header_crc), 100);
        let (_, w, b) = sample(64, 128);
        assert_eq!(b.len(), HEADER_LEN + 4 * PAGE_HEADER_LEN + 64 * 8);
        assert_eq!(&b[..8], b"BLMSLED\0");
        assert_eq!(u64::from_le_bytes(b[72..80].try_into().unwrap()), 5);
        assert_eq!(&b[HEADER_LEN..HEADER_LEN + 4], b"BPG\0");
        let first = u64::from_le_bytes(b[HEADER_LEN + 16..HEADER_LEN + 24].try_into().unwrap());
        assert_eq!(first, w[0]);
    }

    #[test]
    fn round_trip_with_partial_last_page() {
        let (meta, w, b) = sample(8 * 10, 8 * 24);
        let (h, got) = decode(&b).unwrap();
        assert_eq!(got, w);
        assert_eq!(h.generation.get(), meta.generation);
        assert_eq!(h.page_count.get(), 4);
        assert_eq!(h.items.get(), 123);
    }

    #[test]
    fn counting_kind_has_four_times_the_payload_per_block() {
        let (mut meta, w, _) = sample(32 * 3, 256);
        meta.filter_kind = FILTER_KIND_COUNTING;
        let b = encode(&meta, &w, 256);
        let (h, got) = decode(&b).unwrap();
        assert_eq!(h.num_blocks.get(), 3);
        assert_eq!(h.filter_kind.get(), FILTER_KIND_COUNTING);
        assert_eq!(got, w);
        // The same words read as the blocked kind would be 12 blocks: a relabelled kind
        // with the old block count is refused.
        let mut bad = b.clone();
        bad[16..20].copy_from_slice(&FILTER_KIND_BLOCKED.to_le_bytes());
        let c = crc(&[&bad[..HEADER_CRC_OFFSET]]);
        bad[HEADER_CRC_OFFSET..HEADER_LEN].copy_from_slice(&c.to_le_bytes());
        assert!(matches!(decode(&bad), Err(SnapshotFault::Inconsistent(_))));
        let mut unknown = b;
        unknown[16..20].copy_from_slice(&3u32.to_le_bytes());
        let c = crc(&[&unknown[..HEADER_CRC_OFFSET]]);
        unknown[HEADER_CRC_OFFSET..HEADER_LEN].copy_from_slice(&c.to_le_bytes());
        assert!(matches!(
            decode(&unknown),
            Err(SnapshotFault::Inconsistent(_))
        ));
    }

    #[test]
    fn a_snapshot_of_another_hash_kind_is_a_hash_kind_fault() {
        let (_, _, b) = sample(8 * 4, 64);
        assert_eq!(
            u32::from_le_bytes(b[20..24].try_into().unwrap()),
            HASH_KIND_XXH3_BLOCK
        );
        for kind in [HASH_KIND_XXH3_GOLDEN, 0, 3, u32::MAX] {
            let mut old = b.clone();
            old[20..24].copy_from_slice(&kind.to_le_bytes());
            let c = crc(&[&old[..HEADER_CRC_OFFSET]]);
            old[HEADER_CRC_OFFSET..HEADER_LEN].copy_from_slice(&c.to_le_bytes());
            assert_eq!(
                decode(&old).unwrap_err(),
                SnapshotFault::HashKind {
                    expected: HASH_KIND_XXH3_BLOCK,
                    got: kind
                }
            );
        }
    }

    #[test]
    fn every_header_bit_flip_is_detected() {
        let (_, _, b) = sample(8 * 4, 64);
        for byte in 0..HEADER_LEN {
            for bit in 0..8 {
                let mut c = b.clone();
                c[byte] ^= 1 << bit;
                assert!(
                    decode(&c).is_err(),
                    "flip at byte {byte} bit {bit} accepted"
                );
            }
        }
    }

    #[test]
    fn page_flips_name_the_page() {
        let (_, _, b) = sample(8 * 8, 128);
        let page_span = PAGE_HEADER_LEN + 128;
        for page in 0..4u32 {
            let off = HEADER_LEN + page as usize * page_span + PAGE_HEADER_LEN + 17;
            let mut c = b.clone();
            c[off] ^= 0x40;
            match decode(&c) {
                Err(SnapshotFault::PageChecksum { page: p, .. }) => assert_eq!(p, page),
                other => panic!("{other:?}"),
            }
        }
    }

    #[test]
    fn truncation_and_garbage_are_errors() {
        let (_, _, b) = sample(8 * 8, 128);
        for len in 0..b.len() {
            assert!(decode(&b[..len]).is_err(), "truncated at {len}");
        }
        let mut longer = b.clone();
        longer.push(0);
        assert!(matches!(
            decode(&longer),
            Err(SnapshotFault::Inconsistent(_))
        ));
        assert!(matches!(
            decode(b"hello world"),
            Err(SnapshotFault::BadMagic { .. })
        ));
        let mut future = b.clone();
        future[8] = 2;
        assert_eq!(
            decode(&future).unwrap_err(),
            SnapshotFault::UnsupportedVersion {
                expected: 1,
                got: 2
            }
        );
    }

    #[test]
    fn swapped_pages_are_detected() {
        let (_, _, b) = sample(8 * 8, 128);
        let span = PAGE_HEADER_LEN + 128;
        let mut c = b.clone();
        let (p0, p1) = (HEADER_LEN, HEADER_LEN + span);
        let first: Vec<u8> = c[p0..p0 + span].to_vec();
        let second: Vec<u8> = c[p1..p1 + span].to_vec();
        c[p0..p0 + span].copy_from_slice(&second);
        c[p1..p1 + span].copy_from_slice(&first);
        assert!(decode(&c).is_err());
    }

    #[test]
    fn state_record_round_trips_and_rejects_damage() {
        let s = encode_state(42);
        assert_eq!(decode_state(&s), Ok(42));
        for i in 0..STATE_LEN {
            let mut c = s;
            c[i] ^= 4;
            assert!(decode_state(&c).is_err(), "flip at {i}");
        }
        assert!(decode_state(&s[..10]).is_err());
    }
}

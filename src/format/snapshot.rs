//! The snapshot of one filter: a [`Header`], then `page_count` pages, each a [`PageHeader`] and
//! up to `page_size` bytes of the payload (the filter's 64-bit words, little-endian, block by
//! block). A page whose payload is all zeros is stored as its header alone
//! ([`ZERO_PAGE_MAGIC`]), so the snapshot of a new or sparse filter costs a few bytes per page
//! instead of megabytes of zeros.
//!
//! ```text
//! Header (144 bytes, every integer little-endian)
//! offset size field
//!      0    8 magic        b"BLMSLED\0"
//!      8    4 version      format version (2)
//!     12    4 header_len   size of this header (144)
//!     16    4 filter_kind  1 = blocked Bloom, 512-bit blocks (payload: the bits)
//!                          2 = counting, 512 4-bit counters per block (payload: the counters;
//!                              the bits are derived: bit set ⇔ counter non-zero)
//!     20    4 hash_kind    2 = xxh3-64 with seed, the block layout of `filter::layout`
//!                          (1, the retired distinct-bits layout, is refused)
//!     24    8 seed
//!     32   16 db_id        random id of the database that wrote it (see `persist`)
//!     48   16 tree_id      random id of the tree it was written for
//!     64   16 snapshot_id  random id of this snapshot; the tree's record names the current one
//!     80    8 num_blocks
//!     88    4 num_hashes   k
//!     92    4 page_size    payload bytes per page (last page may be shorter)
//!     96    8 capacity     items the filter is sized for
//!    104    8 items        items inserted
//!    112    8 sequence   the snapshot's sequence (see `persist`)
//!    120    8 payload_len  num_blocks · 64 (kind 1) or num_blocks · 256 (kind 2)
//!    128    4 page_count   ⌈payload_len / page_size⌉
//!    132    4 payload_crc  CRC32 of the whole payload, zero pages included as zeros
//!    136    4 reserved     zero
//!    140    4 header_crc   CRC32 of bytes 0..140
//!
//! PageHeader (16 bytes), then `len` payload bytes (none for a zero page)
//!      0    4 magic        b"BPG\0" (payload follows) or b"BPZ\0" (all zeros, not stored)
//!      4    4 index        page number, from 0
//!      8    4 len          payload bytes in this page
//!     12    4 crc          CRC32 of bytes 0..12 of this page header and of the stored payload
//! ```
//!
//! Parsing checks, in order: length, magic, version, header length, header CRC, kinds and
//! field ranges, total length; then each page's magic, index, length and CRC. A stored page
//! of zeros is refused (a writer elides it), so whatever parses re-encodes to the same bytes.

use std::io::{self, Write};

use zerocopy::little_endian::{U32, U64};
use zerocopy::{FromBytes, Immutable, IntoBytes, KnownLayout, Unaligned};

use super::{
    block_bytes, checksum, DecodeError, HASH_KIND_XXH3_BLOCK, MAGIC, PAGE_MAGIC, VERSION,
    ZERO_PAGE_MAGIC,
};
use crate::filter::layout;

/// Largest `k` a header may carry (the filter's own limit).
const MAX_HASHES: u32 = 32;

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
    /// [`super::FILTER_KIND_BLOCKED`] or [`super::FILTER_KIND_COUNTING`].
    pub filter_kind: U32,
    /// [`HASH_KIND_XXH3_BLOCK`].
    pub hash_kind: U32,
    /// Hash seed.
    pub seed: U64,
    /// Id of the database that wrote the snapshot.
    pub db_id: [u8; 16],
    /// Id of the tree the snapshot was written for.
    pub tree_id: [u8; 16],
    /// Id of this snapshot.
    pub snapshot_id: [u8; 16],
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
    /// Snapshot sequence.
    pub sequence: U64,
    /// Payload bytes.
    pub payload_len: U64,
    /// Number of pages.
    pub page_count: U32,
    /// CRC32 of the payload.
    pub payload_crc: U32,
    /// Zero.
    pub reserved: U32,
    /// CRC32 of every byte before this field.
    pub header_crc: U32,
}

/// Size of [`Header`] on disk.
pub const HEADER_LEN: usize = std::mem::size_of::<Header>();
const HEADER_CRC_OFFSET: usize = std::mem::offset_of!(Header, header_crc);

/// The header of one page of the payload.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, FromBytes, IntoBytes, KnownLayout, Immutable, Unaligned,
)]
#[repr(C)]
pub struct PageHeader {
    /// [`PAGE_MAGIC`] or [`ZERO_PAGE_MAGIC`].
    pub magic: [u8; 4],
    /// Page number, from 0.
    pub index: U32,
    /// Payload bytes of the page (stored, or implied zeros).
    pub len: U32,
    /// CRC32 of the first 12 bytes of this header and of the stored payload.
    pub crc: U32,
}

/// Size of [`PageHeader`] on disk.
pub const PAGE_HEADER_LEN: usize = std::mem::size_of::<PageHeader>();
const PAGE_CRC_OFFSET: usize = std::mem::offset_of!(PageHeader, crc);

/// What a snapshot holds besides the payload.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SnapshotMeta {
    /// [`super::FILTER_KIND_BLOCKED`] or [`super::FILTER_KIND_COUNTING`]: what the words are.
    pub filter_kind: u32,
    /// Hash seed.
    pub seed: u64,
    /// Id of the database.
    pub db_id: [u8; 16],
    /// Id of the tree.
    pub tree_id: [u8; 16],
    /// Id of this snapshot.
    pub snapshot_id: [u8; 16],
    /// Bits set per key.
    pub num_hashes: u32,
    /// Items the filter is sized for.
    pub capacity: u64,
    /// Items inserted.
    pub items: u64,
    /// Snapshot sequence.
    pub sequence: u64,
}

impl SnapshotMeta {
    /// The parameters of `bits` (a filter's bits, or a counting filter's) as a snapshot of
    /// `filter_kind` holding `items`, with no ids and sequence 0 (persistence fills those in).
    pub fn of(bits: &crate::filter::Filter, filter_kind: u32, items: u64) -> SnapshotMeta {
        SnapshotMeta {
            filter_kind,
            seed: bits.seed(),
            db_id: [0; 16],
            tree_id: [0; 16],
            snapshot_id: [0; 16],
            num_hashes: bits.num_hashes(),
            capacity: bits.capacity(),
            items,
            sequence: 0,
        }
    }
}

/// Bytes of zeros, for the CRC of elided pages.
static ZEROS: [u8; 4096] = [0; 4096];

fn update_zeros(h: &mut crc32fast::Hasher, mut len: usize) {
    while len > 0 {
        let n = len.min(ZEROS.len());
        h.update(&ZEROS[..n]);
        len -= n;
    }
}

/// Writes a snapshot of `words` (8 per 512-bit block for the blocked kind, 32 for the
/// counting kind) in pages of `page_size` bytes to `out`, streaming: memory use is one page,
/// whatever the filter's size. The header goes last (`out` is rewound to write it), so the
/// writer needs [`io::Seek`].
///
/// # Panics
/// If `page_size` is not a positive multiple of 8 or the kind is unknown (programming
/// errors, not data errors).
///
/// Long because a third of it is the header's twenty fields in one struct literal, written
/// after the pages whose running CRC and offsets it records.
pub fn encode_to<W: Write + io::Seek>(
    meta: &SnapshotMeta,
    words: &[u64],
    page_size: u32,
    out: &mut W,
) -> io::Result<u64> {
    assert!(
        page_size >= 8 && page_size.is_multiple_of(8),
        "page size must be a positive multiple of 8"
    );
    let block_bytes = block_bytes(meta.filter_kind).expect("a known filter kind");
    let payload_len = words.len() as u64 * 8;
    let words_per_page = (page_size / 8) as usize;
    let page_count = words.len().div_ceil(words_per_page);
    let start = out.stream_position()?;
    out.write_all(&[0u8; HEADER_LEN])?;
    let mut written = HEADER_LEN as u64;
    let mut payload_crc = crc32fast::Hasher::new();
    let mut page_bytes = Vec::with_capacity(page_size as usize);
    for (index, chunk) in words.chunks(words_per_page).enumerate() {
        let zero = chunk.iter().all(|&w| w == 0);
        page_bytes.clear();
        if zero {
            update_zeros(&mut payload_crc, chunk.len() * 8);
        } else {
            layout::encode_words(chunk, &mut page_bytes);
            payload_crc.update(&page_bytes);
        }
        let mut ph = PageHeader {
            magic: if zero { ZERO_PAGE_MAGIC } else { PAGE_MAGIC },
            index: U32::new(index as u32),
            len: U32::new((chunk.len() * 8) as u32),
            crc: U32::new(0),
        };
        ph.crc = U32::new(checksum(&[&ph.as_bytes()[..PAGE_CRC_OFFSET], &page_bytes]));
        out.write_all(ph.as_bytes())?;
        out.write_all(&page_bytes)?;
        written += (PAGE_HEADER_LEN + page_bytes.len()) as u64;
    }
    let mut header = Header {
        magic: MAGIC,
        version: U32::new(VERSION),
        header_len: U32::new(HEADER_LEN as u32),
        filter_kind: U32::new(meta.filter_kind),
        hash_kind: U32::new(HASH_KIND_XXH3_BLOCK),
        seed: U64::new(meta.seed),
        db_id: meta.db_id,
        tree_id: meta.tree_id,
        snapshot_id: meta.snapshot_id,
        num_blocks: U64::new(payload_len / block_bytes),
        num_hashes: U32::new(meta.num_hashes),
        page_size: U32::new(page_size),
        capacity: U64::new(meta.capacity),
        items: U64::new(meta.items),
        sequence: U64::new(meta.sequence),
        payload_len: U64::new(payload_len),
        page_count: U32::new(page_count as u32),
        payload_crc: U32::new(payload_crc.finalize()),
        reserved: U32::new(0),
        header_crc: U32::new(0),
    };
    header.header_crc = U32::new(checksum(&[&header.as_bytes()[..HEADER_CRC_OFFSET]]));
    let end = out.stream_position()?;
    out.seek(io::SeekFrom::Start(start))?;
    out.write_all(header.as_bytes())?;
    out.seek(io::SeekFrom::Start(end))?;
    Ok(written)
}

/// [`encode_to`] into memory.
///
/// ```
/// use bloomsled::format::{self, SnapshotMeta, FILTER_KIND_BLOCKED};
/// let meta = SnapshotMeta {
///     filter_kind: FILTER_KIND_BLOCKED, seed: 1, db_id: [1; 16], tree_id: [2; 16],
///     snapshot_id: [3; 16], num_hashes: 7, capacity: 10, items: 0, sequence: 1,
/// };
/// let bytes = format::encode(&meta, &[0u64; 8], 64);
/// let (header, words) = format::decode(&bytes)?;
/// assert_eq!(header.sequence.get(), 1);
/// assert_eq!(words, vec![0u64; 8]);
/// # Ok::<(), bloomsled::format::DecodeError>(())
/// ```
pub fn encode(meta: &SnapshotMeta, words: &[u64], page_size: u32) -> Vec<u8> {
    let mut cur = io::Cursor::new(Vec::new());
    encode_to(meta, words, page_size, &mut cur).expect("writes to memory do not fail");
    cur.into_inner()
}

/// Parses and verifies the header alone (not the pages).
///
/// Long because it is one check per field, in the order their errors must be reported
/// (magic, version, length, checksum, then each field's range).
pub fn parse_header(bytes: &[u8]) -> Result<Header, DecodeError> {
    if bytes.len() < MAGIC.len() || bytes[..MAGIC.len()] != MAGIC {
        return Err(DecodeError::BadMagic {
            got: bytes[..bytes.len().min(MAGIC.len())].to_vec(),
        });
    }
    // The version is read before the length check: an older, shorter header is reported
    // as the version it is.
    if bytes.len() >= 12 {
        let version = u32::from_le_bytes(bytes[8..12].try_into().expect("4 bytes"));
        if version != VERSION {
            return Err(DecodeError::UnsupportedVersion {
                expected: VERSION,
                got: version,
            });
        }
    }
    let Ok((header, _)) = Header::read_from_prefix(bytes) else {
        return Err(DecodeError::Truncated {
            needed: HEADER_LEN as u64,
            got: bytes.len() as u64,
        });
    };
    let computed = checksum(&[&bytes[..HEADER_CRC_OFFSET]]);
    if computed != header.header_crc.get() {
        return Err(DecodeError::HeaderChecksum {
            expected: header.header_crc.get(),
            got: computed,
        });
    }
    let bad = |what: String| Err(DecodeError::Inconsistent(what));
    if header.header_len.get() as usize != HEADER_LEN {
        return bad(format!("header length {}", header.header_len.get()));
    }
    if header.hash_kind.get() != HASH_KIND_XXH3_BLOCK {
        return Err(DecodeError::HashKind {
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
    if !(1..=MAX_HASHES).contains(&header.num_hashes.get()) {
        return bad(format!("k = {}", header.num_hashes.get()));
    }
    if header.reserved.get() != 0 {
        return bad("reserved field not zero".into());
    }
    Ok(header)
}

/// Largest snapshot size the header allows (every page stored); zero pages make the file
/// shorter.
pub fn expected_len(header: &Header) -> u64 {
    HEADER_LEN as u64
        + u64::from(header.page_count.get()) * PAGE_HEADER_LEN as u64
        + header.payload_len.get()
}

/// Parses one page at the start of `bytes`, which must be page `index` of `len` payload
/// bytes; returns its stored payload (`None` for a zero page) and the rest.
pub fn parse_page(
    bytes: &[u8],
    index: u32,
    len: usize,
) -> Result<(Option<&[u8]>, &[u8]), DecodeError> {
    let Ok((ph, rest)) = PageHeader::ref_from_prefix(bytes) else {
        return Err(DecodeError::Truncated {
            needed: PAGE_HEADER_LEN as u64,
            got: bytes.len() as u64,
        });
    };
    let zero = match ph.magic {
        PAGE_MAGIC => false,
        ZERO_PAGE_MAGIC => true,
        _ => {
            return Err(DecodeError::Inconsistent(format!(
                "page {index}: bad page magic"
            )))
        }
    };
    let stored = if zero { 0 } else { len };
    if rest.len() < stored {
        return Err(DecodeError::Truncated {
            needed: stored as u64,
            got: rest.len() as u64,
        });
    }
    let (payload, rest) = rest.split_at(stored);
    let computed = checksum(&[&ph.as_bytes()[..PAGE_CRC_OFFSET], payload]);
    if computed != ph.crc.get() {
        return Err(DecodeError::PageChecksum {
            page: index,
            expected: ph.crc.get(),
            got: computed,
        });
    }
    if ph.index.get() != index || ph.len.get() as usize != len {
        return Err(DecodeError::Inconsistent(format!(
            "page {index}: header says page {} of {} bytes",
            ph.index.get(),
            ph.len.get()
        )));
    }
    if !zero && payload.iter().all(|&b| b == 0) {
        return Err(DecodeError::Inconsistent(format!(
            "page {index}: a stored page of zeros (writers elide it)"
        )));
    }
    Ok(((!zero).then_some(payload), rest))
}

/// Parses and verifies a whole snapshot; returns the header and the words. The words'
/// memory is reserved fallibly: a header announcing more than can be allocated is an
/// error, not an abort (and never more than the bytes justify: zero pages are 16 bytes
/// for up to `page_size` bytes, so the payload is bounded by `page_size / 16` times the
/// input).
pub fn decode(bytes: &[u8]) -> Result<(Header, Vec<u64>), DecodeError> {
    let header = parse_header(bytes)?;
    let most = expected_len(&header);
    let least = HEADER_LEN as u64 + u64::from(header.page_count.get()) * PAGE_HEADER_LEN as u64;
    if (bytes.len() as u64) < least {
        return Err(DecodeError::Truncated {
            needed: least,
            got: bytes.len() as u64,
        });
    }
    if bytes.len() as u64 > most {
        return Err(DecodeError::Inconsistent(format!(
            "{} bytes after the last page",
            bytes.len() as u64 - most
        )));
    }
    let mut words = Vec::new();
    words
        .try_reserve_exact((header.payload_len.get() / 8) as usize)
        .map_err(|_| DecodeError::TooLarge {
            bytes: header.payload_len.get(),
        })?;
    let mut rest = &bytes[HEADER_LEN..];
    let mut remaining = header.payload_len.get();
    let page_size = u64::from(header.page_size.get());
    let mut payload_crc = crc32fast::Hasher::new();
    for index in 0..header.page_count.get() {
        let len = remaining.min(page_size) as usize;
        let (payload, tail) = parse_page(rest, index, len)?;
        match payload {
            Some(payload) => {
                payload_crc.update(payload);
                words.extend(layout::decode_words(payload));
            }
            None => {
                update_zeros(&mut payload_crc, len);
                words.resize(words.len() + len / 8, 0);
            }
        }
        remaining -= len as u64;
        rest = tail;
    }
    if !rest.is_empty() {
        return Err(DecodeError::Inconsistent(format!(
            "{} bytes after the last page",
            rest.len()
        )));
    }
    let computed = payload_crc.finalize();
    if computed != header.payload_crc.get() {
        return Err(DecodeError::PayloadChecksum {
            expected: header.payload_crc.get(),
            got: computed,
        });
    }
    Ok((header, words))
}

#[cfg(test)]
mod tests;

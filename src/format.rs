//! bloomsled's on-disk bytes: bytes in, bytes out. No sled, no files, so every parser here
//! can be fuzzed alone.
//!
//! - [`snapshot`](self#snapshots): a filter snapshot, a [`Header`] and CRC-checked pages.
//! - [`record`](self#records): the small records bloomsled keeps inside sled (the database id
//!   and one trust record per tree) that decide whether a snapshot may be used.
//! - a standalone [`crate::Filter`]'s bytes ([`crate::Filter::to_bytes`]): a snapshot of one
//!   page, with no ids; the same bytes back its serde implementations.
//!
//! This layer sits above `filter` (it knows the filter's kinds and modes) and below
//! `persist`; nothing in `filter` or `hash` imports it.
//!
//! Every integer is little-endian; every structure starts with a magic and a version and
//! ends with a CRC32 of the bytes before it ([`checksum`]). Parsers check, in order: length,
//! magic, version, CRC, then field ranges; every failure is a [`DecodeError`], never a panic.
//!
//! # Snapshots
//! See [`Header`] for the drawn layout.
//!
//! # Records
//! See [`TreeRecord`], [`DbRecord`] and [`ChainRecord`].

mod filter_bytes;
mod record;
mod snapshot;

pub use crate::error::DecodeError;
use crate::filter::FilterMode;
pub use record::{
    ChainRecord, DbRecord, TreeRecord, CHAIN_RECORD_LEN, CHAIN_RECORD_MAGIC, DB_RECORD_LEN,
    DB_RECORD_MAGIC, FLAG_EMPTY, FLAG_GROWS, RECORD_VERSION, TREE_RECORD_LEN, TREE_RECORD_MAGIC,
};
pub use snapshot::{
    decode, encode, encode_to, expected_len, parse_header, parse_page, Header, PageHeader,
    SnapshotMeta, HEADER_LEN, PAGE_HEADER_LEN,
};

/// First bytes of a snapshot file.
pub const MAGIC: [u8; 8] = *b"BLMSLED\0";
/// The snapshot format version this build writes and reads. Version 1 (before snapshots
/// carried the database, tree and snapshot ids) is refused with
/// [`DecodeError::UnsupportedVersion`]; its trees are rebuilt from their keys.
pub const VERSION: u32 = 2;
/// Filter kind: blocked Bloom filter with 512-bit blocks.
pub const FILTER_KIND_BLOCKED: u32 = 1;
/// Filter kind: counting filter, 512 4-bit counters per block.
pub const FILTER_KIND_COUNTING: u32 = 2;
/// Retired hash kind: xxh3-64 with the stored seed, `k` *distinct* positions from the
/// golden-ratio stream (bloomsled before the branch-free probe). Its bit patterns differ from
/// [`HASH_KIND_XXH3_BLOCK`]'s, so probing such a filter with today's layout could answer
/// "absent" for a stored key: it is refused with [`DecodeError::HashKind`].
pub const HASH_KIND_XXH3_GOLDEN: u32 = 1;
/// Hash kind this build writes and reads: xxh3-64 with the stored seed, block and bits as
/// the filter's block layout (`src/filter/layout.rs`) defines them.
pub const HASH_KIND_XXH3_BLOCK: u32 = 2;
/// Default payload bytes per page: 4 KiB, so that a sparse filter (a new tree that holds a
/// few keys) stores little more than the pages its keys touched.
pub const DEFAULT_PAGE_SIZE: u32 = 4 << 10;
/// First bytes of a page that holds its payload.
pub const PAGE_MAGIC: [u8; 4] = *b"BPG\0";
/// First bytes of a page whose payload is all zeros and is not stored.
pub const ZERO_PAGE_MAGIC: [u8; 4] = *b"BPZ\0";
/// Bytes of one 512-bit block of the blocked kind (the block layout's).
pub const BLOCK_BYTES: u64 = crate::filter::layout::BLOCK_BYTES as u64;

/// The filter kind that stores a filter of `mode`.
pub fn filter_kind(mode: FilterMode) -> u32 {
    match mode {
        FilterMode::Plain => FILTER_KIND_BLOCKED,
        FilterMode::Counting => FILTER_KIND_COUNTING,
    }
}

/// The mode of a filter kind (`None`: unknown kind).
pub fn mode_of_kind(kind: u32) -> Option<FilterMode> {
    match kind {
        FILTER_KIND_BLOCKED => Some(FilterMode::Plain),
        FILTER_KIND_COUNTING => Some(FilterMode::Counting),
        _ => None,
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

/// CRC32 (IEEE, as `crc32fast` computes it) of the concatenation of `parts`: the one
/// checksum of every bloomsled structure.
pub fn checksum(parts: &[&[u8]]) -> u32 {
    let mut h = crc32fast::Hasher::new();
    for p in parts {
        h.update(p);
    }
    h.finalize()
}

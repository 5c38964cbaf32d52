//! Where a block lives in Redis: shard keys, byte and bit offsets, the incarnation tag.
//!
//! A filter of `num_blocks` 512-bit blocks is cut into `shards` Redis strings of
//! `shard_blocks` consecutive blocks each (the last one may be shorter). In its shard, block
//! `j` occupies one *stride* of bytes at `j · stride`: the block's cells, then its tag.
//!
//! | bytes (bits / counting)  | content                                                  |
//! |--------------------------|----------------------------------------------------------|
//! | 0..64 / 0..256           | the block's cells, little-endian words, as the local filter holds them: 512 bits (`Filter`), or 512 4-bit counters (`CountingFilter`) |
//! | 64..72 / 256..264        | the filter's incarnation, big-endian (what `BITFIELD GET i64` reads) |
//!
//! Redis numbers bits from the most significant bit of byte 0 (`SETBIT`/`BITFIELD` offset
//! 0 is `0x80` of byte 0), while the local filter's bit `p` of a block is bit `p % 8` counted
//! from the least significant end of byte `p / 8`. [`redis_bit`] maps one onto the other, so
//! `GETRANGE` returns exactly the local bytes and push/pull are byte copies. Likewise a
//! local counter `p` is the low nibble of byte `p / 2` when `p` is even, the high one when
//! odd, while a Redis `u4` at offset `4·q` is the high nibble of byte `q / 2` when `q` is
//! even: [`redis_counter`] maps one onto the other.
//!
//! Every block carries the incarnation, a random non-zero number chosen when the filter was
//! created, so the one command that reads or writes a block also reads its incarnation: a block
//! that is gone (key missing, zero-filled, recreated by another creator) cannot pass for an
//! empty one.

use crate::error::{Error, Result};
use bloomsled::layout::BLOCK_WORDS;

/// Bytes of filter bits in one block.
pub(crate) const BLOCK_BYTES: usize = BLOCK_WORDS * 8;
/// Bytes of the incarnation tag that follows every block.
pub(crate) const TAG_BYTES: usize = 8;

/// What a block's cells are: a bit per position, or a 4-bit saturating counter per
/// position (the counting variant, whose keys can be removed).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Cells {
    /// 512 bits: 64 bytes per block.
    Bits,
    /// 512 counters of 4 bits: 256 bytes per block.
    Counters,
}

impl Cells {
    /// Bytes of cells in one block.
    #[inline]
    pub(crate) fn payload(self) -> u64 {
        match self {
            Cells::Bits => BLOCK_BYTES as u64,
            Cells::Counters => BLOCK_BYTES as u64 * 4,
        }
    }

    /// Bytes one block occupies in its shard: cells, then tag.
    #[inline]
    pub(crate) fn stride(self) -> u64 {
        self.payload() + TAG_BYTES as u64
    }

    /// Blocks per write or read command when copying whole shards (about 1 MiB).
    pub(crate) fn chunk_blocks(self) -> u64 {
        (1 << 20) / self.stride()
    }
}

/// The largest Redis string (`proto-max-bulk-len` and the string limit): 512 MiB.
pub(crate) const MAX_SHARD_BYTES: u64 = 512 << 20;
/// Default size a shard grows to before the filter gets another shard.
const DEFAULT_SHARD_BYTES: u64 = 64 << 20;
/// A filter is spread over at least this many shards (or one per block if it has fewer
/// blocks), so that it lands on every master of a cluster.
const MIN_SHARDS: u64 = 16;
/// Most shards a filter may have.
pub(crate) const MAX_SHARDS: u64 = 4096;
/// Redis Cluster's slot count.
const SLOTS: u64 = 16384;

/// The placement of a filter's blocks over Redis keys.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Layout {
    /// Filter name (validated: see [`check_name`]).
    pub name: String,
    /// Blocks in the whole filter.
    pub num_blocks: u64,
    /// Blocks per shard (all shards but the last hold exactly this many).
    pub shard_blocks: u64,
    /// Number of shard keys.
    pub shards: u64,
    /// Bits or counters.
    pub cells: Cells,
    /// Key of each shard, computed once.
    keys: Vec<String>,
}

/// Where one block lives: its shard and its position there.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct BlockAddr {
    /// Shard number.
    pub shard: usize,
    /// Byte offset of the block's first byte in the shard string.
    pub byte: u64,
    /// Bytes of cells before the tag ([`Cells::payload`]).
    pub payload: u64,
}

impl BlockAddr {
    /// Redis bit offset of local bit `p` (0..512) of this block: see [`redis_bit`].
    #[inline]
    pub(crate) fn bit(self, p: usize) -> u64 {
        self.byte * 8 + redis_bit(p)
    }

    /// Redis bit offset of the `u4` counter of position `p` (0..512) of this block (counting
    /// filters): see [`redis_counter`].
    #[inline]
    pub(crate) fn counter_bit(self, p: usize) -> u64 {
        self.byte * 8 + redis_counter(p)
    }

    /// Byte offset of the block's incarnation tag.
    #[inline]
    pub(crate) fn tag_byte(self) -> u64 {
        self.byte + self.payload
    }

    /// Redis bit offset of the block's incarnation tag.
    #[inline]
    pub(crate) fn tag_bit(self) -> u64 {
        self.tag_byte() * 8
    }

    /// Last byte (inclusive) of the block and its tag, for `GETRANGE`.
    #[inline]
    pub(crate) fn last_byte(self) -> u64 {
        self.tag_byte() + TAG_BYTES as u64 - 1
    }
}

/// Redis bit offset, within a block, of the local filter's bit `p`: the byte stays
/// (`p / 8`, little-endian words), the bit within the byte is counted from the other end.
#[inline]
pub(crate) fn redis_bit(p: usize) -> u64 {
    ((p & !7) | (7 - (p & 7))) as u64
}

/// Redis bit offset, within a counting block, of the `u4` holding local counter `p`: the
/// byte stays (`p / 2`), the nibble within it swaps (local even = low nibble, Redis even =
/// high nibble).
#[inline]
pub(crate) fn redis_counter(p: usize) -> u64 {
    4 * (p ^ 1) as u64
}

/// Local counter `p` of a counting block's cell bytes.
#[inline]
pub(crate) fn counter_at(cells: &[u8], p: usize) -> u8 {
    (cells[p / 2] >> (4 * (p & 1))) & 0xf
}

/// A name may be used inside a Redis hash tag: non-empty, at most 200 bytes, no braces
/// (they would end the tag early and pile every shard onto one slot), no whitespace or
/// control characters (the CLI and the config record print it).
pub(crate) fn check_name(name: &str) -> Result<()> {
    if name.is_empty() || name.len() > 200 {
        return Err(Error::config(format!(
            "a shared filter name must be 1 to 200 bytes, got {} bytes",
            name.len()
        )));
    }
    if let Some(c) = name
        .chars()
        .find(|c| matches!(c, '{' | '}') || c.is_whitespace() || c.is_control())
    {
        return Err(Error::config(format!(
            "a shared filter name may not contain {c:?} (braces, whitespace and control \
             characters are reserved): {name:?}"
        )));
    }
    Ok(())
}

/// The key of a filter's config record.
pub(crate) fn config_key(name: &str) -> String {
    format!("bloomsled:{{{name}}}:config")
}

/// The default shard count for `num_blocks` blocks of `cells`.
pub(crate) fn default_shards(num_blocks: u64, cells: Cells) -> u64 {
    let bytes = num_blocks.saturating_mul(cells.stride());
    bytes
        .div_ceil(DEFAULT_SHARD_BYTES)
        .max(MIN_SHARDS.min(num_blocks))
        .clamp(1, MAX_SHARDS)
}

impl Layout {
    /// The layout of `num_blocks` blocks over (about) `shards` keys; the count is lowered if
    /// some shard would be empty. Errors if a shard would exceed Redis's 512 MiB string limit.
    pub(crate) fn new(name: &str, num_blocks: u64, shards: u64, cells: Cells) -> Result<Layout> {
        check_name(name)?;
        if num_blocks == 0 {
            return Err(Error::config("a shared filter needs at least one block"));
        }
        if shards == 0 || shards > MAX_SHARDS {
            return Err(Error::config(format!(
                "shards must be between 1 and {MAX_SHARDS}, got {shards}"
            )));
        }
        let shard_blocks = num_blocks.div_ceil(shards.min(num_blocks));
        let shards = num_blocks.div_ceil(shard_blocks);
        if shard_blocks * cells.stride() > MAX_SHARD_BYTES {
            return Err(Error::config(format!(
                "{shards} shards of {shard_blocks} blocks would be {} bytes each, over Redis's \
                 {MAX_SHARD_BYTES}-byte string limit; use more shards",
                shard_blocks * cells.stride()
            )));
        }
        let keys = (0..shards).map(|i| shard_key(name, i, shards)).collect();
        Ok(Layout {
            name: name.to_owned(),
            num_blocks,
            shard_blocks,
            shards,
            cells,
            keys,
        })
    }

    /// Where global block `b` (as `filter::layout::block_index` picks it) lives.
    #[inline]
    pub(crate) fn addr(&self, b: u64) -> BlockAddr {
        BlockAddr {
            shard: (b / self.shard_blocks) as usize,
            byte: (b % self.shard_blocks) * self.stride(),
            payload: self.cells.payload(),
        }
    }

    /// Bytes per block in a shard, tag included.
    #[inline]
    pub(crate) fn stride(&self) -> u64 {
        self.cells.stride()
    }

    /// Where block `j` of shard `s` lives.
    pub(crate) fn addr_in(&self, shard: usize, j: u64) -> BlockAddr {
        BlockAddr {
            shard,
            byte: j * self.stride(),
            payload: self.cells.payload(),
        }
    }

    /// The Redis key of shard `i`.
    #[inline]
    pub(crate) fn key(&self, shard: usize) -> &str {
        &self.keys[shard]
    }

    /// The Redis keys of every shard, in order.
    pub(crate) fn shard_keys(&self) -> Vec<String> {
        self.keys.to_vec()
    }

    /// The Redis key of shard `i`'s fence (in the shard's slot): the token of the newest
    /// creator that wrote the shard, so that an older one, stalled past its lease, can no
    /// longer write into it (see `init::block_writes`).
    pub(crate) fn fence_key(&self, shard: usize) -> String {
        format!("{}:fence", self.key(shard))
    }

    /// The Redis keys of every shard's fence, in order.
    pub(crate) fn fence_keys(&self) -> Vec<String> {
        (0..self.keys.len()).map(|s| self.fence_key(s)).collect()
    }

    /// The `DEL`s that delete the filter: its config record first (so no new handle opens
    /// a half-deleted filter; handles still open find their blocks gone), then its shards
    /// and their fences.
    pub(crate) fn delete_cmds(&self) -> Vec<redis::Cmd> {
        std::iter::once(config_key(&self.name))
            .chain(self.shard_keys())
            .chain(self.fence_keys())
            .map(|k| redis::cmd("DEL").arg(k).clone())
            .collect()
    }

    /// Blocks held by shard `i`.
    pub(crate) fn blocks_in(&self, shard: usize) -> u64 {
        let start = shard as u64 * self.shard_blocks;
        self.shard_blocks.min(self.num_blocks - start)
    }

    /// Length in bytes of shard `i`'s string.
    pub(crate) fn shard_len(&self, shard: usize) -> u64 {
        self.blocks_in(shard) * self.stride()
    }

    /// First global block of shard `i`.
    pub(crate) fn first_block(&self, shard: usize) -> u64 {
        shard as u64 * self.shard_blocks
    }
}

/// Key of shard `i` of `shards`: `bloomsled:{NAME:i:SALT}`, where SALT is the smallest
/// number that puts the key's cluster slot in the `i`-th of `shards` equal slot ranges. A
/// cluster assigns slots to masters in ranges, so the shards spread evenly over every master
/// instead of wherever their names happen to hash. Deterministic: every client derives the
/// same names from the config record.
fn shard_key(name: &str, i: u64, shards: u64) -> String {
    let slots = SLOTS.min(shards);
    let range = i * slots / shards; // several shards share a range past 16384
    let lo = range * SLOTS / slots;
    let hi = (range + 1) * SLOTS / slots;
    let mut salt = 0u64;
    loop {
        let tag = format!("{name}:{i}:{salt}");
        let slot = key_slot(tag.as_bytes());
        // Expected `slots` tries; the cap only guards against an impossible loop.
        if (lo..hi).contains(&slot) || salt > 1_000_000 {
            return format!("bloomsled:{{{tag}}}");
        }
        salt += 1;
    }
}

/// Redis Cluster's slot of a hash tag's content: CRC16-XMODEM mod 16384.
pub(crate) fn key_slot(tag: &[u8]) -> u64 {
    u64::from(crc16::State::<crc16::XMODEM>::calculate(tag)) % SLOTS
}

#[cfg(test)]
mod tests {
    use super::*;
    use bloomsled::layout::block_masks;

    #[test]
    fn redis_bit_numbering_matches_local_little_endian_bytes() {
        // Setting Redis bit `redis_bit(p)` in a byte string must set local bit p of the
        // block read back as little-endian words.
        for p in 0..512 {
            let mut bytes = [0u8; BLOCK_BYTES];
            let r = redis_bit(p) as usize;
            bytes[r / 8] |= 0x80 >> (r % 8); // Redis: offset 0 is the MSB of byte 0
            let word = u64::from_le_bytes(bytes[p / 64 * 8..p / 64 * 8 + 8].try_into().unwrap());
            assert_eq!(word, 1u64 << (p % 64), "bit {p}");
        }
        let masks = block_masks(12345, 7);
        assert_eq!(masks.iter().map(|m| m.count_ones()).sum::<u32>(), 7);
    }

    #[test]
    fn redis_counter_numbering_matches_local_counter_words() {
        // A Redis `u4` at `redis_counter(p)` must be local counter p of the block read back
        // as little-endian words (counter j in bits 4·(j % 16) of word j / 16).
        for p in 0..512 {
            let mut bytes = [0u8; BLOCK_BYTES * 4];
            let r = redis_counter(p) as usize;
            assert_eq!(r % 4, 0);
            // Redis: the u4 at bit offset r is bits r..r+4 counted from each byte's MSB.
            bytes[r / 8] |= if r.is_multiple_of(8) { 0x90 } else { 0x09 }; // the value 9
            let word = u64::from_le_bytes(bytes[p / 16 * 8..p / 16 * 8 + 8].try_into().unwrap());
            assert_eq!(word, 9u64 << (4 * (p % 16)), "counter {p}");
            assert_eq!(counter_at(&bytes, p), 9);
        }
        let a = Layout::new("c", 10, 2, Cells::Counters).unwrap().addr(7);
        assert_eq!((a.shard, a.byte, a.payload), (1, 2 * 264, 256));
        assert_eq!((a.tag_byte(), a.last_byte()), (2 * 264 + 256, 3 * 264 - 1));
    }

    #[test]
    fn slot_matches_redis_reference_values() {
        // From the Redis Cluster specification: CRC16 of "123456789" is 0x31C3, below 16384,
        // so the slot is the CRC itself.
        assert_eq!(key_slot(b"123456789"), 0x31C3);
        // `CLUSTER KEYSLOT foo` = 12182, `bar` = 5061 (redis-cli on a real cluster).
        assert_eq!(key_slot(b"foo"), 12182);
        assert_eq!(key_slot(b"bar"), 5061);
    }

    #[test]
    fn shards_cover_every_block_once_and_spread_over_slot_ranges() {
        let l = Layout::new("urls", 1000, 16, Cells::Bits).unwrap();
        assert_eq!(l.shards, 16);
        assert_eq!((0..16).map(|s| l.blocks_in(s)).sum::<u64>(), 1000);
        for b in 0..1000 {
            let a = l.addr(b);
            assert_eq!(l.first_block(a.shard) + a.byte / l.stride(), b);
            assert!(a.byte + l.stride() <= l.shard_len(a.shard));
        }
        for s in 0..16 {
            let key = l.key(s);
            let tag = &key[key.find('{').unwrap() + 1..key.find('}').unwrap()];
            let slot = key_slot(tag.as_bytes());
            assert!(
                (s as u64 * 1024..(s as u64 + 1) * 1024).contains(&slot),
                "{key}"
            );
        }
        // Fewer blocks than shards: one block each, no empty shard.
        let small = Layout::new("x", 3, 16, Cells::Bits).unwrap();
        assert_eq!((small.shards, small.shard_blocks), (3, 1));
        // An uneven split never leaves an empty last shard.
        let odd = Layout::new("x", 10, 4, Cells::Bits).unwrap();
        assert_eq!((odd.shards, odd.shard_blocks), (4, 3));
        assert_eq!(odd.blocks_in(3), 1);
        let odd = Layout::new("x", 10, 6, Cells::Counters).unwrap();
        assert!(odd.blocks_in(odd.shards as usize - 1) > 0);
    }

    #[test]
    fn a_filter_over_512_mib_is_split_under_the_string_limit() {
        // 10 billion bits = 19.5M blocks = 1.4 GB with tags.
        let blocks = 10_000_000_000u64.div_ceil(512);
        for cells in [Cells::Bits, Cells::Counters] {
            let shards = default_shards(blocks, cells);
            let l = Layout::new("big", blocks, shards, cells).unwrap();
            assert!(l.shard_blocks * l.stride() <= MAX_SHARD_BYTES);
            assert!(l.shards * l.shard_blocks >= blocks);
            assert!(Layout::new("big", blocks, 2, cells).is_err());
        }
        // Counters take four times the bytes: more shards by default.
        assert!(default_shards(blocks, Cells::Counters) > default_shards(blocks, Cells::Bits));
    }

    #[test]
    fn names_that_would_break_hash_tags_are_refused() {
        for bad in ["", "a{b", "a}b", "a b", "a\nb", &"x".repeat(201)] {
            assert!(matches!(check_name(bad), Err(Error::InvalidConfig { .. })));
        }
        check_name("crawler:urls/v2").unwrap();
        assert_eq!(config_key("n"), "bloomsled:{n}:config");
    }
}

//! The crash journal's bytes: `<db>/bloomsled/<tree id>.<generation>.jnl`, the key hashes a
//! tree was written with in one generation (see [`crate::persist`], "Crash journal").
//! Bytes in, bytes out: the live mapping that appends to it is [`super::journal_map`].
//!
//! | offset | size | field                                                        |
//! |-------:|-----:|--------------------------------------------------------------|
//! |      0 |    8 | magic `BLMSJRNL`                                             |
//! |      8 |    4 | version (1)                                                  |
//! |     12 |    4 | zero                                                         |
//! |     16 |   16 | database id                                                  |
//! |     32 |   16 | tree id                                                      |
//! |     48 |   16 | snapshot id of this generation's snapshot                    |
//! |     64 |   16 | base: the snapshot id the tree's record named at creation    |
//! |     80 |   16 | boot id of the boot that wrote it                            |
//! |     96 |    8 | generation                                                   |
//! |    104 |    8 | hash seed of the hashes                                      |
//! |    112 |    8 | capacity (records)                                           |
//! |    120 |    4 | CRC32 of bytes 0..120                                        |
//! |    124 |    4 | zero                                                         |
//! |    128 |    8 | reserved: slots handed out to writers (may pass capacity)    |
//! |    136 |    8 | finished: records writers completed                          |
//! |    144 |    8 | `NOSPACE!` once the file system had no room to grow it       |
//! |    256 | 16·n | records                                                      |
//!
//! A record is two little-endian words: the key's hash, then a check word
//! `MARK << 40 | op << 32 | crc32(slot, generation, hash, op)`. A writer stores the hash,
//! then the check word, then counts the record finished. A check word of zero is a slot
//! never written (a writer killed before it got there); [`MARK`] has three non-zero bytes, so
//! a zero-filled region never decodes as a record and no flipped byte makes a written
//! check word zero.

use zerocopy::little_endian::{U32, U64};
use zerocopy::{FromBytes, FromZeros, Immutable, IntoBytes, KnownLayout, Unaligned};

use crate::error::JournalFault;
use crate::format::checksum;

/// First bytes of a journal.
pub(crate) const MAGIC: [u8; 8] = *b"BLMSJRNL";
/// The journal version this build writes and reads.
pub(crate) const VERSION: u32 = 1;
/// Offset of the `reserved` counter.
pub(crate) const RESERVED_OFFSET: usize = 128;
/// Offset of the `finished` counter.
pub(crate) const FINISHED_OFFSET: usize = 136;
/// Offset of the no-space word: [`NO_SPACE`] once the file system had no room to grow the
/// journal (the reserved counter is then also past the capacity, so a reader that does not
/// know this word sees the journal overflowed).
pub(crate) const NO_SPACE_OFFSET: usize = 144;
/// The no-space word's value.
pub(crate) const NO_SPACE: u64 = u64::from_le_bytes(*b"NOSPACE!");
/// Offset of the first record.
pub(crate) const RECORDS_OFFSET: usize = 256;
/// Bytes per record.
pub(crate) const RECORD_LEN: usize = 16;
/// The check word's marker (bits 40..64).
pub(crate) const MARK: u64 = 0xB1_0E_5D;

/// A key counted in (before its sled write).
pub(crate) const OP_INSERT: u8 = 1;
/// A key counted out (after its sled write; counting mode only).
pub(crate) const OP_REMOVE: u8 = 2;

/// The fixed part of a journal's header.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, FromBytes, IntoBytes, KnownLayout, Immutable, Unaligned,
)]
#[repr(C)]
pub(crate) struct JournalHeader {
    pub(crate) magic: [u8; 8],
    pub(crate) version: U32,
    pub(crate) zero: U32,
    pub(crate) db_id: [u8; 16],
    pub(crate) tree_id: [u8; 16],
    pub(crate) snapshot_id: [u8; 16],
    pub(crate) base_id: [u8; 16],
    pub(crate) boot_id: [u8; 16],
    pub(crate) generation: U64,
    pub(crate) seed: U64,
    pub(crate) capacity: U64,
    pub(crate) crc: U32,
    pub(crate) zero2: U32,
}

const HEADER_LEN: usize = std::mem::size_of::<JournalHeader>();
const _: () = assert!(HEADER_LEN == 128 && std::mem::offset_of!(JournalHeader, crc) == 120);

impl JournalHeader {
    /// A header with magic, version and CRC filled in.
    pub(crate) fn sealed(mut self) -> Self {
        self.magic = MAGIC;
        self.version = U32::new(VERSION);
        self.crc = U32::new(checksum(&[&self.as_bytes()[..120]]));
        self
    }

    /// A zeroed header to fill in.
    pub(crate) fn blank() -> Self {
        JournalHeader::new_zeroed()
    }
}

/// The file length of a journal of `capacity` records.
pub(crate) fn file_len(capacity: u64) -> u64 {
    RECORDS_OFFSET as u64 + capacity * RECORD_LEN as u64
}

/// The check word of a record.
#[inline]
pub(crate) fn check_word(slot: u64, generation: u64, hash: u64, op: u8) -> u64 {
    let crc = checksum(&[
        &slot.to_le_bytes(),
        &generation.to_le_bytes(),
        &hash.to_le_bytes(),
        &[op],
    ]);
    MARK << 40 | u64::from(op) << 32 | u64::from(crc)
}

/// A journal as read back: its header, and its records or why they cannot be used.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Decoded {
    pub(crate) header: JournalHeader,
    pub(crate) records: Result<Vec<(u8, u64)>, JournalFault>,
}

fn damaged(generation: u64, what: impl Into<String>) -> JournalFault {
    JournalFault::Damaged {
        generation,
        what: what.into(),
    }
}

/// Decodes the journal read for `generation`: its header (magic, version, CRC, length)
/// or the fault, then its records (overflow, a damaged record, erased records) into
/// [`Decoded::records`], judged only once the header's identity is (by `judge_journals`).
pub(crate) fn decode(bytes: &[u8], generation: u64) -> Result<Decoded, JournalFault> {
    let (header, _) = JournalHeader::read_from_prefix(bytes)
        .map_err(|_| damaged(generation, "shorter than its header"))?;
    if header.magic != MAGIC {
        return Err(damaged(generation, "bad magic"));
    }
    if header.version.get() != VERSION {
        return Err(damaged(generation, format!("version {}", header.version)));
    }
    if checksum(&[&bytes[..120]]) != header.crc.get() {
        return Err(damaged(generation, "header checksum"));
    }
    let capacity = header.capacity.get();
    let expected = capacity
        .checked_mul(RECORD_LEN as u64)
        .and_then(|b| b.checked_add(RECORDS_OFFSET as u64))
        .ok_or_else(|| damaged(generation, "capacity"))?;
    if bytes.len() as u64 != expected {
        return Err(JournalFault::Truncated {
            generation,
            expected,
            got: bytes.len() as u64,
        });
    }
    let records = records(bytes, &header);
    Ok(Decoded { header, records })
}

fn word(bytes: &[u8], at: usize) -> u64 {
    u64::from_le_bytes(bytes[at..at + 8].try_into().expect("8 bytes"))
}

/// The intact records of a journal whose header and length were checked. Every slot is
/// read: a written slot past the `reserved` counter, or fewer intact records than writers
/// finished, means records were erased or the counters damaged.
fn records(bytes: &[u8], h: &JournalHeader) -> Result<Vec<(u8, u64)>, JournalFault> {
    let generation = h.generation.get();
    let capacity = h.capacity.get();
    let reserved = word(bytes, RESERVED_OFFSET);
    let finished = word(bytes, FINISHED_OFFSET);
    if reserved > capacity {
        if word(bytes, NO_SPACE_OFFSET) == NO_SPACE {
            return Err(JournalFault::NoSpace { generation });
        }
        return Err(JournalFault::Overflowed { generation });
    }
    if finished > reserved {
        return Err(damaged(generation, "more records finished than reserved"));
    }
    let mut out = Vec::with_capacity(finished as usize);
    for slot in 0..capacity {
        let at = RECORDS_OFFSET + slot as usize * RECORD_LEN;
        let (hash, check) = (word(bytes, at), word(bytes, at + 8));
        if check == 0 {
            continue; // never written: a writer killed before its record (or no writer)
        }
        let op = (check >> 32) as u8;
        if slot >= reserved || check != check_word(slot, generation, hash, op) {
            return Err(damaged(generation, format!("record {slot}")));
        }
        if op != OP_INSERT && op != OP_REMOVE {
            return Err(damaged(generation, format!("record {slot}: op {op}")));
        }
        out.push((op, hash));
    }
    if (out.len() as u64) < finished {
        return Err(JournalFault::RecordsLost {
            generation,
            finished,
            found: out.len() as u64,
        });
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn journal(records: &[(u8, u64)], capacity: u64) -> Vec<u8> {
        let mut h = JournalHeader::blank();
        h.generation = U64::new(3);
        h.capacity = U64::new(capacity);
        let mut bytes = vec![0u8; file_len(capacity) as usize];
        bytes[..HEADER_LEN].copy_from_slice(h.sealed().as_bytes());
        for (i, &(op, hash)) in records.iter().enumerate() {
            let at = RECORDS_OFFSET + i * RECORD_LEN;
            bytes[at..at + 8].copy_from_slice(&hash.to_le_bytes());
            let check = check_word(i as u64, 3, hash, op);
            bytes[at + 8..at + 16].copy_from_slice(&check.to_le_bytes());
        }
        let n = records.len() as u64;
        bytes[RESERVED_OFFSET..RESERVED_OFFSET + 8].copy_from_slice(&n.to_le_bytes());
        bytes[FINISHED_OFFSET..FINISHED_OFFSET + 8].copy_from_slice(&n.to_le_bytes());
        bytes
    }

    const RECS: [(u8, u64); 3] = [(OP_INSERT, 0), (OP_INSERT, 42), (OP_REMOVE, 42)];

    #[test]
    fn records_round_trip_and_unwritten_slots_are_skipped() {
        let mut bytes = journal(&RECS, 8);
        assert_eq!(decode(&bytes, 3).unwrap().records, Ok(RECS.to_vec()));
        // A writer that reserved slot 3 and died before writing it: skipped.
        bytes[RESERVED_OFFSET] = 4;
        assert_eq!(decode(&bytes, 3).unwrap().records, Ok(RECS.to_vec()));
        // One that wrote its hash but not its check word: skipped too.
        let at = RECORDS_OFFSET + 3 * RECORD_LEN;
        bytes[at] = 9;
        assert_eq!(decode(&bytes, 3).unwrap().records, Ok(RECS.to_vec()));
    }

    #[test]
    fn a_journal_out_of_room_says_so_and_reads_as_overflowed_without_the_word() {
        let mut bytes = journal(&RECS, 8);
        // What a writer that found no room did: the reserved count past the capacity...
        bytes[RESERVED_OFFSET..RESERVED_OFFSET + 8].copy_from_slice(&(3u64 + 9).to_le_bytes());
        assert_eq!(
            decode(&bytes, 3).unwrap().records,
            Err(JournalFault::Overflowed { generation: 3 })
        );
        // ...and the no-space word.
        bytes[NO_SPACE_OFFSET..NO_SPACE_OFFSET + 8].copy_from_slice(&NO_SPACE.to_le_bytes());
        assert_eq!(
            decode(&bytes, 3).unwrap().records,
            Err(JournalFault::NoSpace { generation: 3 })
        );
        assert_eq!(&NO_SPACE.to_le_bytes(), b"NOSPACE!", "as the file shows it");
    }

    #[test]
    fn a_zero_filled_file_body_holds_no_record() {
        assert_eq!(journal(&[], 4).len(), 256 + 64);
        assert_eq!(decode(&journal(&[], 4), 3).unwrap().records, Ok(vec![]));
        assert_eq!(check_word(0, 0, 0, 0) >> 40, MARK);
    }

    #[test]
    fn every_flipped_byte_is_caught_or_harmless() {
        let good = journal(&RECS, 4);
        for i in 0..good.len() {
            for bit in [0x01u8, 0x80] {
                let mut bytes = good.clone();
                bytes[i] ^= bit;
                match decode(&bytes, 3) {
                    Err(_) => {}
                    Ok(d) => match d.records {
                        Err(_) => {}
                        // Only the padding, the counters' spare room or a never
                        // written slot's hash may change without an error.
                        Ok(r) => assert_eq!(r, RECS.to_vec(), "byte {i} bit {bit}"),
                    },
                }
            }
        }
    }

    #[test]
    fn each_fault_has_its_reason() {
        let good = journal(&RECS, 4);
        assert!(matches!(
            decode(&good[..good.len() - 1], 3),
            Err(JournalFault::Truncated { .. })
        ));
        assert!(matches!(
            decode(&good[..100], 3),
            Err(JournalFault::Damaged { .. })
        ));
        let mut bytes = good.clone();
        bytes[RESERVED_OFFSET] = 5;
        assert_eq!(
            decode(&bytes, 3).unwrap().records,
            Err(JournalFault::Overflowed { generation: 3 })
        );
        // A written record zeroed: fewer intact records than finished.
        let mut bytes = good.clone();
        let at = RECORDS_OFFSET + RECORD_LEN;
        bytes[at..at + 16].fill(0);
        assert_eq!(
            decode(&bytes, 3).unwrap().records,
            Err(JournalFault::RecordsLost {
                generation: 3,
                finished: 3,
                found: 2
            })
        );
        let mut bytes = good;
        bytes[0] = b'X';
        assert!(matches!(
            decode(&bytes, 3),
            Err(JournalFault::Damaged { .. })
        ));
    }
}

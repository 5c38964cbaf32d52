//! The crash journal's bytes: `<db>/bloomsled/<tree id>.<sequence>.jnl`, the key hashes a
//! tree was written with in one sequence, and its **counter file**, kept outside the
//! database folder (see [`crate::persist`], "Crash journal"). Bytes in, bytes out: the live
//! mappings that append to them are [`super::journal_map`].
//!
//! The journal:
//!
//! | offset | size | field                                                        |
//! |-------:|-----:|--------------------------------------------------------------|
//! |      0 |    8 | magic `BLMSJRNL`                                             |
//! |      8 |    4 | version (2)                                                  |
//! |     12 |    4 | zero                                                         |
//! |     16 |   16 | database id                                                  |
//! |     32 |   16 | tree id                                                      |
//! |     48 |   16 | snapshot id of this sequence's snapshot                    |
//! |     64 |   16 | base: the snapshot id the tree's record named at creation    |
//! |     80 |   16 | boot id of the boot that wrote it                            |
//! |     96 |   16 | nonce: random, made for this file when it was created        |
//! |    112 |    8 | sequence                                                   |
//! |    120 |    8 | hash seed of the hashes                                      |
//! |    128 |    8 | capacity (records)                                           |
//! |    136 |    4 | CRC32 of bytes 0..136                                        |
//! |    140 |    4 | zero                                                         |
//! |    256 | 16·n | records                                                      |
//!
//! The counter file `bloomsled-<database id>-<tree id>-<sequence>.jctr` (in the counter
//! folder, `/dev/shm` by default: not in the database folder, cleared by a reboot):
//!
//! | offset | size | field                                                        |
//! |-------:|-----:|--------------------------------------------------------------|
//! |      0 |    8 | magic `BLMSJCTR`                                             |
//! |      8 |    4 | version (1)                                                  |
//! |     12 |    4 | zero                                                         |
//! |     16 |   16 | database id                                                  |
//! |     32 |   16 | tree id                                                      |
//! |     48 |   16 | nonce of the journal it counts for                           |
//! |     64 |    8 | sequence                                                   |
//! |     72 |    4 | CRC32 of bytes 0..72                                         |
//! |     76 |    4 | zero                                                         |
//! |     80 |    8 | reserved: slots handed out to writers (may pass capacity)    |
//! |     88 |    8 | finished: records writers completed                          |
//! |     96 |    8 | `NOSPACE!` once the file system had no room to grow it       |
//!
//! A record is two little-endian words: the key's hash, then a check word
//! `MARK << 40 | op << 32 | crc32(slot, sequence, hash, op)`. A writer takes a slot from
//! the counter file, stores the hash, then the check word, then counts the record finished
//! in the counter file. A check word of zero is a slot never written (a writer killed
//! before it got there); [`MARK`] has three non-zero bytes, so a zero-filled region never
//! decodes as a record and no flipped byte makes a written check word zero. An earlier
//! copy of the journal holds fewer records than the counter file says were finished, and
//! one of another incarnation carries another nonce: both are refused.

use zerocopy::little_endian::{U32, U64};
use zerocopy::{FromBytes, FromZeros, Immutable, IntoBytes, KnownLayout, Unaligned};

use crate::error::JournalFault;
use crate::format::checksum;

/// First bytes of a journal.
pub(crate) const MAGIC: [u8; 8] = *b"BLMSJRNL";
/// The journal version this build writes and reads (1 kept its counters in the journal).
pub(crate) const VERSION: u32 = 2;
/// First bytes of a counter file.
pub(crate) const COUNTERS_MAGIC: [u8; 8] = *b"BLMSJCTR";
/// The counter file version this build writes and reads.
pub(crate) const COUNTERS_VERSION: u32 = 1;
/// Offset of the `reserved` counter in the counter file.
pub(crate) const RESERVED_OFFSET: usize = 80;
/// Offset of the `finished` counter in the counter file.
pub(crate) const FINISHED_OFFSET: usize = 88;
/// Offset of the no-space word in the counter file: [`NO_SPACE`] once the file system had
/// no room to grow the journal (the reserved counter is then also past the capacity).
pub(crate) const NO_SPACE_OFFSET: usize = 96;
/// Bytes of a counter file.
pub(crate) const COUNTERS_LEN: usize = 104;
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
    pub(crate) nonce: [u8; 16],
    pub(crate) sequence: U64,
    pub(crate) seed: U64,
    pub(crate) capacity: U64,
    pub(crate) crc: U32,
    pub(crate) zero2: U32,
}

const HEADER_LEN: usize = std::mem::size_of::<JournalHeader>();
const CRC_AT: usize = std::mem::offset_of!(JournalHeader, crc);
const _: () = assert!(HEADER_LEN == 144 && CRC_AT == 136 && HEADER_LEN <= RECORDS_OFFSET);

/// The fixed part of a counter file (the counters follow it).
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, FromBytes, IntoBytes, KnownLayout, Immutable, Unaligned,
)]
#[repr(C)]
pub(crate) struct CountersHeader {
    pub(crate) magic: [u8; 8],
    pub(crate) version: U32,
    pub(crate) zero: U32,
    pub(crate) db_id: [u8; 16],
    pub(crate) tree_id: [u8; 16],
    pub(crate) nonce: [u8; 16],
    pub(crate) sequence: U64,
    pub(crate) crc: U32,
    pub(crate) zero2: U32,
}

const COUNTERS_CRC_AT: usize = std::mem::offset_of!(CountersHeader, crc);
const _: () = assert!(
    std::mem::size_of::<CountersHeader>() == RESERVED_OFFSET
        && COUNTERS_CRC_AT == 72
        && NO_SPACE_OFFSET + 8 == COUNTERS_LEN
);

impl JournalHeader {
    /// A header with magic, version and CRC filled in.
    pub(crate) fn sealed(mut self) -> Self {
        self.magic = MAGIC;
        self.version = U32::new(VERSION);
        self.crc = U32::new(checksum(&[&self.as_bytes()[..CRC_AT]]));
        self
    }

    /// The bytes of a new counter file for this journal (counters at zero).
    #[cfg_attr(not(target_os = "linux"), allow(dead_code))] // journals are Linux only
    pub(crate) fn counters(&self) -> Vec<u8> {
        let mut c = CountersHeader::new_zeroed();
        c.magic = COUNTERS_MAGIC;
        c.version = U32::new(COUNTERS_VERSION);
        c.db_id = self.db_id;
        c.tree_id = self.tree_id;
        c.nonce = self.nonce;
        c.sequence = self.sequence;
        c.crc = U32::new(checksum(&[&c.as_bytes()[..COUNTERS_CRC_AT]]));
        let mut bytes = vec![0u8; COUNTERS_LEN];
        bytes[..RESERVED_OFFSET].copy_from_slice(c.as_bytes());
        bytes
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
pub(crate) fn check_word(slot: u64, sequence: u64, hash: u64, op: u8) -> u64 {
    let crc = checksum(&[
        &slot.to_le_bytes(),
        &sequence.to_le_bytes(),
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

fn damaged(sequence: u64, what: impl Into<String>) -> JournalFault {
    JournalFault::Damaged {
        sequence,
        what: what.into(),
    }
}

/// Decodes the journal read for `sequence`: its header (magic, version, CRC, length)
/// or the fault, then, against its counter file (`counters`: its bytes, or why there are
/// none), its records (the counter file's own header, its nonce, overflow, a damaged
/// record, erased records) into [`Decoded::records`], judged only once the header's
/// identity is (by `judge_journals`).
pub(crate) fn decode(
    bytes: &[u8],
    file_len: u64,
    counters: Result<&[u8], JournalFault>,
    sequence: u64,
) -> Result<Decoded, JournalFault> {
    let (header, _) = JournalHeader::read_from_prefix(bytes)
        .map_err(|_| damaged(sequence, "shorter than its header"))?;
    if header.magic != MAGIC {
        return Err(damaged(sequence, "bad magic"));
    }
    if header.version.get() != VERSION {
        return Err(damaged(sequence, format!("version {}", header.version)));
    }
    if checksum(&[&bytes[..CRC_AT]]) != header.crc.get() {
        return Err(damaged(sequence, "header checksum"));
    }
    let capacity = header.capacity.get();
    let expected = capacity
        .checked_mul(RECORD_LEN as u64)
        .and_then(|b| b.checked_add(RECORDS_OFFSET as u64))
        .ok_or_else(|| damaged(sequence, "capacity"))?;
    if file_len != expected || bytes.len() as u64 > file_len {
        return Err(JournalFault::Truncated {
            sequence,
            expected,
            got: file_len,
        });
    }
    let records =
        counters
            .and_then(|c| counted(c, &header))
            .and_then(|(reserved, finished, no_space)| {
                records(bytes, &header, reserved, finished, no_space)
            });
    Ok(Decoded { header, records })
}

/// The counters `(reserved, finished, no-space word)` of a counter file that belongs to
/// the journal of `h`: its own header whole, for this database, tree and sequence, and
/// with the journal's nonce (else an earlier incarnation of the journal, from a copy).
fn counted(c: &[u8], h: &JournalHeader) -> Result<(u64, u64, u64), JournalFault> {
    let sequence = h.sequence.get();
    if c.len() != COUNTERS_LEN {
        return Err(damaged(
            sequence,
            format!("counter file of {} bytes", c.len()),
        ));
    }
    let (ch, _) = CountersHeader::read_from_prefix(c)
        .map_err(|_| damaged(sequence, "counter file header"))?;
    if ch.magic != COUNTERS_MAGIC
        || ch.version.get() != COUNTERS_VERSION
        || checksum(&[&c[..COUNTERS_CRC_AT]]) != ch.crc.get()
    {
        return Err(damaged(sequence, "counter file header"));
    }
    if ch.db_id != h.db_id || ch.tree_id != h.tree_id || ch.sequence != h.sequence {
        return Err(damaged(sequence, "counter file of another journal"));
    }
    if ch.nonce != h.nonce {
        return Err(JournalFault::OtherIncarnation { sequence });
    }
    Ok((
        word(c, RESERVED_OFFSET),
        word(c, FINISHED_OFFSET),
        word(c, NO_SPACE_OFFSET),
    ))
}

fn word(bytes: &[u8], at: usize) -> u64 {
    u64::from_le_bytes(bytes[at..at + 8].try_into().expect("8 bytes"))
}

/// The intact records of a journal whose header and length were checked, with its
/// counters. Every slot is read (those past `bytes`, a hole of the file, are zeros: never
/// written): a written slot past the `reserved` counter, or fewer intact records than
/// writers finished, means records were erased (an earlier copy of the journal) or the
/// counters damaged.
fn records(
    bytes: &[u8],
    h: &JournalHeader,
    reserved: u64,
    finished: u64,
    no_space: u64,
) -> Result<Vec<(u8, u64)>, JournalFault> {
    let sequence = h.sequence.get();
    let capacity = h.capacity.get();
    if reserved > capacity {
        if no_space == NO_SPACE {
            return Err(JournalFault::NoSpace { sequence });
        }
        return Err(JournalFault::Overflowed { sequence });
    }
    if finished > reserved {
        return Err(damaged(sequence, "more records finished than reserved"));
    }
    let mut out = Vec::with_capacity(finished as usize);
    let held = (bytes.len().saturating_sub(RECORDS_OFFSET) / RECORD_LEN) as u64;
    for slot in 0..capacity.min(held) {
        let at = RECORDS_OFFSET + slot as usize * RECORD_LEN;
        let (hash, check) = (word(bytes, at), word(bytes, at + 8));
        if check == 0 {
            continue; // never written: a writer killed before its record (or no writer)
        }
        let op = (check >> 32) as u8;
        if slot >= reserved || check != check_word(slot, sequence, hash, op) {
            return Err(damaged(sequence, format!("record {slot}")));
        }
        if op != OP_INSERT && op != OP_REMOVE {
            return Err(damaged(sequence, format!("record {slot}: op {op}")));
        }
        out.push((op, hash));
    }
    if (out.len() as u64) < finished {
        return Err(JournalFault::RecordsLost {
            sequence,
            finished,
            found: out.len() as u64,
        });
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A journal of `records` and its counter file.
    fn journal(records: &[(u8, u64)], capacity: u64) -> (Vec<u8>, Vec<u8>) {
        let mut h = JournalHeader::blank();
        h.sequence = U64::new(3);
        h.capacity = U64::new(capacity);
        h.nonce = [7; 16];
        let h = h.sealed();
        let mut bytes = vec![0u8; file_len(capacity) as usize];
        bytes[..HEADER_LEN].copy_from_slice(h.as_bytes());
        for (i, &(op, hash)) in records.iter().enumerate() {
            let at = RECORDS_OFFSET + i * RECORD_LEN;
            bytes[at..at + 8].copy_from_slice(&hash.to_le_bytes());
            let check = check_word(i as u64, 3, hash, op);
            bytes[at + 8..at + 16].copy_from_slice(&check.to_le_bytes());
        }
        let mut c = h.counters();
        let n = records.len() as u64;
        c[RESERVED_OFFSET..RESERVED_OFFSET + 8].copy_from_slice(&n.to_le_bytes());
        c[FINISHED_OFFSET..FINISHED_OFFSET + 8].copy_from_slice(&n.to_le_bytes());
        (bytes, c)
    }

    fn records_of(j: &(Vec<u8>, Vec<u8>)) -> Result<Vec<(u8, u64)>, JournalFault> {
        decode(&j.0, j.0.len() as u64, Ok(&j.1), 3).unwrap().records
    }

    const RECS: [(u8, u64); 3] = [(OP_INSERT, 0), (OP_INSERT, 42), (OP_REMOVE, 42)];

    #[test]
    fn records_round_trip_and_unwritten_slots_are_skipped() {
        let mut j = journal(&RECS, 8);
        assert_eq!(records_of(&j), Ok(RECS.to_vec()));
        // A writer that reserved slot 3 and died before writing it: skipped.
        j.1[RESERVED_OFFSET] = 4;
        assert_eq!(records_of(&j), Ok(RECS.to_vec()));
        // One that wrote its hash but not its check word: skipped too.
        let at = RECORDS_OFFSET + 3 * RECORD_LEN;
        j.0[at] = 9;
        assert_eq!(records_of(&j), Ok(RECS.to_vec()));
    }

    #[test]
    fn an_earlier_copy_or_another_incarnation_of_the_journal_is_refused() {
        let now = journal(&RECS, 8);
        // The same journal copied when it held one record: fewer than finished.
        let earlier = journal(&RECS[..1], 8);
        assert_eq!(
            decode(&earlier.0, earlier.0.len() as u64, Ok(&now.1), 3)
                .unwrap()
                .records,
            Err(JournalFault::RecordsLost {
                sequence: 3,
                finished: 3,
                found: 1
            })
        );
        // A journal of the same tree and sequence made by another process (another
        // nonce), even with as many records.
        let mut h = JournalHeader::read_from_prefix(&now.0).unwrap().0;
        h.nonce = [8; 16];
        let mut other = now.0.clone();
        other[..HEADER_LEN].copy_from_slice(h.sealed().as_bytes());
        assert_eq!(
            decode(&other, other.len() as u64, Ok(&now.1), 3)
                .unwrap()
                .records,
            Err(JournalFault::OtherIncarnation { sequence: 3 })
        );
        // No counter file (a reboot cleared it, or it was deleted): refused as the reader
        // says (`CountersMissing`).
        let missing = JournalFault::CountersMissing { sequence: 3 };
        assert_eq!(
            decode(&now.0, now.0.len() as u64, Err(missing.clone()), 3)
                .unwrap()
                .records,
            Err(missing)
        );
    }

    #[test]
    fn a_journal_out_of_room_says_so_and_reads_as_overflowed_without_the_word() {
        let mut j = journal(&RECS, 8);
        // What a writer that found no room did: the reserved count past the capacity...
        j.1[RESERVED_OFFSET..RESERVED_OFFSET + 8].copy_from_slice(&(3u64 + 9).to_le_bytes());
        assert_eq!(
            records_of(&j),
            Err(JournalFault::Overflowed { sequence: 3 })
        );
        // ...and the no-space word.
        j.1[NO_SPACE_OFFSET..NO_SPACE_OFFSET + 8].copy_from_slice(&NO_SPACE.to_le_bytes());
        assert_eq!(records_of(&j), Err(JournalFault::NoSpace { sequence: 3 }));
        assert_eq!(&NO_SPACE.to_le_bytes(), b"NOSPACE!", "as the file shows it");
    }

    #[test]
    fn a_zero_filled_file_body_holds_no_record() {
        assert_eq!(journal(&[], 4).0.len(), 256 + 64);
        assert_eq!(records_of(&journal(&[], 4)), Ok(vec![]));
        assert_eq!(check_word(0, 0, 0, 0) >> 40, MARK);
    }

    #[test]
    fn every_flipped_byte_is_caught_or_harmless() {
        let good = journal(&RECS, 4);
        for in_counters in [false, true] {
            let len = if in_counters {
                good.1.len()
            } else {
                good.0.len()
            };
            for i in 0..len {
                for bit in [0x01u8, 0x80] {
                    let mut j = good.clone();
                    if in_counters {
                        j.1[i] ^= bit;
                    } else {
                        j.0[i] ^= bit;
                    }
                    match decode(&j.0, j.0.len() as u64, Ok(&j.1), 3) {
                        Err(_) => {}
                        Ok(d) => match d.records {
                            Err(_) => {}
                            // Only the padding, the counters' spare room (a reserved count
                            // or no-space word raised within the capacity) or a never
                            // written slot's hash may change without an error.
                            Ok(r) => assert_eq!(r, RECS.to_vec(), "{in_counters} {i} {bit}"),
                        },
                    }
                }
            }
        }
    }

    #[test]
    fn each_fault_has_its_reason() {
        let (good, c) = journal(&RECS, 4);
        let run = |bytes: &[u8]| decode(bytes, bytes.len() as u64, Ok(&c), 3);
        assert!(matches!(
            run(&good[..good.len() - 1]),
            Err(JournalFault::Truncated { .. })
        ));
        assert!(matches!(
            run(&good[..100]),
            Err(JournalFault::Damaged { .. })
        ));
        let mut c2 = c.clone();
        c2[RESERVED_OFFSET] = 5;
        assert_eq!(
            decode(&good, good.len() as u64, Ok(&c2), 3)
                .unwrap()
                .records,
            Err(JournalFault::Overflowed { sequence: 3 })
        );
        // A written record zeroed: fewer intact records than finished.
        let mut bytes = good.clone();
        let at = RECORDS_OFFSET + RECORD_LEN;
        bytes[at..at + 16].fill(0);
        assert_eq!(
            run(&bytes).unwrap().records,
            Err(JournalFault::RecordsLost {
                sequence: 3,
                finished: 3,
                found: 2
            })
        );
        // A counter file cut short, or of another sequence.
        assert!(matches!(
            decode(&good, good.len() as u64, Ok(&c[..50]), 3)
                .unwrap()
                .records,
            Err(JournalFault::Damaged { .. })
        ));
        let mut bytes = good;
        bytes[0] = b'X';
        assert!(matches!(run(&bytes), Err(JournalFault::Damaged { .. })));
    }
}

//! The records bloomsled keeps inside sled, beside the data they vouch for: one [`DbRecord`]
//! per database and one [`TreeRecord`] per filtered tree. They are what a snapshot file is
//! judged against (see `persist`), so they are small, checksummed and versioned like the
//! snapshot itself.
//!
//! ```text
//! DbRecord (36 bytes)
//! offset size field
//!      0    8 magic        b"BLMSDBID"
//!      8    4 version      1
//!     12    4 reserved     zero
//!     16   16 db_id        random, chosen when the database first met bloomsled
//!     32    4 crc          CRC32 of bytes 0..32
//!
//! TreeRecord (104 bytes)
//!      0    8 magic        b"BLMSTREE"
//!      8    4 version      1
//!     12    4 filter_kind  1 = plain, 2 = counting
//!     16   16 tree_id      random, chosen when the tree's filter was first created
//!     32   16 snapshot_id  id of the current snapshot (zeros with FLAG_EMPTY)
//!     48    8 snapshot_sequence  sequence of the current snapshot
//!     56    8 dirty_sequence     highest sequence the tree was written after
//!     64    8 capacity     items new and rebuilt filters are sized for
//!     72    8 sizing       f64 bits: target false-positive rate or bits per key
//!     80    4 sizing_kind  1 = false-positive rate, 2 = bits per key
//!     84    4 num_hashes   k, or 0 for the optimum of the sizing
//!     88    8 seed         hash seed
//!     96    4 flags        bit 0 (FLAG_EMPTY): the current snapshot is the empty filter of
//!                          this sizing, and has no file; bit 1 (FLAG_GROWS): no setting
//!                          sized the tree: its filter starts at `capacity` and grows
//!    100    4 crc          CRC32 of bytes 0..100
//!
//! ChainRecord (96 bytes): a store's record of one tree's chain of crash journals
//!      0    8 magic        b"BLMSJCHN"
//!      8    4 version      1
//!     12    4 flags        bit 0 (FLAG_EMPTY): the journals extend the empty filter of
//!                          `seed` (no snapshot: base id zeros, base sequence 0)
//!     16   16 database     the database id every journal of the chain carries
//!     32   16 tree         the tree's id
//!     48   16 base         the id of the stored snapshot the journals extend
//!     64    8 base_sequence  that snapshot's sequence
//!     72    8 seed         the hashes' seed (the filter's)
//!     80    8 last         the chain's journals are 1..=last
//!     88    4 reserved     zero
//!     92    4 crc          CRC32 of bytes 0..92
//! ```

use zerocopy::little_endian::{U32, U64};
use zerocopy::{FromBytes, Immutable, IntoBytes, KnownLayout, Unaligned};

use super::{block_bytes, checksum, DecodeError};

/// First bytes of a [`DbRecord`].
pub const DB_RECORD_MAGIC: [u8; 8] = *b"BLMSDBID";
/// First bytes of a [`TreeRecord`].
pub const TREE_RECORD_MAGIC: [u8; 8] = *b"BLMSTREE";
/// First bytes of a [`ChainRecord`].
pub const CHAIN_RECORD_MAGIC: [u8; 8] = *b"BLMSJCHN";
/// The record version this build writes and reads.
pub const RECORD_VERSION: u32 = 1;
/// [`TreeRecord::flags`]: the current snapshot is the empty filter, with no file.
pub const FLAG_EMPTY: u32 = 1;
/// [`TreeRecord::flags`]: no setting sized the tree; its filters start at the record's
/// capacity and grow with its keys (a record without it keeps its capacity as a size).
pub const FLAG_GROWS: u32 = 2;

/// The database's identity.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, FromBytes, IntoBytes, KnownLayout, Immutable, Unaligned,
)]
#[repr(C)]
pub struct DbRecord {
    /// [`DB_RECORD_MAGIC`].
    pub magic: [u8; 8],
    /// [`RECORD_VERSION`].
    pub version: U32,
    /// Zero.
    pub reserved: U32,
    /// The database id.
    pub db_id: [u8; 16],
    /// CRC32 of the bytes before it.
    pub crc: U32,
}

/// Size of [`DbRecord`].
pub const DB_RECORD_LEN: usize = std::mem::size_of::<DbRecord>();

/// One tree's trust record: which snapshot is current, and whether the tree was written
/// after it; plus the sizing its filters are rebuilt with.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, FromBytes, IntoBytes, KnownLayout, Immutable, Unaligned,
)]
#[repr(C)]
pub struct TreeRecord {
    /// [`TREE_RECORD_MAGIC`].
    pub magic: [u8; 8],
    /// [`RECORD_VERSION`].
    pub version: U32,
    /// Filter kind (plain or counting).
    pub filter_kind: U32,
    /// The tree's id.
    pub tree_id: [u8; 16],
    /// The current snapshot's id.
    pub snapshot_id: [u8; 16],
    /// The current snapshot's sequence.
    pub snapshot_sequence: U64,
    /// Highest sequence the tree was written after.
    pub dirty_sequence: U64,
    /// Capacity of new and rebuilt filters.
    pub capacity: U64,
    /// `f64` bits of the rate or bits per key.
    pub sizing: U64,
    /// 1: rate, 2: bits per key.
    pub sizing_kind: U32,
    /// k, or 0 for the sizing's optimum.
    pub num_hashes: U32,
    /// Hash seed.
    pub seed: U64,
    /// [`FLAG_EMPTY`] or 0.
    pub flags: U32,
    /// CRC32 of the bytes before it.
    pub crc: U32,
}

/// Size of [`TreeRecord`].
pub const TREE_RECORD_LEN: usize = std::mem::size_of::<TreeRecord>();

/// A store's record of one tree's chain of crash journals: journals `1..=last`, each
/// bound to `database`, `tree`, `base` and `seed`, extend the stored snapshot `base` (of
/// sequence `base_sequence`), or with [`FLAG_EMPTY`] the empty filter of `seed`.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, FromBytes, IntoBytes, KnownLayout, Immutable, Unaligned,
)]
#[repr(C)]
pub struct ChainRecord {
    /// [`CHAIN_RECORD_MAGIC`].
    pub magic: [u8; 8],
    /// [`RECORD_VERSION`].
    pub version: U32,
    /// [`FLAG_EMPTY`] or 0.
    pub flags: U32,
    /// The database id the chain's journals carry.
    pub database: [u8; 16],
    /// The tree's id.
    pub tree: [u8; 16],
    /// The id of the stored snapshot the journals extend (zeros with [`FLAG_EMPTY`]).
    pub base: [u8; 16],
    /// That snapshot's sequence (0 with [`FLAG_EMPTY`]).
    pub base_sequence: U64,
    /// The hashes' seed.
    pub seed: U64,
    /// The chain's last journal.
    pub last: U64,
    /// Zero.
    pub reserved: U32,
    /// CRC32 of the bytes before it.
    pub crc: U32,
}

/// Size of [`ChainRecord`].
pub const CHAIN_RECORD_LEN: usize = std::mem::size_of::<ChainRecord>();

impl ChainRecord {
    /// Sets the magic, version and checksum after the fields, and returns the bytes.
    pub fn encode(&mut self) -> [u8; CHAIN_RECORD_LEN] {
        self.magic = CHAIN_RECORD_MAGIC;
        self.version = U32::new(RECORD_VERSION);
        self.crc = U32::new(checksum(&[&self.as_bytes()[..CHAIN_RECORD_LEN - 4]]));
        let mut out = [0u8; CHAIN_RECORD_LEN];
        out.copy_from_slice(self.as_bytes());
        out
    }

    /// Parses and checks a record: an empty chain names no snapshot.
    pub fn decode(bytes: &[u8]) -> Result<Self, DecodeError> {
        check_frame(bytes, &CHAIN_RECORD_MAGIC, CHAIN_RECORD_LEN)?;
        let r = ChainRecord::read_from_bytes(bytes).expect("length checked");
        let bad = |what: &str| Err(DecodeError::Inconsistent(what.into()));
        if r.reserved.get() != 0 {
            return bad("reserved field not zero");
        }
        match r.flags.get() {
            0 => Ok(r),
            FLAG_EMPTY if r.base == [0; 16] && r.base_sequence.get() == 0 => Ok(r),
            FLAG_EMPTY => bad("an empty chain names a snapshot"),
            f => Err(DecodeError::Inconsistent(format!("unknown flags {f:#x}"))),
        }
    }
}

fn check_frame(bytes: &[u8], magic: &[u8; 8], len: usize) -> Result<(), DecodeError> {
    if bytes.len() < magic.len() || &bytes[..magic.len()] != magic {
        return Err(DecodeError::BadMagic {
            got: bytes[..bytes.len().min(magic.len())].to_vec(),
        });
    }
    if bytes.len() >= 12 {
        let version = u32::from_le_bytes(bytes[8..12].try_into().expect("4 bytes"));
        if version != RECORD_VERSION {
            return Err(DecodeError::UnsupportedVersion {
                expected: RECORD_VERSION,
                got: version,
            });
        }
    }
    if bytes.len() != len {
        return Err(DecodeError::Truncated {
            needed: len as u64,
            got: bytes.len() as u64,
        });
    }
    let computed = checksum(&[&bytes[..len - 4]]);
    let stored = u32::from_le_bytes(bytes[len - 4..].try_into().expect("4 bytes"));
    if computed != stored {
        return Err(DecodeError::HeaderChecksum {
            expected: stored,
            got: computed,
        });
    }
    Ok(())
}

impl DbRecord {
    /// A record for `db_id`.
    pub fn new(db_id: [u8; 16]) -> Self {
        let mut r = DbRecord {
            magic: DB_RECORD_MAGIC,
            version: U32::new(RECORD_VERSION),
            reserved: U32::new(0),
            db_id,
            crc: U32::new(0),
        };
        r.crc = U32::new(checksum(&[&r.as_bytes()[..DB_RECORD_LEN - 4]]));
        r
    }

    /// Parses and checks a record.
    pub fn decode(bytes: &[u8]) -> Result<Self, DecodeError> {
        check_frame(bytes, &DB_RECORD_MAGIC, DB_RECORD_LEN)?;
        let r = DbRecord::read_from_bytes(bytes).expect("length checked");
        if r.reserved.get() != 0 {
            return Err(DecodeError::Inconsistent("reserved field not zero".into()));
        }
        Ok(r)
    }
}

impl TreeRecord {
    /// Recomputes the checksum after fields changed and returns the bytes.
    pub fn encode(&mut self) -> [u8; TREE_RECORD_LEN] {
        self.magic = TREE_RECORD_MAGIC;
        self.version = U32::new(RECORD_VERSION);
        self.crc = U32::new(checksum(&[&self.as_bytes()[..TREE_RECORD_LEN - 4]]));
        let mut out = [0u8; TREE_RECORD_LEN];
        out.copy_from_slice(self.as_bytes());
        out
    }

    /// Parses and checks a record.
    pub fn decode(bytes: &[u8]) -> Result<Self, DecodeError> {
        check_frame(bytes, &TREE_RECORD_MAGIC, TREE_RECORD_LEN)?;
        let r = TreeRecord::read_from_bytes(bytes).expect("length checked");
        let bad = |what: String| Err(DecodeError::Inconsistent(what));
        if block_bytes(r.filter_kind.get()).is_none() {
            return bad(format!("unknown filter kind {}", r.filter_kind.get()));
        }
        if !(1..=2).contains(&r.sizing_kind.get()) {
            return bad(format!("unknown sizing kind {}", r.sizing_kind.get()));
        }
        if r.flags.get() & !(FLAG_EMPTY | FLAG_GROWS) != 0 {
            return bad(format!("unknown flags {:#x}", r.flags.get()));
        }
        Ok(r)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use zerocopy::FromZeros;

    fn sample() -> TreeRecord {
        let mut r = TreeRecord::new_zeroed();
        r.filter_kind = U32::new(1);
        r.tree_id = [7; 16];
        r.snapshot_sequence = U64::new(3);
        r.sizing = U64::new(0.01f64.to_bits());
        r.sizing_kind = U32::new(1);
        r.capacity = U64::new(1000);
        r
    }

    #[test]
    fn layout_matches_the_documented_offsets() {
        assert_eq!(DB_RECORD_LEN, 36);
        assert_eq!(TREE_RECORD_LEN, 104);
        assert_eq!(std::mem::offset_of!(TreeRecord, snapshot_id), 32);
        assert_eq!(std::mem::offset_of!(TreeRecord, dirty_sequence), 56);
        assert_eq!(std::mem::offset_of!(TreeRecord, flags), 96);
        assert_eq!(std::mem::offset_of!(DbRecord, db_id), 16);
        assert_eq!(CHAIN_RECORD_LEN, 96);
        assert_eq!(std::mem::offset_of!(ChainRecord, base), 48);
        assert_eq!(std::mem::offset_of!(ChainRecord, last), 80);
    }

    #[test]
    fn records_round_trip_and_reject_every_bit_flip() {
        let bytes = sample().encode();
        assert_eq!(TreeRecord::decode(&bytes).unwrap().tree_id, [7; 16]);
        for i in 0..bytes.len() * 8 {
            let mut c = bytes;
            c[i / 8] ^= 1 << (i % 8);
            assert!(TreeRecord::decode(&c).is_err(), "flip {i} accepted");
        }
        for len in 0..bytes.len() {
            assert!(TreeRecord::decode(&bytes[..len]).is_err());
        }
        let db = DbRecord::new([9; 16]);
        let bytes = db.as_bytes().to_vec();
        assert_eq!(DbRecord::decode(&bytes).unwrap().db_id, [9; 16]);
        for i in 0..bytes.len() * 8 {
            let mut c = bytes.clone();
            c[i / 8] ^= 1 << (i % 8);
            assert!(DbRecord::decode(&c).is_err(), "flip {i} accepted");
        }
        let mut chain = ChainRecord::new_zeroed();
        chain.database = [1; 16];
        chain.tree = [2; 16];
        chain.base = [3; 16];
        chain.base_sequence = U64::new(4);
        chain.seed = U64::new(5);
        chain.last = U64::new(6);
        let bytes = chain.encode();
        assert_eq!(ChainRecord::decode(&bytes).unwrap(), chain);
        for i in 0..bytes.len() * 8 {
            let mut c = bytes;
            c[i / 8] ^= 1 << (i % 8);
            assert!(ChainRecord::decode(&c).is_err(), "flip {i} accepted");
        }
        // An empty chain names no snapshot, even under a valid checksum.
        chain.flags = U32::new(FLAG_EMPTY);
        assert!(ChainRecord::decode(&chain.encode()).is_err());
        chain.base = [0; 16];
        chain.base_sequence = U64::new(0);
        assert_eq!(ChainRecord::decode(&chain.encode()).unwrap(), chain);
        // One record kind is never read as the other.
        assert!(ChainRecord::decode(db.as_bytes()).is_err());
        assert!(DbRecord::decode(&chain.encode()).is_err());
        assert!(matches!(
            TreeRecord::decode(db.as_bytes()),
            Err(DecodeError::BadMagic { .. })
        ));
    }
}

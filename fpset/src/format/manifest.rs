//! The manifest (`MANIFEST`): which runs and which log make up the set, and whether its
//! saved filter is current. Replaced atomically (see `dir.rs`), never edited in place.
//!
//! A clean manifest (written by a clean close) also records the log's exact length, so
//! that a log cut after the close reads as damage instead of a torn tail.
//!
//! ## Layout
//! ```text
//! offset size field
//!      0    8 magic "BLSFMAN\0"
//!      8    4 version (1)
//!     12    4 fingerprint width in bytes
//!     16    8 set id (random, chosen at creation)
//!     24    4 flags (bit 0: clean, the saved filter covers every member;
//!                bit 1: the log's length is recorded after the runs, only with bit 0)
//!     28    8 expected items of the filter
//!     36    8 false-positive rate of the filter (f64 bits)
//!     44    8 generation of the live write-ahead log
//!     52    8 next run sequence number
//!     60    8 saved filter file length (meaningful when clean)
//!     68    4 saved filter file CRC32 (meaningful when clean)
//!     72    4 number of runs r
//!     76 16·r runs, oldest first: sequence number (8), members (8)
//!  76+16r   8 only if flags bit 1: bytes of the live log at the clean close
//!   end−4   4 CRC32 of every byte before
//! ```
//!
//! ## Compatibility
//! Flags bit 1 and its length field were added within version 1. A manifest without them
//! is byte for byte what builds before them wrote, and reads as "length unknown"
//! ([`Manifest::clean_wal_len`] `None`): a short log is then a torn tail, as it always was.
//! Only clean manifests carry the field, and an open rewrites the manifest without it
//! before it changes anything, so only a set closed cleanly by this build is refused by an
//! older one (as damaged: its length check fails), and nothing is deleted.

use bloomsled::DecodeError;

use super::{
    check_crc, check_head, check_width, checksum, Fields, FPSET_VERSION, MANIFEST_FIXED_LEN,
    MANIFEST_MAGIC, MAX_RUN_ITEMS, WAL_HEADER_LEN,
};

/// Flags bit 0: the manifest is clean.
const FLAG_CLEAN: u32 = 1;
/// Flags bit 1: the log's length at the clean close follows the runs.
const FLAG_WAL_LEN: u32 = 2;
/// Bytes of one run's entry.
const RUN_ENTRY_LEN: usize = 16;
/// Bytes of the log's length field.
const WAL_LEN_LEN: usize = 8;

/// One live run as the manifest lists it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RunEntry {
    /// Its sequence number (its file is `run-<seq>.fps`).
    pub seq: u64,
    /// Its members.
    pub count: u64,
}

/// The manifest: which files make up the set, and whether its saved filter is current.
#[derive(Debug, Clone, PartialEq)]
pub struct Manifest {
    /// Fingerprint width in bytes.
    pub width: usize,
    /// The set's random id, carried by each of its files.
    pub set_id: u64,
    /// The saved filter covers every member (set by a clean close, cleared at open).
    pub clean: bool,
    /// Expected items of the filter.
    pub expected_items: u64,
    /// False-positive rate of the filter.
    pub fpr: f64,
    /// Generation of the live write-ahead log.
    pub wal_gen: u64,
    /// Sequence number of the next run written.
    pub next_seq: u64,
    /// Length of the saved filter file.
    pub filter_len: u64,
    /// CRC32 of the saved filter file.
    pub filter_crc: u32,
    /// The live runs, oldest first.
    pub runs: Vec<RunEntry>,
    /// Bytes of the live log (header and records) when a clean close wrote this manifest:
    /// every byte was synced before the manifest, and an open clears it (with `clean`)
    /// before any append, so a log of another length is damage. `None` when not clean, or
    /// in a manifest written before the length was recorded (see the module docs); only a
    /// clean manifest may carry it.
    pub clean_wal_len: Option<u64>,
}

impl Manifest {
    /// The manifest's bytes.
    pub fn encode(&self) -> Vec<u8> {
        let mut b = Vec::with_capacity(
            MANIFEST_FIXED_LEN + RUN_ENTRY_LEN * self.runs.len() + WAL_LEN_LEN + 4,
        );
        let mut flags = 0;
        if self.clean {
            flags |= FLAG_CLEAN;
        }
        if self.clean_wal_len.is_some() {
            flags |= FLAG_WAL_LEN;
        }
        b.extend_from_slice(&MANIFEST_MAGIC);
        b.extend_from_slice(&FPSET_VERSION.to_le_bytes());
        b.extend_from_slice(&(self.width as u32).to_le_bytes());
        b.extend_from_slice(&self.set_id.to_le_bytes());
        b.extend_from_slice(&flags.to_le_bytes());
        b.extend_from_slice(&self.expected_items.to_le_bytes());
        b.extend_from_slice(&self.fpr.to_bits().to_le_bytes());
        b.extend_from_slice(&self.wal_gen.to_le_bytes());
        b.extend_from_slice(&self.next_seq.to_le_bytes());
        b.extend_from_slice(&self.filter_len.to_le_bytes());
        b.extend_from_slice(&self.filter_crc.to_le_bytes());
        b.extend_from_slice(&(self.runs.len() as u32).to_le_bytes());
        for r in &self.runs {
            b.extend_from_slice(&r.seq.to_le_bytes());
            b.extend_from_slice(&r.count.to_le_bytes());
        }
        if let Some(len) = self.clean_wal_len {
            b.extend_from_slice(&len.to_le_bytes());
        }
        let crc = checksum(&[&b]);
        b.extend_from_slice(&crc.to_le_bytes());
        b
    }

    /// Parses [`Manifest::encode`]'s bytes, and those of builds before the log's length
    /// was recorded (see the module docs).
    ///
    /// Long because every field of the format is checked where it is read.
    pub fn decode(bytes: &[u8]) -> Result<Manifest, DecodeError> {
        check_head(bytes, MANIFEST_FIXED_LEN + 4, &MANIFEST_MAGIC)?;
        let f = Fields(bytes);
        // Read before the CRC is checked only to find where the CRC is: a damaged flags
        // word or run count gives a wrong length, or a CRC that does not match.
        let flags = f.u32(24);
        let nruns = f.u32(72) as usize;
        let runs_end = MANIFEST_FIXED_LEN + RUN_ENTRY_LEN * nruns;
        let has_wal_len = flags & FLAG_WAL_LEN != 0;
        let len = runs_end + if has_wal_len { WAL_LEN_LEN } else { 0 } + 4;
        if bytes.len() != len {
            return Err(DecodeError::Truncated {
                needed: len as u64,
                got: bytes.len() as u64,
            });
        }
        check_crc(bytes, len, &[])?;
        if flags & !(FLAG_CLEAN | FLAG_WAL_LEN) != 0 || flags == FLAG_WAL_LEN {
            return Err(DecodeError::Inconsistent(format!(
                "manifest flags {flags:#x}"
            )));
        }
        let fpr = f64::from_bits(f.u64(36));
        let runs = (0..nruns)
            .map(|i| RunEntry {
                seq: f.u64(MANIFEST_FIXED_LEN + RUN_ENTRY_LEN * i),
                count: f.u64(MANIFEST_FIXED_LEN + RUN_ENTRY_LEN * i + 8),
            })
            .collect::<Vec<_>>();
        let m = Manifest {
            width: check_width(f.u32(12))?,
            set_id: f.u64(16),
            clean: flags & FLAG_CLEAN != 0,
            expected_items: f.u64(28),
            fpr,
            wal_gen: f.u64(44),
            next_seq: f.u64(52),
            filter_len: f.u64(60),
            filter_crc: f.u32(68),
            runs,
            clean_wal_len: has_wal_len.then(|| f.u64(runs_end)),
        };
        if m.expected_items == 0 || !(m.fpr > 0.0 && m.fpr < 1.0) {
            return Err(DecodeError::Inconsistent(format!(
                "filter sizing {} items at rate {}",
                m.expected_items, m.fpr
            )));
        }
        if m.runs
            .iter()
            .any(|r| r.seq >= m.next_seq || r.count == 0 || r.count > MAX_RUN_ITEMS)
        {
            return Err(DecodeError::Inconsistent("run numbers out of range".into()));
        }
        if let Some(wal_len) = m.clean_wal_len {
            let records = wal_len.checked_sub(WAL_HEADER_LEN as u64);
            if records.is_none_or(|r| r % super::wal_record_len(m.width) as u64 != 0) {
                return Err(DecodeError::Inconsistent(format!(
                    "log length {wal_len} is not a header and whole records of {} bytes",
                    m.width
                )));
            }
        }
        Ok(m)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A clean manifest with the log's length (5 records of 20-byte fingerprints).
    fn manifest() -> Manifest {
        Manifest {
            width: 20,
            set_id: 7,
            clean: true,
            expected_items: 1000,
            fpr: 0.01,
            wal_gen: 3,
            next_seq: 9,
            filter_len: 100,
            filter_crc: 5,
            runs: vec![
                RunEntry { seq: 4, count: 10 },
                RunEntry { seq: 8, count: 2 },
            ],
            clean_wal_len: Some(36 + 24 * 5),
        }
    }

    /// Every shape a manifest takes: clean with the log's length (this build's clean
    /// close), clean without it (an older build's), not clean (every open), no run.
    fn shapes() -> Vec<Manifest> {
        let with_len = manifest();
        let old_clean = Manifest {
            clean_wal_len: None,
            ..manifest()
        };
        let open = Manifest {
            clean: false,
            clean_wal_len: None,
            ..manifest()
        };
        let no_run = Manifest {
            runs: Vec::new(),
            ..manifest()
        };
        vec![with_len, old_clean, open, no_run]
    }

    #[test]
    fn manifest_round_trips_and_rejects_every_truncation_and_flip() {
        for m in shapes() {
            let b = m.encode();
            assert_eq!(Manifest::decode(&b).unwrap(), m);
            for len in 0..b.len() {
                assert!(
                    Manifest::decode(&b[..len]).is_err(),
                    "{m:?} truncated at {len}"
                );
            }
            let mut longer = b.clone();
            longer.extend_from_slice(&[0; 8]);
            assert!(
                Manifest::decode(&longer).is_err(),
                "{m:?} with 8 more bytes"
            );
            for i in 0..b.len() {
                for bit in 0..8 {
                    let mut c = b.clone();
                    c[i] ^= 1 << bit;
                    assert!(
                        Manifest::decode(&c).is_err(),
                        "{m:?}: flip {i}.{bit} accepted"
                    );
                }
            }
            let mut v = b.clone();
            v[8] = 2;
            assert!(matches!(
                Manifest::decode(&v),
                Err(DecodeError::UnsupportedVersion { got: 2, .. })
            ));
        }
        assert!(matches!(
            Manifest::decode(b"{\"not\": \"a manifest\"} and more bytes to be long enough ......"),
            Err(DecodeError::BadMagic { .. })
        ));
    }

    /// Golden bytes computed apart from this code (Python's `struct` and `zlib.crc32`, from
    /// the layout table): the first as every build before the log's length was recorded
    /// wrote it (flags 1, no field), the second with the length (flags 3, a log of 156 bytes).
    #[test]
    fn manifest_bytes_match_the_layout_old_and_new() {
        const OLD: &str =
            "424c53464d414e000100000014000000070000000000000001000000e803000000000000\
            7b14ae47e17a843f030000000000000009000000000000006400000000000000050000000200000004\
            000000000000000a00000000000000080000000000000002000000000000008125d9d7";
        const NEW: &str =
            "424c53464d414e000100000014000000070000000000000003000000e803000000000000\
            7b14ae47e17a843f030000000000000009000000000000006400000000000000050000000200000004\
            000000000000000a00000000000000080000000000000002000000000000009c000000000000006445\
            c931";
        let hex = |s: &str| -> Vec<u8> {
            (0..s.len())
                .step_by(2)
                .map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap())
                .collect()
        };
        let old = Manifest {
            clean_wal_len: None,
            ..manifest()
        };
        assert_eq!(Manifest::decode(&hex(OLD)).unwrap(), old);
        assert_eq!(
            old.encode(),
            hex(OLD),
            "a manifest without the length changed bytes"
        );
        assert_eq!(Manifest::decode(&hex(NEW)).unwrap(), manifest());
        assert_eq!(manifest().encode(), hex(NEW));
    }

    #[test]
    fn a_log_length_is_refused_without_the_clean_mark_or_off_the_record_grid() {
        let unclean = Manifest {
            clean: false,
            ..manifest()
        };
        assert!(matches!(
            Manifest::decode(&unclean.encode()),
            Err(DecodeError::Inconsistent(why)) if why.contains("flags 0x2")
        ));
        for bad in [0, 35, 36 + 23, 36 + 24 * 5 + 1] {
            let m = Manifest {
                clean_wal_len: Some(bad),
                ..manifest()
            };
            assert!(
                matches!(
                    Manifest::decode(&m.encode()),
                    Err(DecodeError::Inconsistent(_))
                ),
                "log length {bad}"
            );
        }
        let empty_log = Manifest {
            clean_wal_len: Some(36),
            ..manifest()
        };
        assert_eq!(Manifest::decode(&empty_log.encode()).unwrap(), empty_log);
    }
}

//! The manifest (`MANIFEST`): which runs and which log make up the set, and whether its
//! saved filter is current. Replaced atomically (see `dir.rs`), never edited in place.
//!
//! ## Layout
//! ```text
//! offset size field
//!      0    8 magic "BLSFMAN\0"
//!      8    4 version (1)
//!     12    4 fingerprint width in bytes
//!     16    8 set id (random, chosen at creation)
//!     24    4 flags (bit 0: clean, the saved filter covers every member)
//!     28    8 expected items of the filter
//!     36    8 false-positive rate of the filter (f64 bits)
//!     44    8 generation of the live write-ahead log
//!     52    8 next run sequence number
//!     60    8 saved filter file length (meaningful when clean)
//!     68    4 saved filter file CRC32 (meaningful when clean)
//!     72    4 number of runs r
//!     76 16·r runs, oldest first: sequence number (8), members (8)
//!  76+16r   4 CRC32 of every byte before
//! ```

use bloomsled::DecodeError;

use super::{
    check_crc, check_head, check_width, checksum, Fields, FPSET_VERSION, MANIFEST_FIXED_LEN,
    MANIFEST_MAGIC, MAX_RUN_ITEMS,
};

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
}

impl Manifest {
    /// The manifest's bytes.
    pub fn encode(&self) -> Vec<u8> {
        let mut b = Vec::with_capacity(MANIFEST_FIXED_LEN + 16 * self.runs.len() + 4);
        b.extend_from_slice(&MANIFEST_MAGIC);
        b.extend_from_slice(&FPSET_VERSION.to_le_bytes());
        b.extend_from_slice(&(self.width as u32).to_le_bytes());
        b.extend_from_slice(&self.set_id.to_le_bytes());
        b.extend_from_slice(&u32::from(self.clean).to_le_bytes());
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
        let crc = checksum(&[&b]);
        b.extend_from_slice(&crc.to_le_bytes());
        b
    }

    /// Parses [`Manifest::encode`]'s bytes.
    pub fn decode(bytes: &[u8]) -> Result<Manifest, DecodeError> {
        check_head(bytes, MANIFEST_FIXED_LEN + 4, &MANIFEST_MAGIC)?;
        let f = Fields(bytes);
        let nruns = f.u32(72) as usize;
        let len = MANIFEST_FIXED_LEN + 16 * nruns + 4;
        if bytes.len() != len {
            return Err(DecodeError::Truncated {
                needed: len as u64,
                got: bytes.len() as u64,
            });
        }
        check_crc(bytes, len, &[])?;
        let flags = f.u32(24);
        if flags > 1 {
            return Err(DecodeError::Inconsistent(format!(
                "manifest flags {flags:#x}"
            )));
        }
        let fpr = f64::from_bits(f.u64(36));
        let runs = (0..nruns)
            .map(|i| RunEntry {
                seq: f.u64(MANIFEST_FIXED_LEN + 16 * i),
                count: f.u64(MANIFEST_FIXED_LEN + 16 * i + 8),
            })
            .collect::<Vec<_>>();
        let m = Manifest {
            width: check_width(f.u32(12))?,
            set_id: f.u64(16),
            clean: flags == 1,
            expected_items: f.u64(28),
            fpr,
            wal_gen: f.u64(44),
            next_seq: f.u64(52),
            filter_len: f.u64(60),
            filter_crc: f.u32(68),
            runs,
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
        Ok(m)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
        }
    }

    #[test]
    fn manifest_round_trips_and_rejects_every_truncation_and_flip() {
        let m = manifest();
        let b = m.encode();
        assert_eq!(Manifest::decode(&b).unwrap(), m);
        for len in 0..b.len() {
            assert!(Manifest::decode(&b[..len]).is_err(), "truncated at {len}");
        }
        for i in 0..b.len() {
            let mut c = b.clone();
            c[i] ^= 0x40;
            assert!(Manifest::decode(&c).is_err(), "flip at {i} accepted");
        }
        assert!(matches!(
            Manifest::decode(b"{\"not\": \"a manifest\"} and more bytes to be long enough ......"),
            Err(DecodeError::BadMagic { .. })
        ));
        let mut v = b.clone();
        v[8] = 2;
        assert!(matches!(
            Manifest::decode(&v),
            Err(DecodeError::UnsupportedVersion { got: 2, .. })
        ));
    }
}

//! The write-ahead log: every member added since the last flush, one CRC-checked record
//! each, appended through a buffer; [`Wal::sync`] writes the buffer and fsyncs, which is
//! the set's commit point. Replay at open keeps every record up to the first bad one; a
//! bad tail (a crash mid-append) is cut off, a bad record followed by a good one is damage.
//!
//! After a clean close the manifest records the log's exact length, and no append can
//! have followed (an open clears that record durably before the log takes a record). So
//! then a log of another length, or with any bad record, was damaged after the close (a
//! bad copy, a restore that cut the file): replay refuses it and changes nothing, rather
//! than cut members off as a torn tail.

use std::fs::{File, OpenOptions};
use std::io::{BufWriter, Read, Write};
use std::path::{Path, PathBuf};

use crate::format::{
    decode_wal_record, encode_wal_record, wal_record_len, WalHeader, WAL_HEADER_LEN,
};
use bloomsled::DecodeError;

use crate::error::{Error, Result};

/// File name of the log of generation `generation`.
pub(crate) fn file_name(generation: u64) -> String {
    format!("wal-{generation:016x}.log")
}

/// The generation of a log's file name, if it is one.
pub(crate) fn generation_of(name: &str) -> Option<u64> {
    let hex = name.strip_prefix("wal-")?.strip_suffix(".log")?;
    (hex.len() == 16).then(|| u64::from_str_radix(hex, 16).ok())?
}

/// The live log, open for appending.
pub(crate) struct Wal {
    pub(crate) generation: u64,
    out: BufWriter<File>,
    scratch: Vec<u8>,
    /// Records appended since the last sync (0: everything is durable).
    unsynced: u64,
    /// Bytes of the log, header and every record appended (buffered ones included).
    len: u64,
}

/// What replay found.
pub(crate) struct Replayed {
    pub(crate) wal: Wal,
    /// Fingerprints of the good records, in order, back to back.
    pub(crate) members: Vec<u8>,
    /// Bytes of a torn tail cut off (0: the log was whole).
    pub(crate) cut_bytes: u64,
}

impl Wal {
    /// Creates the log of `generation` in `dir` (replacing a leftover of that name) with
    /// its header, synced. Its name becomes durable with the next directory sync.
    pub(crate) fn create(dir: &Path, set_id: u64, width: usize, generation: u64) -> Result<Wal> {
        let path = dir.join(file_name(generation));
        let mut file = OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .open(&path)
            .map_err(Error::Io)?;
        let header = WalHeader {
            width,
            set_id,
            generation,
        };
        file.write_all(&header.encode()).map_err(Error::Io)?;
        file.sync_all().map_err(Error::Io)?;
        Ok(Wal::appending(file, generation, WAL_HEADER_LEN as u64))
    }

    fn appending(file: File, generation: u64, len: u64) -> Wal {
        Wal {
            generation,
            out: BufWriter::with_capacity(1 << 16, file),
            scratch: Vec::with_capacity(64 + 4),
            unsynced: 0,
            len,
        }
    }

    /// Opens the log the manifest names and replays it. `clean_len` is the length a
    /// clean close recorded ([`Manifest::clean_wal_len`]): with it, a log of another
    /// length or with a bad record is damage, not a torn tail. Everything replay keeps is
    /// fsynced before it returns, so a clean close that appends nothing still records a
    /// length the disk holds.
    ///
    /// Long because the log is read, checked against a clean close's length, cut and
    /// reopened for appends in one pass, each check naming its own damage.
    ///
    /// [`Manifest::clean_wal_len`]: crate::format::Manifest::clean_wal_len
    pub(crate) fn replay(
        dir: &Path,
        set_id: u64,
        width: usize,
        generation: u64,
        clean_len: Option<u64>,
    ) -> Result<Replayed> {
        let path = dir.join(file_name(generation));
        let damaged = |fault: DecodeError| Error::FileDamaged {
            file: path.clone(),
            fault,
        };
        let mut file = OpenOptions::new()
            .read(true)
            .write(true)
            .open(&path)
            .map_err(|e| match e.kind() {
                std::io::ErrorKind::NotFound => damaged(DecodeError::Inconsistent(
                    "listed by the manifest but missing".into(),
                )),
                _ => Error::Io(e),
            })?;
        let mut bytes = Vec::new();
        file.read_to_end(&mut bytes).map_err(Error::Io)?;
        if let Some(recorded) = clean_len {
            check_clean_len(recorded, bytes.len() as u64).map_err(damaged)?;
        }
        let header = WalHeader::decode(&bytes).map_err(damaged)?;
        let consistent = |ok: bool, what: &str| {
            if ok {
                Ok(())
            } else {
                Err(damaged(DecodeError::Inconsistent(what.into())))
            }
        };
        consistent(header.set_id == set_id, "another set's log")?;
        consistent(header.generation == generation, "another generation's log")?;
        consistent(header.width == width, "another fingerprint width")?;
        let (members, good) =
            scan_records(&bytes[WAL_HEADER_LEN..], generation, width).map_err(|at| {
                damaged(DecodeError::Inconsistent(format!(
                    "record at byte {} fails its checksum but later records are good",
                    WAL_HEADER_LEN as u64 + at
                )))
            })?;
        let good_len = WAL_HEADER_LEN as u64 + good;
        if let Some(recorded) = clean_len.filter(|&recorded| recorded != good_len) {
            return Err(damaged(DecodeError::Inconsistent(format!(
                "record at byte {good_len} fails its checksum, but the clean close recorded \
                 {recorded} bytes of good records: damaged after the close"
            ))));
        }
        let cut_bytes = bytes.len() as u64 - good_len;
        if cut_bytes > 0 {
            log::warn!(
                "bloomsled: {}: cutting a torn tail of {cut_bytes} bytes (a crash mid-append)",
                path.display()
            );
            file.set_len(good_len).map_err(Error::Io)?;
        }
        // What a crashed process wrote may be in the page cache only: make what replay
        // keeps durable before the set counts it as members (and a clean close records
        // its length).
        file.sync_all().map_err(Error::Io)?;
        drop(bytes);
        let file = OpenOptions::new()
            .append(true)
            .open(&path)
            .map_err(Error::Io)?;
        Ok(Replayed {
            wal: Wal::appending(file, generation, good_len),
            members,
            cut_bytes,
        })
    }

    /// Appends the record of `fp` to the buffer (written out when full or at sync).
    pub(crate) fn append(&mut self, fp: &[u8]) -> Result<()> {
        self.scratch.clear();
        encode_wal_record(self.generation, fp, &mut self.scratch);
        self.out.write_all(&self.scratch).map_err(Error::Io)?;
        self.unsynced += 1;
        self.len += self.scratch.len() as u64;
        Ok(())
    }

    /// Bytes of the log once its buffer is written: its length on disk after a
    /// [`sync`](Self::sync).
    pub(crate) fn len(&self) -> u64 {
        self.len
    }

    /// Writes the buffer and fsyncs: every appended record is durable.
    pub(crate) fn sync(&mut self) -> Result<()> {
        if self.unsynced == 0 {
            return Ok(());
        }
        self.out.flush().map_err(Error::Io)?;
        self.out.get_ref().sync_data().map_err(Error::Io)?;
        self.unsynced = 0;
        Ok(())
    }
}

/// The path of the log of `generation` in `dir`.
pub(crate) fn path(dir: &Path, generation: u64) -> PathBuf {
    dir.join(file_name(generation))
}

/// Whether a log of `len` bytes can be the one whose clean close recorded `recorded`
/// bytes: shorter was cut after the close (members lost), longer was written after it
/// (impossible here: an open clears the record durably before the first append).
fn check_clean_len(recorded: u64, len: u64) -> Result<(), DecodeError> {
    if len < recorded {
        return Err(DecodeError::Truncated {
            needed: recorded,
            got: len,
        });
    }
    if len > recorded {
        return Err(DecodeError::Inconsistent(format!(
            "{len} bytes, but the clean close recorded {recorded}: written to after the close"
        )));
    }
    Ok(())
}

/// The fingerprints of the good records of `body` (the log after its header) and the
/// length of the good prefix. A bad record followed only by bad records or a partial one
/// is a torn tail (the prefix ends before it); a bad record followed by a good one is
/// damage: `Err(offset of the bad record)`.
fn scan_records(body: &[u8], generation: u64, width: usize) -> Result<(Vec<u8>, u64), u64> {
    let len = wal_record_len(width);
    let mut members = Vec::with_capacity(body.len() / len * width);
    let mut records = body.chunks_exact(len);
    let mut good = 0u64;
    for rec in records.by_ref() {
        match decode_wal_record(generation, rec) {
            Some(fp) => {
                members.extend_from_slice(fp);
                good += len as u64;
            }
            None => break,
        }
    }
    let bad_at = good;
    if records.any(|rec| decode_wal_record(generation, rec).is_some()) {
        return Err(bad_at);
    }
    Ok((members, good))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn body(n: u8) -> Vec<u8> {
        let mut b = Vec::new();
        for i in 0..n {
            encode_wal_record(1, &[i; 4], &mut b);
        }
        b
    }

    #[test]
    fn a_torn_tail_is_cut_and_a_bad_middle_is_damage() {
        let b = body(5);
        assert_eq!(
            scan_records(&b, 1, 4).unwrap(),
            (b.chunks(8).flat_map(|r| r[..4].to_vec()).collect(), 40)
        );
        // Truncated mid-record: four whole records.
        assert_eq!(scan_records(&b[..37], 1, 4).unwrap().1, 32);
        // The last record damaged: a torn tail.
        let mut c = b.clone();
        c[35] ^= 1;
        assert_eq!(scan_records(&c, 1, 4).unwrap().1, 32);
        // A middle record damaged, good ones after it: damage.
        let mut d = b.clone();
        d[9] ^= 1;
        assert_eq!(scan_records(&d, 1, 4), Err(8));
        // Another generation's records do not verify.
        assert_eq!(scan_records(&b, 2, 4).unwrap().1, 0);
        assert_eq!(generation_of(&file_name(7)), Some(7));
    }

    #[test]
    fn a_clean_length_admits_only_itself() {
        assert_eq!(check_clean_len(100, 100), Ok(()));
        assert_eq!(
            check_clean_len(100, 99),
            Err(DecodeError::Truncated {
                needed: 100,
                got: 99
            })
        );
        assert!(matches!(
            check_clean_len(100, 101),
            Err(DecodeError::Inconsistent(why)) if why.contains("101") && why.contains("100")
        ));
    }
}

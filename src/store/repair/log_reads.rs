//! sled 0.34.7 takes a failed read of its log while it opens for the end of its log: a read
//! check of what that open reads, before and after it, so that a disk that cannot read it
//! fails the open.
//!
//! sled's recovery reads the header of every segment of its log `db` (a header it cannot
//! read drops that segment from the log) and then every message of the segments from its
//! last page-cache snapshot on (a message it cannot read ends the log there). Neither
//! failure is reported: sled opens an older or empty store, with no error, and may zero
//! the segments past the read it took for a tear before it fails on a later read (found by
//! `tests/fault_matrix.rs` and `tests/failed_reads.rs`). No check after the fact can give
//! those keys back.
//!
//! So before sled opens, [`check_log_reads`] reads what sled's recovery will read, in the
//! same format: every segment's header, then each segment (whole) whose header is intact
//! and whose log sequence number is at or past the older of the last snapshot's and the
//! lowest one sled treats as its unstable tail. A read that fails fails the open with an
//! error naming the file, the offset and what sled would have done; nothing is written.
//! On a local file system sled's own reads then come from the page cache the check filled.
//! After sled's open, [`recheck_log_reads`] reads every segment header again: a disk that
//! began failing reads after the check's (and so failed sled's) fails these too, and the
//! open fails before anything is written to the store. Left: a file system that drops its page cache at
//! each open (a FUSE mount without `keep_cache`, some network file systems) while the disk
//! fails exactly between the check's read and sled's (`docs/persistence.md`).
//!
//! The cost: the log since sled's last snapshot read once more at open, the headers twice.

use std::fs;
use std::io;
use std::path::Path;

/// The bytes of sled 0.34.7's segment header: CRC (4), LSN (8), max stable LSN (8).
const SEG_HEADER_LEN: u64 = 20;

/// What sled reads of one segment's header (`SegmentHeader::from` in sled's
/// `pagecache/logger.rs`): its LSN and max stable LSN, and whether its CRC holds.
#[derive(Debug, PartialEq)]
struct Header {
    lsn: i64,
    max_stable_lsn: i64,
    ok: bool,
}

fn parse_header(buf: &[u8; SEG_HEADER_LEN as usize]) -> Header {
    let word = |r: std::ops::Range<usize>| {
        let mut b = [0u8; 8];
        b.copy_from_slice(&buf[r]);
        i64::from_le_bytes(b) ^ 0x7FFF_FFFF_FFFF_FFFF
    };
    let stored = u32::from_le_bytes([buf[0], buf[1], buf[2], buf[3]]) ^ 0xFFFF_FFFF;
    Header {
        lsn: word(4..12),
        max_stable_lsn: word(12..20),
        ok: crc32fast::hash(&buf[4..20]) == stored,
    }
}

/// The lowest stable LSN named by sled's snapshot files (`snap.<16 hex digits>`, the
/// `.generating` one too: sled may take it), or `None` without one (sled then reads its
/// whole log).
fn snapshot_lsn(db_dir: &Path) -> Option<i64> {
    fs::read_dir(db_dir)
        .ok()?
        .flatten()
        .filter_map(|e| {
            let name = e.file_name();
            let hex = name.to_str()?.strip_prefix("snap.")?.get(..16)?.to_owned();
            i64::from_str_radix(&hex, 16).ok()
        })
        .min()
}

/// Reads, in sled's log at `<db_dir>/db`, what sled's open will read (see the module
/// docs). `Ok` if there is no log or every read succeeded, and if another process holds
/// the log (sled's open waits for it, and this runs again before its next try); the first
/// failed read as an error naming the file, the offset and the step.
pub(crate) fn check_log_reads(db_dir: &Path, segment_size: usize) -> io::Result<()> {
    use fs2::FileExt;
    let path = db_dir.join("db");
    let file = match fs::File::open(&path) {
        Ok(f) => f,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(failed(&path, "open", 0, e)),
    };
    if file.try_lock_exclusive().is_err() {
        return Ok(());
    }
    read_what_sled_reads(&file, &path, db_dir, segment_size, true)
    // `file` closes here, releasing the lock before sled takes it.
}

/// Every segment header again, once sled has opened the log (it holds the lock): a disk
/// that began to fail reads after the check's (and so failed sled's) fails these too. The
/// tail is not read again: a failure that spares these reads and hit only sled's reads of
/// the tail is a one-off error, which the check before could not see either.
pub(crate) fn recheck_log_reads(db_dir: &Path, segment_size: usize) -> io::Result<()> {
    let path = db_dir.join("db");
    let file = fs::File::open(&path).map_err(|e| failed(&path, "open", 0, e))?;
    read_what_sled_reads(&file, &path, db_dir, segment_size, false)
}

/// The reads of [`check_log_reads`]: every segment header, then (if `tail`) the tail.
fn read_what_sled_reads(
    file: &fs::File,
    path: &Path,
    db_dir: &Path,
    segment_size: usize,
    tail: bool,
) -> io::Result<()> {
    let len = file
        .metadata()
        .map_err(|e| failed(path, "stat", 0, e))?
        .len();
    let seg = segment_size as u64;
    if seg < SEG_HEADER_LEN {
        return Ok(()); // sled refuses such a config itself
    }
    // sled's count: a last segment shorter than a header is not read.
    let segments = len / seg + u64::from(len % seg >= SEG_HEADER_LEN);
    let mut headers = Vec::with_capacity(segments as usize);
    let mut buf = [0u8; SEG_HEADER_LEN as usize];
    for idx in 0..segments {
        let at = idx * seg;
        read_at(file, &mut buf, at).map_err(|e| failed(path, "read of a segment header", at, e))?;
        headers.push((at, parse_header(&buf)));
    }
    if !tail {
        return Ok(());
    }
    let max_stable = headers
        .iter()
        .filter(|(_, h)| h.ok)
        .map(|(_, h)| h.max_stable_lsn)
        .max()
        .unwrap_or(0)
        .max(0);
    let tail = (max_stable / seg as i64) * seg as i64;
    let from = snapshot_lsn(db_dir).map_or(0, |s| s.min(tail));
    let from = (from / seg as i64) * seg as i64;
    // Read in pieces of 16 KiB on the stack: under glibc a freed allocation of a whole
    // segment (512 KiB) would raise malloc's mmap threshold for the rest of the process,
    // and the allocations sled makes next would then stay in its arenas (seen as a failed
    // thread start under an address-space limit: `tests/memory_limit.rs`); a heap buffer
    // of any size stays in the process's resident memory after the open.
    let mut data = [0u8; 16 << 10];
    for (at, h) in &headers {
        if !h.ok || h.lsn < from {
            continue;
        }
        let end = at + seg.min(len - at);
        let mut pos = *at;
        while pos < end {
            let n = (end - pos).min(data.len() as u64) as usize;
            read_at(file, &mut data[..n], pos)
                .map_err(|e| failed(path, "read of a log segment", pos, e))?;
            pos += n as u64;
        }
    }
    Ok(())
}

fn read_at(file: &fs::File, buf: &mut [u8], at: u64) -> io::Result<()> {
    #[cfg(unix)]
    {
        use std::os::unix::fs::FileExt;
        file.read_exact_at(buf, at)
    }
    #[cfg(not(unix))]
    {
        use std::io::{Read, Seek, SeekFrom};
        let mut f = file;
        f.seek(SeekFrom::Start(at))?;
        f.read_exact(buf)
    }
}

/// `e`, named: the file, the step, the offset, and why the open stops.
fn failed(path: &Path, step: &str, at: u64, e: io::Error) -> io::Error {
    io::Error::new(
        e.kind(),
        format!(
            "{step} of {} at offset {at}: {e} (sled 0.34 would take this for the end of \
             its log and drop what follows, with no error; the open stops here and \
             nothing was written)",
            path.display()
        ),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn store(dir: &Path, keys: u32) {
        let db = sled::Config::new().path(dir).open().unwrap();
        for i in 0..keys {
            db.insert(format!("key-{i:08}"), vec![7u8; 100]).unwrap();
        }
        db.flush().unwrap();
    }

    #[test]
    fn sleds_own_headers_parse_with_their_crc() {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path().join("db");
        store(&d, 20_000);
        let bytes = fs::read(d.join("db")).unwrap();
        let seg = 512 * 1024;
        assert!(bytes.len() > 2 * seg, "several segments");
        let mut lsns = Vec::new();
        for at in (0..bytes.len()).step_by(seg) {
            let h = parse_header(bytes[at..at + 20].try_into().unwrap());
            assert!(h.ok, "segment at {at}: {h:?}");
            assert!(h.lsn >= 0 && h.lsn % seg as i64 == 0, "{h:?}");
            lsns.push(h.lsn);
        }
        lsns.sort();
        lsns.dedup();
        assert_eq!(lsns.len(), bytes.len().div_ceil(seg), "distinct LSNs");
        let mut flipped: [u8; 20] = bytes[..20].try_into().unwrap();
        flipped[9] ^= 1;
        assert!(!parse_header(&flipped).ok, "a flipped byte fails the CRC");
        check_log_reads(&d, seg).unwrap();
    }

    #[test]
    fn no_log_or_a_log_in_use_is_not_read() {
        let dir = tempfile::tempdir().unwrap();
        check_log_reads(&dir.path().join("absent"), 512 * 1024).unwrap();
        let d = dir.path().join("db");
        let db = sled::Config::new().path(&d).open().unwrap();
        db.insert("k", "v").unwrap();
        // sled holds its lock: the check leaves the file to sled's open, which waits; the
        // check after sled's open reads it.
        check_log_reads(&d, 512 * 1024).unwrap();
        recheck_log_reads(&d, 512 * 1024).unwrap();
    }

    #[test]
    fn the_snapshot_lsn_is_read_from_sleds_file_names() {
        let dir = tempfile::tempdir().unwrap();
        assert_eq!(snapshot_lsn(dir.path()), None);
        fs::write(dir.path().join("snap.0000000000A00000"), b"").unwrap();
        fs::write(dir.path().join("snap.0000000000080000.generating"), b"").unwrap();
        fs::write(dir.path().join("snapshot-notes"), b"").unwrap();
        assert_eq!(snapshot_lsn(dir.path()), Some(0x80000));
    }
}

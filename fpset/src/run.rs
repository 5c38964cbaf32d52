//! Runs: sorted, deduplicated files of fingerprints ([`crate::format`] draws the
//! layout). A [`Run`] keeps only its sparse index in memory (the first fingerprint of each
//! block) and reads the one block a lookup needs with a positioned read, so the data stays
//! in the OS page cache, not in the process. A [`RunWriter`] writes a run from ascending
//! fingerprints with bounded buffers; a [`Cursor`] streams one back, block by block, for
//! merges and filter rebuilds. Every block read is checked against its CRC32.

use std::fs::{File, OpenOptions};
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use crate::format::{
    decode_run_footer, encode_run_footer, open_block, open_index, seal_block, seal_index,
    RunHeader, RUN_FOOTER_LEN, RUN_HEADER_LEN,
};
use bloomsled::DecodeError;

use crate::error::{Error, Result};

/// File name of run `seq`.
pub(crate) fn file_name(seq: u64) -> String {
    format!("run-{seq:016x}.fps")
}

/// The sequence number of a run's file name, if it is one.
pub(crate) fn seq_of(name: &str) -> Option<u64> {
    let hex = name.strip_prefix("run-")?.strip_suffix(".fps")?;
    (hex.len() == 16).then(|| u64::from_str_radix(hex, 16).ok())?
}

fn damaged(path: &Path, fault: DecodeError) -> Error {
    Error::FileDamaged {
        file: path.to_path_buf(),
        fault,
    }
}

/// An open run: its header, its sparse index, and the file to read blocks from.
#[derive(Debug)]
pub(crate) struct Run {
    pub(crate) header: RunHeader,
    path: PathBuf,
    file: File,
    /// First fingerprint of every block, then the run's last fingerprint.
    index: Vec<u8>,
}

impl Run {
    /// Opens the run at `path`, which the manifest lists as run `seq` of `count` members
    /// of set `set_id`: every one of those facts, the file's exact length, the footer and
    /// the index are checked; the blocks are checked when read.
    pub(crate) fn open(
        path: &Path,
        set_id: u64,
        width: usize,
        seq: u64,
        count: u64,
    ) -> Result<Run> {
        let file = File::open(path).map_err(|e| match e.kind() {
            std::io::ErrorKind::NotFound => damaged(
                path,
                DecodeError::Inconsistent("listed by the manifest but missing".into()),
            ),
            _ => Error::Io(e),
        })?;
        let len = file.metadata().map_err(Error::Io)?.len();
        let mut head = [0u8; RUN_HEADER_LEN];
        let got = read_up_to(&file, &mut head, 0)?;
        let header = RunHeader::decode(&head[..got]).map_err(|f| damaged(path, f))?;
        let expect = |what: &str, ok: bool| {
            if ok {
                Ok(())
            } else {
                Err(damaged(path, DecodeError::Inconsistent(what.into())))
            }
        };
        expect("another set's run", header.set_id == set_id)?;
        expect("another run's file", header.seq == seq)?;
        expect("another fingerprint width", header.width == width)?;
        expect(
            "member count differs from the manifest's",
            header.count == count,
        )?;
        if len != header.file_len() {
            return Err(damaged(
                path,
                DecodeError::Truncated {
                    needed: header.file_len(),
                    got: len,
                },
            ));
        }
        let mut footer = [0u8; RUN_FOOTER_LEN];
        crate::pread::read_exact_at(&file, &mut footer, len - RUN_FOOTER_LEN as u64)
            .map_err(Error::Io)?;
        let blocks = decode_run_footer(seq, &footer).map_err(|f| damaged(path, f))?;
        expect("footer's block count", blocks == header.blocks())?;
        let mut index = vec![0u8; header.index_len() as usize];
        crate::pread::read_exact_at(&file, &mut index, header.index_offset()).map_err(Error::Io)?;
        let body = open_index(seq, &index).map_err(|f| damaged(path, f))?.len();
        index.truncate(body);
        let run = Run {
            header,
            path: path.to_path_buf(),
            file,
            index,
        };
        let firsts = &run.index[..blocks as usize * width];
        expect(
            "index not ascending",
            firsts.chunks_exact(width).is_sorted_by(|a, b| a < b)
                && run.bounds().1 >= run.index_key(blocks as usize - 1),
        )?;
        Ok(run)
    }

    fn width(&self) -> usize {
        self.header.width
    }

    /// Fingerprint `i` of the index (`i == blocks`: the last member).
    fn index_key(&self, i: usize) -> &[u8] {
        &self.index[i * self.width()..(i + 1) * self.width()]
    }

    /// The run's smallest and largest members.
    fn bounds(&self) -> (&[u8], &[u8]) {
        (
            self.index_key(0),
            self.index_key(self.header.blocks() as usize),
        )
    }

    /// Bytes of memory the run holds (its index).
    pub(crate) fn memory_bytes(&self) -> usize {
        self.index.capacity()
    }

    /// Reads and verifies block `i` into `buf`; returns its fingerprints.
    fn read_block<'b>(&self, i: u64, buf: &'b mut Vec<u8>) -> Result<&'b [u8]> {
        let n = self.header.items_in_block(i) * self.width() + 4;
        buf.resize(n, 0);
        crate::pread::read_exact_at(&self.file, buf, self.header.block_offset(i))
            .map_err(Error::Io)?;
        open_block(self.header.seq, i, buf).map_err(|f| damaged(&self.path, f))
    }

    /// Whether `fp` is a member: no read if `fp` is outside the run's range, else one
    /// block read (`buf` is scratch space). Counts the read in `reads`.
    pub(crate) fn contains(&self, fp: &[u8], buf: &mut Vec<u8>, reads: &mut u64) -> Result<bool> {
        let (lo, hi) = self.bounds();
        if fp < lo || fp > hi {
            return Ok(false);
        }
        let blocks = self.header.blocks() as usize;
        // The last block whose first fingerprint is <= fp (first keys strictly ascend).
        let (mut a, mut b) = (0usize, blocks);
        while b - a > 1 {
            let mid = (a + b) / 2;
            if self.index_key(mid) <= fp {
                a = mid;
            } else {
                b = mid;
            }
        }
        *reads += 1;
        let w = self.width();
        let fps = self.read_block(a as u64, buf)?;
        let n = fps.len() / w;
        let (mut a, mut b) = (0usize, n);
        while a < b {
            let mid = (a + b) / 2;
            match fps[mid * w..(mid + 1) * w].cmp(fp) {
                std::cmp::Ordering::Less => a = mid + 1,
                std::cmp::Ordering::Greater => b = mid,
                std::cmp::Ordering::Equal => return Ok(true),
            }
        }
        Ok(false)
    }
}

/// Reads up to `buf.len()` bytes at `offset`; returns how many (fewer only at the end).
fn read_up_to(file: &File, buf: &mut [u8], offset: u64) -> Result<usize> {
    let mut got = 0;
    while got < buf.len() {
        match crate::pread::read_at(file, &mut buf[got..], offset + got as u64) {
            Ok(0) => break,
            Ok(n) => got += n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(Error::Io(e)),
        }
    }
    Ok(got)
}

/// Streams a run's members in ascending order, one verified block in memory at a time.
pub(crate) struct Cursor {
    run: Arc<Run>,
    next_block: u64,
    buf: Vec<u8>,
    pos: usize,
    end: usize,
}

impl Cursor {
    pub(crate) fn new(run: Arc<Run>) -> Cursor {
        Cursor {
            run,
            next_block: 0,
            buf: Vec::new(),
            pos: 0,
            end: 0,
        }
    }

    /// The current fingerprint, reading the next block when needed; `None` at the end.
    pub(crate) fn peek(&mut self) -> Result<Option<&[u8]>> {
        let w = self.run.width();
        if self.pos >= self.end {
            if self.next_block >= self.run.header.blocks() {
                return Ok(None);
            }
            let mut buf = std::mem::take(&mut self.buf);
            let n = self.run.read_block(self.next_block, &mut buf)?.len();
            self.buf = buf;
            self.next_block += 1;
            self.pos = 0;
            self.end = n;
        }
        Ok(Some(&self.buf[self.pos..self.pos + w]))
    }

    /// Moves past the current fingerprint.
    pub(crate) fn advance(&mut self) {
        self.pos += self.run.width();
    }
}

/// Writes a run from fingerprints given in strictly ascending order.
pub(crate) struct RunWriter {
    path: PathBuf,
    out: BufWriter<File>,
    header: RunHeader,
    block: Vec<u8>,
    blocks: u64,
    index: Vec<u8>,
    last: Vec<u8>,
}

impl RunWriter {
    /// A new file at `path` (replacing a leftover of that name) for run `seq`.
    pub(crate) fn create(
        path: &Path,
        set_id: u64,
        width: usize,
        seq: u64,
        block_items: u32,
    ) -> Result<RunWriter> {
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(true)
            .open(path)
            .map_err(Error::Io)?;
        let header = RunHeader {
            width,
            set_id,
            seq,
            count: 0,
            block_items,
        };
        let mut out = BufWriter::with_capacity(1 << 16, file);
        // Zeros until the header is known; a crash before `finish` leaves a file the
        // manifest does not list.
        out.write_all(&[0u8; RUN_HEADER_LEN]).map_err(Error::Io)?;
        Ok(RunWriter {
            path: path.to_path_buf(),
            out,
            header,
            block: Vec::with_capacity(block_items as usize * width + 4),
            blocks: 0,
            index: Vec::new(),
            last: Vec::new(),
        })
    }

    /// Appends `fp`, which must sort after every fingerprint pushed before (an equal one is
    /// skipped).
    pub(crate) fn push(&mut self, fp: &[u8]) -> Result<()> {
        debug_assert_eq!(fp.len(), self.header.width);
        if self.header.count > 0 && fp <= &self.last[..] {
            if fp == &self.last[..] {
                return Ok(());
            }
            return Err(Error::ReportableBug(
                "fingerprint set: run written out of order".into(),
            ));
        }
        if self.block.is_empty() {
            self.index.extend_from_slice(fp);
        }
        self.block.extend_from_slice(fp);
        self.last.clear();
        self.last.extend_from_slice(fp);
        self.header.count += 1;
        if self.block.len() == self.header.block_items as usize * self.header.width {
            self.seal()?;
        }
        Ok(())
    }

    fn seal(&mut self) -> Result<()> {
        seal_block(self.header.seq, self.blocks, &mut self.block);
        self.out.write_all(&self.block).map_err(Error::Io)?;
        self.block.clear();
        self.blocks += 1;
        Ok(())
    }

    /// Writes index, footer and header, and syncs the file: the run is complete on disk
    /// (its name becomes durable with the manifest's directory sync). An empty run is
    /// removed and `None` returned.
    pub(crate) fn finish(mut self) -> Result<Option<Run>> {
        if self.header.count == 0 {
            drop(self.out);
            std::fs::remove_file(&self.path).map_err(Error::Io)?;
            return Ok(None);
        }
        if !self.block.is_empty() {
            self.seal()?;
        }
        let mut index = std::mem::take(&mut self.index);
        index.extend_from_slice(&self.last);
        let body = index.len();
        seal_index(self.header.seq, &mut index);
        self.out.write_all(&index).map_err(Error::Io)?;
        index.truncate(body);
        index.shrink_to_fit();
        self.out
            .write_all(&encode_run_footer(self.header.seq, self.blocks))
            .map_err(Error::Io)?;
        let file = self
            .out
            .into_inner()
            .map_err(|e| Error::Io(e.into_error()))?;
        crate::pread::write_all_at(&file, &self.header.encode(), 0).map_err(Error::Io)?;
        file.sync_all().map_err(Error::Io)?;
        Ok(Some(Run {
            header: self.header,
            path: self.path,
            file,
            index,
        }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip() {
        assert_eq!(seq_of(&file_name(0xab)), Some(0xab));
        assert_eq!(seq_of("run-12.fps"), None);
        assert_eq!(seq_of("wal-0000000000000001.log"), None);
    }

    #[test]
    fn a_written_run_opens_streams_and_answers_exactly() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join(file_name(3));
        let mut w = RunWriter::create(&path, 9, 4, 3, 8).unwrap();
        let members: Vec<[u8; 4]> = (0..100u32).map(|i| (i * 3).to_be_bytes()).collect();
        for m in &members {
            w.push(m).unwrap();
        }
        w.push(&members[99]).unwrap(); // a repeat is skipped
        assert!(w.push(&members[0]).is_err(), "out of order");
        let run = Arc::new(w.finish().unwrap().unwrap());
        let reopened = Run::open(&path, 9, 4, 3, 100).unwrap();
        let (mut buf, mut reads) = (Vec::new(), 0);
        for i in 0..301u32 {
            let want = i % 3 == 0 && i < 300;
            assert_eq!(
                reopened
                    .contains(&i.to_be_bytes(), &mut buf, &mut reads)
                    .unwrap(),
                want,
                "{i}"
            );
        }
        assert!(!run
            .contains(&1000u32.to_be_bytes(), &mut buf, &mut reads)
            .unwrap());
        let mut c = Cursor::new(run);
        let mut got = Vec::new();
        while let Some(fp) = c.peek().unwrap() {
            got.push(<[u8; 4]>::try_from(fp).unwrap());
            c.advance();
        }
        assert_eq!(got, members);
        assert!(matches!(
            Run::open(&path, 8, 4, 3, 100),
            Err(Error::FileDamaged { .. })
        ));
        assert!(matches!(
            Run::open(&path, 9, 4, 3, 99),
            Err(Error::FileDamaged { .. })
        ));
    }
}

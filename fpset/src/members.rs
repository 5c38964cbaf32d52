//! Iterating over every member of a set, run by run and then the memtable.

use std::sync::Arc;

use crate::error::Result;

use crate::run::{Cursor, Run};
use crate::FingerprintSet;

impl FingerprintSet {
    /// Every member, in no particular order (runs in ascending order, then the
    /// memtable), read from a snapshot of the set taken now; each run block is verified.
    ///
    /// ```
    /// # let dir = tempfile::tempdir()?;
    /// let set = bloomsled_fpset::FingerprintSet::open(dir.path(), 1, 100, 0.01)?;
    /// set.insert_many(&[b"b", b"a"])?;
    /// let mut all = set.iter()?.collect::<Result<Vec<_>, _>>()?;
    /// all.sort();
    /// assert_eq!(all, [b"a".to_vec(), b"b".to_vec()]);
    /// # Ok::<(), bloomsled_fpset::Error>(())
    /// ```
    pub fn iter(&self) -> Result<Members> {
        let inner = self.lock()?;
        let recent = inner.memtable.as_bytes().to_vec();
        Ok(Members {
            runs: inner.runs.iter().rev().cloned().collect(),
            cursor: None,
            recent,
            recent_pos: 0,
            width: self.config.width,
        })
    }
}

/// Every member of a set ([`FingerprintSet::iter`]); an item is an error if a run block
/// fails its check.
pub struct Members {
    /// Runs still to read, the next one last.
    runs: Vec<Arc<Run>>,
    cursor: Option<Cursor>,
    recent: Vec<u8>,
    recent_pos: usize,
    width: usize,
}

impl Iterator for Members {
    type Item = Result<Vec<u8>>;

    fn next(&mut self) -> Option<Result<Vec<u8>>> {
        loop {
            if let Some(c) = &mut self.cursor {
                match c.peek() {
                    Ok(Some(fp)) => {
                        let fp = fp.to_vec();
                        c.advance();
                        return Some(Ok(fp));
                    }
                    Ok(None) => self.cursor = None,
                    Err(e) => {
                        self.cursor = None;
                        self.runs.clear();
                        return Some(Err(e));
                    }
                }
            }
            match self.runs.pop() {
                Some(r) => self.cursor = Some(Cursor::new(r)),
                None => break,
            }
        }
        if self.recent_pos < self.recent.len() {
            let fp = self.recent[self.recent_pos..self.recent_pos + self.width].to_vec();
            self.recent_pos += self.width;
            return Some(Ok(fp));
        }
        None
    }
}

//! Fault injection: fail the Nth operation of a kind on files whose name matches a pattern,
//! with a chosen errno, once or from then on; and a log of every operation, so a test can
//! first count the operations of a run and then fail the first, a middle and the last.
//!
//! Deterministic: a rule counts the matching operations the file system answers from the
//! moment it is set, in the order FUSE delivers them, so the same run of a single-threaded
//! writer meets the same fault. What a fault leaves behind is what the kernel would leave:
//! a failed create, write, rename, unlink or truncation changes nothing; a failed `fsync`
//! makes nothing durable, and (as Linux after a failed writeback, which marks the pages
//! clean: PostgreSQL's "fsyncgate") the writes it covered stay lost at the next cut even if
//! a later `fsync` of the same file succeeds.

/// A kind of file-system operation that a rule can fail (and the log counts).
///
/// ```
/// use bloomsled_powercut::Op;
/// assert!(Op::ALL.contains(&Op::Rename));
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Op {
    /// Creating a file (`open` with `O_CREAT` of a new or existing name) or a folder.
    Create,
    /// Opening an existing file or folder.
    Open,
    /// Reading a file's bytes (also the page-ins of a shared mapping).
    Read,
    /// Writing a file's bytes (also the write-back of a shared mapping).
    Write,
    /// `fsync` or `fdatasync` of a file.
    Fsync,
    /// `fsync` of a folder.
    FsyncDir,
    /// Renaming (matched against the old name and the new one).
    Rename,
    /// Unlinking a file or removing a folder.
    Unlink,
    /// Changing a file's length (`ftruncate`, `set_len`).
    Truncate,
}

impl Op {
    /// Every kind, in a fixed order.
    pub const ALL: [Op; 9] = [
        Op::Create,
        Op::Open,
        Op::Read,
        Op::Write,
        Op::Fsync,
        Op::FsyncDir,
        Op::Rename,
        Op::Unlink,
        Op::Truncate,
    ];
}

/// One rule: fail the `nth` operation of kind `op` on a name matching `pattern`.
///
/// ```
/// use bloomsled_powercut::{Failure, Op};
/// // The first fsync of sled's log fails with EIO; the next one succeeds (as on Linux).
/// let once = Failure::new(Op::Fsync, "db").errno(libc::EIO);
/// // The third write of any snapshot file, and every one after it, fails: a full disk.
/// let full = Failure::new(Op::Write, "*.snap*").nth(3).errno(libc::ENOSPC).sticky();
/// assert!(full.matches("0123.snap.tmp") && !once.matches("conf"));
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Failure {
    /// The kind of operation.
    pub op: Op,
    /// A glob over the file's (or folder's) own name, not its path: `*` matches any run of
    /// characters, `?` one; without either it must equal the name.
    pub pattern: String,
    /// Which matching operation fails, counted from 1 from the moment the rule is set.
    pub nth: u64,
    /// The errno the operation fails with (`EIO` unless set).
    pub errno: i32,
    /// Keep failing every matching operation after the `nth` (a dead disk, a full one);
    /// without, only the `nth` fails.
    pub sticky: bool,
    /// Only reads and writes that touch these bytes of the file match (`start..end`): a
    /// bad sector, failing whoever reads it, however often. `None`: any operation.
    pub bytes: Option<std::ops::Range<u64>>,
}

impl Failure {
    /// Fails the first `op` on a name matching `pattern`, once, with `EIO`.
    pub fn new(op: Op, pattern: &str) -> Failure {
        Failure {
            op,
            pattern: pattern.to_string(),
            nth: 1,
            errno: libc::EIO,
            sticky: false,
            bytes: None,
        }
    }

    /// Only reads and writes touching `range` of the file match: with
    /// [`sticky`](Failure::sticky), a bad sector that fails every read of it, whichever
    /// program reads it and however often. Other kinds of operation never match.
    ///
    /// ```
    /// use bloomsled_powercut::{Failure, Op};
    /// let sector = Failure::new(Op::Read, "db").bytes(4096..8192).sticky();
    /// assert!(sector.touches(Some((8000, 512))) && !sector.touches(Some((0, 4096))));
    /// ```
    pub fn bytes(mut self, range: std::ops::Range<u64>) -> Failure {
        self.bytes = Some(range);
        self
    }

    /// True if an operation on `span` (offset, length; `None` for one that has no bytes)
    /// is one this rule's byte range lets match.
    pub fn touches(&self, span: Option<(u64, u64)>) -> bool {
        match (&self.bytes, span) {
            (None, _) => true,
            (Some(_), None) => false,
            (Some(r), Some((at, len))) => at < r.end && at.saturating_add(len) > r.start,
        }
    }

    /// The `n`th matching operation fails instead (counted from 1; 0 reads as 1).
    pub fn nth(mut self, n: u64) -> Failure {
        self.nth = n.max(1);
        self
    }

    /// The matching operation that fails is one of `range` (counted from 1), picked by
    /// `seed`: the same seed picks the same one on every machine and run, so a failure
    /// found with a seed is found again with it.
    ///
    /// ```
    /// use bloomsled_powercut::{Failure, Op};
    /// let a = Failure::new(Op::Write, "db").nth_in(7, 2..=99);
    /// assert_eq!(a, Failure::new(Op::Write, "db").nth_in(7, 2..=99));
    /// assert!((2..=99).contains(&a.nth));
    /// ```
    pub fn nth_in(mut self, seed: u64, range: std::ops::RangeInclusive<u64>) -> Failure {
        let (lo, hi) = (*range.start(), (*range.end()).max(*range.start()));
        // splitmix64's finalizer: every bit of the seed moves the pick.
        let mut z = seed.wrapping_add(0x9E37_79B9_7F4A_7C15);
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^= z >> 31;
        self.nth = (lo + z % (hi - lo + 1)).max(1);
        self
    }

    /// With this errno (`libc::EIO`, `libc::ENOSPC`, `libc::EROFS`, …).
    pub fn errno(mut self, errno: i32) -> Failure {
        self.errno = errno;
        self
    }

    /// Every matching operation from the `nth` on fails.
    pub fn sticky(mut self) -> Failure {
        self.sticky = true;
        self
    }

    /// True if `name` (a file's own name) matches the pattern.
    pub fn matches(&self, name: &str) -> bool {
        glob(self.pattern.as_bytes(), name.as_bytes())
    }
}

/// An operation the file system answered: its kind and the file's own name (for a rename,
/// the old name then the new, as two entries).
///
/// ```
/// use bloomsled_powercut::{Op, OpRecord};
/// let r = OpRecord { op: Op::Write, name: "db".into(), failed: Some(libc::EIO) };
/// assert!(r.failed.is_some());
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OpRecord {
    /// The kind.
    pub op: Op,
    /// The file's (or folder's) own name.
    pub name: String,
    /// The errno a rule failed it with, if one did.
    pub failed: Option<i32>,
}

/// A rule and how many matching operations it has seen.
#[derive(Debug)]
struct Armed {
    rule: Failure,
    seen: u64,
}

/// The rules in force and the log of operations.
#[derive(Debug, Default)]
pub(crate) struct Faults {
    rules: Vec<Armed>,
    log: Vec<OpRecord>,
    fired: u64,
}

impl Faults {
    /// Logs an operation of kind `op` on `names` (one, or two for a rename) and returns
    /// the errno it fails with, if a rule says so.
    pub(crate) fn check(&mut self, op: Op, names: &[&str]) -> Result<(), i32> {
        self.check_span(op, names, None)
    }

    /// As [`Faults::check`], for a read or write of `span` (offset, length).
    pub(crate) fn check_span(
        &mut self,
        op: Op,
        names: &[&str],
        span: Option<(u64, u64)>,
    ) -> Result<(), i32> {
        let mut failed = None;
        for armed in &mut self.rules {
            if armed.rule.op != op
                || !names.iter().any(|n| armed.rule.matches(n))
                || !armed.rule.touches(span)
            {
                continue;
            }
            armed.seen += 1;
            let hit =
                armed.seen == armed.rule.nth || (armed.rule.sticky && armed.seen > armed.rule.nth);
            if hit && failed.is_none() {
                failed = Some(armed.rule.errno);
            }
        }
        self.fired += u64::from(failed.is_some());
        for name in names {
            self.log.push(OpRecord {
                op,
                name: (*name).to_string(),
                failed,
            });
        }
        failed.map_or(Ok(()), Err)
    }

    pub(crate) fn add(&mut self, rule: Failure) {
        self.rules.push(Armed { rule, seen: 0 });
    }

    pub(crate) fn clear(&mut self) {
        self.rules.clear();
    }

    pub(crate) fn log(&self) -> &[OpRecord] {
        &self.log
    }

    pub(crate) fn fired(&self) -> u64 {
        self.fired
    }
}

/// `*` any run, `?` one byte, anything else itself (iterative, with one backtrack point).
fn glob(pattern: &[u8], name: &[u8]) -> bool {
    let (mut p, mut n) = (0, 0);
    let mut star: Option<(usize, usize)> = None;
    while n < name.len() {
        match pattern.get(p) {
            Some(b'*') => {
                star = Some((p, n));
                p += 1;
            }
            Some(&c) if c == b'?' || c == name[n] => {
                p += 1;
                n += 1;
            }
            _ => match star {
                Some((sp, sn)) => {
                    p = sp + 1;
                    n = sn + 1;
                    star = Some((sp, sn + 1));
                }
                None => return false,
            },
        }
    }
    pattern[p..].iter().all(|&c| c == b'*')
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn globs() {
        assert!(glob(b"db", b"db"));
        assert!(!glob(b"db", b"db2"));
        assert!(glob(b"*.snap", b"ab.snap"));
        assert!(!glob(b"*.snap", b"ab.snap.tmp"));
        assert!(glob(b"*.snap*", b"ab.snap.tmp"));
        assert!(glob(b"snap.*", b"snap.00a1"));
        assert!(glob(b"*jnl*", b"x.3.jnl"));
        assert!(glob(b"?b", b"ab"));
        assert!(glob(b"*", b""));
        assert!(!glob(b"a*b*c", b"aXbY"));
    }

    #[test]
    fn nth_once_and_sticky() {
        let mut f = Faults::default();
        f.add(Failure::new(Op::Fsync, "db").nth(2));
        f.add(
            Failure::new(Op::Write, "*.log")
                .nth(2)
                .errno(libc::ENOSPC)
                .sticky(),
        );
        assert_eq!(f.check(Op::Fsync, &["db"]), Ok(()));
        assert_eq!(f.check(Op::Fsync, &["conf"]), Ok(()));
        assert_eq!(f.check(Op::Fsync, &["db"]), Err(libc::EIO));
        assert_eq!(f.check(Op::Fsync, &["db"]), Ok(()));
        assert_eq!(f.check(Op::Write, &["a.log"]), Ok(()));
        for _ in 0..3 {
            assert_eq!(f.check(Op::Write, &["b.log"]), Err(libc::ENOSPC));
        }
        assert_eq!(f.log().len(), 8);
        assert_eq!(f.fired(), 4);
        assert_eq!(f.log()[2].failed, Some(libc::EIO));
    }
}

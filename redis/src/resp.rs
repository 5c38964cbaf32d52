//! Commands written straight into one RESP buffer, for pipelines to a single server.
//!
//! The `redis` crate builds a `Cmd` per command (allocations, then a second copy into the
//! pipeline's buffer). For the batched paths, where a profile of `add_many` on one core
//! showed about a third of the client's time in building commands, bloomsled writes the
//! protocol bytes itself: `*<n>\r\n` then `$<len>\r\n<bytes>\r\n` per argument.
//!
//! A batch is written once, through [`Sink`], either as RESP ([`Packer`], one server) or as
//! `Cmd`s ([`Cmds`], a cluster, whose client routes each command by its key).

use redis::Cmd;

/// Where a batch's commands are written.
pub(crate) trait Sink {
    /// Starts a command of `args` arguments (its name included).
    fn command(&mut self, args: usize);
    /// One argument.
    fn arg(&mut self, bytes: &[u8]);
    /// One integer argument, in decimal.
    fn uint(&mut self, v: u64);
    /// Constant arguments, written as [`Words`] holds them.
    fn words(&mut self, w: &Words) {
        for a in w.args {
            self.arg(a);
        }
    }
}

/// Constant arguments with their RESP bytes written out once: the repeated words of a
/// `BITFIELD` cost the packer one copy instead of one framing per argument.
pub(crate) struct Words {
    /// The arguments' RESP encoding.
    pub resp: &'static [u8],
    /// The arguments.
    pub args: &'static [&'static [u8]],
}

/// `SET u1` (a bit of a plain filter).
pub(crate) const SET_U1: Words = Words {
    resp: b"$3\r\nSET\r\n$2\r\nu1\r\n",
    args: &[b"SET", b"u1"],
};
/// `INCRBY u4` (a counter of a counting filter).
pub(crate) const INCRBY_U4: Words = Words {
    resp: b"$6\r\nINCRBY\r\n$2\r\nu4\r\n",
    args: &[b"INCRBY", b"u4"],
};
/// `1`, the value of a `SET` or `INCRBY`.
pub(crate) const ONE: Words = Words {
    resp: b"$1\r\n1\r\n",
    args: &[b"1"],
};

/// Commands as the `redis` crate's `Cmd`s.
#[derive(Default)]
pub(crate) struct Cmds(pub Vec<Cmd>);

impl Sink for Cmds {
    fn command(&mut self, _args: usize) {
        self.0.push(Cmd::new());
    }

    fn arg(&mut self, bytes: &[u8]) {
        if let Some(c) = self.0.last_mut() {
            c.arg(bytes);
        }
    }

    fn uint(&mut self, v: u64) {
        if let Some(c) = self.0.last_mut() {
            c.arg(v);
        }
    }
}

impl Sink for Packer {
    fn command(&mut self, args: usize) {
        Packer::command(self, args)
    }

    fn arg(&mut self, bytes: &[u8]) {
        Packer::arg(self, bytes)
    }

    fn uint(&mut self, v: u64) {
        Packer::uint(self, v)
    }

    fn words(&mut self, w: &Words) {
        self.buf.extend_from_slice(w.resp);
    }
}

/// A pipeline being written.
#[derive(Default)]
pub(crate) struct Packer {
    /// The RESP bytes.
    pub buf: Vec<u8>,
    /// Commands written.
    pub count: usize,
}

impl Packer {
    /// Starts a command of `args` arguments (its name included).
    pub(crate) fn command(&mut self, args: usize) {
        self.buf.push(b'*');
        self.decimal(args as u64);
        self.buf.extend_from_slice(b"\r\n");
        self.count += 1;
    }

    /// One argument.
    pub(crate) fn arg(&mut self, bytes: &[u8]) {
        self.buf.push(b'$');
        self.decimal(bytes.len() as u64);
        self.buf.extend_from_slice(b"\r\n");
        self.buf.extend_from_slice(bytes);
        self.buf.extend_from_slice(b"\r\n");
    }

    /// One integer argument, in decimal.
    pub(crate) fn uint(&mut self, v: u64) {
        let (digits, i) = decimal_digits(v);
        self.arg(&digits[i..]);
    }

    fn decimal(&mut self, v: u64) {
        let (digits, i) = decimal_digits(v);
        self.buf.extend_from_slice(&digits[i..]);
    }
}

/// "00" to "99": two digits per division.
const PAIRS: &[u8; 200] = b"0001020304050607080910111213141516171819\
2021222324252627282930313233343536373839\
4041424344454647484950515253545556575859\
6061626364656667686970717273747576777879\
8081828384858687888990919293949596979899";

/// `v` in decimal ASCII: the digits are `buf[start..]`.
fn decimal_digits(mut v: u64) -> ([u8; 20], usize) {
    let mut digits = [0u8; 20];
    let mut i = digits.len();
    while v >= 100 {
        let r = (v % 100) as usize * 2;
        v /= 100;
        i -= 2;
        digits[i..i + 2].copy_from_slice(&PAIRS[r..r + 2]);
    }
    if v >= 10 {
        i -= 2;
        let r = v as usize * 2;
        digits[i..i + 2].copy_from_slice(&PAIRS[r..r + 2]);
    } else {
        i -= 1;
        digits[i] = b'0' + v as u8;
    }
    (digits, i)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn writes_what_the_redis_crate_writes() {
        let mut p = Packer::default();
        p.command(4);
        p.arg(b"GETRANGE");
        p.arg(b"k{x}");
        p.uint(0);
        p.uint(18_446_744_073_709_551_615);
        let want = redis::cmd("GETRANGE")
            .arg("k{x}")
            .arg(0u64)
            .arg(u64::MAX)
            .get_packed_command();
        assert_eq!(p.buf, want);
        assert_eq!(p.count, 1);
        // The same command through the `Cmd` sink packs to the same bytes.
        let mut c = Cmds::default();
        Sink::command(&mut c, 4);
        Sink::arg(&mut c, b"GETRANGE");
        Sink::arg(&mut c, b"k{x}");
        Sink::uint(&mut c, 0);
        Sink::uint(&mut c, u64::MAX);
        assert_eq!(c.0.len(), 1);
        assert_eq!(c.0[0].get_packed_command(), want);
    }

    #[test]
    fn constant_words_are_their_arguments_packed() {
        for w in [&SET_U1, &INCRBY_U4, &ONE] {
            let mut p = Packer::default();
            for a in w.args {
                p.arg(a);
            }
            assert_eq!(p.buf, w.resp, "{:?}", String::from_utf8_lossy(w.resp));
        }
    }

    #[test]
    fn decimals_match_std_formatting() {
        let mut cases = vec![
            0,
            1,
            9,
            10,
            11,
            99,
            100,
            101,
            999,
            1000,
            u64::MAX,
            u64::MAX - 1,
        ];
        let mut x = 1u64;
        while let Some(next) = x.checked_mul(10) {
            cases.extend([x - 1, x, x + 1]);
            x = next;
        }
        for i in 0..10_000u64 {
            cases.push(i.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> (i % 64));
        }
        for v in cases {
            let (d, i) = decimal_digits(v);
            assert_eq!(&d[i..], v.to_string().as_bytes());
        }
    }
}

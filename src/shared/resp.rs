//! Commands written straight into one RESP buffer, for pipelines to a single server.
//!
//! The `redis` crate builds a `Cmd` per command (allocations, then a second copy into the
//! pipeline's buffer). For the batched paths, where a profile of `add_many` on one core
//! showed about a third of the client's time in building commands, bloomsled writes the
//! protocol bytes itself: `*<n>\r\n` then `$<len>\r\n<bytes>\r\n` per argument.

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

/// `v` in decimal ASCII: the digits are `buf[start..]`.
fn decimal_digits(mut v: u64) -> ([u8; 20], usize) {
    let mut digits = [0u8; 20];
    let mut i = digits.len();
    loop {
        i -= 1;
        digits[i] = b'0' + (v % 10) as u8;
        v /= 10;
        if v == 0 {
            return (digits, i);
        }
    }
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
    }
}

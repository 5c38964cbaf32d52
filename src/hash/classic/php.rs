//! PHP 8 integer/float arithmetic on 64-bit platforms, as the Zend engine performs it.
//!
//! The classic hashes are PHP code whose values wander between `int` and `float`: an `int`
//! `+`, `-` or `*` that overflows yields a `float` computed from the operands converted to
//! `double` (`(double)a + (double)b`, not the exact sum rounded once), and every integer
//! operator (`(int)`, `<<`, `>>`, `^`, `&`, `%`) converts a `float` operand back with
//! `zend_dval_to_lval`. On 64-bit builds that conversion is modular: NaN and ±∞ give 0, finite
//! values in `[-2^63, 2^63)` truncate toward zero, and larger ones are reduced modulo 2^64
//! into a two's-complement `i64`. These rules were checked against php-cli 8.2 (see
//! `tests/classic_php.rs`, which compares every hash with PHP itself).

/// A PHP number: the `int` / `float` pair of zvals the hashes operate on.
#[derive(Debug, Clone, Copy)]
pub(super) enum Zv {
    /// A PHP `int` (64-bit).
    Int(i64),
    /// A PHP `float` (IEEE double), reached only through integer overflow.
    Float(f64),
}

/// 2^64 as a double (exact).
const TWO_POW_64: f64 = 18_446_744_073_709_551_616.0;
/// 2^63 as a double (exact): `(double)ZEND_LONG_MAX` rounds up to it.
const TWO_POW_63: f64 = 9_223_372_036_854_775_808.0;

/// `zend_dval_to_lval` on 64-bit PHP 7/8: the conversion of `(int)$f` and of a float operand
/// of an integer operator.
pub(super) fn dval_to_lval(d: f64) -> i64 {
    if !d.is_finite() {
        0
    } else if (-TWO_POW_63..TWO_POW_63).contains(&d) {
        // ZEND_DOUBLE_FITS_LONG: a plain C cast, truncating toward zero.
        d as i64
    } else {
        // Out of range: |d| >= 2^63, so d is an integer and `%` (C fmod) is exact; the
        // remainder lies in (-2^64, 2^64) and fits an i128 exactly. Keeping its low 64 bits
        // is what zend_dval_to_lval_slow's "add 2^64 if negative, subtract it above
        // ZEND_LONG_MAX" amounts to (every step of it is exact for such values).
        ((d % TWO_POW_64) as i128) as i64
    }
}

impl Zv {
    /// The value as PHP converts it for an integer operator or an `(int)` cast.
    pub(super) fn int(self) -> i64 {
        match self {
            Zv::Int(i) => i,
            Zv::Float(f) => dval_to_lval(f),
        }
    }

    /// The value as a double, for arithmetic that already involves a float.
    fn float(self) -> f64 {
        match self {
            Zv::Int(i) => i as f64,
            Zv::Float(f) => f,
        }
    }

    /// `$a + $b`.
    pub(super) fn add(self, other: Zv) -> Zv {
        match (self, other) {
            (Zv::Int(a), Zv::Int(b)) => match a.checked_add(b) {
                Some(s) => Zv::Int(s),
                None => Zv::Float(a as f64 + b as f64),
            },
            (a, b) => Zv::Float(a.float() + b.float()),
        }
    }

    /// `$a - $b`.
    pub(super) fn sub(self, other: Zv) -> Zv {
        match (self, other) {
            (Zv::Int(a), Zv::Int(b)) => match a.checked_sub(b) {
                Some(s) => Zv::Int(s),
                None => Zv::Float(a as f64 - b as f64),
            },
            (a, b) => Zv::Float(a.float() - b.float()),
        }
    }

    /// `$a * $b`.
    pub(super) fn mul(self, other: Zv) -> Zv {
        match (self, other) {
            (Zv::Int(a), Zv::Int(b)) => match a.checked_mul(b) {
                Some(p) => Zv::Int(p),
                None => Zv::Float(a as f64 * b as f64),
            },
            (a, b) => Zv::Float(a.float() * b.float()),
        }
    }

    /// `$a << $n` for a constant `0 <= n < 64`: the bits shifted out are lost, never a float.
    pub(super) fn shl(self, n: u32) -> Zv {
        Zv::Int(((self.int() as u64) << n) as i64)
    }

    /// `$a >> $n` for a constant `0 <= n < 64`: arithmetic (sign-extending) shift.
    pub(super) fn shr(self, n: u32) -> Zv {
        Zv::Int(self.int() >> n)
    }

    /// `$a ^ $b`.
    pub(super) fn xor(self, other: Zv) -> Zv {
        Zv::Int(self.int() ^ other.int())
    }

    /// `$a & $b`.
    pub(super) fn and(self, other: Zv) -> Zv {
        Zv::Int(self.int() & other.int())
    }

    /// `~$a`.
    pub(super) fn not(self) -> Zv {
        Zv::Int(!self.int())
    }

    /// `$a % $b` for a constant divisor other than 0 and -1: C's truncating remainder, whose
    /// sign is the dividend's.
    pub(super) fn rem(self, divisor: i64) -> Zv {
        debug_assert!(divisor != 0 && divisor != -1);
        Zv::Int(self.int() % divisor)
    }

    /// `$a != 0`, as PHP compares an int or a float with the int 0.
    pub(super) fn is_nonzero(self) -> bool {
        match self {
            Zv::Int(i) => i != 0,
            Zv::Float(f) => f != 0.0,
        }
    }
}

/// `ord($string[$i])`: the byte as an `int`.
pub(super) fn ord(b: u8) -> Zv {
    Zv::Int(i64::from(b))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Values printed by php-cli 8.2 for `(int)$f` (see the module docs): they pin the
    /// modular conversion independently of the hash tests.
    #[test]
    fn float_to_int_is_modular() {
        assert_eq!(dval_to_lval(9.3e18), -9_146_744_073_709_551_616);
        assert_eq!(dval_to_lval(-9.3e18), 9_146_744_073_709_551_616);
        assert_eq!(dval_to_lval(2.0e19), 1_553_255_926_290_448_384);
        assert_eq!(dval_to_lval(1e30), 5_076_964_154_930_102_272);
        assert_eq!(dval_to_lval(-1e30), -5_076_964_154_930_102_272);
        assert_eq!(dval_to_lval(TWO_POW_64), 0);
        assert_eq!(dval_to_lval(-TWO_POW_64 - 12288.0), -12288);
        assert_eq!(dval_to_lval(TWO_POW_63), i64::MIN);
        assert_eq!(dval_to_lval(-TWO_POW_63), i64::MIN);
        assert_eq!(dval_to_lval(1.5e300), 0);
        assert_eq!(dval_to_lval(f64::INFINITY), 0);
        assert_eq!(dval_to_lval(f64::NEG_INFINITY), 0);
        assert_eq!(dval_to_lval(f64::NAN), 0);
        assert_eq!(dval_to_lval(-2.9), -2);
    }

    #[test]
    fn overflow_goes_through_doubles() {
        // PHP_INT_MAX + 1 is float(9.2233720368547758E+18), i.e. 2^63.
        let s = Zv::Int(i64::MAX).add(Zv::Int(1));
        assert!(matches!(s, Zv::Float(f) if f == TWO_POW_63));
        // The operands are rounded before adding: (2^63 - 1) + 1 and (2^63 - 1) + 1000
        // are the same float.
        let t = Zv::Int(i64::MAX).add(Zv::Int(1000));
        assert_eq!(s.int(), t.int());
        assert!(matches!(Zv::Int(i64::MIN).sub(Zv::Int(1)), Zv::Float(_)));
        assert!(matches!(
            Zv::Int(1 << 40).mul(Zv::Int(1 << 40)),
            Zv::Float(_)
        ));
        assert!(matches!(Zv::Int(3).mul(Zv::Int(5)), Zv::Int(15)));
        assert_eq!(Zv::Int(-7).rem(3).int(), -1);
        assert_eq!(Zv::Int(-1).shr(27).int(), -1);
        assert_eq!(
            Zv::Int(0xFFFF_FFFF).shl(28).int(),
            1_152_921_504_338_411_520
        );
    }
}

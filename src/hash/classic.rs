//! The classic string hashes of the PHP `BloomFilterRedis` class, bit for bit.
//!
//! Many deployed PHP crawler and anti-spam filters keep one Redis bitmap (the "bucket") and
//! set, for each key, the bits at `BloomFilterHash::<name>Hash($key)` for a fixed list of
//! names (BKDR, SDBM, JS, PJW, ELF, DJB, DEK, FNV). The hash value itself is the bit offset
//! (`SETBIT bucket <hash> 1`), with no reduction to a bucket size: the bucket is as long as
//! the largest offset, up to 2^32 bits (512 MiB). This module returns exactly the values
//! that class returns under PHP 8 on 64-bit Linux, for every byte string, so that Rust code
//! can read and extend such a bucket without re-inserting its keys.
//!
//! # Not for new filters
//!
//! These functions are here for compatibility only. They distribute poorly: PJW depends on
//! nothing but the last 16 bytes of a key (every URL ending in the same 16 bytes gets the same
//! PJW offset); BKDR, SDBM and DJB round low bits away in floats once a key passes a few
//! bytes, so keys differing by a few characters far from their end often collide (the 200
//! keys `prefix-{0..200}-some-long-prefix0123456789abcdefXYZ` get 3 distinct BKDR values, 12
//! SDBM, 66 DJB, 164 DEK and 1 PJW, as PHP computes them too); and all of them are reduced
//! modulo `2^32 - 1`. New filters should use bloomsled's own layout ([`crate::Filter`],
//! xxh3-based [`crate::hash::hash_key`]).
//!
//! # PHP arithmetic, emulated
//!
//! The PHP code was written for 32-bit C integers but runs on 64-bit PHP integers that
//! overflow into floats:
//! - `+`, `-` and `*` of two ints that overflow give a float computed from the operands
//!   converted to double first (`PHP_INT_MAX + 1000 == PHP_INT_MAX + 1`), so low bits are
//!   lost;
//! - `(int)` and every integer operator (`<<`, `>>`, `^`, `&`, `%`) convert a float back
//!   modulo 2^64 (`(int)2.0e19 === 1553255926290448384`; NaN and ±∞ give 0);
//! - `<<` wraps in 64 bits, `>>` is an arithmetic shift (`-1 >> 27 === -1`);
//! - `%` truncates toward zero with the dividend's sign (`-7 % 3 === -1`), so in the final
//!   `($hash % 0xFFFFFFFF) & 0xFFFFFFFF` a negative hash leaves a negative remainder whose
//!   two's-complement low 32 bits the `&` keeps: the result is any `u32`, `0xFFFFFFFF`
//!   included (from a remainder of -1).
//!
//! Floats arise only from one overflowing operation on ints and are converted back within
//! the next operation or two, so they are always finite: NaN and ±∞ cannot occur.
//!
//! Each function documents where it leaves plain integer arithmetic.
//!
//! # Example
//!
//! ```
//! use bloomsled::hash::classic::{self, ClassicHash};
//!
//! // The list of a PHP filter: protected $hashFunction = array('BKDRHash', 'SDBMHash', 'JSHash');
//! let hashes = ClassicHash::parse_list("BKDRHash,SDBM,js")?;
//! assert_eq!(hashes, [ClassicHash::Bkdr, ClassicHash::Sdbm, ClassicHash::Js]);
//!
//! // The bit offsets the PHP class would SETBIT / GETBIT for this key (values printed by
//! // php-cli 8.2 running the PHP class itself).
//! assert_eq!(classic::offsets(b"hello", &hashes), [792145557, 2411508965, 347862645]);
//! assert_eq!(classic::bkdr(b"hello"), 792145557);
//! # Ok::<(), bloomsled::Error>(())
//! ```

mod names;
mod php;

pub use names::ClassicHash;

use php::{ord, Zv};

/// The modulus of every function's final `$hash % 0xFFFFFFFF`.
const MOD: i64 = 0xFFFF_FFFF;

/// `return ($hash % 0xFFFFFFFF) & 0xFFFFFFFF;`, common to all eight functions.
fn finish(hash: Zv) -> u32 {
    // The `& 0xFFFFFFFF` leaves a value in 0..=u32::MAX, so the cast is exact.
    hash.rem(MOD).and(Zv::Int(0xFFFF_FFFF)).int() as u32
}

/// `BloomFilterHash::BKDRHash`: `$hash = (int) (($hash * 131) + ord($c))`, from 0.
///
/// Quirk: the product overflows an int after about 9 bytes (`131^9 > 2^63`) and becomes a
/// float: from then on the byte added is rounded away (doubles near 2^63 are 1024 apart) and
/// the `(int)` cast reduces the float modulo 2^64, so the value depends on float rounding, not
/// on 64-bit wrapping multiplication.
pub fn bkdr(key: &[u8]) -> u32 {
    let mut hash = Zv::Int(0);
    for &b in key {
        hash = Zv::Int(hash.mul(Zv::Int(131)).add(ord(b)).int());
    }
    finish(hash)
}

/// `BloomFilterHash::SDBMHash`:
/// `$hash = (int) (ord($c) + ($hash << 6) + ($hash << 16) - $hash)`, from 0.
///
/// Quirk: the shifts wrap in 64 bits, but the additions (evaluated left to right) overflow
/// into a float once the hash nears 2^63 (after about 4 bytes), losing the low bits before the
/// `(int)` cast reduces the float modulo 2^64.
pub fn sdbm(key: &[u8]) -> u32 {
    let mut hash = Zv::Int(0);
    for &b in key {
        let sum = ord(b).add(hash.shl(6)).add(hash.shl(16)).sub(hash);
        hash = Zv::Int(sum.int());
    }
    finish(hash)
}

/// `BloomFilterHash::JSHash`:
/// `$hash ^= (($hash << 5) + ord($c) + ($hash >> 2))`, from 1315423911.
///
/// Quirk: the hash is a 64-bit int (not the 32 bits of Justin Sobel's C original); the sum
/// can overflow into a float, which the `^=` converts back modulo 2^64 after rounding.
pub fn js(key: &[u8]) -> u32 {
    let mut hash = Zv::Int(1_315_423_911);
    for &b in key {
        let mixed = hash.shl(5).add(ord(b)).add(hash.shr(2));
        hash = hash.xor(mixed);
    }
    finish(hash)
}

/// `BloomFilterHash::PJWHash`: `$hash = ($hash << 4) + ord($c)` over the key, from 0, then
/// once `$test = $hash & (0xFFFFFFFF << 28)` and, if non-zero,
/// `$hash = ($hash ^ ($test >> 24)) & ~(0xFFFFFFFF << 28)`.
///
/// Quirks: unlike the C original, the high-bits fold sits after the loop, not in it, so
/// the loop is a plain shift-and-add in which each byte moves 4 bits up per later byte and
/// leaves the 64-bit int after 16 more: the value depends only on the last 16 bytes. The mask
/// covers bits 28–59 (`0x0FFFFFFFF0000000`), not 28–31, because `<<` works on 64-bit ints.
/// Rarely (when the hash nears 2^63, e.g. the bytes `07 0F×14` then a byte `>= 0x10`) the
/// addition overflows into a float, which the next `<<` or `&` converts back modulo 2^64
/// after rounding.
pub fn pjw(key: &[u8]) -> u32 {
    let high_bits = Zv::Int(0xFFFF_FFFF).shl(28);
    let mut hash = Zv::Int(0);
    for &b in key {
        hash = hash.shl(4).add(ord(b));
    }
    let test = hash.and(high_bits);
    if test.is_nonzero() {
        hash = hash.xor(test.shr(24)).and(high_bits.not());
    }
    finish(hash)
}

/// `BloomFilterHash::ELEHash` (sic: the PHP method is spelled `ELEHash`), the ELF hash:
/// `$hash = ($hash << 4) + ord($c); $x = $hash & 0xF0000000; if ($x != 0) $hash ^= ($x >> 24);
/// $hash &= ~$x;`, from 0.
///
/// Quirk: only bits 28–31 are cleared, not everything above bit 31 as 32-bit C does
/// implicitly, so bits carried past bit 31 (`((2^28 - 1) << 4) + 0xFF` exceeds 32 bits)
/// accumulate and climb 4 bits per byte until `<<` drops them, and the final `% 0xFFFFFFFF`
/// folds them in. Pure integer arithmetic: bits 32–35 of `$hash << 4` are always clear (bits
/// 28–31 were cleared the round before), so `+ ord($c)` cannot overflow.
pub fn elf(key: &[u8]) -> u32 {
    let mut hash = Zv::Int(0);
    for &b in key {
        hash = hash.shl(4).add(ord(b));
        let x = hash.and(Zv::Int(0xF000_0000));
        if x.is_nonzero() {
            hash = hash.xor(x.shr(24));
        }
        hash = hash.and(x.not());
    }
    finish(hash)
}

/// `BloomFilterHash::DJBHash`: `$hash = (int) (($hash << 5) + $hash) + ord($c)`, from 5381.
///
/// Quirk: the `(int)` cast binds to `(($hash << 5) + $hash)` only, so the byte is added
/// afterwards and that addition can overflow into a float that is carried into the next
/// round, where `<<` converts it modulo 2^64 but `+ $hash` adds the float itself.
pub fn djb(key: &[u8]) -> u32 {
    let mut hash = Zv::Int(5381);
    for &b in key {
        hash = Zv::Int(hash.shl(5).add(hash).int()).add(ord(b));
    }
    finish(hash)
}

/// `BloomFilterHash::DEKHash`: `$hash = (($hash << 5) ^ ($hash >> 27)) ^ ord($c)`, starting
/// from the key's length in bytes.
///
/// Quirk: pure integer arithmetic, but on 64-bit ints: `>> 27` brings down bits 27–63
/// (sign-extended), not the top 5 bits of a 32-bit word, so it is not C's 32-bit DEK hash.
/// The empty key hashes to 0.
pub fn dek(key: &[u8]) -> u32 {
    // A slice is at most isize::MAX bytes long, so the length fits an i64.
    let mut hash = Zv::Int(key.len() as i64);
    for &b in key {
        hash = hash.shl(5).xor(hash.shr(27)).xor(ord(b));
    }
    finish(hash)
}

/// `BloomFilterHash::FNVHash`: `$hash = (int) ($hash * 16777619) % 0xFFFFFFFF;
/// $hash ^= ord($c);`, from 2166136261.
///
/// Quirk: this is FNV-1 (multiply, then XOR) reduced modulo `2^32 - 1` (not 2^32) every
/// round, so it differs from FNV-1 32 for every key longer than one byte. The hash stays
/// below 2^32, the product below 2^56: pure integer arithmetic, no float.
pub fn fnv(key: &[u8]) -> u32 {
    let mut hash = Zv::Int(2_166_136_261);
    for &b in key {
        hash = Zv::Int(hash.mul(Zv::Int(16_777_619)).int()).rem(MOD);
        hash = hash.xor(ord(b));
    }
    finish(hash)
}

/// The bit offsets the PHP class sets (`add`) or tests (`exists`) for `key` in its bucket:
/// one per entry of `hashes`, in that order, repeats included (a repeated hash gives the same
/// offset twice, as in PHP). Each is the hash value itself, `0..=u32::MAX`.
///
/// ```
/// use bloomsled::hash::classic::{offsets, ClassicHash};
///
/// let hashes = [ClassicHash::Fnv, ClassicHash::Dek, ClassicHash::Fnv];
/// let bits = offsets(b"key", &hashes);
/// assert_eq!(bits.len(), 3);
/// assert_eq!(bits[0], bits[2]);
/// assert_eq!(bits[1], u64::from(ClassicHash::Dek.hash(b"key")));
/// ```
pub fn offsets(key: &[u8], hashes: &[ClassicHash]) -> Vec<u64> {
    hashes.iter().map(|h| u64::from(h.hash(key))).collect()
}

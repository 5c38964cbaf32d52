//! [`ClassicHash`]: the eight hashes by name, as a PHP filter's `$hashFunction` lists them.

use std::fmt;
use std::str::FromStr;

use crate::error::{Error, Result};

/// One of the eight `BloomFilterHash` functions.
///
/// Parses from the PHP method name or the bare name, case-insensitively (PHP method names are
/// case-insensitive too): `"BKDRHash"`, `"bkdr"`, `"Fnv"`. ELF also answers to `"ELE"` /
/// `"ELEHash"`, the (misspelt) name of its PHP method, which is what a PHP filter's
/// `$hashFunction` array contains.
///
/// ```
/// use bloomsled::hash::classic::ClassicHash;
///
/// let h: ClassicHash = "ELEHash".parse()?;
/// assert_eq!(h, ClassicHash::Elf);
/// assert_eq!(h.to_string(), "ELF");
/// assert_eq!(h.php_method(), "ELEHash");
/// assert!("MD5".parse::<ClassicHash>().is_err());
/// # Ok::<(), bloomsled::Error>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum ClassicHash {
    /// [`bkdr`](super::bkdr), PHP `BKDRHash`.
    Bkdr,
    /// [`sdbm`](super::sdbm), PHP `SDBMHash`.
    Sdbm,
    /// [`js`](super::js), PHP `JSHash`.
    Js,
    /// [`pjw`](super::pjw), PHP `PJWHash`.
    Pjw,
    /// [`elf`](super::elf), PHP `ELEHash` (sic).
    Elf,
    /// [`djb`](super::djb), PHP `DJBHash`.
    Djb,
    /// [`dek`](super::dek), PHP `DEKHash`.
    Dek,
    /// [`fnv`](super::fnv), PHP `FNVHash`.
    Fnv,
}

impl ClassicHash {
    /// All eight: BKDR, SDBM, JS, PJW, ELF, DJB, DEK, FNV (the PHP class defines them in
    /// another order, which does not matter: a filter's own list fixes its order).
    pub const ALL: [ClassicHash; 8] = [
        ClassicHash::Bkdr,
        ClassicHash::Sdbm,
        ClassicHash::Js,
        ClassicHash::Pjw,
        ClassicHash::Elf,
        ClassicHash::Djb,
        ClassicHash::Dek,
        ClassicHash::Fnv,
    ];

    /// The hash of `key`: exactly what the PHP method returns for the same bytes.
    pub fn hash(self, key: &[u8]) -> u32 {
        match self {
            ClassicHash::Bkdr => super::bkdr(key),
            ClassicHash::Sdbm => super::sdbm(key),
            ClassicHash::Js => super::js(key),
            ClassicHash::Pjw => super::pjw(key),
            ClassicHash::Elf => super::elf(key),
            ClassicHash::Djb => super::djb(key),
            ClassicHash::Dek => super::dek(key),
            ClassicHash::Fnv => super::fnv(key),
        }
    }

    /// The short name, as [`Display`](fmt::Display) prints it: `"BKDR"`, …, `"FNV"`.
    pub fn name(self) -> &'static str {
        match self {
            ClassicHash::Bkdr => "BKDR",
            ClassicHash::Sdbm => "SDBM",
            ClassicHash::Js => "JS",
            ClassicHash::Pjw => "PJW",
            ClassicHash::Elf => "ELF",
            ClassicHash::Djb => "DJB",
            ClassicHash::Dek => "DEK",
            ClassicHash::Fnv => "FNV",
        }
    }

    /// The name of the PHP `BloomFilterHash` method: `"BKDRHash"`, …, and `"ELEHash"` for
    /// ELF, as the reference class spells it.
    pub fn php_method(self) -> &'static str {
        match self {
            ClassicHash::Bkdr => "BKDRHash",
            ClassicHash::Sdbm => "SDBMHash",
            ClassicHash::Js => "JSHash",
            ClassicHash::Pjw => "PJWHash",
            ClassicHash::Elf => "ELEHash",
            ClassicHash::Djb => "DJBHash",
            ClassicHash::Dek => "DEKHash",
            ClassicHash::Fnv => "FNVHash",
        }
    }

    /// Parses a comma-separated list such as `"BKDR,SDBMHash, js"` (the CLI's `--hashes`):
    /// order kept, repeats allowed, blanks around names ignored. An empty list is an error,
    /// as the PHP class refuses an empty `$hashFunction`.
    ///
    /// ```
    /// use bloomsled::hash::classic::ClassicHash;
    ///
    /// let list = ClassicHash::parse_list("FNV, bkdrhash,FNV")?;
    /// assert_eq!(list, [ClassicHash::Fnv, ClassicHash::Bkdr, ClassicHash::Fnv]);
    /// assert!(ClassicHash::parse_list("").is_err());
    /// assert!(ClassicHash::parse_list("BKDR,,SDBM").is_err());
    /// # Ok::<(), bloomsled::Error>(())
    /// ```
    pub fn parse_list(list: &str) -> Result<Vec<ClassicHash>> {
        if list.trim().is_empty() {
            return Err(Error::config(
                "the list of classic hashes is empty; name at least one of \
                 BKDR, SDBM, JS, PJW, ELF, DJB, DEK, FNV",
            ));
        }
        list.split(',').map(|name| name.trim().parse()).collect()
    }
}

impl fmt::Display for ClassicHash {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for ClassicHash {
    type Err = Error;

    /// Accepts the short name or the PHP method name, in any case; see [`ClassicHash`].
    fn from_str(s: &str) -> Result<Self> {
        let bare = match s.len().checked_sub(4) {
            Some(cut) if s.is_char_boundary(cut) && s[cut..].eq_ignore_ascii_case("hash") => {
                &s[..cut]
            }
            _ => s,
        };
        if bare.eq_ignore_ascii_case("ELE") {
            return Ok(ClassicHash::Elf);
        }
        ClassicHash::ALL
            .into_iter()
            .find(|h| bare.eq_ignore_ascii_case(h.name()))
            .ok_or_else(|| Error::UnknownHash { name: s.to_owned() })
    }
}

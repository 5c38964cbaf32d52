//! Properties of the classic hashes that need no oracle: names parse back to the same hash in
//! every accepted spelling, anything else is a typed error, and no function panics on any
//! input. (Their values are checked against PHP itself in `tests/classic_php.rs`.)

use bloomsled::hash::classic::{self, ClassicHash};
use bloomsled::Error;
use proptest::prelude::*;

fn any_hash() -> impl Strategy<Value = ClassicHash> {
    proptest::sample::select(ClassicHash::ALL.to_vec())
}

/// `name` with each ASCII letter's case chosen by `mask`.
fn recase(name: &str, mask: u64) -> String {
    name.chars()
        .enumerate()
        .map(|(i, c)| {
            if mask >> (i % 64) & 1 == 1 {
                c.to_ascii_lowercase()
            } else {
                c.to_ascii_uppercase()
            }
        })
        .collect()
}

/// Every spelling the parser promises to accept for `h`.
fn spellings(h: ClassicHash) -> Vec<String> {
    let mut names = vec![
        h.to_string(),
        h.name().to_owned(),
        h.php_method().to_owned(),
    ];
    names.push(format!("{}Hash", h.name()));
    if h == ClassicHash::Elf {
        names.extend(["ELE".to_owned(), "ELEHash".to_owned()]);
    }
    names
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn every_spelling_in_any_case_round_trips(h in any_hash(), mask in any::<u64>()) {
        for name in spellings(h) {
            let spelled = recase(&name, mask);
            prop_assert_eq!(spelled.parse::<ClassicHash>(), Ok(h), "{}", spelled);
        }
    }

    #[test]
    fn other_names_are_a_typed_error(name in any::<String>()) {
        let known = ClassicHash::ALL
            .iter()
            .flat_map(|&h| spellings(h))
            .any(|s| s.eq_ignore_ascii_case(&name));
        match name.parse::<ClassicHash>() {
            Ok(h) => prop_assert!(known, "{:?} parsed as {}", name, h),
            Err(Error::UnknownHash { name: got }) => {
                prop_assert!(!known);
                prop_assert_eq!(got, name);
            }
            Err(e) => prop_assert!(false, "unexpected error {e}"),
        }
    }

    #[test]
    fn lists_round_trip(list in proptest::collection::vec(any_hash(), 1..12), php in any::<bool>()) {
        let names: Vec<&str> = list
            .iter()
            .map(|h| if php { h.php_method() } else { h.name() })
            .collect();
        prop_assert_eq!(ClassicHash::parse_list(&names.join(",")).unwrap(), list.clone());
        prop_assert_eq!(ClassicHash::parse_list(&names.join(" , ")).unwrap(), list);
    }

    #[test]
    fn no_function_panics(key in proptest::collection::vec(any::<u8>(), 0..2048)) {
        let offsets = classic::offsets(&key, &ClassicHash::ALL);
        prop_assert_eq!(offsets.len(), 8);
        for (&h, &o) in ClassicHash::ALL.iter().zip(&offsets) {
            prop_assert!(o <= u64::from(u32::MAX));
            prop_assert_eq!(o, u64::from(h.hash(&key)));
        }
        // The free functions are the enum's.
        prop_assert_eq!(classic::bkdr(&key), ClassicHash::Bkdr.hash(&key));
        prop_assert_eq!(classic::sdbm(&key), ClassicHash::Sdbm.hash(&key));
        prop_assert_eq!(classic::js(&key), ClassicHash::Js.hash(&key));
        prop_assert_eq!(classic::pjw(&key), ClassicHash::Pjw.hash(&key));
        prop_assert_eq!(classic::elf(&key), ClassicHash::Elf.hash(&key));
        prop_assert_eq!(classic::djb(&key), ClassicHash::Djb.hash(&key));
        prop_assert_eq!(classic::dek(&key), ClassicHash::Dek.hash(&key));
        prop_assert_eq!(classic::fnv(&key), ClassicHash::Fnv.hash(&key));
    }

    /// Mixed, repeated lists: the offsets follow the list, entry by entry.
    #[test]
    fn offsets_follow_the_list_order(key in proptest::collection::vec(any::<u8>(), 0..300)) {
        let list = ClassicHash::parse_list("js,BKDRHash,ELEHash,js,FNV").unwrap();
        let offs = classic::offsets(&key, &list);
        let want: Vec<u64> = list.iter().map(|h| u64::from(h.hash(&key))).collect();
        prop_assert_eq!(&offs, &want);
        prop_assert_eq!(offs[0], offs[3]);
    }
}

#[test]
fn bad_lists_are_errors() {
    for list in [
        "",
        " ",
        ",",
        "BKDR,",
        ",SDBM",
        "BKDR,,JS",
        "BKDR;SDBM",
        "MD5",
        "Hash",
        "BKDRHashHash",
    ] {
        assert!(ClassicHash::parse_list(list).is_err(), "{list:?} accepted");
    }
    assert!(matches!(
        ClassicHash::parse_list("BKDR,murmur"),
        Err(Error::UnknownHash { name }) if name == "murmur"
    ));
    assert!(matches!(
        ClassicHash::parse_list(""),
        Err(Error::InvalidConfig { .. })
    ));
}

/// Huge keys take the long path through every function without panicking (the length, DEK's
/// seed, is far above any shift or multiply that could overflow it in Rust).
#[test]
fn megabyte_keys() {
    for fill in [0x00u8, 0x7F, 0xFF] {
        let key = vec![fill; 1 << 20];
        let offsets = classic::offsets(&key, &ClassicHash::ALL);
        assert_eq!(offsets.len(), 8);
    }
}

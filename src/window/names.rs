//! The names of a window's generation trees: the reserved prefix, the window name with its
//! length before it (a window name may hold any bytes, `:` and `/` included), and the index:
//! `__bloomsled_window:<name length>:<name>:<index>`, lengths and indexes in decimal. One name
//! decodes one way, and a window's name can never make another window's generation names.

use crate::store::RESERVED_TREE_PREFIX;

/// First bytes of every generation tree's name: the prefix the store reserves for the
/// layers above it.
const GENERATION_PREFIX: &[u8] = RESERVED_TREE_PREFIX;

/// The tree name of generation `index` of window `window`.
pub(crate) fn generation_name(window: &[u8], index: u64) -> Vec<u8> {
    let mut n = GENERATION_PREFIX.to_vec();
    n.extend_from_slice(format!("{}:", window.len()).as_bytes());
    n.extend_from_slice(window);
    n.extend_from_slice(format!(":{index}").as_bytes());
    n
}

/// The window and index a generation tree name encodes; `None` for any other name.
pub(crate) fn parse_generation_name(tree: &[u8]) -> Option<(&[u8], u64)> {
    let rest = tree.strip_prefix(GENERATION_PREFIX)?;
    let colon = rest.iter().position(|&b| b == b':')?;
    let len: usize = decimal(&rest[..colon])?.try_into().ok()?;
    let rest = &rest[colon + 1..];
    if rest.len() < len + 1 || rest[len] != b':' {
        return None;
    }
    let index = decimal(&rest[len + 1..])?;
    Some((&rest[..len], index))
}

/// A canonical decimal number (no sign, no leading zero unless it is 0).
fn decimal(b: &[u8]) -> Option<u64> {
    if b.is_empty() || !b.iter().all(u8::is_ascii_digit) || (b.len() > 1 && b[0] == b'0') {
        return None;
    }
    std::str::from_utf8(b).ok()?.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn readable_and_reserved() {
        assert_eq!(
            generation_name(b"crawl", 20_000),
            b"__bloomsled_window:5:crawl:20000".to_vec()
        );
        assert_eq!(parse_generation_name(b"crawl"), None);
        assert_eq!(
            parse_generation_name(b"__bloomsled_window:5:crawl:020"),
            None
        );
        assert_eq!(parse_generation_name(b"__bloomsled_window:5:crawl:"), None);
        assert_eq!(parse_generation_name(b"__bloomsled_window:9:crawl:1"), None);
    }

    proptest! {
        #[test]
        fn round_trips_and_never_collides(
            a in proptest::collection::vec(any::<u8>(), 0..24),
            b in proptest::collection::vec(prop_oneof![Just(b':'), Just(b'1'), any::<u8>()], 0..24),
            ea in any::<u64>(),
            eb in any::<u64>(),
        ) {
            let na = generation_name(&a, ea);
            prop_assert_eq!(parse_generation_name(&na), Some((&a[..], ea)));
            let nb = generation_name(&b, eb);
            prop_assert_eq!(na == nb, a == b && ea == eb);
        }
    }
}

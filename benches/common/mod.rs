//! Helpers shared by the benches: deterministic URL-like keys and environment knobs.
#![allow(dead_code)] // each bench uses a subset

use std::io::Write as _;

pub mod rounds;

pub fn env_count(name: &str, default: u64) -> u64 {
    match std::env::var(name) {
        Ok(s) => s
            .replace('_', "")
            .parse()
            .unwrap_or_else(|_| panic!("{name}={s:?} is not a number")),
        Err(_) => default,
    }
}

/// `2M`, `50M`, `200K`, or the plain number.
pub fn size_label(n: u64) -> String {
    if n >= 1_000_000 && n.is_multiple_of(1_000_000) {
        format!("{}M", n / 1_000_000)
    } else if n >= 1_000 && n.is_multiple_of(1_000) {
        format!("{}K", n / 1_000)
    } else {
        n.to_string()
    }
}

#[inline]
pub fn splitmix64(x: u64) -> u64 {
    let mut z = x.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// Writes key number `id` into `buf`: `https://hNN.example.com/<16 hex digits><padding>`,
/// 40..=80 bytes long (uniformly). The hex digits are `splitmix64(id)`, a bijection, so
/// distinct ids give distinct keys, and present, absent and fresh keys are spread alike over
/// the key space: absent lookups land in the same sled leaves as present ones, not in one
/// cached corner of the tree.
pub fn write_key(buf: &mut Vec<u8>, id: u64) {
    const ALPHABET: &[u8; 36] = b"abcdefghijklmnopqrstuvwxyz0123456789";
    buf.clear();
    let token = splitmix64(id);
    let m = splitmix64(token);
    write!(buf, "https://h{:02}.example.com/{token:016x}", m % 100).unwrap();
    let len = 40 + (m >> 32) as usize % 41;
    debug_assert!(buf.len() <= len);
    let mut x = m;
    while buf.len() < len {
        x = x.wrapping_mul(0x9E37_79B9_7F4A_7C15).wrapping_add(1);
        buf.push(ALPHABET[(x >> 58) as usize % 36]);
    }
}

pub fn key(id: u64) -> Vec<u8> {
    let mut buf = Vec::with_capacity(80);
    write_key(&mut buf, id);
    buf
}

/// Hands the key ids `0..n` to `apply` in chunks of `chunk`, with a scratch buffer for
/// [`write_key`]: one store batch per chunk.
pub fn load_chunks(n: u64, chunk: u64, mut apply: impl FnMut(std::ops::Range<u64>, &mut Vec<u8>)) {
    let mut buf = Vec::with_capacity(80);
    for start in (0..n).step_by(chunk as usize) {
        apply(start..(start + chunk).min(n), &mut buf);
    }
}

/// Replaces what stands between `<!-- {marker}:start -->` and `<!-- {marker}:end -->` in
/// `docs/benchmarks.md` with `table`, so the docs show the run a reader can repeat; says so
/// on stderr, or that the markers are missing (the table is printed either way).
#[allow(dead_code)] // each bench binary uses its own subset
pub fn write_docs_table(marker: &str, table: &str) {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/docs/benchmarks.md");
    let Ok(text) = std::fs::read_to_string(path) else {
        eprintln!("{path} not found; table printed only");
        return;
    };
    let start = format!("<!-- {marker}:start -->\n");
    let end = format!("<!-- {marker}:end -->");
    match (text.find(&start), text.find(&end)) {
        (Some(a), Some(b)) if a < b => {
            let new = format!("{}{start}{table}{}", &text[..a], &text[b..]);
            match std::fs::write(path, new) {
                Ok(()) => eprintln!("docs/benchmarks.md updated"),
                Err(e) => eprintln!("cannot write {path}: {e}"),
            }
        }
        _ => eprintln!("docs/benchmarks.md has no {marker} markers; table printed only"),
    }
}

//! The classic hashes against their oracle: php-cli running the reference PHP class itself
//! (`../shared/reference/bloom_filter_redis.php`, beside the workspace) on a few thousand
//! generated keys — empty, every single byte, short and long ASCII, non-ASCII UTF-8, arbitrary
//! bytes, and every prefix of long keys so that each function's int→float overflow point is
//! crossed. No expected value is written here: PHP computes them all at test time.
//!
//! Needs `php` on PATH (Debian: php-cli; `.ci/run` installs it), so it belongs to the full
//! suite (`cargo test --all-features`) with the other tests that need system packages, behind
//! this crate's `server-tests` feature: the classic hashes exist for the classic PHP layout
//! on Redis. Gating on a feature rather than on an environment variable keeps `cargo test`
//! passing on a machine with only Rust, and keeps the full suite one command that runs
//! everything. Under `CI=true` a missing php or reference file fails the test; elsewhere it
//! is skipped with a loud message.
#![cfg(feature = "server-tests")]

// The workspace's deterministic generator, shared with the core's tests.
#[path = "../../tests/common/rng.rs"]
#[allow(dead_code)] // each test uses its own subset
mod rng;

use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::Command;

use bloomsled::hash::classic::{self, ClassicHash};
use rng::Rng;

/// The PHP driver: loads the reference class (defining classes only; nothing connects to
/// Redis until a filter is constructed), then prints, per hex-encoded key, the value of each
/// method named on the command line. It also calls each method the way `exists()` does (with
/// the length passed) and reports a difference, which would make add and exists disagree.
const DRIVER: &str = r#"<?php
// The reference code converts overflowed floats to int implicitly, which PHP 8.1+ reports as
// deprecated; the conversion itself is what is being tested, so silence only that.
error_reporting(E_ALL & ~E_DEPRECATED);
ini_set('display_errors', 'stderr');
require $argv[1];
$hash = new BloomFilterHash;
$methods = explode(',', $argv[2]);
$out = fopen('php://stdout', 'w');
foreach (file($argv[3], FILE_IGNORE_NEW_LINES) as $line) {
    $key = hex2bin($line);
    $values = [];
    foreach ($methods as $m) {
        $v = $hash->$m($key);
        $w = $hash->$m($key, strlen($key));
        if (!is_int($v) || $v !== $w) {
            fwrite(STDERR, "add/exists disagree or non-int: $m($line): " . var_export($v, true) . ' ' . var_export($w, true) . "\n");
            exit(3);
        }
        $values[] = $v;
    }
    fwrite($out, implode(' ', $values) . "\n");
}
"#;

/// The keys under test: a few thousand, covering the shapes that matter to the arithmetic.
fn keys() -> Vec<Vec<u8>> {
    let mut rng = Rng(0x636c_6173_7369_6321);
    let mut keys: Vec<Vec<u8>> = vec![Vec::new(), b"0".to_vec(), b"hello".to_vec()];
    keys.extend((0..=255u8).map(|b| vec![b]));
    // Every prefix of a few long keys: each function crosses its overflow point somewhere.
    for seed_key in [
        rng.ascii(80),
        rng.bytes(80),
        vec![0xFF; 80],
        vec![0x7F; 80],
        rng.utf8(30),
    ] {
        keys.extend((1..=seed_key.len()).map(|n| seed_key[..n].to_vec()));
    }
    // Near-duplicates differing far from the end: where float rounding makes BKDR, SDBM and
    // DJB collide.
    keys.extend(
        (0..200).map(|p| format!("prefix-{p}-some-long-prefix0123456789abcdefXYZ").into_bytes()),
    );
    // PJW's shift-and-add overflows into a float only when the hash nears 2^63: the nibbles
    // 7,F,F,…,F (15 of them) followed by a byte >= 0x10, at the end or inside the key.
    let mut pjw_edge = vec![0x07];
    pjw_edge.extend([0x0F; 14]);
    for last in [0x10, 0x80, 0xFF] {
        for tail in [&[][..], b"x", b"0123456789abcdefghij"] {
            for head in [&[][..], b"\x00", b"head"] {
                keys.push([head, &pjw_edge, &[last], tail].concat());
            }
        }
    }
    for _ in 0..800 {
        let len = rng.below(17) as usize;
        keys.push(rng.ascii(len));
    }
    for _ in 0..400 {
        let len = 16 + rng.below(300) as usize;
        keys.push(rng.ascii(len));
    }
    for _ in 0..300 {
        keys.push(
            format!(
                "https://example.com/item/{}?page={}",
                rng.next(),
                rng.below(1000)
            )
            .into_bytes(),
        );
    }
    for _ in 0..500 {
        let chars = 1 + rng.below(60) as usize;
        keys.push(rng.utf8(chars));
    }
    for _ in 0..600 {
        let len = rng.below(400) as usize;
        keys.push(rng.bytes(len));
    }
    for _ in 0..40 {
        let len = 1000 + rng.below(7000) as usize;
        keys.push(if rng.below(2) == 0 {
            rng.bytes(len)
        } else {
            rng.ascii(len)
        });
    }
    keys
}

/// php and the reference file, or `None` (after a loud message) when either is missing
/// outside CI. Under CI a missing one is a failure.
fn oracle() -> Option<PathBuf> {
    let reference =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../../shared/reference/bloom_filter_redis.php");
    let php_ok = Command::new("php")
        .arg("-v")
        .output()
        .is_ok_and(|o| o.status.success());
    let missing = match (php_ok, reference.is_file()) {
        (true, true) => return Some(reference),
        (false, _) => "php (Debian package php-cli) is not on PATH".to_owned(),
        (true, false) => format!("the reference PHP file {} is missing", reference.display()),
    };
    if std::env::var("CI").is_ok_and(|v| v == "true") {
        panic!("CI=true but {missing}: the PHP oracle test cannot run");
    }
    eprintln!("\n!!!! SKIPPING the PHP oracle test: {missing} !!!!\n");
    None
}

fn hex(bytes: &[u8]) -> String {
    bytes
        .iter()
        .fold(String::with_capacity(bytes.len() * 2), |mut s, b| {
            let _ = write!(s, "{b:02x}");
            s
        })
}

/// BKDR with plain 64-bit wrapping arithmetic: what a port that ignores PHP's float overflow
/// would compute. The test requires PHP to disagree with it often, proving the keys reach
/// the float paths the emulation exists for.
fn naive_bkdr(key: &[u8]) -> u32 {
    let h = key
        .iter()
        .fold(0i64, |h, &b| h.wrapping_mul(131).wrapping_add(i64::from(b)));
    ((h % 0xFFFF_FFFF) & 0xFFFF_FFFF) as u32
}

#[test]
fn every_hash_matches_php_on_generated_keys() {
    let Some(reference) = oracle() else { return };
    let keys = keys();
    let dir = tempfile::tempdir().unwrap();
    let input = dir.path().join("keys.hex");
    let driver = dir.path().join("driver.php");
    let lines: String = keys.iter().map(|k| hex(k) + "\n").collect();
    std::fs::write(&input, lines).unwrap();
    std::fs::write(&driver, DRIVER).unwrap();
    let methods: Vec<&str> = ClassicHash::ALL.iter().map(|h| h.php_method()).collect();

    let out = Command::new("php")
        .arg(&driver)
        .arg(&reference)
        .arg(methods.join(","))
        .arg(&input)
        .output()
        .expect("run php");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "php failed ({}): {stderr}",
        out.status
    );
    assert!(stderr.trim().is_empty(), "php wrote to stderr: {stderr}");
    let stdout = String::from_utf8(out.stdout).unwrap();
    let rows: Vec<&str> = stdout.lines().collect();
    assert_eq!(rows.len(), keys.len(), "php printed one line per key");

    let mut mismatches = Vec::new();
    let mut per_hash = [0usize; 8];
    let mut bad_offsets = 0;
    let mut naive_differs = 0;
    for (key, row) in keys.iter().zip(&rows) {
        let php: Vec<u32> = row.split(' ').map(|v| v.parse().unwrap()).collect();
        assert_eq!(php.len(), ClassicHash::ALL.len(), "row {row:?}");
        for (i, (&h, &want)) in ClassicHash::ALL.iter().zip(&php).enumerate() {
            let got = h.hash(key);
            if got != want {
                per_hash[i] += 1;
                mismatches.push(format!("{h}({}) = {got}, PHP says {want}", hex(key)));
            }
        }
        // The offsets for the whole list, in order, are the PHP values themselves.
        let offsets = classic::offsets(key, &ClassicHash::ALL);
        let want: Vec<u64> = php.iter().map(|&p| u64::from(p)).collect();
        if offsets != want {
            bad_offsets += 1;
        }
        if naive_bkdr(key) != php[0] {
            naive_differs += 1;
        }
    }
    assert!(
        mismatches.is_empty(),
        "{} of {} values differ from PHP (per hash {:?}: {per_hash:?}), e.g.:\n{}",
        mismatches.len(),
        keys.len() * ClassicHash::ALL.len(),
        ClassicHash::ALL,
        mismatches[..mismatches.len().min(20)].join("\n")
    );
    assert_eq!(bad_offsets, 0, "offsets() disagrees with the hashes");
    assert!(
        naive_differs > keys.len() / 4,
        "only {naive_differs} keys reach PHP's float overflow in BKDR"
    );
    eprintln!(
        "{} keys x {} hashes agree with PHP; naive 64-bit BKDR would differ on {naive_differs}",
        keys.len(),
        ClassicHash::ALL.len()
    );
}

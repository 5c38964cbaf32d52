//! The classic layout against its oracle: the reference PHP class itself
//! (`../shared/reference/bloom_filter_redis.php`, run by php-cli with php-redis) and a real
//! redis-server. For each of the eight hashes and for mixed lists: PHP adds → bloomsled finds
//! all; bloomsled adds → PHP's `exists` finds all; on keys nobody added both give the same
//! answers; and the same adds leave byte-identical bitmaps. No expected value is written
//! here: PHP computes them at test time.
#![cfg(feature = "server-tests")]

// The workspace's deterministic generator, shared with the core's tests.
mod redis_support;
#[path = "../../tests/common/rng.rs"]
#[allow(dead_code)] // each test uses its own subset
mod rng;

use std::path::{Path, PathBuf};
use std::process::Command;

use bloomsled::hash::classic::ClassicHash;
use bloomsled_redis::Error;
use bloomsled_redis::{ClassicFilter, Endpoint};
use redis_support::Server;
use rng::Rng;

/// A subclass of the reference `BloomFilterRedis` with the bucket and list from the command
/// line; `add` adds every hex-encoded key of the file, `exists` prints 1 or 0 per key.
const DRIVER: &str = r#"<?php
error_reporting(E_ALL & ~E_DEPRECATED);
ini_set('display_errors', 'stderr');
require $argv[1];
class Oracle extends BloomFilterRedis {
    public function __construct($bucket, $fns) {
        $this->bucket = $bucket;
        $this->hashFunction = $fns;
        parent::__construct();
    }
}
$f = new Oracle($argv[2], explode(',', $argv[3]));
$out = fopen('php://stdout', 'w');
foreach (file($argv[5], FILE_IGNORE_NEW_LINES) as $line) {
    $key = hex2bin($line);
    if ($argv[4] === 'add') {
        $f->add($key);
    } else {
        fwrite($out, ($f->exists($key) ? '1' : '0') . "\n");
    }
}
"#;

/// php with the redis extension and the reference file, or `None` after a loud message
/// (outside CI; under `CI=true` a missing one fails).
fn oracle() -> Option<PathBuf> {
    let reference =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../../shared/reference/bloom_filter_redis.php");
    let php_redis = Command::new("php")
        .arg("-m")
        .output()
        .map(|o| {
            String::from_utf8_lossy(&o.stdout)
                .lines()
                .any(|l| l.trim() == "redis")
        })
        .unwrap_or(false);
    if php_redis && reference.is_file() {
        return Some(reference);
    }
    let missing = format!(
        "php with the redis extension ({php_redis}) or {} ({})",
        reference.display(),
        reference.is_file()
    );
    if std::env::var("CI").is_ok_and(|v| v == "true") {
        panic!("CI=true but {missing} is missing (Debian: apt-get install php-cli php-redis)");
    }
    eprintln!("\n*** SKIPPING the PHP oracle test: {missing} is missing ***\n");
    None
}

struct Php<'a> {
    reference: &'a Path,
    port: u16,
    dir: &'a Path,
}

impl Php<'_> {
    fn run(&self, bucket: &str, list: &[ClassicHash], mode: &str, keys: &[Vec<u8>]) -> String {
        let driver = self.dir.join("driver.php");
        std::fs::write(&driver, DRIVER).unwrap();
        let input = self.dir.join(format!("{bucket}-{mode}.hex"));
        let hex: String = keys
            .iter()
            .map(|k| k.iter().map(|b| format!("{b:02x}")).collect::<String>() + "\n")
            .collect();
        std::fs::write(&input, hex).unwrap();
        let methods: Vec<&str> = list.iter().map(|h| h.php_method()).collect();
        let out = Command::new("php")
            .arg(&driver)
            .arg(self.reference)
            .arg(bucket)
            .arg(methods.join(","))
            .arg(mode)
            .arg(&input)
            .env("REDIS_PORT", self.port.to_string())
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "php: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8(out.stdout).unwrap()
    }

    fn exists(&self, bucket: &str, list: &[ClassicHash], keys: &[Vec<u8>]) -> Vec<bool> {
        let out = self.run(bucket, list, "exists", keys);
        let v: Vec<bool> = out.lines().map(|l| l == "1").collect();
        assert_eq!(v.len(), keys.len());
        v
    }
}

/// Deterministic keys: empty, short and long ASCII, URLs, non-ASCII UTF-8, raw bytes.
fn keys(seed: u64, n: usize) -> Vec<Vec<u8>> {
    let mut rng = Rng(seed);
    let mut v = vec![Vec::new()];
    for i in 0..n {
        let len = (rng.next() % 300) as usize;
        let k = match i % 4 {
            0 => format!(
                "https://www.example.com/{seed}/{i}/{}",
                "p".repeat(len % 60)
            )
            .into_bytes(),
            1 => (0..len).map(|_| b'!' + (rng.next() % 94) as u8).collect(),
            2 => (0..len % 40)
                .map(|_| ['é', 'Ж', '漢', '🦀', 'a'][(rng.next() % 5) as usize])
                .collect::<String>()
                .into_bytes(),
            _ => (0..len).map(|_| rng.next() as u8).collect(),
        };
        v.push(k);
    }
    v
}

#[test]
fn bloomsled_and_the_php_class_agree_bit_for_bit() {
    require_redis!();
    let Some(reference) = oracle() else { return };
    let s = Server::start();
    let dir = tempfile::tempdir().unwrap();
    let php = Php {
        reference: &reference,
        port: s.port,
        dir: dir.path(),
    };
    let ep = Endpoint::url(s.url());
    let mut c = s.client();
    let mut lists: Vec<Vec<ClassicHash>> = ClassicHash::ALL.iter().map(|&h| vec![h]).collect();
    lists.push(ClassicHash::parse_list("BKDRHash,SDBMHash,JSHash").unwrap());
    lists.push(ClassicHash::parse_list("fnv,DEK,FNV,pjw,ELEHash,DJB,js").unwrap());
    for (i, list) in lists.iter().enumerate() {
        let (a, b, never) = (
            keys(i as u64, 400),
            keys(100 + i as u64, 400),
            keys(200 + i as u64, 1000),
        );
        let php_bucket = format!("php-{i}");
        let our_bucket = format!("ours-{i}");
        // The same adds leave the same bitmap. (Buckets are up to 512 MiB, as the offsets are
        // 32-bit: compared by count, not copied. Both have every offset of `a` set — ours by
        // construction, PHP's as `contains_many` checks — and as many bits as there are
        // distinct offsets, so they are equal.)
        php.run(&php_bucket, list, "add", &a);
        let ours = ClassicFilter::open(&ep, &our_bucket, list).unwrap();
        ours.insert_many(&a).unwrap();
        let distinct: std::collections::HashSet<u64> = a
            .iter()
            .flat_map(|k| bloomsled::hash::classic::offsets(k, list))
            .collect();
        for bucket in [&php_bucket, &our_bucket] {
            let n: u64 = redis::cmd("BITCOUNT").arg(bucket).query(&mut c).unwrap();
            assert_eq!(n, distinct.len() as u64, "{list:?}: bits of {bucket}");
        }
        // PHP adds -> bloomsled finds all.
        let f = ClassicFilter::open(&ep, &php_bucket, list).unwrap();
        assert!(f.contains_many(&a).unwrap().iter().all(|&x| x), "{list:?}");
        redis::cmd("DEL").arg(&our_bucket).exec(&mut c).unwrap();
        // bloomsled adds -> PHP finds all.
        f.insert_many(&b).unwrap();
        assert!(
            php.exists(&php_bucket, list, &b).iter().all(|&x| x),
            "{list:?}"
        );
        // Keys nobody added: identical answers (false positives included).
        let ours_answers = f.contains_many(&never).unwrap();
        assert_eq!(
            ours_answers,
            php.exists(&php_bucket, list, &never),
            "{list:?}"
        );
        for (k, &want) in never.iter().zip(&ours_answers).take(20) {
            assert_eq!(f.contains(k).unwrap(), want);
        }
        redis::cmd("DEL").arg(&php_bucket).exec(&mut c).unwrap();
    }
}

#[test]
fn a_missing_bucket_is_an_error_not_absent() {
    require_redis!();
    let s = Server::start();
    let ep = Endpoint::url(s.url());
    let hashes = ClassicHash::parse_list("BKDR,SDBM,JS").unwrap();
    let f = ClassicFilter::open(&ep, "rptc", &hashes).unwrap();
    assert!(matches!(
        f.contains(b"x"),
        Err(Error::SharedFilterNotFound { .. })
    ));
    assert!(f.insert(b"x").unwrap());
    assert!(!f.insert(b"x").unwrap());
    assert!(f.contains(b"x").unwrap());
    redis::cmd("FLUSHALL").exec(&mut s.client()).unwrap();
    assert!(matches!(
        f.contains_many(&[b"x"]),
        Err(Error::SharedFilterNotFound { .. })
    ));
    assert!(ClassicFilter::open(&ep, "rptc", &[]).is_err());
    assert!(ClassicFilter::open(&ep, "", &hashes).is_err());
}

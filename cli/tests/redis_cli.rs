//! `bloomsled redis …` against a real redis-server: the output contract scripts rely on,
//! several processes adding at once, errors that never print "absent", and a creator
//! killed mid-creation.
#![cfg(feature = "redis")]

#[path = "../../redis/tests/redis_support/mod.rs"]
mod redis_support;

use std::io::Write;
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use bloomsled::FilterConfig;
use bloomsled_redis::{Endpoint, SharedFilter};
use redis_support::{Cluster, Server};

fn bin() -> Command {
    Command::new(env!("CARGO_BIN_EXE_bloomsled"))
}

fn run(args: &[&str], stdin: &[u8]) -> Output {
    let mut child = bin()
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // Fed from a thread: a child answering line by line fills its stdout pipe while we
    // are still writing its stdin.
    let mut pipe = child.stdin.take().unwrap();
    let input = stdin.to_vec();
    let feeder = std::thread::spawn(move || {
        let _ = pipe.write_all(&input);
    });
    let out = child.wait_with_output().unwrap();
    feeder.join().unwrap();
    out
}

fn lines(prefix: &str, n: usize) -> String {
    (0..n).map(|i| format!("{prefix}/{i}\n")).collect()
}

#[test]
fn create_add_check_info_pull() {
    require_redis!();
    let s = Server::start();
    let url = s.url();
    let out = run(
        &[
            "redis", "create", "c", "--url", &url, "--items", "10000", "--fpr", "0.01",
        ],
        b"",
    );
    assert!(out.status.success(), "{out:?}");
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("keys.txt");
    std::fs::write(&file, lines("https://in.example", 5_000)).unwrap();
    let out = run(
        &["redis", "add", "c", "--url", &url, file.to_str().unwrap()],
        b"",
    );
    assert!(out.status.success(), "{out:?}");
    assert!(String::from_utf8_lossy(&out.stdout).contains("added 5000 keys"));
    // Keys from stdin, CRLF and empty lines tolerated.
    let out = run(
        &["redis", "add", "c", "--url", &url, "-"],
        b"crlf-key\r\n\n",
    );
    assert!(out.status.success());
    let mut query = lines("https://in.example", 5_000);
    query.push_str("crlf-key\n");
    query.push_str(&lines("https://out.example", 2_000));
    let out = run(&["redis", "check", "c", "--url", &url], query.as_bytes());
    assert!(out.status.success(), "{out:?}");
    let text = String::from_utf8(out.stdout).unwrap();
    let rows: Vec<(&str, &str)> = text.lines().map(|l| l.split_once('\t').unwrap()).collect();
    assert_eq!(rows.len(), 7_001);
    for (answer, key) in &rows[..5_001] {
        assert_eq!(*answer, "maybe", "{key}");
    }
    let fp = rows[5_001..].iter().filter(|(a, _)| *a == "maybe").count();
    assert!(fp < 60, "{fp} false positives of 2000");
    assert!(rows[5_001..]
        .iter()
        .all(|(a, _)| matches!(*a, "maybe" | "absent")));
    let out = run(&["--json", "redis", "stats", "c", "--url", &url], b"");
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["capacity"], 10_000);
    assert!(v["estimated_items"].as_u64().unwrap() > 4_700);
    let pulled = dir.path().join("c.filter");
    let out = run(
        &[
            "redis",
            "pull",
            "c",
            "--url",
            &url,
            pulled.to_str().unwrap(),
        ],
        b"",
    );
    assert!(out.status.success(), "{out:?}");
    let f = bloomsled::Filter::from_bytes(&std::fs::read(&pulled).unwrap()).unwrap();
    assert!(f.contains(b"crlf-key") && f.contains(b"https://in.example/42"));
    // Creating it again with another shape is refused.
    let out = run(
        &["redis", "create", "c", "--url", &url, "--items", "99"],
        b"",
    );
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("another shape"));
}

/// `--cluster` is a flag that never takes the next argument: in `add NAME --url U,U,U
/// --cluster FILE`, FILE is the keys file and the nodes come through `--url`. The cluster is
/// used as soon as `redis-cli --cluster create` returns, before its nodes agree that it is
/// up, as a script would: create and open wait a converging cluster out (when the nodes
/// are quicker than the first command, the run simply meets a settled cluster).
#[test]
fn cluster_is_a_flag_and_a_fresh_cluster_is_waited_for() {
    require_redis!();
    let c = Cluster::start_unsettled(3);
    let urls = c.urls().join(",");
    let out = run(
        &[
            "redis",
            "create",
            "cl",
            "--url",
            &urls,
            "--cluster",
            "--items",
            "10000",
        ],
        b"",
    );
    assert!(out.status.success(), "{out:?}");
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("keys.txt");
    std::fs::write(&file, lines("https://in.example", 2_000)).unwrap();
    let out = run(
        &[
            "redis",
            "add",
            "cl",
            "--url",
            &urls,
            "--cluster",
            file.to_str().unwrap(),
        ],
        b"",
    );
    assert!(out.status.success(), "{out:?}");
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("added 2000 keys"),
        "{out:?}"
    );
    // The flag before --url, one node's URL enough to find the others.
    let out = run(
        &["redis", "check", "cl", "--cluster", "--url", &c.urls()[1]],
        lines("https://in.example", 2_000).as_bytes(),
    );
    assert!(out.status.success(), "{out:?}");
    let text = String::from_utf8(out.stdout).unwrap();
    assert_eq!(text.lines().count(), 2_000);
    assert!(text.lines().all(|l| l.starts_with("maybe\t")), "{text}");
    // Several URLs without --cluster: an error that says what is missing.
    let out = run(&["redis", "check", "cl", "--url", &urls], b"k\n");
    assert!(!out.status.success());
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("--cluster"),
        "{out:?}"
    );
    assert!(out.stdout.is_empty(), "{out:?}");
}

#[test]
fn processes_adding_at_once_lose_nothing() {
    require_redis!();
    let s = Server::start();
    let url = s.url();
    assert!(run(
        &["redis", "create", "p", "--url", &url, "--items", "40000"],
        b""
    )
    .status
    .success());
    let children: Vec<_> = (0..4)
        .map(|i| {
            let mut c = bin()
                .args(["redis", "add", "p", "--url", &url])
                .stdin(Stdio::piped())
                .stdout(Stdio::null())
                .spawn()
                .unwrap();
            let input = lines(&format!("proc{i}"), 10_000);
            c.stdin.take().unwrap().write_all(input.as_bytes()).unwrap();
            c
        })
        .collect();
    for mut c in children {
        assert!(c.wait().unwrap().success());
    }
    let all: String = (0..4).map(|i| lines(&format!("proc{i}"), 10_000)).collect();
    let out = run(&["redis", "check", "p", "--url", &url], all.as_bytes());
    assert!(out.status.success());
    let text = String::from_utf8(out.stdout).unwrap();
    assert_eq!(text.lines().count(), 40_000);
    assert!(
        text.lines().all(|l| l.starts_with("maybe\t")),
        "a key added by another process was absent"
    );
}

#[test]
fn errors_exit_nonzero_and_never_print_absent() {
    require_redis!();
    let s = Server::start();
    let url = s.url();
    assert!(run(
        &["redis", "create", "e", "--url", &url, "--items", "1000"],
        b""
    )
    .status
    .success());
    assert!(run(
        &["redis", "add", "e", "--url", &url],
        lines("k", 500).as_bytes()
    )
    .status
    .success());
    // The data vanishes but the config record survives: the blocks say "lost".
    let mut c = s.client();
    let keys: Vec<String> = redis::cmd("KEYS")
        .arg("bloomsled:{e:*")
        .query(&mut c)
        .unwrap();
    assert!(!keys.is_empty());
    for k in &keys {
        redis::cmd("DEL").arg(k).exec(&mut c).unwrap();
    }
    let mut query = lines("k", 500);
    query.push_str(&lines("never-added", 500));
    let out = run(&["redis", "check", "e", "--url", &url], query.as_bytes());
    assert!(!out.status.success());
    assert!(!String::from_utf8_lossy(&out.stdout).contains("absent"));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("lost"),
        "{out:?}"
    );
    // Flushed entirely, a server that is down, no target: all errors, no answers.
    redis::cmd("FLUSHALL").exec(&mut c).unwrap();
    let out = run(&["redis", "check", "e", "--url", &url], b"k/1\n");
    assert!(!out.status.success() && out.stdout.is_empty());
    let dead = format!("redis://127.0.0.1:{}/", redis_support::free_port());
    let out = run(&["redis", "check", "e", "--url", &dead], b"k/1\n");
    assert!(!out.status.success() && out.stdout.is_empty());
    let out = run(&["redis", "check", "e"], b"k/1\n");
    assert!(!out.status.success() && out.stdout.is_empty());
}

/// A database at `path` whose default tree holds `row/0` .. `row/<n - 1>`.
fn database_with_rows(path: &std::path::Path, n: usize) {
    let db = bloomsled::Config::new()
        .path(path)
        .expected_items(2_000)
        .open()
        .unwrap();
    for i in 0..n {
        db.insert(format!("row/{i}"), b"v".to_vec()).unwrap();
    }
    db.flush().unwrap();
}

/// `bloomsled redis create <name>` for 5,000 items, which must succeed.
fn create_filter(url: &str, name: &str) {
    let out = run(
        &["redis", "create", name, "--url", url, "--items", "5000"],
        b"",
    );
    assert!(out.status.success(), "{out:?}");
}

#[test]
fn push_a_database_tree_into_a_shared_filter() {
    require_redis!();
    let s = Server::start();
    let url = s.url();
    let dir = tempfile::tempdir().unwrap();
    let db_path = dir.path().join("db");
    database_with_rows(&db_path, 2_000);
    create_filter(&url, "t");
    let out = run(
        &[
            "redis",
            "push",
            db_path.to_str().unwrap(),
            "t",
            "--url",
            &url,
        ],
        b"",
    );
    assert!(out.status.success(), "{out:?}");
    let out = run(
        &["redis", "check", "t", "--url", &url],
        lines("row", 2_000).as_bytes(),
    );
    let text = String::from_utf8(out.stdout).unwrap();
    assert_eq!(text.lines().count(), 2_000);
    assert!(text.lines().all(|l| l.starts_with("maybe\t")));
}

/// `push --tree` names the tree to push: a name that is no tree of the database (a typo) is
/// an error, not an empty tree made on the spot and "pushed" with exit 0.
#[test]
fn push_of_a_tree_that_does_not_exist_is_an_error_and_creates_nothing() {
    require_redis!();
    let s = Server::start();
    let url = s.url();
    let dir = tempfile::tempdir().unwrap();
    let db_path = dir.path().join("db");
    database_with_rows(&db_path, 1);
    create_filter(&url, "t");
    let d = db_path.to_str().unwrap();
    let out = run(
        &[
            "redis",
            "push",
            d,
            "--tree",
            "no-such-tree",
            "t",
            "--url",
            &url,
        ],
        b"",
    );
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    assert!(err.contains("no-such-tree"), "{err}");
    let db = bloomsled::Config::new().path(&db_path).open().unwrap();
    assert!(
        !db.tree_names().iter().any(|n| &n[..] == b"no-such-tree"),
        "push created the tree"
    );
}

#[test]
fn php_layout_add_and_check() {
    require_redis!();
    let s = Server::start();
    let url = s.url();
    let php = ["--layout", "php", "--hashes", "BKDRHash,sdbm,JS,js"];
    let out = run(
        &[&["redis", "add", "rptc", "--url", &url][..], &php].concat(),
        lines("c", 300).as_bytes(),
    );
    assert!(out.status.success(), "{out:?}");
    // The library (checked against the PHP class in tests/redis_classic_php.rs) sees them.
    let hashes = bloomsled::hash::classic::ClassicHash::parse_list("BKDR,SDBM,JS").unwrap();
    let f = bloomsled_redis::ClassicFilter::open(
        &bloomsled_redis::Endpoint::url(url.clone()),
        "rptc",
        &hashes,
    )
    .unwrap();
    let keys: Vec<String> = (0..300).map(|i| format!("c/{i}")).collect();
    assert!(f.contains_many(&keys).unwrap().iter().all(|&b| b));
    let out = run(
        &[&["redis", "check", "rptc", "--url", &url][..], &php].concat(),
        b"c/7\nnever\n",
    );
    assert!(out.status.success());
    assert!(String::from_utf8_lossy(&out.stdout).starts_with("maybe\tc/7\n"));
    // Bad lists and mixed flags are refused.
    for bad in [
        &["--layout", "php"][..],
        &["--layout", "php", "--hashes", "MD5"][..],
        &["--hashes", "BKDR"][..],
    ] {
        let out = run(
            &[&["redis", "check", "rptc", "--url", &url][..], bad].concat(),
            b"x\n",
        );
        assert!(!out.status.success() && out.stdout.is_empty(), "{bad:?}");
    }
}

#[test]
fn counting_create_add_remove_check_and_stats() {
    require_redis!();
    let s = Server::start();
    let url = s.url();
    let ok = |args: &[&str], stdin: &[u8]| {
        let out = run(args, stdin);
        assert!(out.status.success(), "{args:?}: {out:?}");
        String::from_utf8(out.stdout).unwrap()
    };
    let created = ok(
        &[
            "--json",
            "redis",
            "create",
            "n",
            "--url",
            &url,
            "--items",
            "5000",
            "--fpr",
            "0.01",
            "--counting",
        ],
        b"",
    );
    let v: serde_json::Value = serde_json::from_str(&created).unwrap();
    assert_eq!(v["counting"], true);
    ok(
        &["redis", "add", "n", "--url", &url],
        lines("k", 4_000).as_bytes(),
    );
    // Remove the first half, plus keys that were never added and that the filter says are
    // absent. (A never-added key the filter passes is a false positive: removing it lowers
    // counters kept keys need, which `SharedFilter::remove` documents as the caller's error;
    // with a secret seed per filter, which keys those are differs from run to run.)
    let never = ok(
        &["redis", "check", "n", "--url", &url],
        lines("never", 500).as_bytes(),
    );
    let never: Vec<&str> = never
        .lines()
        .filter_map(|l| l.strip_prefix("absent\t"))
        .collect();
    assert!(
        never.len() > 450,
        "only {} of 500 new keys absent",
        never.len()
    );
    let mut gone = lines("k", 2_000);
    gone.extend(never.iter().map(|k| format!("{k}\n")));
    let removed = ok(
        &["--json", "redis", "remove", "n", "--url", &url],
        gone.as_bytes(),
    );
    let v: serde_json::Value = serde_json::from_str(&removed).unwrap();
    assert_eq!(v["read"], 2_000 + never.len());
    assert_eq!(v["removed"], 2_000, "{v}");
    assert_eq!(v["absent"], never.len(), "{v}");
    let out = ok(
        &["redis", "check", "n", "--url", &url],
        lines("k", 4_000).as_bytes(),
    );
    let rows: Vec<&str> = out.lines().collect();
    assert_eq!(rows.len(), 4_000);
    assert!(
        rows[2_000..].iter().all(|l| l.starts_with("maybe\t")),
        "a kept key answered absent"
    );
    let absent = rows[..2_000]
        .iter()
        .filter(|l| l.starts_with("absent\t"))
        .count();
    assert!(absent > 1_900, "only {absent} of 2,000 removed keys absent");
    let stats = ok(&["--json", "redis", "stats", "n", "--url", &url], b"");
    let v: serde_json::Value = serde_json::from_str(&stats).unwrap();
    assert_eq!(v["counting"], true);
    let items = v["estimated_items"].as_u64().unwrap();
    assert!((1_800..2_300).contains(&items), "{items}");
    // A plain filter cannot remove: an error and a non-zero exit.
    ok(
        &["redis", "create", "plain", "--url", &url, "--items", "100"],
        b"",
    );
    let out = run(&["redis", "remove", "plain", "--url", &url], b"x\n");
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("counting"));
}

#[test]
fn a_creator_killed_mid_creation_does_not_block_the_name() {
    require_redis!();
    let s = Server::start();
    let url = s.url();
    let mut con = s.client();
    // A creator of a big filter (about 280 MB of blocks), killed while it writes them.
    let mut child = bin()
        .args([
            "redis",
            "create",
            "big",
            "--url",
            &url,
            "--items",
            "200000000",
        ])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let start = Instant::now();
    let record = loop {
        let r: Option<String> = redis::cmd("GET")
            .arg("bloomsled:{big}:config")
            .query(&mut con)
            .unwrap();
        if let Some(r) = r {
            break r;
        }
        assert!(start.elapsed() < Duration::from_secs(10), "no record");
        std::thread::sleep(Duration::from_millis(5));
    };
    assert!(record.contains("state=init"), "{record}");
    std::thread::sleep(Duration::from_millis(200));
    child.kill().unwrap();
    child.wait().unwrap();
    // Its record is a lease that runs out, not a lock held forever.
    let ttl: i64 = redis::cmd("PTTL")
        .arg("bloomsled:{big}:config")
        .query(&mut con)
        .unwrap();
    assert!(ttl > 0 && ttl <= 20_000, "PTTL {ttl}");
    // Another creator (another shape) waits for the lease, then creates the name afresh.
    let t = Instant::now();
    let f = SharedFilter::create(&Endpoint::url(&url), "big", &FilterConfig::new(1_000)).unwrap();
    assert!(t.elapsed() < Duration::from_secs(25));
    assert_eq!(f.shape().capacity, 1_000);
    let ks: Vec<Vec<u8>> = (0..1_000).map(|i| format!("k{i}").into_bytes()).collect();
    f.insert_many(&ks).unwrap();
    assert!(f.contains_many(&ks).unwrap().iter().all(|&b| b));
    // The finished record has no deadline.
    let ttl: i64 = redis::cmd("PTTL")
        .arg("bloomsled:{big}:config")
        .query(&mut con)
        .unwrap();
    assert_eq!(ttl, -1);
    assert!(f.stats().is_ok());
}

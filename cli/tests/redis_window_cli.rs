//! `bloomsled redis` windows from the command line against a real redis-server: the output
//! scripts rely on, and separate processes rotating one ring at once.
#![cfg(feature = "redis")]

#[path = "../../redis/tests/redis_support/mod.rs"]
mod redis_support;

use std::time::Duration;

use bloomsled_redis::{Endpoint, SharedWindow};
use redis_support::Server;
use std::process::{Command, Output, Stdio};

fn run(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_bloomsled"))
        .args(args)
        .stdin(Stdio::null())
        .output()
        .unwrap()
}

/// `bloomsled redis create NAME --url URL --window SPAN --generations G --items N`,
/// then `extra`.
fn create(
    url: &str,
    name: &str,
    span: &str,
    generations: &str,
    items: &str,
    extra: &[&str],
) -> Output {
    let mut args = vec![
        "redis",
        "create",
        name,
        "--url",
        url,
        "--window",
        span,
        "--generations",
        generations,
        "--items",
        items,
    ];
    args.extend(extra);
    run(&args)
}

#[test]
fn create_add_check_stats_on_a_window() {
    require_redis!();
    let s = Server::start();
    let url = s.url();
    let out = create(&url, "win", "7d", "7", "10000", &["--fpr", "0.01"]);
    assert!(out.status.success(), "{out:?}");
    let w = SharedWindow::open(&Endpoint::url(&url), "win").unwrap();
    assert_eq!(w.span(), Duration::from_secs(7 * 86_400));
    assert_eq!(w.generations(), 7);
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("keys.txt");
    let added: String = (0..3_000).map(|i| format!("https://in/{i}\n")).collect();
    std::fs::write(&file, &added).unwrap();
    let f = file.to_str().unwrap();
    let out = run(&["redis", "add", "win", "--url", &url, f]);
    assert!(out.status.success(), "{out:?}");
    let out = run(&["redis", "check", "win", "--url", &url, f]);
    assert!(out.status.success(), "{out:?}");
    let text = String::from_utf8(out.stdout).unwrap();
    assert_eq!(text.lines().count(), 3_000);
    assert!(text.lines().all(|l| l.starts_with("maybe\t")), "{text}");
    let absent = dir.path().join("absent.txt");
    std::fs::write(
        &absent,
        (0..1_000)
            .map(|i| format!("https://out/{i}\n"))
            .collect::<String>(),
    )
    .unwrap();
    let out = run(&[
        "redis",
        "check",
        "win",
        "--url",
        &url,
        absent.to_str().unwrap(),
    ]);
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(text.lines().filter(|l| l.starts_with("absent\t")).count() > 950);
    // Library and CLI agree.
    assert!(w.contains(b"https://in/17").unwrap());
    let out = run(&["--json", "redis", "stats", "win", "--url", &url]);
    assert!(out.status.success(), "{out:?}");
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["window"], true);
    assert_eq!(v["generations"], 7);
    assert_eq!(v["live"].as_array().unwrap().len(), 1);
    let items = v["live"][0]["estimated_items"].as_u64().unwrap();
    assert!((2_800..3_200).contains(&items), "{v}");
    let out = run(&["redis", "info", "win", "--url", &url]);
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(
        text.contains("7 generations") && text.contains("generation "),
        "{text}"
    );
    // Commands for plain filters say what NAME is.
    let out = run(&["redis", "pull", "win", "--url", &url, "/dev/null"]);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("shared window"));
    // Bad durations and lost windows are errors, never "absent" lines.
    let out = run(&[
        "redis", "create", "bad", "--url", &url, "--window", "7x", "--items", "10",
    ]);
    assert!(!out.status.success());
    redis::cmd("FLUSHALL").exec(&mut s.client()).unwrap();
    let out = run(&["redis", "check", "win", "--url", &url, f]);
    assert!(!out.status.success());
    assert!(out.stdout.is_empty(), "{out:?}");
}

#[test]
fn separate_processes_rotating_at_once_end_with_one_ring() {
    require_redis!();
    let s = Server::start();
    let url = s.url();
    // Generations of 10 s: the writers all meet a generation nobody created yet (big
    // enough that creating it takes a while), and every key stays inside the horizon
    // until the checks below.
    let out = create(&url, "procs", "30s", "3", "500000", &[]);
    assert!(out.status.success(), "{out:?}");
    let dir = tempfile::tempdir().unwrap();
    let procs = 4;
    let children: Vec<_> = (0..procs)
        .map(|p| {
            let file = dir.path().join(format!("k{p}.txt"));
            let lines: String = (0..5_000).map(|i| format!("p{p}/{i}\n")).collect();
            std::fs::write(&file, lines).unwrap();
            Command::new(env!("CARGO_BIN_EXE_bloomsled"))
                .args(["redis", "add", "procs", "--url", &url])
                .arg(&file)
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .spawn()
                .unwrap()
        })
        .collect();
    for c in children {
        let out = c.wait_with_output().unwrap();
        assert!(out.status.success(), "{out:?}");
    }
    // Every generation the ring lists has exactly one filter, with the listed incarnation.
    let w = SharedWindow::open(&Endpoint::url(&url), "procs").unwrap();
    let r = redis_support::window_ring(&s, &w);
    assert!(!r.is_empty());
    let mut cli = s.client();
    let configs: Vec<String> = redis::cmd("KEYS")
        .arg("bloomsled:{procs:w*}:config")
        .query(&mut cli)
        .unwrap();
    for (e, incarnation) in &r {
        let key = &w.generation_keys(*e).unwrap()[0];
        let text: Option<String> = redis::cmd("GET").arg(key).query(&mut cli).unwrap();
        let text = text.expect("a listed generation has its config record");
        let listed = u64::from_str_radix(incarnation.trim_start_matches("0x"), 16).unwrap();
        let stored = text
            .split_whitespace()
            .find_map(|f| f.strip_prefix("epoch=0x"))
            .and_then(|h| u64::from_str_radix(h, 16).ok());
        assert_eq!(stored, Some(listed), "{text} vs {incarnation}");
        assert!(text.contains("state=ready"), "{text}");
    }
    // No config record outside the ring (no orphan incarnation of a generation).
    for key in &configs {
        let e: u64 = key
            .rsplit_once(":g")
            .and_then(|(_, rest)| rest.strip_suffix("}:config"))
            .and_then(|e| e.parse().ok())
            .unwrap();
        assert!(r.contains_key(&e), "{key} is not in the ring {r:?}");
    }
    // Every key is found (the horizon is at least 20 s).
    for p in 0..procs {
        let all: Vec<Vec<u8>> = (0..5_000)
            .map(|i| format!("p{p}/{i}").into_bytes())
            .collect();
        let found = w.contains_many(&all).unwrap();
        assert!(found.iter().all(|&b| b), "process {p}");
    }
}

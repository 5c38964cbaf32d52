//! The real `bloomsled` binary: load, check, stats, verify/rebuild after corruption, snapshot,
//! demo, and one-line errors with a non-zero exit.

use std::io::Write;
use std::path::Path;
use std::process::{Command, Output, Stdio};

fn bin() -> Command {
    Command::new(env!("CARGO_BIN_EXE_bloomsled"))
}

fn run(args: &[&str]) -> Output {
    bin().args(args).output().expect("run bloomsled")
}

fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

fn load_sample(db: &Path) {
    let dir = db.parent().unwrap();
    let file = dir.join("keys.tsv");
    let mut f = std::fs::File::create(&file).unwrap();
    for i in 0..3_000 {
        writeln!(f, "spam-{i}@example.net\tblocked").unwrap();
    }
    let o = run(&["load", db.to_str().unwrap(), file.to_str().unwrap()]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(stdout(&o).starts_with("loaded 3000 keys"), "{}", stdout(&o));
}

#[test]
fn load_check_and_stats() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("db");
    load_sample(&db);
    // Keys from standard input into another tree, JSON report.
    let mut child = bin()
        .args([
            "load",
            db.to_str().unwrap(),
            "--tree",
            "allow",
            "-",
            "--json",
        ])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(b"friend@example.org\r\n\nboss@example.org\n")
        .unwrap();
    let o = child.wait_with_output().unwrap();
    assert!(o.status.success());
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(v["keys"], 2);

    let o = run(&[
        "check",
        db.to_str().unwrap(),
        "spam-7@example.net",
        "nobody@example.net",
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let out = stdout(&o);
    assert!(out.contains("present\tspam-7@example.net"), "{out}");
    assert!(
        out.contains("absent\tnobody@example.net") || out.contains("false-positive\tnobody"),
        "{out}"
    );
    let o = run(&[
        "check",
        db.to_str().unwrap(),
        "--tree",
        "allow",
        "boss@example.org",
        "--json",
    ]);
    let v: serde_json::Value = serde_json::from_str(stdout(&o).trim()).unwrap();
    assert_eq!(v["result"], "present");

    let o = run(&["stats", db.to_str().unwrap(), "--json"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let trees = v.as_array().unwrap();
    assert_eq!(trees.len(), 2);
    assert_eq!(trees[0]["recovery"]["loaded"], true, "{v}");
    assert!(trees[0]["items"].as_u64().unwrap() > 2_900);
}

#[test]
fn corrupt_snapshot_fails_verify_and_rebuild_fixes_it() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("db");
    load_sample(&db);
    let o = run(&["verify", db.to_str().unwrap()]);
    assert!(o.status.success(), "{}{}", stdout(&o), stderr(&o));
    assert!(stdout(&o).trim_end().ends_with("OK"));

    let snap = std::fs::read_dir(db.join("bloomsled"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .find(|p| p.extension().is_some_and(|e| e == "snap"))
        .unwrap();
    let mut bytes = std::fs::read(&snap).unwrap();
    bytes[300] ^= 0x01;
    std::fs::write(&snap, &bytes).unwrap();

    let o = run(&["verify", db.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(1));
    assert!(stdout(&o).contains("checksum mismatch"), "{}", stdout(&o));

    let o = run(&["rebuild", db.to_str().unwrap()]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(stdout(&o).contains("3000 keys scanned"), "{}", stdout(&o));
    let o = run(&["verify", db.to_str().unwrap(), "--json"]);
    assert!(o.status.success());
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(v["ok"], true);
    assert_eq!(v["trees"][0]["false_negatives"], 0);
    assert_eq!(v["trees"][0]["keys_checked"], 3000);

    let o = run(&["snapshot", db.to_str().unwrap(), "--json"]);
    assert!(o.status.success());
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert!(v[0]["bytes"].as_u64().unwrap() > 0);
}

#[test]
fn errors_are_one_line_with_a_non_zero_exit() {
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("missing");
    for args in [
        vec!["check", missing.to_str().unwrap(), "k"],
        vec!["stats", missing.to_str().unwrap()],
        vec!["verify", missing.to_str().unwrap()],
        vec!["load", missing.to_str().unwrap(), "/no/such/file"],
    ] {
        let o = run(&args);
        assert!(!o.status.success(), "{args:?}");
        let err = stderr(&o);
        assert_eq!(err.trim_end().lines().count(), 1, "{args:?}: {err}");
        assert!(err.starts_with("bloomsled: "), "{err}");
    }
    // Bad arguments: clap's usage error, exit code 2.
    let o = run(&["check"]);
    assert_eq!(o.status.code(), Some(2));
    let o = run(&["demo", "--items", "lots"]);
    assert_eq!(o.status.code(), Some(2));

    // A database open in another process is reported as such.
    let db_dir = dir.path().join("held");
    let held = bloomsled::Config::new().path(&db_dir).open().unwrap();
    held.insert("k", "v").unwrap();
    let o = run(&["stats", db_dir.to_str().unwrap()]);
    assert!(!o.status.success());
    assert!(
        stderr(&o).contains("in use by another process"),
        "{}",
        stderr(&o)
    );
}

#[test]
fn demo_runs_and_reuses_its_directory() {
    let dir = tempfile::tempdir().unwrap();
    let demo = dir.path().join("demo");
    for _ in 0..2 {
        let o = run(&[
            "demo",
            "--dir",
            demo.to_str().unwrap(),
            "--items",
            "5000",
            "--json",
        ]);
        assert!(o.status.success(), "{}", stderr(&o));
        let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
        assert_eq!(v["items"], 5000);
        assert_eq!(v["reopen"]["loaded"], true, "{v}");
        assert!(v["store_lookups_skipped"].as_u64().unwrap() > 4_800);
    }
    // A directory that is not a demo is never deleted.
    let precious = dir.path().join("precious");
    std::fs::create_dir(&precious).unwrap();
    std::fs::write(precious.join("notes.txt"), "mine").unwrap();
    let o = run(&["demo", "--dir", precious.to_str().unwrap(), "--items", "10"]);
    assert!(!o.status.success());
    assert_eq!(std::fs::read(precious.join("notes.txt")).unwrap(), b"mine");
    assert_eq!(std::fs::read_dir(&precious).unwrap().count(), 1);
}

#[test]
fn a_counting_database_stays_counting_under_the_cli() {
    let dir = tempfile::tempdir().unwrap();
    let db_dir = dir.path().join("counting");
    {
        let db = bloomsled::Config::new()
            .path(&db_dir)
            .counting(true)
            .open()
            .unwrap();
        for i in 0..100 {
            db.insert(format!("k{i}"), "v").unwrap();
        }
        db.remove("k0").unwrap();
    }
    let o = run(&["stats", db_dir.to_str().unwrap(), "--json"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(v[0]["mode"], "counting", "{v}");
    assert_eq!(v[0]["items"], 99, "{v}");
    assert_eq!(v[0]["recovery"]["outcome"], "loaded from snapshot", "{v}");
    let o = run(&["verify", db_dir.to_str().unwrap()]);
    assert!(o.status.success(), "{}{}", stdout(&o), stderr(&o));
    // Still counting for the library afterwards: the CLI did not convert it.
    let db = bloomsled::Config::new()
        .path(&db_dir)
        .counting(true)
        .open()
        .unwrap();
    assert!(db.recovery_report().loaded());
}

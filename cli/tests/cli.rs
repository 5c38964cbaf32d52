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
    let keys = dir.path().join("keys.txt");
    std::fs::write(&keys, "a\nb\n").unwrap();
    let d = db_dir.to_str().unwrap();
    for args in [
        vec!["stats", d],
        vec!["verify", d],
        vec!["rebuild", d],
        vec!["snapshot", d],
        vec!["check", d, "k"],
        vec!["load", d, keys.to_str().unwrap()],
    ] {
        let o = run(&args);
        assert_eq!(o.status.code(), Some(1), "{args:?}");
        assert_eq!(
            stderr(&o),
            format!("bloomsled: {d}: the database is in use by another process\n"),
            "{args:?}"
        );
    }
    assert_eq!(held.get("k").unwrap().as_deref(), Some(&b"v"[..]));
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

/// Every file under `dir` with its contents, to show that a refused command changed nothing.
fn listing(dir: &Path) -> Vec<(std::path::PathBuf, Option<Vec<u8>>)> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).unwrap() {
            let p = e.unwrap().path();
            let meta = std::fs::symlink_metadata(&p).unwrap();
            if meta.is_dir() {
                stack.push(p.clone());
                out.push((p, None));
            } else {
                let bytes = if meta.is_file() {
                    std::fs::read(&p).ok()
                } else {
                    None
                };
                out.push((p, bytes));
            }
        }
    }
    out.sort();
    out
}

fn demo_in(cwd: &Path, dir: &str, items: &str) -> Output {
    bin()
        .current_dir(cwd)
        .args(["demo", "--dir", dir, "--items", items, "--json"])
        .output()
        .expect("run bloomsled")
}

#[test]
fn demo_never_deletes_a_folder_it_did_not_make() {
    let root = tempfile::tempdir().unwrap();
    // The reproduction: a folder whose `bloomsled-demo` entry is not the demo's.
    let x = root.path().join("X");
    std::fs::create_dir_all(x.join("bloomsled-demo")).unwrap();
    std::fs::create_dir_all(x.join("projects")).unwrap();
    std::fs::write(x.join("projects/thesis.txt"), "four years of work").unwrap();
    // Old-style marker file, exact content, but beside files the demo never made.
    let y = root.path().join("Y");
    std::fs::create_dir_all(y.join("projects")).unwrap();
    std::fs::write(
        y.join("bloomsled-demo"),
        "created by `bloomsled demo`; safe to delete\n",
    )
    .unwrap();
    std::fs::write(y.join("projects/thesis.txt"), "four years of work").unwrap();
    // A marker file with other content.
    let z = root.path().join("Z");
    std::fs::create_dir_all(z.join("bloomsled")).unwrap();
    std::fs::write(z.join("BLOOMSLED-DEMO.txt"), "my notes\n").unwrap();
    std::fs::write(z.join("bloomsled/data.txt"), "mine").unwrap();
    // A file, not a folder.
    std::fs::write(root.path().join("file"), "data").unwrap();
    let before = listing(root.path());
    for (dir, why) in [
        ("X", "was not made by `bloomsled demo`"),
        ("Y", "did not create"),
        ("Z", "was not made by `bloomsled demo`"),
        ("file", "not a directory"),
    ] {
        let o = demo_in(root.path(), dir, "100");
        assert_eq!(o.status.code(), Some(1), "{dir}");
        let err = stderr(&o);
        assert!(err.contains(why), "{dir}: {err}");
        assert!(
            err.contains("nothing was changed") || dir == "file",
            "{err}"
        );
        assert_eq!(err.trim_end().lines().count(), 1, "{err}");
    }
    assert_eq!(listing(root.path()), before);
    assert_eq!(
        std::fs::read(x.join("projects/thesis.txt")).unwrap(),
        b"four years of work"
    );

    // A real demo folder the user then added a file to is not replaced either.
    let o = demo_in(root.path(), "demo", "100");
    assert!(o.status.success(), "{}", stderr(&o));
    std::fs::write(root.path().join("demo/keep.txt"), "mine").unwrap();
    let before = listing(root.path());
    let o = demo_in(root.path(), "demo", "100");
    assert!(!o.status.success());
    assert!(stderr(&o).contains("\"keep.txt\""), "{}", stderr(&o));
    assert_eq!(listing(root.path()), before);

    // A symbolic link to a demo folder is refused, trailing slash or not.
    #[cfg(unix)]
    {
        std::fs::remove_file(root.path().join("demo/keep.txt")).unwrap();
        std::os::unix::fs::symlink(root.path().join("demo"), root.path().join("link")).unwrap();
        let before = listing(root.path());
        for dir in ["link", "link/"] {
            let o = demo_in(root.path(), dir, "100");
            assert!(!o.status.success(), "{dir}");
            assert!(stderr(&o).contains("symbolic link"), "{}", stderr(&o));
        }
        assert_eq!(listing(root.path()), before);
    }
}

#[test]
fn demo_refuses_the_current_directory_its_parents_root_and_home() {
    let root = tempfile::tempdir().unwrap();
    let cwd = root.path().join("checkout");
    let home = root.path().join("home");
    std::fs::create_dir_all(cwd.join(".git")).unwrap();
    std::fs::write(cwd.join("README.md"), "mine").unwrap();
    std::fs::create_dir_all(&home).unwrap();
    std::fs::write(home.join(".profile"), "mine").unwrap();
    // A demo folder in the checkout: `.` must not be taken for it.
    let o = demo_in(&cwd, "bloomsled-demo", "100");
    assert!(o.status.success(), "{}", stderr(&o));
    let before = listing(root.path());
    let cwd_abs = cwd.to_str().unwrap().to_string();
    let root_abs = root.path().to_str().unwrap().to_string();
    let home_abs = home.to_str().unwrap().to_string();
    for dir in [
        ".",
        "./",
        "..",
        "../checkout",
        &cwd_abs,
        &root_abs,
        "/",
        &home_abs,
    ] {
        let o = bin()
            .current_dir(&cwd)
            .env("HOME", &home)
            .args(["demo", "--dir", dir, "--items", "100"])
            .output()
            .unwrap();
        assert_eq!(o.status.code(), Some(1), "{dir}");
        assert!(
            stderr(&o).contains("refusing to use"),
            "{dir}: {}",
            stderr(&o)
        );
        assert!(stdout(&o).is_empty());
    }
    assert_eq!(listing(root.path()), before);
}

#[test]
fn demo_replaces_its_own_demo_and_says_what_to_run_next() {
    let root = tempfile::tempdir().unwrap();
    let demo = root.path().join("demo");
    // An empty folder is used; the folder itself is kept.
    std::fs::create_dir(&demo).unwrap();
    let db = demo.join("bloomsled");
    for items in ["300", "200"] {
        let o = run(&["demo", "--dir", demo.to_str().unwrap(), "--items", items]);
        assert!(o.status.success(), "{}", stderr(&o));
        let out = stdout(&o);
        assert!(
            out.contains(&format!("database: {}", db.display())),
            "{out}"
        );
        for cmd in ["stats", "verify", "check"] {
            assert!(
                out.contains(&format!("bloomsled {cmd} {}", db.display())),
                "{out}"
            );
        }
    }
    let mut names: Vec<String> = std::fs::read_dir(&demo)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    names.sort();
    assert_eq!(names, ["BLOOMSLED-DEMO.txt", "bloomsled", "plain-sled"]);
    // The second run replaced the first: 200 keys, not 500.
    let o = run(&["stats", db.to_str().unwrap(), "--json"]);
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(v[0]["items"], 200, "{v}");

    // The next commands, as printed in JSON, run as they are.
    let o = run(&[
        "demo",
        "--dir",
        demo.to_str().unwrap(),
        "--items",
        "100",
        "--json",
    ]);
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(v["database"], db.to_str().unwrap());
    let cmds = v["next_commands"].as_array().unwrap();
    assert_eq!(cmds.len(), 3);
    for cmd in cmds {
        let words: Vec<&str> = cmd.as_str().unwrap().split(' ').collect();
        assert_eq!(words[0], "bloomsled");
        let o = run(&words[1..]);
        assert!(o.status.success(), "{cmd}: {}", stderr(&o));
    }
    let check = cmds[2].as_str().unwrap().split(' ').collect::<Vec<_>>();
    let o = run(&check[1..]);
    assert!(stdout(&o).starts_with("present\t"), "{}", stdout(&o));

    // A demo made by the earlier marker style is recognized and replaced.
    let old = root.path().join("old-demo");
    std::fs::create_dir_all(old.join("bloomsled")).unwrap();
    std::fs::create_dir_all(old.join("plain-sled")).unwrap();
    std::fs::write(old.join("bloomsled/x"), "").unwrap();
    std::fs::write(
        old.join("bloomsled-demo"),
        "created by `bloomsled demo`; safe to delete\n",
    )
    .unwrap();
    let o = run(&["demo", "--dir", old.to_str().unwrap(), "--items", "100"]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(!old.join("bloomsled-demo").exists());
    assert!(!old.join("bloomsled/x").exists());
}

#[test]
fn stats_verify_and_check_on_the_demo_folder_use_the_database_inside() {
    let root = tempfile::tempdir().unwrap();
    let demo = root.path().join("demo");
    let o = run(&["demo", "--dir", demo.to_str().unwrap(), "--items", "500"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let d = demo.to_str().unwrap();
    let inner = demo.join("bloomsled");
    let note = format!("using its database {}", inner.display());

    let o = run(&["stats", d, "--json"]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(stderr(&o).contains(&note), "{}", stderr(&o));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    // `items` counts the inserts that set a new bit: a key whose bits were all set already
    // by others is not counted (a few of 500 at 10 bits per key).
    let items = v[0]["items"].as_u64().unwrap();
    assert!((490..=500).contains(&items), "{v}");

    let o = run(&["verify", d]);
    assert!(o.status.success(), "{}{}", stdout(&o), stderr(&o));
    assert!(stdout(&o).contains("500 keys checked"), "{}", stdout(&o));

    let key = "https://site0.example.com/page/0000000000000000";
    let o = run(&["check", d, key]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert_eq!(stdout(&o), format!("present\t{key}\n"));

    // With its database gone, `load` recreates it in place, not beside it.
    std::fs::remove_dir_all(&inner).unwrap();
    let o = run(&["stats", d]);
    assert_eq!(
        stderr(&o).lines().last().unwrap(),
        format!("bloomsled: {}: not a database directory", inner.display())
    );
    let keys = root.path().join("keys.txt");
    std::fs::write(&keys, "a\nb\n").unwrap();
    let o = run(&["load", d, keys.to_str().unwrap()]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert_eq!(stdout(&run(&["check", d, "a"])), "present\ta\n");

    // Nothing was created in the demo folder itself, so the next demo replaces it.
    let mut names: Vec<String> = std::fs::read_dir(&demo)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    names.sort();
    assert_eq!(names, ["BLOOMSLED-DEMO.txt", "bloomsled", "plain-sled"]);
    let o = run(&["demo", "--dir", d, "--items", "100"]);
    assert!(o.status.success(), "{}", stderr(&o));
}

/// A closed counting database of `n` keys in the default tree and in tree `other`, each
/// with one key removed, its filters sized for `capacity`.
fn counting_db(path: &Path, n: u32, capacity: u64) {
    let db = bloomsled::Config::new()
        .path(path)
        .counting(true)
        .expected_items(capacity)
        .open()
        .unwrap();
    let other = db.open_tree("other").unwrap();
    for i in 0..n {
        db.insert(format!("k{i}"), "v").unwrap();
        other.insert(format!("o{i}"), "v").unwrap();
    }
    db.remove("k0").unwrap();
    other.remove("o0").unwrap();
    drop(other);
    db.close().unwrap();
}

#[test]
fn rebuild_keeps_each_trees_mode_and_size() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("counting");
    counting_db(&path, 500, 5_000);
    let o = run(&["rebuild", path.to_str().unwrap(), "--json"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let rows = v.as_array().unwrap();
    assert_eq!(rows.len(), 2, "{v}");
    for row in rows {
        assert_eq!(row["mode"], "counting", "{v}");
        assert_eq!(row["outcome"], "rebuilt from keys", "{v}");
        assert_eq!(row["keys_scanned"], 499, "{v}");
        assert_eq!(row["capacity"], 5_000, "{v}");
        assert_eq!(row["old_capacity"], 5_000, "{v}");
    }

    // A strict counting open trusts every rebuilt snapshot, and removes keep working.
    let db = bloomsled::Config::new()
        .path(&path)
        .counting(true)
        .recovery(bloomsled::RecoveryPolicy::Strict)
        .open()
        .unwrap();
    let other = db.open_tree("other").unwrap();
    for (t, prefix) in [(&*db, "k"), (&other, "o")] {
        assert!(t.recovery_report().loaded(), "{:?}", t.recovery_report());
        let s = t.stats();
        assert_eq!(s.mode, bloomsled::FilterMode::Counting);
        assert_eq!((s.items, s.capacity), (499, 5_000));
        for i in 1..500 {
            assert!(t.may_contain(format!("{prefix}{i}")), "{prefix}{i}");
        }
        assert!(t.remove(format!("{prefix}1")).unwrap().is_some());
        assert_eq!(t.stats().items, 498);
    }
    drop(other);
    db.close().unwrap();

    // A plain database keeps its size too, and the CLI's open does not make it counting.
    let plain = dir.path().join("plain");
    {
        let db = bloomsled::Config::new()
            .path(&plain)
            .expected_items(20_000)
            .false_positive_rate(0.001)
            .open()
            .unwrap();
        for i in 0..100 {
            db.insert(format!("k{i}"), "v").unwrap();
        }
    }
    let shape = |p: &Path| {
        let db = bloomsled::Config::new().path(p).open().unwrap();
        let s = db.stats();
        db.close().unwrap();
        (s.mode, s.capacity, s.num_bits)
    };
    let (_, _, bits_before) = shape(&plain);
    let o = run(&["rebuild", plain.to_str().unwrap()]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(
        stdout(&o).contains("(plain): rebuilt from keys, 100 keys scanned"),
        "{}",
        stdout(&o)
    );
    assert_eq!(
        shape(&plain),
        (bloomsled::FilterMode::Plain, 20_000, bits_before)
    );
}

#[test]
fn rebuild_with_a_damaged_snapshot_keeps_the_recorded_mode() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("counting");
    let db = bloomsled::Config::new()
        .path(&path)
        .counting(true)
        .open()
        .unwrap();
    for i in 0..200 {
        db.insert(format!("k{i}"), "v").unwrap();
    }
    let snap = db.filter_snapshot_path().unwrap().to_path_buf();
    db.close().unwrap();
    let mut bytes = std::fs::read(&snap).unwrap();
    bytes[20] ^= 0xff; // inside the header: its CRC fails
    std::fs::write(&snap, &bytes).unwrap();
    let p = path.to_str().unwrap();

    // The tree's record, not the damaged header, says it is a counting tree.
    let o = run(&["rebuild", p]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(stdout(&o).contains("(counting)"), "{}", stdout(&o));
    assert!(stdout(&o).contains("200 keys scanned"), "{}", stdout(&o));
    let db = bloomsled::Config::new()
        .path(&path)
        .counting(true)
        .recovery(bloomsled::RecoveryPolicy::Strict)
        .open()
        .unwrap();
    assert!(db.recovery_report().loaded());
    assert!(db.remove("k5").unwrap().is_some());
    assert_eq!(db.stats().items, 199);
    db.close().unwrap();

    // --mode converts.
    let o = run(&["rebuild", p, "--mode", "plain"]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(stdout(&o).contains("(plain)"), "{}", stdout(&o));
    let db = bloomsled::Config::new().path(&path).open().unwrap();
    assert_eq!(db.stats().mode, bloomsled::FilterMode::Plain);
    assert!(db.recovery_report().loaded());
}

fn write_lines(path: &Path, prefix: &str, n: u32) {
    let mut f = std::io::BufWriter::new(std::fs::File::create(path).unwrap());
    for i in 0..n {
        writeln!(f, "{prefix}{i}").unwrap();
    }
}

#[test]
fn load_sizes_the_filter_for_its_input() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("db");
    {
        let db = bloomsled::Config::new()
            .path(&path)
            .expected_items(1_000)
            .open()
            .unwrap();
        db.insert("seed", "v").unwrap();
    }
    let p = path.to_str().unwrap();
    let file = dir.path().join("keys.txt");
    write_lines(&file, "key-", 30_000);
    let f = file.to_str().unwrap();

    // A new tree is created for the 30,000 lines, not for the database's 1,000.
    let o = run(&["load", p, "--tree", "big", f, "--json"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(v["keys"], 30_000);
    assert_eq!(v["rebuilt"], false, "{v}");
    // Sized for its lines in the database's own settings, not the CLI's 1M default, and
    // without a resize.
    let capacity = v["capacity"].as_u64().unwrap();
    assert!((30_000..60_000).contains(&capacity), "{v}");

    // An existing tree sized for 1,000 ends sized for what it holds after the load.
    let o = run(&["load", p, f, "--json"]);
    assert!(o.status.success(), "{}", stderr(&o));

    let o = run(&["stats", p, "--json"]);
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    for tree in v.as_array().unwrap() {
        let (items, capacity) = (
            tree["items"].as_u64().unwrap(),
            tree["capacity"].as_u64().unwrap(),
        );
        // `items` counts the inserts that set a new bit: a little under the keys.
        assert!(items >= 29_000, "{v}");
        assert!(capacity >= 30_000 && capacity >= items, "{v}");
        assert!(
            tree["estimated_fpr"].as_f64().unwrap() <= 2.0 * tree["target_fpr"].as_f64().unwrap(),
            "{v}"
        );
        assert_eq!(tree["recovery"]["loaded"], true, "{v}");
    }
    let o = run(&["verify", p]);
    assert!(o.status.success(), "{}{}", stdout(&o), stderr(&o));
}

#[test]
fn a_filter_rebuilt_at_open_keeps_the_databases_size() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("db");
    let db = bloomsled::Config::new()
        .path(&path)
        .expected_items(20_000)
        .open()
        .unwrap();
    for i in 0..100 {
        db.insert(format!("k{i}"), "v").unwrap();
    }
    let snap = db.filter_snapshot_path().unwrap().to_path_buf();
    db.close().unwrap();
    let mut bytes = std::fs::read(&snap).unwrap();
    let last = bytes.len() - 1;
    bytes[last] ^= 0x01; // in a page: the header still tells the size
    std::fs::write(&snap, &bytes).unwrap();
    let o = run(&["stats", path.to_str().unwrap(), "--json"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(v[0]["recovery"]["loaded"], false, "{v}");
    assert_eq!(v[0]["recovery"]["keys_scanned"], 100, "{v}");
    assert_eq!(v[0]["capacity"], 20_000, "{v}");
}

/// `bloomsled stats` and `verify` show a window and each of its live generations.
#[test]
fn stats_and_verify_show_windows_and_their_generations() {
    let dir = tempfile::tempdir().unwrap();
    {
        let db = bloomsled::Config::new().path(dir.path()).open().unwrap();
        // On the wall clock, as the CLI opens it: a day-long window in 4 generations.
        let w = db
            .open_window(
                "seen",
                bloomsled::window::WindowConfig::new(std::time::Duration::from_secs(86_400), 4),
            )
            .unwrap();
        for i in 0..50 {
            w.insert(format!("https://example.com/r0/page/{i}"), &b""[..])
                .unwrap();
        }
        drop(w);
        db.close().unwrap();
    }
    let path = dir.path().to_str().unwrap();
    let out = bin().args(["stats", path]).output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{text}");
    assert!(
        text.contains("window \"seen\": span 86400000 ms in 4 generations"),
        "{text}"
    );
    assert!(text.contains("__bloomsled_window:4:seen:"), "{text}");
    let out = bin().args(["verify", path]).output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{text}");
    assert!(
        text.contains("__bloomsled_window:4:seen:")
            && text.contains("50 keys checked, 0 false negatives"),
        "{text}"
    );
}

//! The real `bloomsled` binary: load, check, stats, verify/rebuild after corruption, snapshot,
//! and one-line errors with a non-zero exit (the demo's tests are in `demo.rs`).

mod common;

use std::io::Write;
use std::path::Path;
use std::process::Stdio;

use common::{bin, load_sample, run, stderr, stdout};

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
fn a_counting_database_stays_counting_under_the_cli() {
    let dir = tempfile::tempdir().unwrap();
    let db_dir = dir.path().join("counting");
    {
        let db = open_counting(&db_dir);
        insert_keys(&db, 100);
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
    let db = open_counting(&db_dir);
    assert!(db.recovery_report().loaded());
}

/// Opens (or creates) the counting database at `path`.
fn open_counting(path: &Path) -> bloomsled::Db {
    bloomsled::Config::new()
        .path(path)
        .counting(true)
        .open()
        .unwrap()
}

/// Opens the counting database at `path` under the strict recovery policy.
fn open_counting_strict(path: &Path) -> bloomsled::Db {
    bloomsled::Config::new()
        .path(path)
        .counting(true)
        .recovery(bloomsled::RecoveryPolicy::Strict)
        .open()
        .unwrap()
}

/// Inserts the keys `k0 .. k{n-1}`, each with the value `v`.
fn insert_keys(db: &bloomsled::Db, n: u32) {
    for i in 0..n {
        db.insert(format!("k{i}"), "v").unwrap();
    }
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
    let db = open_counting_strict(&path);
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
    let db = open_counting(&path);
    insert_keys(&db, 200);
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
    let db = open_counting_strict(&path);
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

/// `check --tree` names a tree to look in: a name that is no tree of the database (a typo)
/// is an error, not a tree made on the spot whose every answer is `absent`.
#[test]
fn check_in_a_tree_that_does_not_exist_is_an_error_and_creates_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("db");
    load_sample(&db);
    let d = db.to_str().unwrap();
    let o = run(&["check", d, "--tree", "no-such-tree", "spam-7@example.net"]);
    assert_eq!(o.status.code(), Some(1), "{}", stdout(&o));
    assert!(stdout(&o).is_empty(), "answered: {}", stdout(&o));
    let err = stderr(&o);
    assert!(
        err.starts_with("bloomsled: ") && err.contains("no-such-tree"),
        "{err}"
    );
    let opened = bloomsled::Config::new().path(&db).open().unwrap();
    let names = opened.tree_names();
    assert!(
        !names.iter().any(|n| &n[..] == b"no-such-tree"),
        "check created the tree"
    );
}

/// sled's log cut to nothing: sled opens an empty store. `verify` (strict) says why it
/// cannot vouch for it, in one line with exit 1, instead of "OK" over an empty store.
#[test]
fn verify_of_a_store_whose_sled_log_was_cut_is_an_error() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("db");
    load_sample(&db);
    std::fs::OpenOptions::new()
        .write(true)
        .open(db.join("db"))
        .unwrap()
        .set_len(0)
        .unwrap();
    let o = run(&["verify", db.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(1), "{}{}", stdout(&o), stderr(&o));
    let err = stderr(&o);
    assert_eq!(err.trim_end().lines().count(), 1, "{err}");
    assert!(err.contains("sled's log lost what it held"), "{err}");
    // `check` repairs (a new database id) and answers from what the store holds now, but
    // says on stderr that the store lost what it held.
    let o = run(&["check", db.to_str().unwrap(), "spam-1@example.net"]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert_eq!(stdout(&o), "absent\tspam-1@example.net\n");
    assert!(
        stderr(&o).starts_with("bloomsled: warning: ")
            && stderr(&o).contains("sled's log lost what it held"),
        "{}",
        stderr(&o)
    );
}

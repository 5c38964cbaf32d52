//! The kill -9 control that once failed: sled killed between its two writes of `conf`,
//! before it made its log. Two checks `tests/power_cut.rs` runs first on every run, with no
//! FUSE: the folder such a kill leaves, made byte for byte, and made by a real SIGKILL that
//! strace sends at that write.

use std::process::Command;

use super::{config, key, Kind, CHILD_ENV};

/// What a failing `kill -9` control left (Snapshots kind, killed 29 ms in, found by
/// `BLOOMSLED_POWER_CUT_CONTROLS`; the error of the control that failed once at 88 ms
/// before): the child died inside its first open,
/// between sled's two writes of `conf` (its lines, then their CRC) and before sled made its
/// log `db`. sled 0.34.7 refuses that folder forever (`Read corrupted data at file offset
/// None`); bloomsled's open completes `conf` (src/store/repair/torn_conf.rs). The same folder, made
/// here byte for byte, so this needs no FUSE and no luck.
pub(crate) fn a_kill_inside_sleds_creation_of_conf_does_not_brick_the_folder() -> Result<(), String>
{
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("db");
    std::fs::create_dir_all(db.join("blobs")).unwrap();
    std::fs::write(
        db.join("conf"),
        "segment_size: 524288\nuse_compression: false\nversion: 0.34\n",
    )
    .unwrap();
    if sled::Config::new().path(&db).open().is_ok() {
        return Err("plain sled opened the torn folder (sled fixed? drop the repair)".into());
    }
    let open = || config(&db, Kind::Plain).open().map_err(|e| e.to_string());
    let d = open()?;
    d.insert(key(1), &b"v"[..]).map_err(|e| e.to_string())?;
    d.close().map_err(|e| e.to_string())?;
    let d = open()?;
    match d.contains_key(key(1)) {
        Ok(true) => Ok(()),
        other => Err(format!("key lost: {other:?}")),
    }
}

/// The same folder made by a real `kill -9` on a plain folder (no FUSE): `strace` sends the
/// child SIGKILL at its second write to `conf`, the instant the control met by chance. So
/// the control's failure is sled's two-write `conf` meeting any kill, not a FUSE artifact
/// (FUSE only widens the window: each write is a round trip to the file system's process).
/// Skipped, loudly, where `strace` is missing or cannot trace; under `CI=true` that fails.
pub(crate) fn a_real_kill_between_sleds_two_writes_of_conf() -> Result<(), String> {
    let skip = |why: &str| {
        if std::env::var("CI").as_deref() == Ok("true") {
            // .ci/run installs strace: a skip there would hide the check.
            return Err(format!("the strace kill cannot run under CI=true: {why}"));
        }
        eprintln!("*** power_cut: the strace kill inside sled's conf write SKIPPED: {why} ***");
        Ok(())
    };
    let on_path = std::env::var_os("PATH")
        .is_some_and(|p| std::env::split_paths(&p).any(|d| d.join("strace").is_file()));
    if !on_path {
        return skip("no strace on PATH");
    }
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("db");
    let status = Command::new("strace")
        .args(["-f", "-qq", "-o", "/dev/null", "-e", "trace=write"])
        .args(["-e", "inject=write:signal=KILL:when=2", "-P"])
        .arg(db.join("conf"))
        .arg(std::env::current_exe().unwrap())
        .env(CHILD_ENV, &db)
        .env("BLOOMSLED_POWER_CUT_KIND", "Plain")
        .env("BLOOMSLED_POWER_CUT_CHILD_SEED", "1")
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .status()
        .map_err(|e| format!("strace: {e}"))?;
    let conf = std::fs::read(db.join("conf")).unwrap_or_default();
    if conf.len() != 58 || db.join("db").exists() {
        return skip(&format!(
            "strace did not stop the child there ({status}, conf {} bytes)",
            conf.len()
        ));
    }
    if sled::Config::new().path(&db).open().is_ok() {
        return Err("plain sled opened the folder a kill left (sled fixed?)".into());
    }
    let d = config(&db, Kind::Plain).open().map_err(|e| e.to_string())?;
    d.insert(key(1), &b"v"[..]).map_err(|e| e.to_string())?;
    d.close().map_err(|e| e.to_string())
}

/// The child of [`a_power_cut_after_a_flush_keeps_sleds_conf`]: creates a database at
/// `dir` with a segment size other than sled's default, stores one key, flushes it, says
/// so and waits for the cut.
pub(crate) fn conf_child(dir: &std::path::Path) {
    let db = bloomsled::Config::new()
        .path(dir)
        .segment_size(CONF_SEGMENT)
        .open()
        .unwrap();
    db.insert(key(1), &b"v"[..]).unwrap();
    db.flush().unwrap();
    println!("flushed");
    std::thread::sleep(std::time::Duration::from_secs(600));
}

/// The child's segment size (sled's default is 512 KiB).
const CONF_SEGMENT: usize = 1 << 20;

/// sled writes `conf` once, when it creates a database, and never fsyncs it; a flush that
/// returned makes sled's log durable, not `conf`. After a power cut `conf` could be gone
/// while the flushed data stays, and the next open writes a new one from *its* settings:
/// another segment size would then read the log with the wrong geometry instead of
/// meeting sled's "cannot change the io buffer size" refusal. bloomsled fsyncs `conf` at
/// open, before anything it makes durable: after the cut the file is whole, an open with
/// another segment size is refused, and the one with the creator's finds the key.
pub(crate) fn a_power_cut_after_a_flush_keeps_sleds_conf() -> Result<(), String> {
    let base = tempfile::tempdir().unwrap();
    let run = bloomsled_powercut::run_child(
        base.path(),
        |mnt| {
            let mut c = Command::new(std::env::current_exe().unwrap());
            c.env(CONF_CHILD_ENV, mnt.join("db"));
            c
        },
        "flushed",
        std::time::Duration::ZERO,
        std::time::Duration::from_secs(60),
        bloomsled_powercut::Fault::PowerCut(1),
    )
    .map_err(|e| e.to_string())?;
    if !run.reached {
        return Err(format!("the child never flushed: {:?}", run.lines));
    }
    let db = base.path().join("data").join("db");
    let conf = std::fs::read(db.join("conf")).unwrap_or_default();
    // Whole: sled's three lines, then their CRC32 (4 bytes).
    let lines = format!("segment_size: {CONF_SEGMENT}\nuse_compression: false\nversion: 0.34\n");
    if !conf.starts_with(lines.as_bytes()) || conf.len() != lines.len() + 4 {
        return Err(format!(
            "sled's conf after the cut: {:?} ({} bytes)",
            String::from_utf8_lossy(&conf),
            conf.len()
        ));
    }
    match bloomsled::Config::new().path(&db).open() {
        Err(bloomsled::Error::Unsupported(why)) if why.contains("io buffer size") => {}
        other => {
            return Err(format!(
                "an open with another segment size: {:?}",
                other.map(|_| ())
            ))
        }
    }
    let d = bloomsled::Config::new()
        .path(&db)
        .segment_size(CONF_SEGMENT)
        .open()
        .map_err(|e| e.to_string())?;
    match d.get(key(1)) {
        Ok(Some(_)) => Ok(()),
        other => Err(format!("the flushed key after the cut: {other:?}")),
    }
}

/// The environment variable that makes the test binary [`conf_child`].
pub(crate) const CONF_CHILD_ENV: &str = "BLOOMSLED_POWER_CUT_CONF_CHILD";

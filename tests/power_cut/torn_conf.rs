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

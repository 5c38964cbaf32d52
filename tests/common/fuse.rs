//! The power-cut file system (`bloomsled-powercut`) mounted in the test process, gated as
//! `tests/power_cut.rs` is: where FUSE cannot be mounted the caller skips, loudly, except
//! under `CI=true`, where it fails.

use std::path::PathBuf;

use bloomsled_powercut::{Model, Mounted, PowerCutFs};

/// A mount at `<tmp>/<name>-<pid>/mnt` over a fresh backing folder, or `None` (after a
/// loud note) if this machine cannot mount FUSE and this is not CI.
pub fn mount_or_skip(name: &str) -> Option<(PathBuf, Mounted)> {
    if let Err(why) = bloomsled_powercut::available() {
        assert!(
            std::env::var("CI").as_deref() != Ok("true"),
            "no FUSE on this machine under CI=true: {why}"
        );
        eprintln!(
            "\n*** {name}: SKIPPED, this machine cannot mount FUSE: {why} ***\n\
             *** (apt-get install -y fuse3; under CI=true this fails) ***\n"
        );
        return None;
    }
    let base = std::env::temp_dir().join(format!("bloomsled-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&base);
    let mounted = PowerCutFs::mount_with(&base, Model::Posix).expect("mount the FUSE fs");
    Some((base, mounted))
}

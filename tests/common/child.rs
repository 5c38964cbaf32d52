//! A child process to crash: the test binary re-runs itself with an environment variable
//! that tells it which role to play (as sled's `tests/test_crash_recovery.rs` does), and the
//! parent kills it with SIGKILL at the moment it chooses.

use std::ffi::OsStr;
use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};

/// This test binary, to be run as a child with `env` set to `value`. Under the standard
/// test harness `test` names the one test the child runs (exactly, on one thread, its output
/// not captured); a binary with its own `main` (`harness = false`) passes `None` and reads
/// `env` first thing.
pub fn command(env: &str, value: impl AsRef<OsStr>, test: Option<&str>) -> Command {
    let mut cmd = Command::new(std::env::current_exe().expect("the test binary's path"));
    if let Some(test) = test {
        cmd.args(["--exact", test, "--nocapture", "--test-threads=1"]);
    }
    cmd.env(env, value);
    cmd
}

/// The value of `env` when this process is a child started by [`command`], else `None`.
pub fn role(env: &str) -> Option<String> {
    std::env::var(env).ok()
}

/// `kill -9` and reap: the child gets no chance to clean up.
pub fn kill(child: &mut Child) {
    child.kill().expect("SIGKILL the child");
    child.wait().expect("reap the child");
}

/// Runs `cmd` until it prints a line containing `marker` (or exits), then kills it with
/// SIGKILL; true if the marker was printed, i.e. the child reached the chosen moment.
pub fn kill_after_line(mut cmd: Command, marker: &str) -> bool {
    let mut child = cmd
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("spawn the child");
    let out = child.stdout.take().expect("the child's stdout");
    let seen = BufReader::new(out)
        .lines()
        .any(|l| l.map(|l| l.contains(marker)).unwrap_or(false));
    kill(&mut child);
    seen
}

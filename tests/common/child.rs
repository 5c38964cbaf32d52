//! A child process to crash: the test binary re-runs itself with an environment variable
//! that tells it which role to play (as sled's `tests/test_crash_recovery.rs` does), and the
//! parent kills it with SIGKILL at the moment it chooses.

use std::ffi::OsStr;
use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

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
pub fn kill_after_line(cmd: Command, marker: &str) -> bool {
    kill_after(cmd, marker, Duration::ZERO, None).reached
}

/// What a child killed by [`kill_after`] printed.
#[derive(Debug)]
pub struct Killed {
    /// Whether it printed the marker line (reached the chosen moment) in time.
    pub reached: bool,
    /// Every line of its stdout, up to its death (including those after the marker).
    pub lines: Vec<String>,
}

/// Runs `cmd` until it prints a line containing `marker`, lets it run on for `then`, and
/// kills it with SIGKILL. A child that exits first, or has not printed the marker within
/// `limit` (if given), is killed at once and reported as not `reached`.
pub fn kill_after(
    mut cmd: Command,
    marker: &str,
    then: Duration,
    limit: Option<Duration>,
) -> Killed {
    let mut child = cmd
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("spawn the child");
    let out = child.stdout.take().expect("the child's stdout");
    let (tx, rx) = mpsc::channel();
    // The reader runs on after the marker, so the lines printed until the kill are kept.
    let reader = std::thread::spawn(move || {
        for line in BufReader::new(out).lines() {
            let Ok(line) = line else { break };
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    let deadline = limit.map(|l| Instant::now() + l);
    let mut lines = Vec::new();
    let reached = loop {
        let next = match deadline {
            Some(d) => rx
                .recv_timeout(d.saturating_duration_since(Instant::now()))
                .map_err(|_| ()),
            None => rx.recv().map_err(|_| ()),
        };
        let Ok(line) = next else { break false }; // exited, or out of time
        let hit = line.contains(marker);
        lines.push(line);
        if hit {
            break true;
        }
    };
    if reached {
        std::thread::sleep(then);
    }
    kill(&mut child);
    reader.join().expect("the reader thread");
    lines.extend(rx.try_iter());
    Killed { reached, lines }
}

//! A child process for crash tests: this test binary, re-run with one test selected and a
//! role in an environment variable; the parent kills it with SIGKILL once it has printed a
//! marker line (after its writes are durable), as `kill -9` would.

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};

/// Runs test `test` of this binary as a child with `env` set, reads its standard output
/// until a line that ends with `marker` (the test harness may print its own text before it
/// on the same line), then kills it with SIGKILL and reaps it. Panics if the
/// child ends before printing the marker.
pub fn run_until_then_kill(test: &str, env: &[(&str, String)], marker: &str) {
    let mut cmd = Command::new(std::env::current_exe().unwrap());
    cmd.args(["--exact", test, "--nocapture", "--test-threads=1"])
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit());
    for (k, v) in env {
        cmd.env(k, v);
    }
    let mut child = cmd.spawn().unwrap();
    let out = BufReader::new(child.stdout.take().unwrap());
    let seen = out
        .lines()
        .any(|l| l.map(|l| l.trim_end().ends_with(marker)).unwrap_or(false));
    child.kill().unwrap(); // SIGKILL on Unix
    child.wait().unwrap();
    assert!(seen, "the child ended before printing {marker:?}");
}

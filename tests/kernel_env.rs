//! `BLOOMSLED_KERNEL` (read once per process): each value runs in a child process of this
//! test binary, which reports the kernel its filters got and checks them.
//!
//! A binary built for another architecture and run under an emulator (cargo's
//! `CARGO_TARGET_<TRIPLE>_RUNNER`, e.g. `qemu-aarch64 -L /usr/aarch64-linux-gnu`) cannot
//! start its children directly where the system does not hand foreign binaries to the
//! emulator (no `binfmt_misc`): set `BLOOMSLED_TEST_RUNNER` to the same command and the
//! children run under it.

use std::process::Command;

/// Set in the child: run the filter checks and print the kernel instead of spawning.
const CHILD: &str = "BLOOMSLED_KERNEL_TEST_CHILD";

/// The kernels this CPU runs, the fastest last (the test's own detection, not the crate's).
fn supported() -> Vec<&'static str> {
    let mut k = vec!["scalar"];
    #[cfg(target_arch = "x86_64")]
    {
        if std::is_x86_feature_detected!("avx2") {
            k.push("avx2");
        }
        if std::is_x86_feature_detected!("avx512f") && std::is_x86_feature_detected!("avx512dq") {
            k.push("avx512");
        }
    }
    k
}

/// In the child: a filter made under the forced kernel answers right (no false negative,
/// a false-positive rate near the configured one), and the kernel's name is printed.
fn child() {
    let f = bloomsled::Filter::new(20_000, 0.01).unwrap();
    let keys: Vec<String> = (0..20_000)
        .map(|i| format!("https://example.com/{i}"))
        .collect();
    for k in &keys {
        f.insert(k.as_bytes());
    }
    assert!(keys.iter().all(|k| f.contains(k.as_bytes())));
    assert!(f.contains_many(&keys).iter().all(|&c| c));
    let fp = (0..20_000)
        .filter(|i| f.contains(format!("https://example.org/{i}").as_bytes()))
        .count();
    assert!(fp < 600, "{fp} false positives of 20,000 at 1%");
    println!("kernel={}", bloomsled::probe_kernel());
}

/// A command running this test binary: directly, or under `BLOOMSLED_TEST_RUNNER`'s
/// command (words split on blanks) if it is set.
fn this_binary() -> Command {
    let exe = std::env::current_exe().unwrap();
    let runner = std::env::var("BLOOMSLED_TEST_RUNNER").unwrap_or_default();
    let mut words = runner.split_whitespace();
    match words.next() {
        None => Command::new(exe),
        Some(program) => {
            let mut cmd = Command::new(program);
            cmd.args(words).arg(exe);
            cmd
        }
    }
}

#[test]
fn the_environment_forces_a_kernel_the_cpu_runs() {
    if std::env::var_os(CHILD).is_some() {
        child();
        return;
    }
    let supported = supported();
    let best = *supported.last().unwrap();
    let mut cases: Vec<(Option<&str>, &str)> = vec![
        (None, best),
        (Some(""), best),
        (Some("bogus"), best),
        (Some("neon-ish"), best),
    ];
    for name in ["scalar", "avx2", "avx512"] {
        let want = if supported.contains(&name) {
            name
        } else {
            best
        };
        cases.push((Some(name), want));
    }
    for (value, want) in cases {
        let mut cmd = this_binary();
        cmd.args([
            "--exact",
            "the_environment_forces_a_kernel_the_cpu_runs",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(CHILD, "1");
        match value {
            Some(v) => cmd.env("BLOOMSLED_KERNEL", v),
            None => cmd.env_remove("BLOOMSLED_KERNEL"),
        };
        let out = cmd.output().unwrap();
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success(),
            "BLOOMSLED_KERNEL={value:?}: the child failed: {stdout}{}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(
            stdout.contains(&format!("kernel={want}\n")),
            "BLOOMSLED_KERNEL={value:?}: want {want}, got {stdout}"
        );
    }
}

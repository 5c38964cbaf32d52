//! A child process on a mount, ended by a power cut or by `kill -9`.

use std::io;
use std::path::Path;
use std::time::Duration;

use crate::{CutReport, Model, PowerCutFs};

/// What ends a run of [`run_child`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fault {
    /// The power is cut (with this seed for the writes that reached the disk anyway, see
    /// [`crate::Mounted::cut`]) and the child dies with it.
    PowerCut(u64),
    /// `kill -9` of the child, the machine stays up: every write stays (the control).
    Kill,
}

/// What a run of [`run_child`] saw.
#[derive(Debug)]
pub struct ChildRun {
    /// Every line the child printed before it died (a line is printed after the act it
    /// reports returned, so a line seen here was true before the fault).
    pub lines: Vec<String>,
    /// What the power cut undid (`None` under [`Fault::Kill`]).
    pub cut: Option<CutReport>,
    /// Whether the child printed the marker before it died or exited.
    pub reached: bool,
}

/// Mounts the power-cut file system at `<base>/mnt` over `<base>/data` (with
/// [`Model::Ext4Ordered`], or [`Model::Posix`] if `BLOOMSLED_POWER_CUT_MODEL=posix`), starts the child
/// that `command` makes for the mount point, waits until it prints a line containing
/// `marker` (at most `limit`), lets it run `then` longer, and ends it with `fault`. The
/// backing folder `<base>/data` then holds what a reboot would find.
///
/// ```no_run
/// use std::process::Command;
/// use std::time::Duration;
/// use bloomsled_powercut::{run_child, Fault};
/// let run = run_child(
///     std::path::Path::new("/tmp/pc-run"),
///     |mnt| { let mut c = Command::new("touch"); c.arg(mnt.join("f")); c },
///     "never printed",
///     Duration::ZERO,
///     Duration::from_secs(5),
///     Fault::PowerCut(7),
/// )?;
/// assert!(!run.reached);
/// # Ok::<(), std::io::Error>(())
/// ```
pub fn run_child(
    base: &Path,
    command: impl FnOnce(&Path) -> std::process::Command,
    marker: &str,
    then: Duration,
    limit: Duration,
    fault: Fault,
) -> io::Result<ChildRun> {
    let model = match std::env::var("BLOOMSLED_POWER_CUT_MODEL").as_deref() {
        Ok("posix") => Model::Posix,
        _ => Model::Ext4Ordered,
    };
    run_child_with(model, base, command, marker, then, limit, fault)
}

/// [`run_child`] on a file system of the given [`Model`].
///
/// ```no_run
/// use std::process::Command;
/// use std::time::Duration;
/// use bloomsled_powercut::{run_child_with, Fault, Model};
/// let run = run_child_with(
///     Model::Posix,
///     std::path::Path::new("/tmp/pc-posix"),
///     |mnt| { let mut c = Command::new("touch"); c.arg(mnt.join("f")); c },
///     "never printed",
///     Duration::ZERO,
///     Duration::from_secs(5),
///     Fault::PowerCut(7),
/// )?;
/// assert!(!run.reached);
/// # Ok::<(), std::io::Error>(())
/// ```
pub fn run_child_with(
    model: Model,
    base: &Path,
    command: impl FnOnce(&Path) -> std::process::Command,
    marker: &str,
    then: Duration,
    limit: Duration,
    fault: Fault,
) -> io::Result<ChildRun> {
    use std::io::{BufRead, BufReader};
    use std::process::Stdio;
    use std::sync::mpsc;

    let ctx =
        |what: &'static str| move |e: io::Error| io::Error::new(e.kind(), format!("{what}: {e}"));
    let mounted = PowerCutFs::mount_with(base, model).map_err(ctx("mount"))?;
    let mut cmd = command(mounted.mountpoint());
    let mut child = cmd
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .map_err(ctx("spawn the child"))?;
    let out = child.stdout.take().expect("piped stdout");
    let (tx, rx) = mpsc::channel();
    let reader = std::thread::spawn(move || {
        for line in BufReader::new(out).lines() {
            let Ok(line) = line else { break };
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    let mut lines = Vec::new();
    let reached = wait_for_marker(&rx, marker, limit, &mut lines);
    if reached {
        std::thread::sleep(then);
    }
    if matches!(fault, Fault::PowerCut(_)) {
        // The power goes first: nothing the child does after this instant reaches a disk.
        mounted.freeze();
    }
    let _ = child.kill();
    child.wait()?;
    reader.join().expect("the reader thread");
    lines.extend(rx.try_iter());
    let cut = match fault {
        Fault::PowerCut(seed) => Some(mounted.cut(Some(seed)).map_err(ctx("cut"))?),
        Fault::Kill => {
            mounted.unmount().map_err(ctx("unmount"))?;
            None
        }
    };
    Ok(ChildRun {
        lines,
        cut,
        reached,
    })
}

/// Collects the child's lines from `rx` until one contains `marker` (true) or `limit`
/// passes or the child's output ends (false).
fn wait_for_marker(
    rx: &std::sync::mpsc::Receiver<String>,
    marker: &str,
    limit: Duration,
    lines: &mut Vec<String>,
) -> bool {
    let deadline = std::time::Instant::now() + limit;
    loop {
        let left = deadline.saturating_duration_since(std::time::Instant::now());
        let Ok(line) = rx.recv_timeout(left) else {
            return false;
        };
        let hit = line.contains(marker);
        lines.push(line);
        if hit {
            return true;
        }
    }
}

//! The FUSE session loop on a thread of its own, and a teardown that cannot panic.
//!
//! fuser 0.15's `BackgroundSession::join` unmounts, then `guard.join().unwrap().unwrap()`:
//! it panics if the session loop ended with an error. The loop (`Session::run`) ends
//! cleanly only on `ENODEV` from `read(2)` on `/dev/fuse`; but when the kernel tears the
//! connection down while a request is still in flight (the unmount of a cut racing the
//! request a `kill -9`ed writer left behind, or any process still touching the mount), the
//! read answers `ECONNABORTED` instead (cberner/fuser#212: "Software caused connection
//! abort" from `join`), and the test that called `join` panicked inside fuser (the flake
//! of `fpset/tests/power_cut.rs`, once in a dozen runs). So this module runs the loop
//! itself: [`Served::stop`] unmounts, joins the thread and reads its result: an end by
//! `ENODEV` or `ECONNABORTED` is the end of the session it asked for; any other error, or
//! a panic of the loop, is returned as an [`io::Error`] saying so, never a panic here.

use std::io;
use std::path::Path;
use std::thread::JoinHandle;

use fuser::{Filesystem, MountOption, Session, SessionUnmounter};

/// A mounted session whose loop runs on its own thread.
pub(crate) struct Served {
    unmounter: SessionUnmounter,
    thread: Option<JoinHandle<io::Result<()>>>,
    mountpoint: std::path::PathBuf,
    /// The kernel's id of this FUSE connection (the minor number of the mount's device):
    /// `/sys/fs/fuse/connections/<id>/abort` ends it whatever still holds the mount.
    connection: Option<u64>,
}

impl Served {
    /// Mounts `fs` at `mountpoint` and starts its loop.
    pub(crate) fn start<FS: Filesystem + Send + 'static>(
        fs: FS,
        mountpoint: &Path,
        options: &[MountOption],
    ) -> io::Result<Served> {
        let mut session = Session::new(fs, mountpoint, options)?;
        let unmounter = session.unmount_callable();
        let thread = std::thread::Builder::new()
            .name("powercut-fuse".into())
            .spawn(move || session.run())?;
        // The mount's device, read through the loop now serving it (a `stat` of the root).
        let connection = {
            use std::os::unix::fs::MetadataExt;
            std::fs::metadata(mountpoint)
                .ok()
                .map(|m| u64::from(libc::minor(m.dev())))
        };
        Ok(Served {
            unmounter,
            thread: Some(thread),
            mountpoint: mountpoint.to_path_buf(),
            connection,
        })
    }

    /// Unmounts, waits for the loop to end and says how it ended (see the module docs).
    pub(crate) fn stop(mut self) -> io::Result<()> {
        self.end()
    }

    fn end(&mut self) -> io::Result<()> {
        let Some(thread) = self.thread.take() else {
            return Ok(());
        };
        // A file on the mount still open makes the unmount fail (`EBUSY`): a writer's
        // thread pool can hold one a moment after the writer let go (sled's does). fuser's
        // unmount only logs that failure and returns `Ok` (and will not try again), and
        // the loop then reads `/dev/fuse` forever: a CI run hung there. So the mount itself
        // is watched: retried for a while, then its connection aborted (which ends the
        // loop whatever holds the mount) and detached, and the test told.
        let _ = self.unmounter.unmount();
        let start = std::time::Instant::now();
        while is_mount_point(&self.mountpoint)
            && start.elapsed() < std::time::Duration::from_secs(10)
        {
            std::thread::sleep(std::time::Duration::from_millis(20));
            umount(&self.mountpoint, 0);
        }
        if is_mount_point(&self.mountpoint) {
            self.abort(thread);
            return Ok(());
        }
        match thread.join() {
            Ok(Ok(())) => Ok(()),
            // The connection was torn down under a request in flight: the end we asked for.
            Ok(Err(e)) if e.kind() == io::ErrorKind::ConnectionAborted => Ok(()),
            Ok(Err(e)) => Err(io::Error::new(
                e.kind(),
                format!("the FUSE session loop ended with an error: {e}"),
            )),
            Err(_) => Err(io::Error::other("the FUSE session loop panicked")),
        }
    }

    /// The mount stayed busy: aborts its connection (through `fusectl`, mounted if need
    /// be; root only), so nothing more reaches the backing folder and the loop ends, and
    /// detaches it. The session is over either way (a cut's forgetting may go on); what
    /// still held it is reported on stderr. A loop that does not end within 5 s (no
    /// `fusectl` here) is left to the process's exit rather than waited for.
    fn abort(&mut self, thread: JoinHandle<io::Result<()>>) {
        let control = Path::new("/sys/fs/fuse/connections");
        if std::fs::read_dir(control).is_ok_and(|mut d| d.next().is_none()) {
            let _ = std::process::Command::new("mount")
                .args(["-t", "fusectl", "fusectl"])
                .arg(control)
                .stderr(std::process::Stdio::null())
                .status();
        }
        let aborted = self.connection.is_some_and(|id| {
            std::fs::write(control.join(id.to_string()).join("abort"), "1").is_ok()
        });
        umount(&self.mountpoint, libc::MNT_DETACH);
        let start = std::time::Instant::now();
        while !thread.is_finished() && start.elapsed() < std::time::Duration::from_secs(5) {
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
        eprintln!(
            "powercut: {} stayed busy for 10 s after the unmount (a file on it still open); \
             its connection was {}, the mount detached",
            self.mountpoint.display(),
            if aborted {
                "aborted"
            } else {
                "NOT aborted (no fusectl)"
            }
        );
        if thread.is_finished() {
            let _ = thread.join();
        }
    }
}

/// True if `mountpoint` is a mount point in this process's mount namespace.
pub(crate) fn is_mount_point(mountpoint: &Path) -> bool {
    let Ok(info) = std::fs::read_to_string("/proc/self/mountinfo") else {
        return false;
    };
    let want = std::path::absolute(mountpoint).unwrap_or_else(|_| mountpoint.to_path_buf());
    // Field 5 is the mount point, with spaces and the like escaped as `\040`.
    info.lines()
        .filter_map(|l| l.split(' ').nth(4))
        .any(|m| Path::new(&m.replace("\\040", " ")) == want)
}

/// `umount2(mountpoint, flags)`; the outcome is read back through [`is_mount_point`].
fn umount(mountpoint: &Path, flags: libc::c_int) {
    use std::os::unix::ffi::OsStrExt;
    let Ok(c) = std::ffi::CString::new(mountpoint.as_os_str().as_bytes()) else {
        return;
    };
    // SAFETY: `c` is a NUL-terminated path that outlives the call; umount2 reads it only.
    #[allow(unsafe_code)]
    let failed = unsafe { libc::umount2(c.as_ptr(), flags) } != 0;
    if failed && io::Error::last_os_error().raw_os_error() == Some(libc::EPERM) {
        // Not root: through the setuid helper, as fuser does.
        let mut cmd = std::process::Command::new("fusermount3");
        cmd.arg("-u").arg("-q");
        if flags & libc::MNT_DETACH != 0 {
            cmd.arg("-z");
        }
        let _ = cmd
            .arg("--")
            .arg(mountpoint)
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .status();
    }
}

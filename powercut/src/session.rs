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
        Ok(Served {
            unmounter,
            thread: Some(thread),
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
        // thread pool can hold one a moment after the writer let go (sled's does). Retry
        // for a while; if it never goes, say so rather than wait for the loop forever.
        let mut unmounted = self.unmounter.unmount();
        let start = std::time::Instant::now();
        while unmounted.is_err() && start.elapsed() < std::time::Duration::from_secs(10) {
            std::thread::sleep(std::time::Duration::from_millis(20));
            unmounted = self.unmounter.unmount();
        }
        if let Err(e) = unmounted {
            return Err(io::Error::new(
                e.kind(),
                format!("unmount failed (a file on the mount still open?): {e}"),
            ));
        }
        let ended = match thread.join() {
            Ok(Ok(())) => Ok(()),
            // The connection was torn down under a request in flight: the end we asked for.
            Ok(Err(e)) if e.kind() == io::ErrorKind::ConnectionAborted => Ok(()),
            Ok(Err(e)) => Err(io::Error::new(
                e.kind(),
                format!("the FUSE session loop ended with an error: {e}"),
            )),
            Err(_) => Err(io::Error::other("the FUSE session loop panicked")),
        };
        ended
    }
}

impl Drop for Served {
    fn drop(&mut self) {
        if let Err(e) = self.end() {
            eprintln!("powercut: teardown of the mount: {e}");
        }
    }
}

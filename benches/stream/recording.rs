//! With `--features metrics`: the metrics rows' recorder and the thread that records the
//! store's series while those rows run.

use std::sync::atomic::{AtomicBool, Ordering::Relaxed};
use std::sync::Arc;
use std::time::Duration;

/// A real recorder installed (metrics-util's `DebuggingRecorder`) and a thread that records
/// the store's series every 10 ms while a contender runs under [`Recording::during`] (as
/// `Config::metrics_interval` would, 1,000× as often as a 10 s scrape); idle otherwise, so
/// the rows without metrics run without it.
pub struct Recording {
    on: Arc<AtomicBool>,
    stop: Arc<AtomicBool>,
}

impl Recording {
    /// Installs the recorder (once per process; a second size's store reuses it) and starts
    /// the recording thread over `db`.
    pub fn start(db: bloomsled::Db) -> Recording {
        let _ = metrics_util::debugging::DebuggingRecorder::new().install();
        let (on, stop) = (
            Arc::new(AtomicBool::new(false)),
            Arc::new(AtomicBool::new(false)),
        );
        let (flag, end) = (on.clone(), stop.clone());
        std::thread::spawn(move || {
            while !end.load(Relaxed) {
                std::thread::sleep(Duration::from_millis(10));
                if flag.load(Relaxed) {
                    db.record_metrics();
                }
            }
        });
        Recording { on, stop }
    }

    /// Runs `f` with the recording on.
    pub fn during(&self, f: impl FnOnce() -> f64) -> f64 {
        self.on.store(true, Relaxed);
        let v = f();
        self.on.store(false, Relaxed);
        v
    }
}

impl Drop for Recording {
    fn drop(&mut self) {
        self.stop.store(true, Relaxed);
    }
}

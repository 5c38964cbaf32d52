//! sled's file lock, after bloomsled's last handle to sled is gone.
//!
//! sled 0.34 locks its `db` file (`flock` on Unix, `LockFileEx` on Windows) for as long as
//! any of its handles holds the file open, and the threads that write its log out hold it
//! too: the last one can let go a moment after the last `sled::Db` drops, when a write-out
//! was in flight (a clean close's records are). A reopen in that moment fails with "could
//! not acquire lock". [`wait_until_free`] makes dropping the last handle a close the caller
//! can reopen after, as closing a file is.

use std::fs::{File, TryLockError};
use std::path::Path;
use std::time::{Duration, Instant};

/// How long a drop waits for sled's threads: they finish a write-out that was in flight.
/// Past it (a second process took the lock, or a write-out is stuck on the disk) the drop
/// returns, and says so in the log.
const LIMIT: Duration = Duration::from_secs(2);

/// Returns once no handle holds the lock on sled's `db` file, `db_file` (after taking the
/// lock and giving it back at once), or after [`LIMIT`]. A file that cannot be opened or
/// locked for another reason (gone, unreadable) has nothing to wait for.
pub(super) fn wait_until_free(db_file: &Path) {
    let Ok(file) = File::open(db_file) else {
        return;
    };
    let start = Instant::now();
    loop {
        match file.try_lock() {
            // Dropping `file` gives the lock back.
            Ok(()) => return,
            Err(TryLockError::WouldBlock) if start.elapsed() < LIMIT => {
                std::thread::sleep(Duration::from_millis(1));
            }
            Err(TryLockError::WouldBlock) => {
                log::warn!(
                    "bloomsled: sled's lock on {} is still held {LIMIT:?} after the database \
                     was dropped",
                    db_file.display()
                );
                return;
            }
            Err(TryLockError::Error(_)) => return,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn returns_once_another_handle_lets_go_of_the_lock() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("db");
        let holder = File::create(&path).unwrap();
        holder.lock().unwrap();
        let released = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(50));
            let releasing = Instant::now();
            drop(holder);
            releasing
        });
        wait_until_free(&path);
        let returned = Instant::now();
        assert!(
            returned >= released.join().unwrap(),
            "returned while the lock was held"
        );
        // And the lock is free again for the next open.
        File::open(&path).unwrap().try_lock().unwrap();
    }

    /// Another holder that never lets go (a second process that opened the database the
    /// moment the drop let go of it): the wait ends at its limit, it does not hang.
    #[test]
    fn a_lock_held_for_good_is_waited_for_only_up_to_the_limit() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("db");
        let holder = File::create(&path).unwrap();
        holder.lock().unwrap();
        let start = Instant::now();
        wait_until_free(&path);
        let took = start.elapsed();
        assert!(took >= LIMIT, "gave up before its limit: {took:?}");
        drop(holder);
    }

    #[test]
    fn a_missing_file_has_nothing_to_wait_for() {
        let dir = tempfile::tempdir().unwrap();
        wait_until_free(&dir.path().join("db"));
    }
}

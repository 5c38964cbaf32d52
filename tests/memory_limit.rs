//! Under a memory limit, a filter too large to load is an error, not an abort: a child
//! process caps its address space (RLIMIT_AS) below what the snapshot needs and opens the
//! database; it must get `Error::OutOfMemory` and exit normally, and the data must be intact.
#![cfg(target_os = "linux")]

mod common;

use bloomsled::Config;
use common::child;

const CHILD_ENV: &str = "BLOOMSLED_MEMLIMIT_CHILD";
/// ~600 MB of filter (500M items at 1%); a few keys, so its snapshot is sparse and small.
const ITEMS: u64 = 500_000_000;

/// Pages of virtual memory this process has mapped now.
fn vm_bytes() -> u64 {
    let statm = std::fs::read_to_string("/proc/self/statm").unwrap();
    let pages: u64 = statm.split_whitespace().next().unwrap().parse().unwrap();
    pages * 4096
}

#[test]
fn memory_limit_child() {
    let Some(dir) = child::role(CHILD_ENV) else {
        return;
    };
    // Room for sled and the allocator's arenas, not for the 600 MB filter.
    let limit = vm_bytes() + (400 << 20);
    let rl = libc::rlimit {
        rlim_cur: limit,
        rlim_max: limit,
    };
    // SAFETY: setrlimit reads a valid, initialized rlimit struct; it changes only this
    // process's own limit.
    #[allow(unsafe_code)]
    let rc = unsafe { libc::setrlimit(libc::RLIMIT_AS, &rl) };
    assert_eq!(rc, 0);
    match Config::new().path(&dir).open() {
        Err(bloomsled::Error::OutOfMemory { what, bytes }) => {
            println!("out of memory: {what}, {bytes} bytes");
        }
        Err(e) => println!("other error: {e}"),
        Ok(_) => println!("opened"),
    }
}

#[test]
fn a_filter_too_large_for_the_memory_limit_is_an_error_not_an_abort() {
    let dir = tempfile::tempdir().unwrap();
    {
        let db = Config::new()
            .path(dir.path())
            .expected_items(ITEMS)
            .open()
            .unwrap();
        for i in 0..100u32 {
            db.insert(format!("k{i}"), "v").unwrap();
        }
        db.close().unwrap();
    }
    let out = child::command(CHILD_ENV, dir.path(), Some("memory_limit_child"))
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "child died: {:?}\n{stdout}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(stdout.contains("out of memory"), "{stdout}");
    // Nothing was lost: without the limit the database opens and loads its snapshot.
    let db = Config::new().path(dir.path()).open().unwrap();
    assert!(db.recovery_report().loaded(), "{:?}", db.recovery_report());
    for i in 0..100u32 {
        assert!(db.get(format!("k{i}")).unwrap().is_some());
    }
}

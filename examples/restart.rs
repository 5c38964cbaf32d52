//! Restart: insert, close cleanly, reopen (the filter loads from its snapshot, no key is
//! scanned), then simulate a crash (a write, no clean close) and reopen again: the stale
//! snapshot is detected and the filter rebuilt from the keys. Prints each recovery report.
//!
//! `cargo run --release --example restart [ITEMS]` (default 100,000).

use bloomsled::{Config, RecoveryReport};

fn show(when: &str, r: &RecoveryReport) {
    println!(
        "{when:<28} {:?}: {} keys scanned, {} snapshot bytes verified, {:.2?}",
        r.outcome, r.keys_scanned, r.bytes_verified, r.duration
    );
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let items: u64 = match std::env::args().nth(1) {
        Some(a) => a
            .parse()
            .map_err(|e| format!("ITEMS must be a number: {e}"))?,
        None => 100_000,
    };
    let dir = tempfile::tempdir()?;
    let config = || Config::new().path(dir.path()).expected_items(items.max(1));

    let db = config().open()?;
    show("first open (new database)", &db.recovery_report());
    let mut batch = bloomsled::Batch::default();
    for i in 0..items {
        batch.insert(format!("user:{i}").as_bytes(), &b"profile"[..]);
    }
    db.apply_batch(batch)?;
    db.close()?; // snapshot + flush (dropping the last handle does the same)

    let db = config().open()?;
    show("after a clean close", &db.recovery_report());
    assert!(db.recovery_report().loaded());

    // A crash: a write, then the process dies without closing. Here the handle is leaked and
    // the files copied, as a crash would leave them (sled holds its lock until exit).
    db.insert("user:late", &b"profile"[..])?;
    db.flush()?;
    std::mem::forget(db);
    let crashed = tempfile::tempdir()?;
    copy_dir(dir.path(), crashed.path())?;
    let db = Config::new()
        .path(crashed.path())
        .expected_items(items.max(1))
        .open()?;
    show("after a crash", &db.recovery_report());
    assert!(db.may_contain("user:late") && db.may_contain("user:0"));
    println!("every key is still found: no false negatives after the crash");
    Ok(())
}

fn copy_dir(from: &std::path::Path, to: &std::path::Path) -> std::io::Result<()> {
    for entry in std::fs::read_dir(from)? {
        let entry = entry?;
        let target = to.join(entry.file_name());
        if entry.file_type()?.is_dir() {
            std::fs::create_dir_all(&target)?;
            copy_dir(&entry.path(), &target)?;
        } else {
            std::fs::copy(entry.path(), target)?;
        }
    }
    Ok(())
}

//! Helpers shared by the integration tests: a deterministic generator ([`rng`]), a child
//! process to kill ([`child`]), a model of a sled tree ([`model`]), and folder copies.
#![allow(dead_code)] // each test binary uses its own subset

pub mod child;
#[cfg(target_os = "linux")]
pub mod fuse;
pub mod model;
pub mod rng;

use std::fs;
use std::path::Path;
use std::time::{Duration, Instant};

/// Every file under `dir` (recursively).
pub fn walk(dir: &Path) -> Vec<std::path::PathBuf> {
    let mut out = Vec::new();
    for e in fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        if p.is_dir() {
            out.extend(walk(&p));
        } else {
            out.push(p);
        }
    }
    out
}

/// The default tree's name as `Db::tree_names` reports it (sled's own).
pub const DEFAULT_TREE: &str = "__sled__default";

/// The tree called `name` in `db`: the default tree for [`DEFAULT_TREE`], else
/// `open_tree`, so a test can walk every tree of a database by name.
pub fn tree_named(db: &bloomsled::Db, name: &str) -> bloomsled::Tree {
    if name == DEFAULT_TREE {
        (**db).clone()
    } else {
        db.open_tree(name).unwrap()
    }
}

/// Opens the database at `dir` with plain sled, as a user's own tool would after bloomsled
/// closed it. sled's lock can outlive the handle's drop by a moment (a write sled handed
/// to its thread pool holds the file until it ends; seen in CI as "could not acquire lock"
/// right after `Db::close`), so a held lock is waited for, up to 10 s; any other result is
/// returned as sled gave it.
pub fn sled_open(dir: &Path) -> sled::Result<sled::Db> {
    let start = Instant::now();
    loop {
        match sled::open(dir) {
            Err(sled::Error::Io(e))
                if e.to_string().contains("could not acquire lock")
                    && start.elapsed() < Duration::from_secs(10) =>
            {
                std::thread::sleep(Duration::from_millis(20));
            }
            r => return r,
        }
    }
}

/// Copies folder `from` (recursively) into `to`, as a backup or a restore would.
pub fn copy_dir(from: &Path, to: &Path) {
    fs::create_dir_all(to).unwrap();
    for e in fs::read_dir(from).unwrap() {
        let e = e.unwrap();
        let target = to.join(e.file_name());
        if e.file_type().unwrap().is_dir() {
            copy_dir(&e.path(), &target);
        } else {
            fs::copy(e.path(), target).unwrap();
        }
    }
}

/// [`copy_dir`] of a folder a live database is writing (a crash image): a file removed or
/// renamed between the listing and its copy (a retired journal, a snapshot's temporary file)
/// is left out, as it would be from a copy made a moment later.
pub fn copy_live_dir(from: &Path, to: &Path) {
    fs::create_dir_all(to).unwrap();
    let entries = match fs::read_dir(from) {
        Ok(rd) => rd,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return,
        Err(e) => panic!("listing {}: {e}", from.display()),
    };
    for e in entries {
        let e = e.unwrap();
        let target = to.join(e.file_name());
        match e.file_type() {
            Ok(t) if t.is_dir() => copy_live_dir(&e.path(), &target),
            Ok(_) => match fs::copy(e.path(), &target) {
                Ok(_) => {}
                Err(err) if err.kind() == std::io::ErrorKind::NotFound => {}
                Err(err) => panic!("copying {}: {err}", e.path().display()),
            },
            Err(err) if err.kind() == std::io::ErrorKind::NotFound => {}
            Err(err) => panic!("{}: {err}", e.path().display()),
        }
    }
}

/// The counter file of the crash journal at `jnl` (`src/persist/journal.rs`): in
/// `$BLOOMSLED_JOURNAL_COUNTER_DIR`, else `/dev/shm`, named by the database id, tree id and
/// sequence its header holds.
pub fn journal_counter_file(jnl: &Path) -> std::path::PathBuf {
    let mut h = [0u8; 144];
    std::io::Read::read_exact(&mut fs::File::open(jnl).unwrap(), &mut h).unwrap();
    let hex = |b: &[u8]| b.iter().map(|x| format!("{x:02x}")).collect::<String>();
    let sequence = u64::from_le_bytes(h[112..120].try_into().unwrap());
    let dir = std::env::var_os("BLOOMSLED_JOURNAL_COUNTER_DIR").unwrap_or("/dev/shm".into());
    Path::new(&dir).join(format!(
        "bloomsled-{}-{}-{sequence}.jctr",
        hex(&h[16..32]),
        hex(&h[32..48])
    ))
}

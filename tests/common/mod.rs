//! Helpers shared by the integration tests: a deterministic generator ([`rng`]), a child
//! process to kill ([`child`]), a model of a sled tree ([`model`]), and folder copies.
#![allow(dead_code)] // each test binary uses its own subset

pub mod child;
pub mod model;
pub mod rng;

use std::fs;
use std::path::Path;

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

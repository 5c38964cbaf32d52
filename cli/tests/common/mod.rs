//! Running the real `bloomsled` binary from the CLI's tests.
#![allow(dead_code)]

use std::io::Write;
use std::path::Path;
use std::process::{Command, Output};

pub fn bin() -> Command {
    Command::new(env!("CARGO_BIN_EXE_bloomsled"))
}

pub fn run(args: &[&str]) -> Output {
    bin().args(args).output().expect("run bloomsled")
}

pub fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

pub fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

pub fn load_sample(db: &Path) {
    let dir = db.parent().unwrap();
    let file = dir.join("keys.tsv");
    let mut f = std::fs::File::create(&file).unwrap();
    for i in 0..3_000 {
        writeln!(f, "spam-{i}@example.net\tblocked").unwrap();
    }
    let o = run(&["load", db.to_str().unwrap(), file.to_str().unwrap()]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(stdout(&o).starts_with("loaded 3000 keys"), "{}", stdout(&o));
}

//! `check`: what the filter and the store say about each key.

use std::io::{self, BufRead, Write};
use std::path::Path;
use std::process::ExitCode;

use bloomsled::RecoveryPolicy;
use serde::Serialize;

use crate::error::{CliError, CliResult};
use crate::open;

/// The verdict on one key.
#[derive(Serialize)]
struct CheckRow<'a> {
    key: &'a str,
    /// `absent` (the filter said no), `present`, or `false-positive`.
    result: &'static str,
}

pub fn run(path: &Path, tree: Option<&str>, keys: &[String], json: bool) -> CliResult<ExitCode> {
    let path = open::resolve(path);
    let db = open::open_existing(&path, RecoveryPolicy::Repair)?;
    let t = open::existing_tree(&db, tree)?;
    let keys: Vec<String> = if keys.len() == 1 && keys[0] == "-" {
        io::stdin()
            .lock()
            .lines()
            .collect::<Result<_, _>>()
            .map_err(CliError::Stdio)?
    } else {
        keys.to_vec()
    };
    let mut out = io::stdout().lock();
    for key in &keys {
        let result = if !t.may_contain(key) {
            "absent"
        } else if t.contains_key(key)? {
            "present"
        } else {
            "false-positive"
        };
        let line = if json {
            serde_json::to_string(&CheckRow { key, result })
                .map_err(|e| CliError::Stdio(e.into()))?
        } else {
            format!("{result}\t{key}")
        };
        writeln!(out, "{line}").map_err(CliError::Stdio)?;
    }
    Ok(ExitCode::SUCCESS)
}

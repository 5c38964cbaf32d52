//! What the commands print: a serializable row type per report (the `--json` form is the
//! row as serde writes it), its text form, and the progress bar.

use std::io::{self, IsTerminal, Write};

use bloomsled::{RecoveryOutcome, RecoveryReport};
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use serde::Serialize;

use crate::error::{CliError, CliResult};

/// Prints `value` as one line of JSON, or `text(value)`.
pub fn emit<T: Serialize>(json: bool, value: &T, text: impl FnOnce(&T) -> String) -> CliResult<()> {
    let line = if json {
        serde_json::to_string(value).map_err(|e| CliError::Stdio(e.into()))?
    } else {
        text(value)
    };
    let mut out = io::stdout().lock();
    writeln!(out, "{line}").map_err(CliError::Stdio)
}

/// A progress bar on standard error, hidden unless it is a terminal.
pub fn progress(len: Option<u64>, what: &str) -> ProgressBar {
    let bar = match len {
        Some(n) => ProgressBar::new(n),
        None => ProgressBar::new_spinner(),
    };
    if !io::stderr().is_terminal() {
        bar.set_draw_target(ProgressDrawTarget::hidden());
    }
    let template = if len.is_some() {
        "{msg} [{bar:40}] {pos}/{len} ({per_sec}, {eta})"
    } else {
        "{msg} {spinner} {pos} ({per_sec})"
    };
    bar.set_style(ProgressStyle::with_template(template).expect("valid template"));
    bar.set_message(what.to_string());
    bar
}

/// How a filter came to be at open, in words.
pub fn outcome_text(o: &RecoveryOutcome) -> String {
    match o {
        RecoveryOutcome::Loaded => "loaded from snapshot".into(),
        RecoveryOutcome::Rebuilt { reason } => format!("rebuilt from keys ({reason})"),
        RecoveryOutcome::Created => "created".into(),
        RecoveryOutcome::InMemory => "in memory".into(),
        other => format!("{other:?}"),
    }
}

/// A tree's [`RecoveryReport`].
#[derive(Debug, Clone, Serialize)]
pub struct RecoveryRow {
    pub tree: String,
    pub outcome: String,
    pub loaded: bool,
    pub keys_scanned: u64,
    pub bytes_verified: u64,
    pub sequence: u64,
    pub millis: f64,
    /// Set while the filter is being rebuilt in the background (lookups go to the store).
    pub rebuilding: Option<RebuildingRow>,
}

/// How far a filter's rebuild after open has come.
#[derive(Debug, Clone, Serialize)]
pub struct RebuildingRow {
    pub keys_scanned: u64,
    pub keys_per_second: f64,
    pub expected_keys: Option<u64>,
    pub seconds_left: Option<f64>,
}

impl RebuildingRow {
    /// In words: "rebuilding: 1200000 of ~5000000 keys scanned, 810000 keys/s, ~4.7 s left".
    pub fn text(&self) -> String {
        let of = self
            .expected_keys
            .map_or(String::new(), |n| format!(" of ~{n}"));
        let left = self
            .seconds_left
            .map_or(String::new(), |s| format!(", ~{s:.1} s left"));
        format!(
            "rebuilding: {}{of} keys scanned, {:.0} keys/s{left}; lookups go to the store \
             until it is done",
            self.keys_scanned, self.keys_per_second
        )
    }
}

impl From<&RecoveryReport> for RecoveryRow {
    fn from(r: &RecoveryReport) -> Self {
        RecoveryRow {
            tree: r.tree.clone(),
            outcome: outcome_text(&r.outcome),
            loaded: r.loaded(),
            keys_scanned: r.keys_scanned,
            bytes_verified: r.bytes_verified,
            sequence: r.sequence,
            millis: r.duration.as_secs_f64() * 1e3,
            rebuilding: r.rebuilding.as_ref().map(|p| RebuildingRow {
                keys_scanned: p.keys_scanned,
                keys_per_second: p.keys_per_second,
                expected_keys: p.expected_keys,
                seconds_left: p.estimated_time_left.map(|d| d.as_secs_f64()),
            }),
        }
    }
}

/// Rows as text, one line each.
pub fn lines<T>(rows: &[T], line: impl Fn(&T) -> String) -> String {
    rows.iter().map(line).collect::<Vec<_>>().join("\n")
}

/// `arg` as one word for a POSIX shell: unchanged if it is plainly safe, else single-quoted.
pub fn shell_word(arg: &str) -> String {
    let plain = |c: char| c.is_ascii_alphanumeric() || "/._-+:=,@%".contains(c);
    if !arg.is_empty() && arg.chars().all(plain) {
        arg.to_string()
    } else {
        format!("'{}'", arg.replace('\'', r"'\''"))
    }
}

#[cfg(test)]
mod tests {
    use super::shell_word;

    #[test]
    fn shell_words() {
        assert_eq!(
            shell_word("target/ci-demo/bloomsled"),
            "target/ci-demo/bloomsled"
        );
        assert_eq!(shell_word("my demo"), "'my demo'");
        assert_eq!(shell_word("it's"), r"'it'\''s'");
        assert_eq!(shell_word(""), "''");
        assert_eq!(shell_word("$HOME"), "'$HOME'");
    }
}

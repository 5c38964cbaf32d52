//! `load`: keys (and values) from a file or standard input, in batches.
//!
//! The filter is sized for the input before the database is opened: a regular file's lines
//! are counted (or, past [`COUNT_LIMIT`], estimated from a sample), and a new tree is
//! created for at least that many keys. When the load is done, a tree whose filter still
//! holds more keys than it is sized for is rebuilt before the database is closed, so that
//! no load leaves an overfull filter behind.

use std::fs::{self, File};
use std::io::{self, BufRead, BufReader, Read};
use std::path::Path;
use std::process::ExitCode;
use std::time::Instant;

use bloomsled::{Batch, Config, RecoveryPolicy, Stats};
use serde::Serialize;

use crate::error::{CliError, CliResult};
use crate::open;
use crate::output::{emit, progress};

/// Keys per batch.
const BATCH: usize = 10_000;

/// Files up to this size have their lines counted exactly; larger ones are estimated.
const COUNT_LIMIT: u64 = 256 << 20;

/// Bytes read from a large file to estimate its lines.
const SAMPLE: usize = 4 << 20;

/// What `load` reports.
#[derive(Serialize)]
struct LoadRow {
    keys: u64,
    seconds: f64,
    keys_per_second: f64,
    /// Items the tree's filter is sized for after the load.
    capacity: u64,
    /// True if the filter was rebuilt at the end because the load overfilled it.
    rebuilt: bool,
}

pub fn run(path: &Path, tree: Option<&str>, file: &str, json: bool) -> CliResult<ExitCode> {
    let path = open::resolve(path);
    let (input, len, expected): (Box<dyn Read>, Option<u64>, Option<u64>) = if file == "-" {
        (Box::new(io::stdin()), None, None)
    } else {
        let expected = expected_lines(Path::new(file)).map_err(CliError::io(file))?;
        let f = File::open(file).map_err(CliError::io(file))?;
        let len = f.metadata().map(|m| m.len()).ok();
        (Box::new(f), len, expected)
    };
    let db = open::open_with(&path, config_for(expected))?;
    let t = open::open_tree(&db, tree)?;

    let start = Instant::now();
    let keys = load_lines(input, len, file, &t)?;
    // A background resize the load started is finished, not abandoned at close; a filter
    // still over its capacity is rebuilt for the keys it holds.
    t.wait_for_rebuild();
    let rebuilt = overfull(&t.stats());
    if rebuilt {
        t.rebuild()?;
    }
    let capacity = t.stats().capacity;
    drop(t);
    db.close()?;
    let seconds = start.elapsed().as_secs_f64();
    let row = LoadRow {
        keys,
        seconds,
        keys_per_second: keys as f64 / seconds.max(1e-9),
        capacity,
        rebuilt,
    };
    emit(json, &row, |r| {
        format!(
            "loaded {} keys in {:.2} s ({:.0} keys/s); filter capacity {}{}",
            r.keys,
            r.seconds,
            r.keys_per_second,
            r.capacity,
            if r.rebuilt {
                " (rebuilt for the load)"
            } else {
                ""
            }
        )
    })?;
    Ok(ExitCode::SUCCESS)
}

/// Loads `input`'s lines (`key` or `key<TAB>value`, `\r\n` or `\n`, empty lines skipped)
/// into `t` a batch at a time, behind a progress bar of `len` bytes; the keys loaded.
fn load_lines(
    input: Box<dyn Read>,
    len: Option<u64>,
    file: &str,
    t: &bloomsled::Tree,
) -> CliResult<u64> {
    let bar = progress(len, "loading");
    let (mut keys, mut batch, mut in_batch) = (0u64, Batch::default(), 0usize);
    for line in BufReader::new(input).split(b'\n') {
        let line = line.map_err(CliError::io(file))?;
        bar.inc(line.len() as u64 + 1);
        let line = line.strip_suffix(b"\r").unwrap_or(&line);
        if line.is_empty() {
            continue;
        }
        let (k, v) = match line.iter().position(|&b| b == b'\t') {
            Some(i) => (&line[..i], &line[i + 1..]),
            None => (line, &b""[..]),
        };
        batch.insert(k, v);
        keys += 1;
        in_batch += 1;
        if in_batch == BATCH {
            t.apply_batch(std::mem::take(&mut batch))?;
            in_batch = 0;
        }
    }
    t.apply_batch(batch)?;
    bar.finish_and_clear();
    Ok(keys)
}

/// True if the filter holds more live keys than it is sized for, or its bits say so: a
/// plain filter's count only includes inserts that set a new bit, so an overfull one
/// undercounts, while its fill ratio does not.
fn overfull(s: &Stats) -> bool {
    s.items.saturating_sub(s.stale_entries) > s.capacity || s.estimated_fpr > 2.0 * s.target_fpr
}

/// The settings to open with: sized for the `expected` items of the input (the default
/// size when it cannot be told). They size a new database or tree; an existing tree keeps
/// the sizing its record stores (and is resized after the load if the load overfilled it).
fn config_for(expected: Option<u64>) -> Config {
    let config = Config::new()
        .recovery(RecoveryPolicy::Repair)
        .background_recovery(false);
    let default = config.get_filter().get_expected_items();
    config.expected_items(expected.unwrap_or(default).max(1))
}

/// An upper estimate of the lines of a regular file (`None` for a pipe or a device): the
/// exact count up to [`COUNT_LIMIT`] bytes, else the size over the mean line length of the
/// first [`SAMPLE`] bytes, plus 10%.
fn expected_lines(file: &Path) -> io::Result<Option<u64>> {
    let meta = fs::metadata(file)?;
    if !meta.is_file() {
        return Ok(None);
    }
    let size = meta.len();
    let mut f = File::open(file)?;
    let mut buf = vec![0u8; 1 << 20];
    let (mut read, mut newlines, mut last) = (0u64, 0u64, b'\n');
    while size <= COUNT_LIMIT || read < SAMPLE as u64 {
        let n = f.read(&mut buf)?;
        if n == 0 {
            break;
        }
        read += n as u64;
        newlines += buf[..n].iter().filter(|&&b| b == b'\n').count() as u64;
        last = buf[n - 1];
    }
    if read >= size {
        // The whole file: a last line without a newline counts too.
        return Ok(Some(newlines + u64::from(last != b'\n')));
    }
    let per_line = read as f64 / newlines.max(1) as f64;
    Ok(Some((size as f64 / per_line * 1.1).ceil() as u64))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_are_counted_or_bounded() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("f");
        for (text, want) in [
            (&b""[..], 0),
            (b"a", 1),
            (b"a\n", 1),
            (b"a\nb", 2),
            (b"a\r\n\nb\n", 3),
        ] {
            fs::write(&p, text).unwrap();
            assert_eq!(expected_lines(&p).unwrap(), Some(want), "{text:?}");
        }
        assert_eq!(expected_lines(dir.path()).unwrap(), None);
        assert!(expected_lines(&dir.path().join("missing")).is_err());
    }
}

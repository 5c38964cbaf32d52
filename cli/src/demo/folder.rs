//! The demo's folder: `demo` only ever writes into, and deletes from, a folder it can prove
//! it made.
//!
//! Proof is a marker *file* whose first line is [`MARKER_LINE`], written before anything
//! else; a folder is replaced only if it holds that file and nothing but what the demo
//! creates ([`DB_DIR`], [`SLED_DIR`]), each a real directory. Replacing empties those two
//! and rewrites the marker; the folder itself is never deleted. `.`, `..`, the current
//! directory and its parents, `/` and the home directory are refused before anything is
//! read, and so are symbolic links, non-directories and non-empty folders without the
//! marker.

use std::fs::{self, File};
use std::io::{self, Read};
use std::path::{Component, Path, PathBuf};

use crate::error::{CliError, CliResult, DemoRefusal};

/// The marker file's name.
pub const MARKER: &str = "BLOOMSLED-DEMO.txt";

/// The marker file's first line.
const MARKER_LINE: &str = "bloomsled demo folder, format 1";

/// The bloomsled database inside a demo folder.
pub const DB_DIR: &str = "bloomsled";

/// The plain sled database the demo compares with.
pub const SLED_DIR: &str = "plain-sled";

/// The marker of demos made before [`MARKER`] (bloomsled 0.1.0): a file of exactly
/// [`LEGACY_TEXT`]. Recognized so that those folders can be replaced too.
const LEGACY_MARKER: &str = "bloomsled-demo";
const LEGACY_TEXT: &str = "created by `bloomsled demo`; safe to delete\n";

/// The bloomsled database of the demo folder `dir`.
pub fn database_of(dir: &Path) -> PathBuf {
    dir.join(DB_DIR)
}

/// True if `dir` holds the demo's marker file (current or legacy).
pub fn is_demo_folder(dir: &Path) -> bool {
    has_marker(dir) || has_legacy_marker(dir)
}

/// Makes `dir` ready for a new demo and returns it (trailing `/` and `.` removed): creates
/// it, takes an empty folder, or empties a folder an earlier demo made; refuses anything
/// else without changing it. The marker is written before the demo writes anything.
pub fn prepare(dir: &Path) -> CliResult<PathBuf> {
    let dir: PathBuf = dir.components().collect();
    let refuse = |reason| CliError::DemoDir {
        path: dir.clone(),
        reason,
    };
    if let Some(what) = protected(&dir) {
        return Err(refuse(DemoRefusal::Protected(what)));
    }
    match fs::symlink_metadata(&dir) {
        Err(e) if e.kind() == io::ErrorKind::NotFound => {
            fs::create_dir_all(&dir).map_err(CliError::io(&dir))?;
        }
        Err(e) => return Err(CliError::io(&dir)(e)),
        Ok(m) if m.file_type().is_symlink() => return Err(refuse(DemoRefusal::Symlink)),
        Ok(m) if !m.is_dir() => return Err(refuse(DemoRefusal::NotADirectory)),
        Ok(_) => empty_earlier_demo(&dir).map_err(refuse)?,
    }
    let text = format!(
        "{MARKER_LINE}\n\
         This folder was made by `bloomsled demo` (bloomsled {}). It holds only demo data:\n\
         the next `bloomsled demo` run in it replaces it, and deleting it is safe.\n",
        env!("CARGO_PKG_VERSION")
    );
    let marker = dir.join(MARKER);
    fs::write(&marker, text).map_err(CliError::io(&marker))?;
    Ok(dir)
}

/// Why `dir` may never be used, if it is one of the protected folders.
fn protected(dir: &Path) -> Option<&'static str> {
    match dir.components().next_back() {
        None | Some(Component::CurDir) => return Some("the current directory"),
        Some(Component::ParentDir) => return Some("`..`"),
        Some(Component::RootDir | Component::Prefix(_)) => return Some("the root directory"),
        Some(Component::Normal(_)) => {}
    }
    // A folder that does not exist yet cannot be any of the others.
    let canon = fs::canonicalize(dir).ok()?;
    if canon.parent().is_none() {
        return Some("the root directory");
    }
    let cwd = std::env::current_dir().and_then(fs::canonicalize).ok();
    if cwd.is_some_and(|cwd| cwd.starts_with(&canon)) {
        return Some("the current directory or one of its parents");
    }
    let home = std::env::var_os("HOME").and_then(|h| fs::canonicalize(h).ok());
    if home.is_some_and(|home| home.starts_with(&canon)) {
        return Some("your home directory or one of its parents");
    }
    None
}

/// Accepts an empty folder; empties a folder an earlier demo made (its marker and nothing
/// but the demo's own entries); refuses anything else untouched.
fn empty_earlier_demo(dir: &Path) -> Result<(), DemoRefusal> {
    let io_refusal = |e: io::Error| DemoRefusal::Unreadable(e.to_string());
    let names: Vec<std::ffi::OsString> = fs::read_dir(dir)
        .map_err(io_refusal)?
        .map(|e| e.map(|e| e.file_name()))
        .collect::<Result<_, _>>()
        .map_err(io_refusal)?;
    if names.is_empty() {
        return Ok(());
    }
    let (marker, legacy) = (has_marker(dir), has_legacy_marker(dir));
    if !marker && !legacy {
        return Err(DemoRefusal::NotADemo { marker: MARKER });
    }
    let mut remove = Vec::new();
    for name in &names {
        let ours = match name.to_str() {
            Some(MARKER) => marker,
            Some(LEGACY_MARKER) => legacy,
            Some(n @ (DB_DIR | SLED_DIR)) => {
                let p = dir.join(n);
                let real_dir = fs::symlink_metadata(&p).is_ok_and(|m| m.is_dir());
                if real_dir {
                    remove.push(p);
                }
                real_dir
            }
            _ => false,
        };
        if !ours {
            return Err(DemoRefusal::Foreign {
                entry: name.to_string_lossy().into_owned(),
            });
        }
    }
    for p in remove {
        fs::remove_dir_all(&p).map_err(io_refusal)?;
    }
    if legacy {
        fs::remove_file(dir.join(LEGACY_MARKER)).map_err(io_refusal)?;
    }
    Ok(())
}

/// A regular file named [`MARKER`] whose first line is [`MARKER_LINE`].
fn has_marker(dir: &Path) -> bool {
    read_small_file(&dir.join(MARKER)).is_some_and(|text| text.lines().next() == Some(MARKER_LINE))
}

/// A regular file named [`LEGACY_MARKER`] holding exactly [`LEGACY_TEXT`].
fn has_legacy_marker(dir: &Path) -> bool {
    read_small_file(&dir.join(LEGACY_MARKER)).is_some_and(|text| text == LEGACY_TEXT)
}

/// The text of a regular file (not a link) of at most 4 KiB.
fn read_small_file(path: &Path) -> Option<String> {
    let meta = fs::symlink_metadata(path).ok()?;
    if !meta.is_file() || meta.len() > 4096 {
        return None;
    }
    let mut text = String::new();
    File::open(path).ok()?.read_to_string(&mut text).ok()?;
    Some(text)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn protected_paths() {
        for p in [".", "./", "./.", "", "..", "a/..", "/"] {
            let p: PathBuf = Path::new(p).components().collect();
            assert!(protected(&p).is_some(), "{p:?}");
        }
        assert_eq!(protected(Path::new("surely/not/existing/demo")), None);
    }
}

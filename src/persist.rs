//! Persistence: snapshot files, the dirty marker, and the decision to trust or rebuild.
//!
//! Per tree, in `<db>/bloomsled/`:
//! - `<name>.snap`: the filter snapshot ([`crate::format`]), replaced atomically (write a
//!   temporary file, fsync, rename, fsync the directory), so a reader sees one whole snapshot
//!   or the previous one.
//! - `<name>.state`: the dirty marker, the highest generation *g* such that the tree was
//!   written after the bits of snapshot *g* were copied.
//!
//! The protocol, and why no stored key is ever missing from a trusted snapshot:
//! - A snapshot increments the tree's generation to *g*, then copies the bits, then writes
//!   them as generation *g*.
//! - A writer sets the key's bits, then reads the generation *g*; if the marker does not yet
//!   say *g*, it writes and fsyncs `dirty = g` **before** its sled write.
//! - Open trusts a snapshot of generation *g* only if every CRC passes and `dirty < g`.
//!
//! A SeqCst fence after the writer's bits and after the snapshot's increment makes the two
//! orders exclusive: either the writer reads the new generation (and marks it dirty, so that
//! snapshot is never trusted), or the snapshot's copy contains the writer's bits. Writers
//! are never held off by a snapshot; the first write after each snapshot pays one fsync.

use std::fs::{self, File, OpenOptions};
use std::io::{self, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{fence, AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use crate::filter::any::{AnyFilter, FilterMode};
use crate::format::{self, SnapshotFault, SnapshotMeta};
use crate::hash::hash_key;

/// Subdirectory of the sled directory holding bloomsled's files.
pub const DIR_NAME: &str = "bloomsled";

/// What `open` does with a snapshot it cannot trust.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Recovery {
    /// Rebuild the filter from a scan of the tree's keys (default), and report why.
    #[default]
    Repair,
    /// Fail with [`crate::Error::SnapshotRejected`] naming what failed.
    Strict,
}

/// How a tree's filter came to be at open.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum RecoveryOutcome {
    /// Loaded from a verified, current snapshot; no key was scanned.
    Loaded,
    /// Rebuilt from a scan of the keys because the snapshot could not be trusted.
    Rebuilt {
        /// Why the snapshot was not used.
        reason: SnapshotFault,
    },
    /// A new tree: empty filter.
    Created,
    /// A temporary database: built from a scan, never persisted.
    InMemory,
}

/// What happened to one tree's filter at open (also logged at `info` level).
#[derive(Debug, Clone, PartialEq)]
pub struct RecoveryReport {
    /// Tree name (lossy UTF-8).
    pub tree: String,
    /// Loaded, rebuilt (and why), created or in-memory.
    pub outcome: RecoveryOutcome,
    /// Keys read from sled to build the filter (0 when loaded).
    pub keys_scanned: u64,
    /// Snapshot bytes read and CRC-verified.
    pub bytes_verified: u64,
    /// Generation of the filter after open.
    pub generation: u64,
    /// Time the load or rebuild took.
    pub duration: Duration,
}

impl RecoveryReport {
    /// True if the filter came from its snapshot without a scan.
    pub fn loaded(&self) -> bool {
        self.outcome == RecoveryOutcome::Loaded
    }
}

/// What a snapshot wrote.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SnapshotInfo {
    /// Generation of the snapshot.
    pub generation: u64,
    /// Bytes written.
    pub bytes: u64,
    /// Pages of the bitset.
    pub pages: u32,
    /// Items in the filter.
    pub items: u64,
    /// Time from the copy of the bits to the durable rename.
    pub duration: Duration,
}

/// What [`crate::Tree::verify`] found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VerifyReport {
    /// Keys read from the store and checked against the filter.
    pub keys_checked: u64,
    /// Stored keys the filter denied (always 0 unless an invariant broke).
    pub false_negatives: u64,
    /// The snapshot file on disk: `Ok(generation)` if every CRC passed, the fault otherwise;
    /// `None` for a temporary database.
    pub snapshot: Option<Result<u64, SnapshotFault>>,
}

impl VerifyReport {
    /// True if no key was denied and the snapshot (if any) verified.
    pub fn is_ok(&self) -> bool {
        self.false_negatives == 0 && !matches!(self.snapshot, Some(Err(_)))
    }
}

/// Reads a snapshot file and verifies every CRC and that it belongs to this tree; returns
/// the header, the words and the file's size.
fn read_verified(
    files: &TreeFiles,
    name_hash: u64,
) -> Result<(format::Header, Vec<u64>, u64), SnapshotFault> {
    let bytes = match fs::read(&files.snapshot) {
        Ok(b) => b,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Err(SnapshotFault::Missing),
        Err(e) => return Err(SnapshotFault::Io(e.to_string())),
    };
    let (header, words) = format::decode(&bytes)?;
    if header.name_hash.get() != name_hash {
        return Err(SnapshotFault::Inconsistent(
            "snapshot belongs to another tree".into(),
        ));
    }
    Ok((header, words, bytes.len() as u64))
}

/// The files of one tree.
#[derive(Debug, Clone)]
pub(crate) struct TreeFiles {
    dir: PathBuf,
    snapshot: PathBuf,
    state: PathBuf,
    tmp: PathBuf,
}

impl TreeFiles {
    pub(crate) fn new(db_dir: &Path, tree_name: &[u8]) -> Self {
        let dir = db_dir.join(DIR_NAME);
        // Names are arbitrary bytes: hex keeps them portable; long ones are hashed.
        let stem = if tree_name.len() <= 100 {
            tree_name
                .iter()
                .map(|b| format!("{b:02x}"))
                .collect::<String>()
        } else {
            format!("h{:016x}-{}", hash_key(tree_name, 0), tree_name.len())
        };
        let stem = if stem.is_empty() {
            "empty".to_string()
        } else {
            stem
        };
        TreeFiles {
            snapshot: dir.join(format!("{stem}.snap")),
            state: dir.join(format!("{stem}.state")),
            tmp: dir.join(format!("{stem}.snap.tmp")),
            dir,
        }
    }

    /// Path of the snapshot file.
    pub(crate) fn snapshot_path(&self) -> &Path {
        &self.snapshot
    }

    pub(crate) fn remove(&self) -> io::Result<()> {
        for p in [&self.snapshot, &self.state, &self.tmp] {
            match fs::remove_file(p) {
                Err(e) if e.kind() != io::ErrorKind::NotFound => return Err(e),
                _ => {}
            }
        }
        sync_dir(&self.dir)
    }
}

fn sync_dir(dir: &Path) -> io::Result<()> {
    File::open(dir)?.sync_all()
}

/// The snapshot bytes, parsed and checked against the marker.
pub(crate) struct Loaded {
    pub(crate) filter: AnyFilter,
    pub(crate) generation: u64,
    pub(crate) bytes: u64,
}

/// Reads the dirty marker: `Ok(None)` if there is none.
pub(crate) fn read_state(files: &TreeFiles) -> Result<Option<u64>, SnapshotFault> {
    match fs::read(&files.state) {
        Ok(b) => format::decode_state(&b).map(Some),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(SnapshotFault::StateUnreadable(e.to_string())),
    }
}

/// The filter mode recorded in the snapshot of tree `tree_name` of the database at
/// `db_dir`, if that snapshot's header is intact (only the header is read and checked).
///
/// Tools that open databases they did not create (the `bloomsled` CLI) use it to open a
/// counting-mode database in counting mode: opening it in the other mode would rebuild
/// its filters as plain ones.
///
/// ```
/// # let dir = tempfile::tempdir()?;
/// let db = bloomsled::Config::new().path(dir.path()).counting(true).open()?;
/// drop(db);
/// let mode = bloomsled::persist::stored_mode(dir.path(), b"__sled__default");
/// assert_eq!(mode, Some(bloomsled::FilterMode::Counting));
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub fn stored_mode(db_dir: &Path, tree_name: &[u8]) -> Option<FilterMode> {
    let header = read_header(&TreeFiles::new(db_dir, tree_name))?;
    FilterMode::of_kind(header.filter_kind.get())
}

/// The snapshot's header alone, if it is intact (the pages are not read).
fn read_header(files: &TreeFiles) -> Option<format::Header> {
    let mut buf = vec![0u8; format::HEADER_LEN];
    let mut f = File::open(&files.snapshot).ok()?;
    std::io::Read::read_exact(&mut f, &mut buf).ok()?;
    format::parse_header(&buf).ok()
}

/// The generation in the snapshot's header, if the header itself is intact.
pub(crate) fn peek_generation(files: &TreeFiles) -> Option<u64> {
    read_header(files).map(|h| h.generation.get())
}

/// Loads and verifies a tree's snapshot; any reason not to trust it is a fault, including
/// a filter of another mode than the configured one.
pub(crate) fn load(
    files: &TreeFiles,
    name_hash: u64,
    mode: FilterMode,
    dirty: Result<Option<u64>, SnapshotFault>,
) -> Result<Loaded, SnapshotFault> {
    let (header, words, bytes) = read_verified(files, name_hash)?;
    let generation = header.generation.get();
    let found = FilterMode::of_kind(header.filter_kind.get())
        .ok_or_else(|| SnapshotFault::Inconsistent("unknown filter kind".into()))?;
    if found != mode {
        return Err(SnapshotFault::ModeChanged {
            snapshot: found.name(),
            configured: mode.name(),
        });
    }
    match dirty? {
        None => {
            return Err(SnapshotFault::StateUnreadable(
                "dirty marker missing".into(),
            ));
        }
        Some(d) if d >= generation => {
            return Err(SnapshotFault::Stale {
                snapshot_generation: generation,
                dirty_generation: d,
            })
        }
        Some(_) => {}
    }
    let filter = AnyFilter::from_words(
        mode,
        &words,
        header.num_hashes.get(),
        header.seed.get(),
        header.capacity.get(),
        header.items.get(),
    )
    .map_err(|e| SnapshotFault::Inconsistent(e.to_string()))?;
    Ok(Loaded {
        filter,
        generation,
        bytes,
    })
}

/// The live persistence state of one tree.
pub(crate) struct Persistence {
    files: TreeFiles,
    name_hash: u64,
    page_size: u32,
    /// Generation of the latest snapshot copy (or of the loaded snapshot).
    generation: AtomicU64,
    /// Highest generation whose dirty mark is durable.
    marked: AtomicU64,
    /// The open marker file; held while marking.
    state_file: Mutex<File>,
    /// One snapshot at a time; `true` once the tree was dropped (no more snapshots).
    snapshotting: Mutex<bool>,
}

impl Persistence {
    /// Opens (creating if needed) the marker file. `generation` is the generation of the
    /// filter in memory, `marked` the marker's current value.
    pub(crate) fn open(
        files: TreeFiles,
        tree_name: &[u8],
        page_size: u32,
        generation: u64,
        marked: Option<u64>,
    ) -> io::Result<Self> {
        fs::create_dir_all(&files.dir)?;
        let mut f = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(&files.state)?;
        let marked = match marked {
            Some(m) => m,
            None => {
                // A new or unreadable marker. Claim "dirty up to `generation`", so that no
                // snapshot older than the one about to be written can ever be trusted.
                write_state(&mut f, generation)?;
                sync_dir(&files.dir)?;
                generation
            }
        };
        Ok(Persistence {
            files,
            name_hash: hash_key(tree_name, 0),
            page_size,
            generation: AtomicU64::new(generation.max(marked)),
            marked: AtomicU64::new(marked),
            state_file: Mutex::new(f),
            snapshotting: Mutex::new(false),
        })
    }

    pub(crate) fn files(&self) -> &TreeFiles {
        &self.files
    }

    /// Fully verifies the snapshot file on disk; returns its generation.
    pub(crate) fn verify_file(&self) -> Result<u64, SnapshotFault> {
        read_verified(&self.files, self.name_hash).map(|(h, _, _)| h.generation.get())
    }

    /// The tree was dropped: delete its files, and never write them again (handles to the
    /// dropped tree may still be alive).
    pub(crate) fn forget(&self) -> io::Result<()> {
        let mut dropped = self.snapshotting.lock().unwrap_or_else(|p| p.into_inner());
        *dropped = true;
        self.files.remove()
    }

    /// True if the tree was written since its last snapshot copy (and not dropped).
    pub(crate) fn is_dirty(&self) -> bool {
        if *self.snapshotting.lock().unwrap_or_else(|p| p.into_inner()) {
            return false;
        }
        self.marked.load(Ordering::Acquire) >= self.generation.load(Ordering::SeqCst)
    }

    /// Must be called after a key's bits are set and before its sled write: makes sure the
    /// marker durably says the current generation is dirty.
    #[inline]
    pub(crate) fn before_write(&self) -> io::Result<()> {
        fence(Ordering::SeqCst);
        let g = self.generation.load(Ordering::SeqCst);
        if self.marked.load(Ordering::Acquire) >= g {
            return Ok(());
        }
        self.mark(g)
    }

    #[cold]
    fn mark(&self, g: u64) -> io::Result<()> {
        let mut f = self.state_file.lock().unwrap_or_else(|p| p.into_inner());
        if self.marked.load(Ordering::Acquire) >= g {
            return Ok(());
        }
        write_state(&mut f, g)?;
        self.marked.store(g, Ordering::Release);
        Ok(())
    }

    /// Writes a snapshot as the next generation. `copy` is called after the generation moved
    /// on and returns the filter's metadata (generation and name filled in here) and words.
    pub(crate) fn snapshot(
        &self,
        copy: impl FnOnce() -> io::Result<(SnapshotMeta, Vec<u64>)>,
    ) -> io::Result<SnapshotInfo> {
        let dropped = self.snapshotting.lock().unwrap_or_else(|p| p.into_inner());
        if *dropped {
            return Err(io::Error::new(
                io::ErrorKind::NotFound,
                "the tree was dropped",
            ));
        }
        let generation = self.generation.fetch_add(1, Ordering::SeqCst) + 1;
        fence(Ordering::SeqCst);
        let start = Instant::now();
        let (mut meta, words) = copy()?;
        meta.name_hash = self.name_hash;
        meta.generation = generation;
        let bytes = format::encode(&meta, &words, self.page_size);
        let pages = (words.len() as u64 * 8).div_ceil(u64::from(self.page_size)) as u32;
        drop(words);
        write_atomic(&self.files, &bytes)?;
        Ok(SnapshotInfo {
            generation,
            bytes: bytes.len() as u64,
            pages,
            items: meta.items,
            duration: start.elapsed(),
        })
    }
}

fn write_state(f: &mut File, g: u64) -> io::Result<()> {
    f.seek(SeekFrom::Start(0))?;
    f.write_all(&format::encode_state(g))?;
    f.sync_data()
}

fn write_atomic(files: &TreeFiles, bytes: &[u8]) -> io::Result<()> {
    {
        let mut f = File::create(&files.tmp)?;
        f.write_all(bytes)?;
        f.sync_all()?;
    }
    fs::rename(&files.tmp, &files.snapshot)?;
    sync_dir(&files.dir)
}

//! Opening a set: create it, or read its manifest, repair what a crash left (a torn log
//! tail, files no manifest lists) and rebuild its filter unless a clean close saved it.

use std::path::Path;
use std::sync::{Arc, Mutex};

use bloomsled::Filter;

use crate::error::{Error, Result};

use crate::config::invalid_config;
use crate::config::{DEFAULT_EXPECTED_ITEMS, DEFAULT_SET_FALSE_POSITIVE_RATE};
use crate::dir::Folder;
use crate::format::Manifest;
use crate::memtable::Memtable;
use crate::run::{Cursor, Run};
use crate::wal::Wal;
use crate::{dir, run, FingerprintSet, FingerprintSetConfig, Inner, Opened, WalSlot};

impl FingerprintSet {
    /// Opens (or creates) the set in folder `path` holding `width`-byte fingerprints, its
    /// filter sized for `expected_items` at false-positive rate `fpr`; the other settings
    /// are [`FingerprintSetConfig`]'s defaults.
    ///
    /// A width other than the stored set's is an [`Error::InvalidConfig`]; a sizing other
    /// than the stored one rebuilds the filter to the new sizing.
    ///
    /// ```
    /// # let dir = tempfile::tempdir()?;
    /// let set = bloomsled_fpset::FingerprintSet::open(dir.path(), 20, 10_000, 0.01)?;
    /// assert!(set.is_empty());
    /// assert!(bloomsled_fpset::FingerprintSet::open(dir.path().join("x"), 20, 0, 0.01).is_err());
    /// # Ok::<(), bloomsled_fpset::Error>(())
    /// ```
    pub fn open(
        path: impl AsRef<Path>,
        width: usize,
        expected_items: u64,
        fpr: f64,
    ) -> Result<FingerprintSet> {
        FingerprintSetConfig::new(path)
            .width(width)
            .expected_items(expected_items)
            .false_positive_rate(fpr)
            .open()
    }

    /// Opens (or creates) the set `config` names.
    ///
    /// Long because an open is one ordered sequence (the lock, the manifest, the filter, the
    /// log's replay, the clean mark cleared durably before any append), each step commented.
    pub(crate) fn open_with(config: FingerprintSetConfig) -> Result<FingerprintSet> {
        let folder = Folder::lock(&config.path)?;
        let width = config.width;
        let mut manifest = match folder.read_manifest()? {
            Some(m) => m,
            None => create(&folder, &config)?,
        };
        if manifest.width != width {
            return Err(invalid_config(format!(
                "{} holds {}-byte fingerprints, not {width}-byte ones",
                folder.path.display(),
                manifest.width
            )));
        }
        let leftovers_removed = folder.remove_leftovers(&manifest)? as u64;
        let runs = open_runs(&folder, &manifest)?;
        let expected_items = config.expected_items.unwrap_or(manifest.expected_items);
        let fpr = config.fpr.unwrap_or(manifest.fpr);
        let (filter, filter_rebuilt) =
            saved_or_rebuilt_filter(&folder, &manifest, &runs, expected_items, fpr)?;
        let replayed = Wal::replay(
            &folder.path,
            manifest.set_id,
            width,
            manifest.wal_gen,
            manifest.clean_wal_len,
        )?;
        let mut memtable = Memtable::new(width, config.memtable_items.min(1 << 20));
        for fp in replayed.members.chunks_exact(width) {
            // Already in a saved filter; inserting again changes nothing.
            filter.insert(fp);
            memtable.insert(fp);
        }
        // The clean mark and the log's length are cleared (durably: `write_manifest` syncs
        // the file and the folder) before any change is accepted: the log takes its first
        // append only after this returns, so a clean manifest never names a log that has
        // grown since (a longer log beside one is damage, see `wal.rs`).
        let was_clean = manifest.clean;
        manifest.clean = false;
        manifest.clean_wal_len = None;
        manifest.expected_items = expected_items;
        manifest.fpr = fpr;
        folder.write_manifest(&manifest)?;
        if was_clean {
            let _ = std::fs::remove_file(folder.path.join(dir::FILTER));
        }
        let inner = Inner::opened(manifest, runs, memtable, WalSlot(replayed.wal));
        let set = FingerprintSet {
            filter,
            config,
            folder,
            inner: Mutex::new(inner),
            opened: Opened {
                filter_rebuilt,
                torn_bytes_cut: replayed.cut_bytes,
                leftovers_removed,
            },
        };
        {
            let mut inner = set.lock()?;
            if inner.memtable.len() >= set.config.memtable_items {
                set.flush(&mut inner)?;
            }
        }
        Ok(set)
    }
}

/// The runs `manifest` lists, opened.
fn open_runs(folder: &Folder, manifest: &Manifest) -> Result<Vec<Arc<Run>>> {
    let mut runs = Vec::with_capacity(manifest.runs.len());
    for r in &manifest.runs {
        let path = folder.path.join(run::file_name(r.seq));
        runs.push(Arc::new(Run::open(
            &path,
            manifest.set_id,
            manifest.width,
            r.seq,
            r.count,
        )?));
    }
    Ok(runs)
}

/// The filter a clean close saved, if it is there and sized as asked (`false`), or one
/// rebuilt from `runs` for `expected_items` at `fpr` (`true`).
fn saved_or_rebuilt_filter(
    folder: &Folder,
    manifest: &Manifest,
    runs: &[Arc<Run>],
    expected_items: u64,
    fpr: f64,
) -> Result<(Filter, bool)> {
    let same_sizing = manifest.expected_items == expected_items && manifest.fpr == fpr;
    let saved = (manifest.clean && same_sizing)
        .then(|| folder.load_filter(manifest))
        .flatten();
    Ok(match saved {
        Some(f) => (f, false),
        None => (rebuild_filter(runs, expected_items, fpr)?, true),
    })
}

impl Inner {
    /// The state of a set just opened: nothing read, flushed or merged yet, its runs in
    /// lookup order.
    fn opened(manifest: Manifest, runs: Vec<Arc<Run>>, memtable: Memtable, wal: WalSlot) -> Self {
        let mut inner = Inner {
            manifest,
            runs,
            lookup_order: Vec::new(),
            memtable,
            wal,
            scratch: Vec::new(),
            block_reads: 0,
            false_positives: 0,
            flushes: 0,
            merges: 0,
            broken: None,
        };
        inner.sort_runs();
        inner
    }
}

/// A new set in `folder`: its first log, then its manifest (a folder holding members
/// without a manifest is refused).
pub(crate) fn create(folder: &Folder, config: &FingerprintSetConfig) -> Result<Manifest> {
    if folder.has_orphan_members()? {
        return Err(folder.missing_manifest());
    }
    let m = Manifest {
        width: config.width,
        set_id: random_id()?,
        clean: false,
        expected_items: config.expected_items.unwrap_or(DEFAULT_EXPECTED_ITEMS),
        fpr: config.fpr.unwrap_or(DEFAULT_SET_FALSE_POSITIVE_RATE),
        wal_gen: 1,
        next_seq: 1,
        filter_len: 0,
        filter_crc: 0,
        runs: Vec::new(),
        clean_wal_len: None,
    };
    drop(Wal::create(
        &folder.path,
        m.set_id,
        config.width,
        m.wal_gen,
    )?);
    folder.write_manifest(&m)?;
    Ok(m)
}

/// A filter over every member of `runs`, streamed block by block (each block verified).
pub(crate) fn rebuild_filter(runs: &[Arc<Run>], expected_items: u64, fpr: f64) -> Result<Filter> {
    let f = Filter::new(expected_items, fpr)?;
    for run in runs {
        let mut c = Cursor::new(Arc::clone(run));
        while let Some(fp) = c.peek()? {
            f.insert(fp);
            c.advance();
        }
    }
    Ok(f)
}

pub(crate) fn random_id() -> Result<u64> {
    let mut b = [0u8; 8];
    getrandom::fill(&mut b).map_err(|e| Error::Io(std::io::Error::other(e.to_string())))?;
    Ok(u64::from_le_bytes(b))
}

//! Flushes and merges: a full memtable becomes a sorted run; runs merge size-tiered. Each
//! step is saved by an atomic manifest replacement, so a crash leaves the old or the new
//! set of runs, never a mix.

use std::ops::Range;
use std::sync::Arc;

use crate::error::Result;

use crate::format::{RunEntry, MAX_WIDTH};
use crate::run::{Cursor, RunWriter};
use crate::wal::Wal;
use crate::{remove_quietly, run, tiers, wal, FingerprintSet, Inner};

impl FingerprintSet {
    /// Writes the memtable as a run, replaces the log, then merges while a merge is due.
    pub(crate) fn flush(&self, inner: &mut Inner) -> Result<()> {
        let result = self.flush_and_merge(inner);
        inner.fail_on(result)
    }

    pub(crate) fn flush_and_merge(&self, inner: &mut Inner) -> Result<()> {
        let cfg = &self.config;
        let dir = &self.folder.path;
        let m = &inner.manifest;
        let seq = m.next_seq;
        let sorted = inner.memtable.sorted();
        let path = dir.join(run::file_name(seq));
        let mut w = RunWriter::create(&path, m.set_id, cfg.width, seq, cfg.block_items)?;
        for fp in sorted {
            w.push(fp)?;
        }
        let new_run = w.finish()?;
        step("flush:run-written");
        let new_wal = Wal::create(dir, m.set_id, cfg.width, m.wal_gen + 1)?;
        let mut next = m.clone();
        next.wal_gen += 1;
        next.next_seq += 1;
        if let Some(r) = &new_run {
            next.runs.push(RunEntry {
                seq,
                count: r.header.count,
            });
        }
        self.folder.write_manifest(&next)?;
        step("flush:listed");
        // Listed: the old log is no longer needed.
        let old = std::mem::replace(&mut inner.wal.0, new_wal);
        drop(old);
        remove_quietly(&wal::path(dir, next.wal_gen - 1));
        inner.manifest = next;
        if let Some(r) = new_run {
            inner.runs.push(Arc::new(r));
        }
        inner.memtable.clear();
        inner.flushes += 1;
        inner.sort_runs();
        // Anywhere in the list, not only among the newest runs: this also finishes a chain
        // of merges a crash cut short (see `tiers`).
        while let Some(range) = tiers::merge_due(
            &inner
                .manifest
                .runs
                .iter()
                .map(|r| r.count)
                .collect::<Vec<_>>(),
            cfg.memtable_items as u64,
            cfg.merge_factor,
        ) {
            self.merge(inner, range)?;
        }
        Ok(())
    }

    /// Merges the runs `range` (indexes into the runs, largest first) into one run.
    pub(crate) fn merge(&self, inner: &mut Inner, range: Range<usize>) -> Result<()> {
        let cfg = &self.config;
        let dir = &self.folder.path;
        let seq = inner.manifest.next_seq;
        let path = dir.join(run::file_name(seq));
        let mut w = RunWriter::create(
            &path,
            inner.manifest.set_id,
            cfg.width,
            seq,
            cfg.block_items,
        )?;
        let mut cursors: Vec<Cursor> = inner.runs[range.clone()]
            .iter()
            .map(|r| Cursor::new(Arc::clone(r)))
            .collect();
        let mut least = [0u8; MAX_WIDTH];
        let width = cfg.width;
        loop {
            let mut from = None;
            for (i, c) in cursors.iter_mut().enumerate() {
                if let Some(fp) = c.peek()? {
                    if from.is_none() || fp < &least[..width] {
                        least[..width].copy_from_slice(fp);
                        from = Some(i);
                    }
                }
            }
            let Some(i) = from else { break };
            w.push(&least[..width])?;
            cursors[i].advance();
        }
        drop(cursors);
        let merged = w.finish()?;
        step("merge:run-written");
        let mut next = inner.manifest.clone();
        let inputs: Vec<u64> = next.runs.drain(range.clone()).map(|r| r.seq).collect();
        next.next_seq += 1;
        if let Some(r) = &merged {
            next.runs.push(RunEntry {
                seq,
                count: r.header.count,
            });
        }
        self.folder.write_manifest(&next)?;
        step("merge:listed");
        for s in inputs {
            remove_quietly(&dir.join(run::file_name(s)));
        }
        inner.manifest = next;
        inner.runs.drain(range);
        if let Some(r) = merged {
            inner.runs.push(Arc::new(r));
        }
        inner.merges += 1;
        inner.sort_runs();
        Ok(())
    }
}

/// A test seam: a function called at the named steps of a flush and a merge (see
/// `set_step_hook`, feature `failpoints`).
#[cfg(feature = "failpoints")]
static STEP_HOOK: std::sync::OnceLock<fn(&'static str)> = std::sync::OnceLock::new();

/// Test seam (feature `failpoints`; process-wide, set once): `hook` is called with the name
/// of each step of a flush or merge as it is reached: `"flush:run-written"` (the run is
/// synced, the manifest does not list it yet), `"flush:listed"` (the manifest lists it, the
/// old log is still there), `"merge:run-written"`, `"merge:listed"` (inputs still there).
/// Crash tests block a child there and kill it.
///
/// ```
/// bloomsled_fpset::set_step_hook(|step| eprintln!("reached {step}"));
/// ```
#[cfg(feature = "failpoints")]
pub fn set_step_hook(hook: fn(&'static str)) {
    let _ = STEP_HOOK.set(hook);
}

#[cfg(feature = "failpoints")]
pub(crate) fn step(name: &'static str) {
    if let Some(hook) = STEP_HOOK.get() {
        hook(name);
    }
}

#[cfg(not(feature = "failpoints"))]
#[inline(always)]
pub(crate) fn step(_name: &'static str) {}

//! Online rebuild and resize of a tree's filter.
//!
//! A rebuild allocates a new filter (sized for the live keys, doubling the capacity as often
//! as needed) or reuses a retired one of that exact shape, publishes it as "being built",
//! then reads the tree's keys in chunks, each chunk under the gate's write side (see
//! [`super::filters`]): writers apply their change to the new filter as well when their key
//! is at or before the scan's cursor, so every key reaches it exactly once. When the scan
//! reaches the end, the new filter becomes current in one store, still under the gate. The
//! on-disk state is not touched until the snapshot that follows, so a crash at any point of
//! a rebuild recovers like any other crash.
//!
//! Automatic rebuilds run in a background thread, triggered (checked every 256 written keys)
//! when the live keys pass the capacity or the modelled false-positive rate passes the
//! configured bound.

use std::ops::Deref;
use std::sync::atomic::Ordering;
use std::thread;
use std::time::{Duration, Instant};

use super::scan::{scan_cuts, scan_round, scan_threads, Cursor};
use super::state::TreeState;
use crate::error::{Error, Result};
use crate::filter::any::{AnyFilter, FilterMode};
use crate::persist::{pause_limit, wait_at_pause, SnapshotInfo};

/// Longest round of a scan (one hold of the gate): re-positioning sled's iterators (a few
/// microseconds) is amortized over it. A writer that arrives ends the round once it has
/// read as many keys as were written since the last one, plus [`ROUND_STRIDE`] (see
/// [`scan_round`]): a few milliseconds under a load of batches, well under this bound.
const MAX_ROUND: Duration = Duration::from_millis(50);

/// Keys a round reads, beyond those written since the last round, before it yields to
/// waiting writers.
const ROUND_STRIDE: u64 = 1024;

/// Longest the rebuild yields between chunks to writers that were blocked on the gate.
const MAX_YIELD: Duration = Duration::from_millis(2);

/// Scans one rebuild may start before it settles for the size it has.
const MAX_ATTEMPTS: u32 = 8;

/// How a scan ended.
enum Scan {
    /// The new filter is current; this many keys were read.
    Swapped(u64),
    /// The new filter filled past its capacity before the scan ended (writers outpaced the
    /// estimate); it was abandoned holding this many items.
    Outgrown(u64),
}

/// What a rebuild did.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct RebuildReport {
    /// Keys read from the store into the new filter.
    pub keys_scanned: u64,
    /// Capacity of the filter it replaced.
    pub old_capacity: u64,
    /// Capacity of the new filter.
    pub capacity: u64,
    /// Bits of the new filter.
    pub num_bits: u64,
    /// From the start of the rebuild to the swap.
    pub duration: Duration,
    /// The snapshot written after the swap (`None` for a temporary database or if it
    /// failed; the failure is logged and the next snapshot retries).
    pub snapshot: Option<SnapshotInfo>,
    /// True if started automatically.
    pub automatic: bool,
}

/// A rebuild's view of a tree: the procedures borrow the tree's state instead of adding
/// methods to it.
pub(crate) struct Rebuild<'a>(pub(crate) &'a TreeState);

impl Deref for Rebuild<'_> {
    type Target = TreeState;

    fn deref(&self) -> &TreeState {
        self.0
    }
}

/// The capacity from which an automatic rebuild is followed by a snapshot.
const SNAPSHOT_AFTER_REBUILD_MIN: u64 = 1 << 16;

impl Rebuild<'_> {
    /// Live keys as far as the filter knows: counted in less counted out (counting mode),
    /// or bit-setting inserts less stale removes (plain mode).
    fn live_estimate(&self, f: &AnyFilter) -> u64 {
        match f.mode() {
            FilterMode::Counting => f.items(),
            FilterMode::Plain => f.items().saturating_sub(self.stale()),
        }
    }

    /// Live keys from the writes since the last finished scan: what it read, plus inserts,
    /// less removes since it started. An upper bound (an overwrite counts as an insert),
    /// and a lower one after a reopen (the counts are this process's); a filter far past
    /// its capacity undercounts far more (its new bits run out), so a rebuild sizes for the
    /// larger of the two. Without it, a tree grown from 128 keys by batches of 10,000
    /// restarted its scan a dozen times, each sized from a saturated count.
    fn written_estimate(&self) -> u64 {
        let (read, inserts_then, removes_then) = *self
            .rebuild
            .at_last_scan
            .lock()
            .unwrap_or_else(|p| p.into_inner());
        let (inserts, removes, _) = self.counters.writes();
        (read + inserts.saturating_sub(inserts_then))
            .saturating_sub(removes.saturating_sub(removes_then))
    }

    /// Starts an automatic rebuild in the background if the filter needs one. Returns true
    /// if a rebuild is running or pending now (started here or before).
    ///
    /// A writer checks after its write, and a rebuild that ends checks again after it has
    /// said it is done ([`Self::recheck`]): one of the two sees the other, so a write that
    /// a rebuild in flight did not size for is never left past the capacity until the
    /// next 256 keys. The fence orders each side's store before its load (a writer's keys,
    /// then the rebuild flags; the flags, then the filter's count and the written keys).
    pub(crate) fn check(&self) -> bool {
        std::sync::atomic::fence(Ordering::SeqCst);
        let r = &self.rebuild;
        if r.in_progress() {
            return true;
        }
        if !r.policy.auto
            || r.auto_failed.load(Ordering::Relaxed)
            || self.closing.load(Ordering::Relaxed)
        {
            return false;
        }
        let (live, items, capacity) = {
            let gate = self.filters.enter();
            let f = gate.current();
            (self.live_estimate(f), f.items(), f.capacity())
        };
        let limit = r.limit.load(Ordering::Relaxed);
        if live <= capacity && items <= limit {
            return false;
        }
        if r.pending.swap(true, Ordering::AcqRel) {
            return true;
        }
        log::info!(
            "bloomsled: tree {:?}: {live} live keys, {items} in the filter, capacity \
             {capacity}, limit {limit}: rebuilding in the background",
            self.report.tree
        );
        self.start_automatic()
    }

    /// Starts the automatic rebuild [`Self::check`] marked pending, in a thread of its own;
    /// false (and no longer pending) if the thread cannot be made.
    fn start_automatic(&self) -> bool {
        let me = self.me.clone();
        // Taken here, so that a database dropped before the thread runs waits for it.
        let hold = self.holds.take();
        let spawned = thread::Builder::new()
            .name("bloomsled-rebuild".into())
            .spawn(move || {
                let hold = hold.claim();
                let Some(s) = me.upgrade() else { return };
                match Rebuild(&s).now(true) {
                    Ok(_) => {}
                    Err(Error::Closed(_)) => {}
                    Err(e) => {
                        log::error!(
                            "bloomsled: tree {:?}: automatic rebuild failed, not retried: {e}",
                            s.report.tree
                        );
                        s.rebuild.auto_failed.store(true, Ordering::Relaxed);
                    }
                }
                Rebuild(&s).automatic_done();
                // The tree first, then the hold: a waiting drop resumes with the thread's
                // `Arc` gone.
                drop(s);
                drop(hold);
            });
        match spawned {
            Ok(_) => true,
            Err(e) => {
                log::warn!("bloomsled: cannot start a rebuild thread: {e}");
                self.rebuild.pending.store(false, Ordering::Release);
                false
            }
        }
    }

    /// An automatic rebuild's thread is done with it. Writes that came while it ran, and
    /// saw it pending, left the check to it: the next rebuild, if due, starts now.
    fn automatic_done(&self) {
        self.rebuild.pending.store(false, Ordering::Release);
        self.recheck();
    }

    /// [`Self::check`] after a rebuild ended, or for a waiter: only if keys were written
    /// since the last scan's filter became current. A filter a scan just sized can still
    /// be "due" with no write since (a `rebuild_false_positive_rate` below what the sizing
    /// gives, a scan that settled under a load): rebuilding it again would read the whole
    /// tree to the same end, over and over, on a tree no one writes.
    fn recheck(&self) -> bool {
        std::sync::atomic::fence(Ordering::SeqCst);
        if !self.rebuild.in_progress()
            && self.written() == self.rebuild.written_at_swap.load(Ordering::Relaxed)
        {
            return false;
        }
        self.check()
    }

    /// Blocks until no rebuild is running or pending, and none is due: a rebuild the
    /// writes so far call for, not yet started, is started and waited for too.
    pub(crate) fn wait(&self) {
        loop {
            drop(self.rebuild.lock.lock().unwrap_or_else(|p| p.into_inner()));
            if !self.rebuild.in_progress() && !self.recheck() {
                return;
            }
            thread::sleep(Duration::from_millis(1));
        }
    }

    /// Rebuilds the filter from the keys (see the module docs).
    pub(crate) fn now(&self, automatic: bool) -> Result<RebuildReport> {
        self.run(automatic, None)
    }

    /// The rebuild after open of a tree serving with the pass-all stand-in, sized for
    /// `expected_keys` (a hint: the scan resizes if it finds more; if a filter that size
    /// cannot be allocated, it starts from the configured size).
    pub(crate) fn recover(&self, expected_keys: Option<u64>) -> Result<RebuildReport> {
        match self.run(false, expected_keys) {
            Err(Error::OutOfMemory { .. }) if expected_keys.is_some() => self.run(false, None),
            r => r,
        }
    }

    fn run(&self, automatic: bool, known: Option<u64>) -> Result<RebuildReport> {
        let one = self.rebuild.lock.lock().unwrap_or_else(|p| p.into_inner());
        self.rebuild.running.store(true, Ordering::Release);
        self.rebuild.start_progress(known);
        let r = self.locked(automatic, known);
        self.rebuild.running.store(false, Ordering::Release);
        drop(one);
        if !automatic {
            // As after an automatic rebuild: writes during this one may have left a resize
            // due.
            self.recheck();
        }
        r
    }

    fn locked(&self, automatic: bool, mut known: Option<u64>) -> Result<RebuildReport> {
        let start = Instant::now();
        let old_capacity = self.filters.enter().current().capacity();
        // The filter's own count is only an estimate (an overfull plain filter undercounts
        // badly, and writers may add keys faster than the scan reads them). A scan whose new
        // filter overflows its capacity is abandoned and restarted sized for what it found
        // (at least the next doubling);
        // one that ends with more keys than its size suits is followed by one more at the
        // size it measured.
        let mut attempts = 0;
        let (scanned, capacity, slot) = loop {
            attempts += 1;
            let (capacity, slot, end) = self.rebuild_once(known, attempts >= MAX_ATTEMPTS)?;
            let scanned = match end {
                Scan::Outgrown(items) => {
                    known = Some(items);
                    continue;
                }
                Scan::Swapped(n) => n,
            };
            if self.rebuild.policy.fits(scanned, capacity)
                || attempts >= MAX_ATTEMPTS
                || self.rebuild.policy.capacity_for(scanned) <= capacity
            {
                break (scanned, capacity, slot);
            }
            known = Some(scanned);
        };
        // The real filter is current (the tree may have served with the stand-in until now).
        self.recovery.set_ready(scanned);
        self.filters.release_retired();
        let duration = start.elapsed();
        let new = self
            .filters
            .get(slot)
            .ok_or_else(|| Error::ReportableBug("the rebuilt filter's slot vanished".into()))?;
        self.rebuild
            .limit
            .store(self.rebuild.policy.items_limit(new), Ordering::Relaxed);
        self.rebuild.rebuilds.fetch_add(1, Ordering::Relaxed);
        if capacity != old_capacity {
            self.rebuild.resizes.fetch_add(1, Ordering::Relaxed);
        }
        let snapshot = self.snapshot_after_rebuild(automatic, capacity);
        log::info!(
            "bloomsled: tree {:?}: filter rebuilt from {scanned} keys in {duration:?}, \
             capacity {old_capacity} -> {capacity}",
            self.report.tree
        );
        Ok(RebuildReport {
            keys_scanned: scanned,
            old_capacity,
            capacity,
            num_bits: new.bits().num_bits(),
            duration,
            snapshot,
            automatic,
        })
    }

    /// A snapshot of the rebuilt filter (of `capacity`), if the tree persists one and is
    /// not closing; a failed one is logged (the rebuild stands: the next snapshot or open
    /// makes up for it). A small tree's `automatic` rebuild (a growing tree's next size)
    /// writes none: its fsyncs would cost more than the scan a crash before the next
    /// snapshot makes, and a clean close snapshots it anyway.
    fn snapshot_after_rebuild(&self, automatic: bool, capacity: u64) -> Option<SnapshotInfo> {
        if self.persist.is_none()
            || self.closing.load(Ordering::Relaxed)
            || automatic && capacity < SNAPSHOT_AFTER_REBUILD_MIN
        {
            return None;
        }
        match self.snapshot() {
            Ok(info) => Some(info),
            Err(e) => {
                log::warn!(
                    "bloomsled: tree {:?}: snapshot after rebuild failed: {e}",
                    self.report.tree
                );
                None
            }
        }
    }

    /// One scan into a new filter sized for `live` keys or the current estimate, whichever
    /// is larger (a retry's `live` is what the last attempt read, and the tree may have
    /// grown since), swapped in at the end. Returns its capacity, slot and how it ended.
    fn rebuild_once(&self, live: Option<u64>, last: bool) -> Result<(u64, usize, Scan)> {
        self.check_open()?;
        let policy = &self.rebuild.policy;
        let (seed, estimate) = {
            let gate = self.filters.enter();
            let f = gate.current();
            let own = self.live_estimate(f);
            // The writes' count only for a filter far past its capacity (its own count no
            // longer tracks its keys: a batch far larger than a small filter); at a growth's
            // usual trigger, just past capacity, the filter's count is the better one (the
            // writes' counts the keys a scan read while they were written twice). A tree of
            // few keys overwritten often keeps its size.
            let written = if f.items() > 2 * f.capacity() {
                self.written_estimate()
            } else {
                0
            };
            (f.bits().seed(), own.max(written))
        };
        let capacity = policy.capacity_for(live.unwrap_or(0).max(estimate));
        let shape = policy.shape_for(capacity, seed)?;
        let mode = self.mode;
        let slot = self.filters.prepare(
            |f| f.same_kind(mode, &shape, capacity),
            || AnyFilter::new(mode, shape, capacity),
        )?;
        let stale_before = self.stale_total();
        let cuts = scan_cuts(&self.sled, scan_threads())?;
        {
            let mut gate = self.filters.close_gate();
            gate.building = Some(slot);
            gate.cursor = Cursor::start(cuts);
        }
        let end = self.scan_and_swap(slot, stale_before, last);
        if !matches!(end, Ok(Scan::Swapped(_))) {
            let mut gate = self.filters.close_gate();
            gate.building = None;
            gate.cursor = Cursor::default();
        }
        Ok((capacity, slot, end?))
    }

    fn check_open(&self) -> Result<()> {
        if self.closing.load(Ordering::Relaxed) {
            return Err(Error::Closed(format!(
                "tree {:?} closed during a rebuild",
                self.report.tree
            )));
        }
        Ok(())
    }

    /// A scan read `at_last_scan.0` keys to the end, under the gate, its filter about to
    /// become current: what later estimates and rechecks start from.
    fn scan_ended(&self, at_last_scan: (u64, u64, u64)) {
        *self
            .rebuild
            .at_last_scan
            .lock()
            .unwrap_or_else(|p| p.into_inner()) = at_last_scan;
        self.rebuild
            .written_at_swap
            .store(self.written(), Ordering::Relaxed);
    }

    /// Reads every key into the filter of `slot`, a round per hold of the gate, and makes
    /// it current once every range is read to its end; gives up if the filter outgrows its
    /// capacity first, unless this is the last try.
    fn scan_and_swap(&self, slot: usize, stale_before: u64, last_try: bool) -> Result<Scan> {
        let new = self
            .filters
            .get(slot)
            .ok_or_else(|| Error::ReportableBug("the rebuild's filter slot is empty".into()))?;
        let seed = new.bits().seed();
        let mut scanned = 0u64;
        self.rebuild.scanned.store(0, Ordering::Relaxed);
        let (inserts_at_start, removes_at_start, _) = self.counters.writes();
        let mut written_at = inserts_at_start;
        loop {
            wait_at_pause(scanned, || self.closing.load(Ordering::Relaxed));
            self.check_open()?;
            let mut gate = self.filters.close_gate();
            // The test seam's pause (never, in a release build) ends the round at its key
            // count, so the next turn of the loop waits there.
            let limit = pause_limit().saturating_sub(scanned);
            // A round yields to waiting writers only once it has read as many keys as were
            // written since the last one (and a stride more), so the scan gains on any
            // steady load. Yielding at once, a round read a stride while a batch wrote
            // thousands, and a growth rebuild under a load never ended.
            let written = self.counters.writes().0;
            let owed = written.saturating_sub(written_at) + ROUND_STRIDE;
            written_at = written;
            let stop = |elapsed: Duration, read: u64| {
                elapsed >= MAX_ROUND
                    || self.closing.load(Ordering::Relaxed)
                    || (read >= owed && self.filters.writers_waiting())
            };
            let (cursor, n) = scan_round(&self.sled, &gate.cursor, new, seed, limit, stop)?;
            gate.cursor = cursor;
            scanned += n;
            self.rebuild.scanned.store(scanned, Ordering::Relaxed);
            if gate.cursor.done() {
                self.scan_ended((scanned, inserts_at_start, removes_at_start));
                self.filters.swap(&mut gate, slot);
                gate.building = None;
                gate.cursor = Cursor::default();
                self.rebuild
                    .stale_base
                    .store(stale_before, Ordering::Relaxed);
                return Ok(Scan::Swapped(scanned));
            }
            drop(gate);
            if !last_try && new.items() > new.capacity() {
                return Ok(Scan::Outgrown(new.items()));
            }
            // Writers woken by the release must get the gate before the next round takes
            // it back; once one holds it, the next `close_gate` queues behind it.
            let yielded = Instant::now();
            while self.filters.writers_waiting() && yielded.elapsed() < MAX_YIELD {
                thread::yield_now();
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Config;

    /// The interleaving behind a flake of `tests/growth.rs`: a batch lands while an
    /// automatic rebuild is finishing (its filter already sized and swapped in), so the
    /// batch's own check sees the rebuild pending and leaves the resize to it. Once the
    /// rebuild has said it is done, waiting for rebuilds must still leave the tree sized
    /// for its keys, and so must the check the rebuild itself makes on the way out.
    #[test]
    fn a_batch_that_lands_as_a_rebuild_ends_is_not_left_past_the_capacity() {
        for thread_rechecks in [false, true] {
            let db = Config::new()
                .temporary(true)
                .expected_items(1_000)
                .open()
                .unwrap();
            let tree: &crate::Tree = &db;
            let s = &tree.state;
            let capacity = db.stats().capacity;
            // The rebuild in flight, as far as writers can tell.
            s.rebuild.pending.store(true, Ordering::Release);
            let mut b = crate::Batch::default();
            for i in 0..capacity * 3 {
                b.insert(&i.to_be_bytes(), &b""[..]);
            }
            db.apply_batch(b).unwrap();
            assert_eq!(db.stats().capacity, capacity, "the batch left the resize");
            if thread_rechecks {
                // The rebuild's thread ends; then a plain wait for what it left running.
                Rebuild(s).automatic_done();
                while s.rebuild.in_progress() {
                    thread::sleep(Duration::from_millis(1));
                }
            } else {
                // It ends, and a user waits for rebuilds.
                s.rebuild.pending.store(false, Ordering::Release);
                db.wait_for_rebuild();
            }
            let stats = db.stats();
            assert!(
                stats.capacity >= capacity * 3,
                "{} keys in a filter for {} (thread rechecks: {thread_rechecks})",
                capacity * 3,
                stats.capacity
            );
            assert!((0..capacity * 3).all(|i| db.may_contain(i.to_be_bytes())));
        }
    }

    /// A bound below what a rebuilt filter's sizing gives leaves every new filter "due".
    /// The check a rebuild makes as it ends, and `wait_for_rebuild`, start another only
    /// for writes since: on a tree no one writes, the rebuilds stop and the wait returns.
    #[test]
    fn a_filter_due_right_after_its_rebuild_is_not_rebuilt_again_without_writes() {
        let db = Config::new()
            .temporary(true)
            .expected_items(1_000)
            .rebuild_false_positive_rate(1e-12)
            .open()
            .unwrap();
        let mut b = crate::Batch::default();
        for i in 0..600u64 {
            b.insert(&i.to_be_bytes(), &b""[..]);
        }
        db.apply_batch(b).unwrap();
        let (tx, rx) = std::sync::mpsc::channel();
        let waiter = db.clone();
        thread::spawn(move || {
            waiter.wait_for_rebuild();
            let _ = tx.send(());
        });
        rx.recv_timeout(Duration::from_secs(60))
            .expect("wait_for_rebuild did not return on a tree no one writes");
        let rebuilds = db.stats().rebuilds;
        assert!(rebuilds >= 1, "the batch's check started no rebuild");
        thread::sleep(Duration::from_millis(300));
        let after = db.stats();
        assert!(
            after.rebuilds == rebuilds && !after.rebuild_in_progress,
            "rebuilds went on with no write: {rebuilds} then {} (in progress: {})",
            after.rebuilds,
            after.rebuild_in_progress
        );
        assert!((0..600u64).all(|i| db.may_contain(i.to_be_bytes())));
    }
}

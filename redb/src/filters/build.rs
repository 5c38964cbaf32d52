//! How a table gets a filter it can trust: loaded from what the last clean close wrote (in
//! the caller's thread: one read of the filter's bytes, no key read), or built from a scan
//! of the table's keys in a background thread while redb answers (the table's lookups go
//! to redb until the build installs its filter). Growth rebuilds run the same way, off the
//! committing thread. The protocol's rules are in the parent module's doc.

use std::sync::Arc;
use std::sync::atomic::Ordering::SeqCst;
use std::thread::{self, JoinHandle};

use super::{Bits, Built, FilterSource, GROWTH, Shared, TableFilter, journals};
use crate::persist;
use crate::sync::{AtomicBool, AtomicU64, Mutex};

/// How to read one table's keys, with its key and value types inside, so a build can run
/// without them.
pub(crate) trait Keys: Send + Sync + 'static {
    /// How many keys the table holds in `txn` (0 if it does not exist); `None` on an error.
    fn len(&self, txn: &redb::ReadTransaction) -> Option<u64>;

    /// Feeds each key's stored bytes to `add` while it returns true. True only if every
    /// key was fed (a table that does not exist has none); false on an error or a stop.
    fn scan(&self, txn: &redb::ReadTransaction, add: &mut dyn FnMut(&[u8]) -> bool) -> bool;
}

/// A table with fewer keys than this is scanned in the caller's thread (a millisecond or
/// so): a thread would cost more than the scan, and the table's first lookups get a
/// filter at once. Larger tables are scanned in the background while redb answers.
const INLINE_BUILD_MAX: u64 = 4096;

/// A table's [`Keys`], shared with the build that reads them.
pub(crate) type Builder = Arc<dyn Keys>;

/// The builds of one database running in the background.
#[derive(Default)]
pub(crate) struct Builds {
    /// Set while the database closes, compacts or checks its file: builds stop at their
    /// next key and none starts.
    stopping: AtomicBool,
    threads: Mutex<Vec<JoinHandle<()>>>,
}

impl Builds {
    fn stopping(&self) -> bool {
        self.stopping.load(SeqCst)
    }

    fn spawn(&self, job: impl FnOnce() + Send + 'static) {
        let mut threads = self.threads.lock().unwrap_or_else(|e| e.into_inner());
        threads.retain(|t| !t.is_finished());
        // A thread that cannot start drops its job and claim: the table answers from redb
        // and its next open tries again.
        if let Ok(t) = thread::Builder::new()
            .name("bloomsled-redb-build".into())
            .spawn(job)
        {
            threads.push(t);
        }
    }

    /// Waits for every running build to end.
    pub(crate) fn wait(&self) {
        loop {
            let running =
                std::mem::take(&mut *self.threads.lock().unwrap_or_else(|e| e.into_inner()));
            if running.is_empty() {
                return;
            }
            for t in running {
                // A build that panicked installed nothing: its table answers from redb.
                let _ = t.join();
            }
        }
    }

    /// Stops every build (each at its next key, installing nothing) and waits for them;
    /// none starts until [`Builds::resume`]. redb's `compact` and `check_integrity` need
    /// no read transaction alive, and a build holds one.
    pub(crate) fn stop(&self) {
        self.stopping.store(true, SeqCst);
        self.wait();
    }

    /// Lets the builds in flight finish, then lets none start: a close writes what they
    /// built, so the next open does not scan the same keys again.
    pub(crate) fn finish(&self) {
        self.wait();
        self.stopping.store(true, SeqCst);
        self.wait();
    }

    /// Lets builds start again after [`Builds::stop`].
    pub(crate) fn resume(&self) {
        self.stopping.store(false, SeqCst);
    }
}

/// A table's build claimed (its `building` flag set), released when dropped.
struct Claim(Arc<TableFilter>);

impl Claim {
    fn take(tf: &Arc<TableFilter>) -> Option<Claim> {
        tf.building
            .compare_exchange(false, true, SeqCst, SeqCst)
            .is_ok()
            .then(|| Claim(tf.clone()))
    }
}

impl Drop for Claim {
    fn drop(&mut self) {
        self.0.building.store(false, SeqCst);
    }
}

impl Shared {
    /// Gives `tf` a trusted filter if it needs one: `grow` false, its filter is not trusted
    /// at the current epoch (never built, or a restore or rename since); `grow` true, its
    /// filter holds more keys than it was sized for. A filter a clean close wrote is loaded
    /// here if its record still holds; otherwise a background thread builds one sized for
    /// [`GROWTH`] times the table's keys, from a scan (rules 2 and 3), while lookups use the
    /// filter there is (or redb, if none is trusted). Nothing is done while a build of the
    /// table runs, a restore or rename is in flight, or builds are stopped. `keys` is called
    /// only if a build starts.
    pub(crate) fn build_if_needed(
        self: &Arc<Self>,
        tf: &Arc<TableFilter>,
        grow: bool,
        keys: impl FnOnce() -> Builder,
    ) {
        let needed = |epoch: u64| {
            if grow {
                tf.wants_growth()
            } else {
                tf.read().current.trusted_epoch != Some(epoch)
            }
        };
        if !needed(self.epoch_of(tf)) || self.builds.stopping() {
            return;
        }
        let Some(claim) = Claim::take(tf) else {
            return;
        };
        let Some(epoch) = self.settled_epoch(tf) else {
            return;
        };
        if !needed(epoch) {
            return;
        }
        if !grow && self.load_saved(tf, epoch) {
            return;
        }
        self.build_claimed(tf, grow, claim, epoch, keys());
    }

    /// [`Shared::build_if_needed`] once it claimed the build at `epoch` and found no
    /// filter a clean close wrote: replays the table's crash journals or scans its keys.
    fn build_claimed(
        self: &Arc<Self>,
        tf: &Arc<TableFilter>,
        grow: bool,
        claim: Claim,
        epoch: u64,
        keys: Builder,
    ) {
        if !grow && self.load_replayed(tf, epoch, &*keys) {
            // The keys written since the close may have filled it: rebuilt larger, as
            // after the commit that fills a filter, while lookups use this one.
            drop(claim);
            if tf.wants_growth() {
                self.build_if_needed(tf, true, || keys);
            }
            return;
        }
        let Some(len) = self.source.begin_read().and_then(|txn| keys.len(&txn)) else {
            return;
        };
        if len < INLINE_BUILD_MAX {
            self.scan_build(tf, epoch, &*keys, len);
            return;
        }
        let shared = self.clone();
        self.builds.spawn(move || {
            shared.scan_build(&claim.0, epoch, &*keys, len);
            drop(claim);
        });
    }

    /// The epoch a build of `tf` that begins now may trust its filter at, or `None` while a
    /// restore, or a rename to or from its name, is in flight. Read before `unsettled` (the
    /// database's and the table's), which a restore or rename raises before it moves the
    /// epoch: a build that reads the moved epoch sees it in flight, and one that read the
    /// epoch before is refused at its install (or its filter distrusted by the move).
    pub(crate) fn settled_epoch(&self, tf: &TableFilter) -> Option<u64> {
        let epoch = self.epoch_of(tf);
        (self.unsettled.load(SeqCst) == 0 && tf.unsettled.load(SeqCst) == 0).then_some(epoch)
    }

    /// Installs the filter the last clean close wrote for `tf`, if its record is still in
    /// the latest committed state (no commit touched the table since: a touch removes the
    /// record in its own commit). Reads no key.
    fn load_saved(&self, tf: &TableFilter, epoch: u64) -> bool {
        let Some(first) = self.source.begin_read() else {
            return false;
        };
        let saved = persist::load(&first, &tf.key, tf.seed, tf.counting)
            .zip(persist::raw_record(&first, &tf.key));
        drop(first);
        let Some((filter, record)) = saved else {
            return false;
        };
        let fresh = Arc::new(Built::loaded(filter));
        self.set_pending(tf, fresh.clone());
        let installed = self.source.begin_read().is_some_and(|txn| {
            let valid_from = self.started.load(SeqCst);
            let unchanged = persist::raw_record(&txn, &tf.key).as_ref() == Some(&record);
            drop(fresh);
            unchanged && self.install(tf, epoch, valid_from)
        });
        self.settle(tf, installed, &self.loaded, FilterSource::Loaded);
        installed
    }

    /// The filter `tf`'s crash journals extend (`journals.rs`), not yet trusted, with its
    /// mark and raw mark: the one the last clean close left stored, if the mark names that
    /// close and the core's rule trusts the snapshot it names; or, for an empty mark naming
    /// no snapshot, an empty filter sized for [`GROWTH`] times the table's keys in
    /// the same state (an empty filter of any size holds no key).
    fn replay_base(
        &self,
        tf: &TableFilter,
        keys: &dyn Keys,
    ) -> Option<(persist::Mark, Built, persist::RawMark)> {
        let first = self.source.begin_read()?;
        let (mark, stored, raw) = persist::marked_filter(&first, &tf.key, tf.seed)?;
        let base = match stored {
            Some(filter) => Built::loaded(Bits::Plain(filter)),
            None if journals::extends_empty(&mark) => Built::new(
                tf.seed,
                keys.len(&first)?.saturating_mul(GROWTH),
                tf.counting,
            )?,
            None => return None,
        };
        Some((mark, base, raw))
    }

    /// Installs the filter `tf`'s crash journals extend ([`Shared::replay_base`]) with
    /// their hashes added (`journals.rs`), if the core's rule accepts every journal the
    /// mark names and the mark is unchanged when the second transaction begins. Reads no
    /// key. A refusal is kept for `Database::table_filter_source`.
    fn load_replayed(&self, tf: &TableFilter, epoch: u64, keys: &dyn Keys) -> bool {
        // A counting table is scanned instead: its journals hold count-ins only, so a
        // replay would keep every key removed since the close (`docs/redb.md`).
        let Some(dir) = self.journals.dir().filter(|_| !tf.counting) else {
            return false;
        };
        let Some((mark, base, raw)) = self.replay_base(tf, keys) else {
            return false;
        };
        let fresh = Arc::new(base);
        // Pending first: a key written from here on reaches it (rule 1); one written before
        // was appended to its journal before, so the replay below reads it.
        self.set_pending(tf, fresh.clone());
        let replayed = bloomsled::persist::replay_journals(
            dir,
            &journals::binding(&tf.key, &mark),
            1..=mark.last,
        );
        let hashes = match replayed {
            Ok(hashes) => hashes,
            Err(fault) => {
                tf.source().1 = Some(fault);
                // Journals that will never be trusted are not continued: the table's next
                // write in this session removes its mark.
                self.journals.stop(&tf.key);
                drop(fresh);
                self.settle(tf, false, &self.replayed, FilterSource::Loaded);
                return false;
            }
        };
        for &h in &hashes {
            fresh.insert_hash(h);
        }
        let installed = self.source.begin_read().is_some_and(|txn| {
            let valid_from = self.started.load(SeqCst);
            let unchanged = persist::raw_mark(&txn, &tf.key).as_ref() == Some(&raw);
            drop(fresh);
            unchanged && self.install(tf, epoch, valid_from)
        });
        let source = FilterSource::Replayed {
            sessions: mark.last,
            hashes: hashes.len() as u64,
        };
        self.settle(tf, installed, &self.replayed, source);
        installed
    }

    /// Builds `tf`'s filter, sized for `len` keys, from a scan of the latest committed
    /// state.
    fn scan_build(&self, tf: &TableFilter, epoch: u64, keys: &dyn Keys, len: u64) {
        self.scan_build_with(
            tf,
            epoch,
            len,
            || self.source.begin_read(),
            |txn, add| keys.scan(txn, add),
        );
    }

    /// [`Shared::scan_build`] on any store: `begin` begins the read transaction whose state
    /// the build trusts (redb's `begin_read`), `scan` feeds its keys to `add` as
    /// [`Keys::scan`] does. The loom model runs it on an in-memory store.
    pub(crate) fn scan_build_with<T>(
        &self,
        tf: &TableFilter,
        epoch: u64,
        len: u64,
        begin: impl FnOnce() -> Option<T>,
        scan: impl FnOnce(&T, &mut dyn FnMut(&[u8]) -> bool) -> bool,
    ) {
        let Some(fresh) = Built::new(tf.seed, len.saturating_mul(GROWTH), tf.counting) else {
            return;
        };
        let fresh = Arc::new(fresh);
        self.set_pending(tf, fresh.clone());
        let installed = begin().is_some_and(|txn| {
            let valid_from = self.started.load(SeqCst);
            let read = scan(&txn, &mut |key| {
                fresh.insert_hash(bloomsled::hash::hash_key(key, tf.seed));
                !self.builds.stopping()
            });
            drop(fresh);
            read && self.install(tf, epoch, valid_from)
        });
        let refused = tf.source().1.clone();
        self.settle(
            tf,
            installed,
            &self.scanned,
            FilterSource::Scanned { journal: refused },
        );
    }

    /// Makes `fresh` the filter every write of `tf` also fills (rule 1), before the build
    /// begins the read transaction it trusts (rule 2).
    fn set_pending(&self, tf: &TableFilter, fresh: Arc<Built>) {
        let mut s = tf.slots.write().unwrap_or_else(|e| e.into_inner());
        s.pending = Some(fresh);
        s.build_gen += 1;
    }

    /// After a build: counts it and says where its filter came from if it installed it, or
    /// drops the pending one.
    fn settle(&self, tf: &TableFilter, installed: bool, counter: &AtomicU64, source: FilterSource) {
        if installed {
            counter.fetch_add(1, SeqCst);
            tf.builds.fetch_add(1, SeqCst);
            *tf.source() = (Some(source), None);
        } else {
            tf.slots.write().unwrap_or_else(|e| e.into_inner()).pending = None;
        }
    }

    /// Makes the pending filter of `tf` its current one, trusted at `epoch` from the state
    /// `valid_from` on, unless the epoch moved during the build.
    fn install(&self, tf: &TableFilter, epoch: u64, valid_from: u64) -> bool {
        let mut s = tf.slots.write().unwrap_or_else(|e| e.into_inner());
        let Some(pending) = s.pending.take() else {
            return false;
        };
        if self.epoch_of(tf) != epoch {
            return false;
        }
        // Only the slots hold `pending` now (the build dropped the handle it filled), so this
        // takes it without a copy.
        let Ok(mut built) = Arc::try_unwrap(pending) else {
            return false;
        };
        built.trusted_epoch = Some(epoch);
        built.valid_from = valid_from;
        s.current = Arc::new(built);
        self.changed();
        true
    }
}

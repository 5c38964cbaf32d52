//! The filter side of a table open in a write transaction, shared by `Table` and
//! `MultimapTable`: every key a write may create goes through [`Writing::admit`] before
//! redb stores it, and a lookup asks [`Writing::get`] before redb.

use std::sync::atomic::Ordering::{Acquire, Relaxed, Release};
use std::sync::atomic::{AtomicBool, AtomicU64};
use std::sync::{Arc, Mutex};

use bloomsled::reuse::{Hashed, Pending};

use crate::filters::{Builder, Kind, Out, Streak, TableFilter};
use crate::transactions::WriteTransaction;

/// What a cursor writes through (see [`Writing::for_cursor`]).
pub(crate) type ForCursor<'a> = (
    Option<&'a TableFilter>,
    &'a mut Vec<u64>,
    &'a mut Pending,
    &'a mut Vec<Out>,
);

/// Counting mode: where a removal that outlives one call of the table (an `ExtractIf`, an
/// entry) notes the keys it removed or the counts it added in vain, counted out when the
/// transaction commits (see [`Writing::count_out`]). Notes nothing in plain mode.
pub(crate) struct CountOuts<'a> {
    /// The table's seed, in counting mode only.
    seed: Option<u64>,
    outs: &'a mut Vec<Out>,
}

impl CountOuts<'_> {
    /// `key` was removed (redb's call returned it): one count out at the commit.
    pub(crate) fn removed(&mut self, key: &[u8]) {
        if let Some(seed) = self.seed {
            self.outs.push(Out {
                h: bloomsled::hash::hash_key(key, seed),
                extra: false,
            });
        }
    }

    /// A hash [`Writing::admit`] or [`Writing::out_hash`] gave, counted out at the commit
    /// (counting mode).
    pub(crate) fn push(&mut self, out: Option<Out>) {
        if let Some(out) = out.filter(|_| self.seed.is_some()) {
            self.outs.push(out);
        }
    }
}

/// One table's filter as a write transaction sees it, and the hashes of the keys written
/// through this handle (handed to the transaction when the handle drops, so that its
/// commit can re-insert them into a filter a build installed meanwhile).
pub(crate) struct Writing<'txn> {
    txn: &'txn WriteTransaction,
    kind: Kind,
    name: String,
    /// `None` when filters are off (another process may write).
    filter: Option<Arc<TableFilter>>,
    /// The build generation the transaction saw when it first opened the table.
    gen_seen: u64,
    log: Vec<u64>,
    /// Counting mode: the hashes to count out when the transaction commits, one per key
    /// this handle removed or overwrote (an overwrite counted its key in once more).
    outs: Vec<Out>,
    /// The sets of the table's false-positive memory this handle's writes began in, handed
    /// to the transaction when the handle drops (ended when it ends).
    pending: Pending,
    /// Keys the filter passed and this transaction's view lacked (false positives, or keys
    /// it removed): answered absent without redb until this handle writes them, and handed
    /// to the transaction when the handle drops, which records them in the table's memory
    /// after its commit (rule 6 of `docs/redb.md`, "The false-positive memory").
    /// (A lock, not a `RefCell`: redb's tables are `Sync`; taken only when `missed` says
    /// it may hold the key.)
    misses: Mutex<Vec<Box<[u8]>>>,
    /// One bit per kept miss, chosen by the top 6 bits of the hash its lookup probed with
    /// ([`miss_bit`]); cleared only with the whole list. A lookup whose bit is clear is not
    /// in the list: it takes no lock, so a handle that has missed once does not make every
    /// later lookup of a key it holds lock and compare up to [`MISSES`] keys.
    missed: AtomicU64,
    /// This handle's hits in a row (`Builder::set_bypass_after_hits`).
    streak: Streak,
}

/// The bit of hash `h` in [`Writing::missed`].
#[inline]
fn miss_bit(h: u64) -> u64 {
    1 << (h >> 58)
}

/// Set when a lookup this crate added to a mutation panicked ([`Writing::before_write`]):
/// redb refuses the commit of a transaction in which a mutation panicked
/// (`CommitError::TransactionPoisoned`), and the mutation the user called did panic, so
/// this transaction's commit is refused too, though redb's state was not changed.
#[derive(Default)]
pub(crate) struct Poison(AtomicBool);

impl Poison {
    /// Runs `f`; poisons if it panics.
    pub(crate) fn run<R>(&self, f: impl FnOnce() -> R) -> R {
        struct Armed<'a>(&'a AtomicBool);
        impl Drop for Armed<'_> {
            fn drop(&mut self) {
                if std::thread::panicking() {
                    self.0.store(true, Release);
                }
            }
        }
        let _armed = Armed(&self.0);
        f()
    }

    /// True once a guarded lookup panicked.
    pub(crate) fn is_set(&self) -> bool {
        self.0.load(Acquire)
    }
}

/// At most this many misses a table handle keeps (only keys the filter passed get here).
const MISSES: usize = 64;

impl<'txn> Writing<'txn> {
    /// The filter of table `name` for `txn`, built by `build` if it has none yet.
    pub(crate) fn open(
        txn: &'txn WriteTransaction,
        kind: Kind,
        name: String,
        build: Builder,
    ) -> Writing<'txn> {
        let (filter, gen_seen) = match txn.filter_for(kind, &name, build) {
            Some((tf, g)) => (Some(tf), g),
            None => (None, 0),
        };
        Writing {
            txn,
            kind,
            name,
            filter,
            gen_seen,
            log: Vec::new(),
            outs: Vec::new(),
            pending: Pending::default(),
            misses: Mutex::default(),
            missed: AtomicU64::new(0),
            streak: Streak::new(txn.shared().bypass_after_hits),
        }
    }

    /// The table's name.
    pub(crate) fn name(&self) -> &str {
        &self.name
    }

    /// Sets the key's bits before a write that may create it (and drops it from the
    /// handle's misses); its hash, for a [`Writing::count_out_hash`] if the write overwrote
    /// the key.
    pub(crate) fn admit(&mut self, key: &[u8]) -> Option<Out> {
        let tf = self.filter.as_ref()?;
        let h = tf.insert(key, &mut self.pending);
        self.log.push(h);
        // Any bit, not the key's: the list must lose the key whatever hash a lookup kept
        // it under (a clear bit at a lookup only sends it to redb; a stale entry here would
        // answer "absent" for a key this handle wrote).
        if *self.missed.get_mut() != 0 {
            let misses = self.misses.get_mut().unwrap_or_else(|e| e.into_inner());
            misses.retain(|k| **k != *key);
        }
        Some(Out { h, extra: true })
    }

    /// Counting mode: `key` (admitted before, by this or an earlier transaction) is one
    /// count too many once this transaction commits: it removed the key, or overwrote it
    /// (its admit counted it in again). Counted out of the table's filter after redb's
    /// commit returns (`filters/commits.rs`, "Count-outs"); an abort counts out nothing.
    pub(crate) fn count_out(&mut self, key: &[u8]) {
        let h = self.out_hash(key);
        self.count_out_hash(h);
    }

    /// [`Writing::count_out`] by the hash [`Writing::admit`] or [`Writing::out_hash`] gave.
    pub(crate) fn count_out_hash(&mut self, out: Option<Out>) {
        if let Some(out) = out.filter(|_| self.counting()) {
            self.outs.push(out);
        }
    }

    /// What to count a removed `key` out by, in counting mode.
    pub(crate) fn out_hash(&self, key: &[u8]) -> Option<Out> {
        let tf = self.filter.as_ref().filter(|tf| tf.counting)?;
        Some(Out {
            h: bloomsled::hash::hash_key(key, tf.seed()),
            extra: false,
        })
    }

    /// True in counting mode: removals and overwrites are counted out.
    pub(crate) fn counting(&self) -> bool {
        self.filter.as_ref().is_some_and(|tf| tf.counting)
    }

    /// Runs `lookup`, a lookup of redb this crate adds before a mutation (counting mode);
    /// a panic in it (the user's `compare`) poisons the transaction ([`Poison`]).
    pub(crate) fn before_write<R>(&self, lookup: impl FnOnce() -> R) -> R {
        self.txn.poison.run(lookup)
    }

    /// Where a removal that outlives one call notes its count-outs ([`CountOuts`]).
    pub(crate) fn count_outs(&mut self) -> CountOuts<'_> {
        let seed = self
            .filter
            .as_ref()
            .filter(|tf| tf.counting)
            .map(|tf| tf.seed());
        CountOuts {
            seed,
            outs: &mut self.outs,
        }
    }

    fn probe(&self, key: &[u8]) -> Option<Option<Hashed>> {
        let tf = self.filter.as_ref()?;
        tf.probe_written(
            self.gen_seen,
            || self.txn.settled(),
            self.txn.shared(),
            self.txn.seq(),
            key,
        )
    }

    /// A lookup of `key` in this transaction's view: the filter, the false-positive
    /// memory (this handle's misses, then the table's), then `get` (redb), counted in the
    /// table's lookups. A miss the trusted filter passed is kept (rule 6). After a streak of
    /// hits the handle skips all of it and asks redb until a lookup finds nothing
    /// ([`Streak`]).
    #[inline]
    pub(crate) fn get<G, E>(
        &self,
        key: &[u8],
        get: impl FnOnce() -> Result<Option<G>, E>,
    ) -> Result<Option<G>, E> {
        let Some(tf) = &self.filter else {
            return get();
        };
        tf.lookups.lookup();
        let hits = self.streak.hits();
        if self.streak.bypasses(hits) {
            return self.streak.bypassed(hits, &tf.lookups, get);
        }
        let probe = self.probe(key);
        let passed = match probe {
            Some(None) => {
                self.streak.missed(hits);
                return Ok(None);
            }
            Some(Some(hashed)) => {
                if self.missed(key, hashed.h) || tf.remembered_absent(key, hashed) {
                    tf.lookups.remembered();
                    self.streak.missed(hits);
                    return Ok(None);
                }
                true
            }
            None => false,
        };
        let v = get()?;
        tf.lookups.stored(passed && v.is_none());
        match (passed, &v) {
            (true, Some(_)) => self.streak.found(hits),
            (_, None) => self.streak.missed(hits),
            (false, Some(_)) => {}
        }
        if let (Some(Some(hashed)), None) = (probe, &v) {
            let mut misses = self.misses.lock().unwrap_or_else(|e| e.into_inner());
            if misses.len() < MISSES {
                misses.push(key.into());
                self.missed.fetch_or(miss_bit(hashed.h), Relaxed);
            }
        }
        Ok(v)
    }

    /// True if this handle found `key` (of hash `h`) absent and has not written it since.
    fn missed(&self, key: &[u8], h: u64) -> bool {
        self.missed.load(Relaxed) & miss_bit(h) != 0
            && (self.misses.lock().unwrap_or_else(|e| e.into_inner()))
                .iter()
                .any(|k| **k == *key)
    }

    fn misses_mut(&mut self) -> &mut Vec<Box<[u8]>> {
        self.misses.get_mut().unwrap_or_else(|e| e.into_inner())
    }

    /// The filter, the log, the forgets and the count-outs, for a cursor that writes
    /// through this handle (which drops the handle's misses: a cursor's writes do not pass
    /// through [`Writing::admit`]).
    pub(crate) fn for_cursor(&mut self) -> ForCursor<'_> {
        self.misses_mut().clear();
        *self.missed.get_mut() = 0;
        (
            self.filter.as_deref(),
            &mut self.log,
            &mut self.pending,
            &mut self.outs,
        )
    }
}

impl Drop for Writing<'_> {
    fn drop(&mut self) {
        self.txn
            .append_log(self.kind, &self.name, &mut self.log, &mut self.outs);
        if let Some(tf) = &self.filter {
            let forgets = self.txn.forgets();
            forgets.keep(tf.clone(), std::mem::take(&mut self.pending));
            let misses = self.misses.get_mut().unwrap_or_else(|e| e.into_inner());
            forgets.keep_misses(tf, std::mem::take(misses));
        }
    }
}

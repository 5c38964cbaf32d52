//! Transactions: sled's, with every key a transaction writes sent to the filter first.
//!
//! The error and result types are sled's own (re-exported), so code that matches on
//! `TransactionError::Abort` keeps compiling. [`TransactionalTree`] and [`Transactional`]
//! are thin wrappers: each transactional insert counts the key into the filter before it is
//! staged, so a commit can never publish a key the filter denies.
//!
//! Before sled's transaction starts, each tree's dirty mark is made to cover the current
//! sequence, and the sequence is held still until the transaction ends
//! (`Persistence::hold_sequence`): sled runs the closure under a global lock that every
//! other sled write waits for, so the record cannot be written from inside it (it would wait
//! for itself). A snapshot that wants to move the sequence on waits for the transaction.
//!
//! A transaction holds the gate of each of its trees (in a fixed order, so two transactions
//! never wait on each other) for its whole run, and keeps a write log per tree: the keys it
//! counted in (at most once each, across sled's retries) and, for the last attempt, whether
//! each key existed before and after. Once sled has committed or the closure aborted, the
//! write log settles: in counting mode every key ends up counted exactly once if it is in the
//! store and zero times if not; in plain mode committed removes are counted stale. After a
//! storage error the outcome is unknown, so nothing counted in is taken back (at worst a
//! false positive).

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use sled::IVec;

pub use sled::transaction::{
    abort, ConflictableTransactionError, ConflictableTransactionResult, TransactionError,
    TransactionResult, UnabortableTransactionError,
};

/// Result of a transactional read or write: only storage errors, no abort.
pub type UnabortableTransactionResult<T> = Result<T, UnabortableTransactionError>;

use super::state::TreeState;
use super::write::Writing;
use super::{Batch, Tree};

/// What one tree's part of a transaction did to the filter.
#[derive(Default)]
struct WriteLog {
    /// Keys counted in so far, over all attempts.
    counted: HashSet<IVec>,
    /// Per key touched by the current attempt: (existed before, exists after).
    attempt: HashMap<IVec, (bool, bool)>,
}

/// One tree of a running transaction.
struct TxTree {
    state: Arc<TreeState>,
    write_log: Mutex<WriteLog>,
    /// The closure asked for a flush after the commit ([`TransactionalTree::flush`]).
    flush: AtomicBool,
}

impl TxTree {
    fn write_log(&self) -> std::sync::MutexGuard<'_, WriteLog> {
        self.write_log.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Notes that this attempt wrote `k`: whether it existed before (kept from the first
    /// write of `k` in the attempt) and whether it exists now.
    fn record(&self, k: IVec, existed: bool, exists: bool) {
        self.write_log()
            .attempt
            .entry(k)
            .or_insert((existed, exists))
            .1 = exists;
    }
}

/// The view of a [`Tree`] inside a transaction; the methods of
/// `sled::transaction::TransactionalTree`.
#[derive(Clone)]
pub struct TransactionalTree {
    inner: sled::transaction::TransactionalTree,
    ctx: Arc<TxTree>,
}

impl TransactionalTree {
    fn wrap(inner: &sled::transaction::TransactionalTree, ctx: &Arc<TxTree>) -> Self {
        TransactionalTree {
            inner: inner.clone(),
            ctx: ctx.clone(),
        }
    }

    /// Sets a key to a new value, returning the old one.
    pub fn insert<K, V>(&self, key: K, value: V) -> UnabortableTransactionResult<Option<IVec>>
    where
        K: AsRef<[u8]> + Into<IVec>,
        V: Into<IVec>,
    {
        let k = IVec::from(key.as_ref());
        if !self.ctx.write_log().counted.contains(&k) {
            // Nested in the transaction's own hold of the gate: no lock is taken here.
            let w = Writing::new(&self.ctx.state);
            w.count_in(&k);
            w.check_marked().map_err(storage)?;
            self.ctx.write_log().counted.insert(k.clone());
        }
        let old = self.inner.insert(key, value)?;
        self.ctx.record(k, old.is_some(), true);
        Ok(old)
    }

    /// Removes a key, returning the old value.
    pub fn remove<K>(&self, key: K) -> UnabortableTransactionResult<Option<IVec>>
    where
        K: AsRef<[u8]> + Into<IVec>,
    {
        let k = IVec::from(key.as_ref());
        Writing::new(&self.ctx.state)
            .check_marked()
            .map_err(storage)?;
        let old = self.inner.remove(key)?;
        self.ctx.record(k, old.is_some(), false);
        Ok(old)
    }

    /// Reads a key, seeing this transaction's own writes. Reads go to sled: a transaction
    /// must register what it read for conflict detection.
    pub fn get<K: AsRef<[u8]>>(&self, key: K) -> UnabortableTransactionResult<Option<IVec>> {
        self.inner.get(key)
    }

    /// Applies a [`Batch`] inside the transaction, operation by operation (as sled does).
    pub fn apply_batch(&self, batch: &Batch) -> UnabortableTransactionResult<()> {
        for (k, v) in &batch.ops {
            match v {
                Some(v) => {
                    self.insert(k.clone(), v.clone())?;
                }
                None => {
                    self.remove(k.clone())?;
                }
            }
        }
        Ok(())
    }

    /// Flushes the database after the transaction commits, durably: sled's flush at the
    /// commit, then (before the transaction returns) one fsync of sled's log, so a
    /// transaction that returned `Ok` survives a power cut (see [`Tree::flush`]).
    ///
    /// # Examples
    ///
    /// ```
    /// use bloomsled::transaction::TransactionResult;
    /// # let dir = tempfile::tempdir()?;
    /// let db = bloomsled::Config::new().path(dir.path()).open()?;
    /// let r: TransactionResult<()> = db.transaction(|tx| {
    ///     tx.insert(b"k", b"v")?;
    ///     tx.flush();
    ///     Ok(())
    /// });
    /// r.unwrap(); // "k" is durable from here on, even if the power is cut next
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn flush(&self) {
        self.ctx.flush.store(true, Ordering::Relaxed);
        self.inner.flush()
    }

    /// A monotonic id (see `Db::generate_id`). Call this one inside a transaction: sled
    /// deadlocks on `Db::generate_id` there.
    pub fn generate_id(&self) -> crate::error::Result<u64> {
        Ok(self.inner.generate_id()?)
    }
}

/// A bloomsled error inside a transaction, as the storage error sled's types can carry.
fn storage(e: crate::error::Error) -> UnabortableTransactionError {
    e.into()
}

/// How a transaction ended.
#[derive(Clone, Copy, PartialEq)]
enum Outcome {
    Committed,
    Aborted,
    Unknown,
}

/// The trees of one transaction: their gates held, their write logs.
struct Run<'t> {
    /// One per distinct tree, in gate order.
    holds: Vec<Writing<'t>>,
    /// The trees' sequences held still from their dirty marks to the transaction's end
    /// (see the module docs); released before the write logs settle, which may snapshot.
    sequences: Vec<std::sync::RwLockReadGuard<'t, ()>>,
    distinct: Vec<Arc<TxTree>>,
    /// One per tree as the caller listed them (a tree may appear twice).
    views: Vec<Arc<TxTree>>,
}

impl<'t> Run<'t> {
    fn new(trees: &[&'t Tree]) -> crate::error::Result<Self> {
        let id = |t: &Tree| Arc::as_ptr(&t.state) as usize;
        let mut order: Vec<&'t Tree> = trees.to_vec();
        order.sort_by_key(|t| id(t));
        order.dedup_by_key(|t| id(t));
        let holds = order.iter().map(|t| Writing::new(&t.state)).collect();
        let mut sequences = Vec::new();
        for t in &order {
            if let Some(p) = &t.state.persist {
                sequences.push(p.hold_sequence()?);
            }
        }
        let distinct: Vec<Arc<TxTree>> = order
            .iter()
            .map(|t| {
                Arc::new(TxTree {
                    state: t.state.clone(),
                    write_log: Mutex::default(),
                    flush: AtomicBool::new(false),
                })
            })
            .collect();
        let views = trees
            .iter()
            .map(|t| {
                let i = order.iter().position(|o| id(o) == id(t)).unwrap_or(0);
                distinct[i].clone()
            })
            .collect();
        Ok(Run {
            holds,
            sequences,
            distinct,
            views,
        })
    }

    /// sled is (re)running the closure: forget what the previous attempt did.
    fn new_attempt(&self) {
        for t in &self.distinct {
            t.write_log().attempt.clear();
        }
    }

    fn view(&self, i: usize, tx: &sled::transaction::TransactionalTree) -> TransactionalTree {
        TransactionalTree::wrap(tx, &self.views[i])
    }

    /// Settles every write log (see the module docs), ends the writes and, if the closure
    /// asked for a flush and the transaction committed, fsyncs sled's log (sled flushed at
    /// the commit) before the result is returned.
    fn finish<A, E>(self, result: TransactionResult<A, E>) -> TransactionResult<A, E> {
        let flush = self
            .distinct
            .iter()
            .find(|t| t.flush.load(Ordering::Relaxed));
        let persist = flush.and_then(|t| t.state.persist.as_ref().map(|_| t.state.clone()));
        self.settle(&result);
        match (result, persist) {
            (Ok(a), Some(state)) => match state.persist.as_ref().map(|p| p.sync_log()) {
                Some(Err(e)) => Err(TransactionError::Storage(e.into())),
                _ => Ok(a),
            },
            (result, _) => result,
        }
    }

    /// Settles every write log (see the module docs) and ends the writes.
    fn settle<A, E>(mut self, result: &TransactionResult<A, E>) {
        self.sequences.clear();
        let outcome = match result {
            Ok(_) => Outcome::Committed,
            Err(TransactionError::Abort(_)) => Outcome::Aborted,
            Err(TransactionError::Storage(_)) => Outcome::Unknown,
        };
        for (t, hold) in self.distinct.iter().zip(self.holds) {
            let j = std::mem::take(&mut *t.write_log());
            let mut written = 0;
            if outcome != Outcome::Unknown {
                let mut keys: HashSet<&IVec> = j.counted.iter().collect();
                if outcome == Outcome::Committed {
                    keys.extend(j.attempt.keys());
                    written = j.attempt.len() as u64;
                }
                for k in keys {
                    let counted = i32::from(j.counted.contains(k));
                    let (before, after) = match (outcome, j.attempt.get(k)) {
                        (Outcome::Committed, Some(&(b, a))) => (b, a),
                        _ => (false, false),
                    };
                    // Counted in `counted` times; the store gained `after - before`. A key
                    // the transaction removed is counted out (never in the crash journal: see
                    // `Writing::count_out`), the other surplus count-ins are taken back.
                    let removed = before && !after;
                    let surplus = counted - (i32::from(after) - i32::from(before));
                    for _ in 0..surplus - i32::from(removed) {
                        hold.undo_count_in(k);
                    }
                    if removed {
                        hold.count_out(k);
                    }
                }
            }
            hold.finish(written);
        }
    }
}

/// Types that transactions can run on: a [`Tree`], slices of trees, and tuples of up to 14
/// `&Tree`s (all from one database), as in sled.
///
/// ```
/// use bloomsled::transaction::{TransactionResult, Transactional};
/// # let db = bloomsled::Config::new().temporary(true).open()?;
/// let a = db.open_tree("a")?;
/// let b = db.open_tree("b")?;
/// let r: TransactionResult<()> = (&a, &b).transaction(|(a, b)| {
///     a.insert(b"k", b"1")?;
///     b.insert(b"k", b"2")?;
///     Ok(())
/// });
/// r.unwrap();
/// assert!(a.may_contain(b"k") && b.may_contain(b"k"));
/// # Ok::<(), bloomsled::Error>(())
/// ```
pub trait Transactional<E = ()> {
    /// What the closure receives: one [`TransactionalTree`] per tree.
    type View;

    /// Runs `f` atomically over the trees, retrying on conflict.
    fn transaction<F, A>(&self, f: F) -> TransactionResult<A, E>
    where
        F: Fn(&Self::View) -> ConflictableTransactionResult<A, E>;
}

impl<E> Transactional<E> for &Tree {
    type View = TransactionalTree;

    fn transaction<F, A>(&self, f: F) -> TransactionResult<A, E>
    where
        F: Fn(&TransactionalTree) -> ConflictableTransactionResult<A, E>,
    {
        let run = match Run::new(&[*self]) {
            Ok(run) => run,
            Err(e) => return Err(TransactionError::Storage(e.into())),
        };
        let r = sled::Transactional::transaction(&self.inner, |tx| {
            run.new_attempt();
            f(&run.view(0, tx))
        });
        run.finish(r)
    }
}

impl<E> Transactional<E> for &&Tree {
    type View = TransactionalTree;

    fn transaction<F, A>(&self, f: F) -> TransactionResult<A, E>
    where
        F: Fn(&TransactionalTree) -> ConflictableTransactionResult<A, E>,
    {
        Transactional::transaction(*self, f)
    }
}

impl<E> Transactional<E> for Tree {
    type View = TransactionalTree;

    fn transaction<F, A>(&self, f: F) -> TransactionResult<A, E>
    where
        F: Fn(&TransactionalTree) -> ConflictableTransactionResult<A, E>,
    {
        Transactional::transaction(&self, f)
    }
}

/// A transaction over any number of trees, viewed as a `Vec`.
fn transaction_over<'a, E, F, A>(
    trees: impl Iterator<Item = &'a Tree>,
    f: F,
) -> TransactionResult<A, E>
where
    F: Fn(&Vec<TransactionalTree>) -> ConflictableTransactionResult<A, E>,
{
    let trees: Vec<&Tree> = trees.collect();
    let inner: Vec<sled::Tree> = trees.iter().map(|t| t.inner.clone()).collect();
    let run = match Run::new(&trees) {
        Ok(run) => run,
        Err(e) => return Err(TransactionError::Storage(e.into())),
    };
    let r = sled::Transactional::transaction(inner.as_slice(), |txs: &Vec<_>| {
        run.new_attempt();
        let view = txs
            .iter()
            .enumerate()
            .map(|(i, tx)| run.view(i, tx))
            .collect();
        f(&view)
    });
    run.finish(r)
}

impl<E> Transactional<E> for [Tree] {
    type View = Vec<TransactionalTree>;

    fn transaction<F, A>(&self, f: F) -> TransactionResult<A, E>
    where
        F: Fn(&Vec<TransactionalTree>) -> ConflictableTransactionResult<A, E>,
    {
        transaction_over(self.iter(), f)
    }
}

impl<E> Transactional<E> for [&Tree] {
    type View = Vec<TransactionalTree>;

    fn transaction<F, A>(&self, f: F) -> TransactionResult<A, E>
    where
        F: Fn(&Vec<TransactionalTree>) -> ConflictableTransactionResult<A, E>,
    {
        transaction_over(self.iter().copied(), f)
    }
}

macro_rules! impl_transactional_tuple {
    ($($idx:tt $T:ident),+) => {
        impl<E> Transactional<E> for ($(impl_transactional_tuple!(@ref $T),)+) {
            type View = ($(impl_transactional_tuple!(@view $T),)+);

            fn transaction<F, A>(&self, f: F) -> TransactionResult<A, E>
            where
                F: Fn(&Self::View) -> ConflictableTransactionResult<A, E>,
            {
                let inner = ($(&self.$idx.inner,)+);
                let run = match Run::new(&[$(self.$idx,)+]) {
                    Ok(run) => run,
                    Err(e) => return Err(TransactionError::Storage(e.into())),
                };
                let r = sled::Transactional::transaction(&inner, |txs| {
                    run.new_attempt();
                    let view = ($(run.view($idx, &txs.$idx),)+);
                    f(&view)
                });
                run.finish(r)
            }
        }
    };
    (@ref $T:ident) => { &Tree };
    (@view $T:ident) => { TransactionalTree };
}

impl_transactional_tuple!(0 A);
impl_transactional_tuple!(0 A, 1 B);
impl_transactional_tuple!(0 A, 1 B, 2 C);
impl_transactional_tuple!(0 A, 1 B, 2 C, 3 D);
impl_transactional_tuple!(0 A, 1 B, 2 C, 3 D, 4 F);
impl_transactional_tuple!(0 A, 1 B, 2 C, 3 D, 4 F, 5 G);
impl_transactional_tuple!(0 A, 1 B, 2 C, 3 D, 4 F, 5 G, 6 H);
impl_transactional_tuple!(0 A, 1 B, 2 C, 3 D, 4 F, 5 G, 6 H, 7 I);
impl_transactional_tuple!(0 A, 1 B, 2 C, 3 D, 4 F, 5 G, 6 H, 7 I, 8 J);
impl_transactional_tuple!(0 A, 1 B, 2 C, 3 D, 4 F, 5 G, 6 H, 7 I, 8 J, 9 K);
impl_transactional_tuple!(0 A, 1 B, 2 C, 3 D, 4 F, 5 G, 6 H, 7 I, 8 J, 9 K, 10 L);
impl_transactional_tuple!(0 A, 1 B, 2 C, 3 D, 4 F, 5 G, 6 H, 7 I, 8 J, 9 K, 10 L, 11 M);
impl_transactional_tuple!(0 A, 1 B, 2 C, 3 D, 4 F, 5 G, 6 H, 7 I, 8 J, 9 K, 10 L, 11 M, 12 N);
impl_transactional_tuple!(0 A, 1 B, 2 C, 3 D, 4 F, 5 G, 6 H, 7 I, 8 J, 9 K, 10 L, 11 M, 12 N, 13 O);

//! Transactions: sled's, with every key a transaction writes sent to the filter first.
//!
//! The error and result types are sled's own (re-exported), so code that matches on
//! `TransactionError::Abort` keeps compiling. [`TransactionalTree`] and [`Transactional`]
//! are thin wrappers: each transactional insert sets the key's filter bits before it is
//! staged, so a commit can never publish a key the filter denies. A closure that sled re-runs
//! after a conflict sets the bits again, which costs at most false positives.

use std::sync::Arc;

use sled::IVec;

pub use sled::transaction::{
    abort, ConflictableTransactionError, ConflictableTransactionResult, TransactionError,
    TransactionResult, UnabortableTransactionError,
};

/// Result of a transactional read or write: only storage errors, no abort.
pub type UnabortableTransactionResult<T> = Result<T, UnabortableTransactionError>;

use super::tree::TreeShared;
use super::{Batch, Tree};

/// The view of a [`Tree`] inside a transaction; the methods of
/// `sled::transaction::TransactionalTree`.
#[derive(Clone)]
pub struct TransactionalTree {
    inner: sled::transaction::TransactionalTree,
    shared: Arc<TreeShared>,
}

impl TransactionalTree {
    fn wrap(inner: &sled::transaction::TransactionalTree, tree: &Tree) -> Self {
        TransactionalTree {
            inner: inner.clone(),
            shared: tree.shared.clone(),
        }
    }

    /// Sets a key to a new value, returning the old one.
    pub fn insert<K, V>(&self, key: K, value: V) -> UnabortableTransactionResult<Option<IVec>>
    where
        K: AsRef<[u8]> + Into<IVec>,
        V: Into<IVec>,
    {
        admit(&self.shared, key.as_ref())?;
        self.inner.insert(key, value)
    }

    /// Removes a key, returning the old value.
    pub fn remove<K>(&self, key: K) -> UnabortableTransactionResult<Option<IVec>>
    where
        K: AsRef<[u8]> + Into<IVec>,
    {
        self.inner.remove(key)
    }

    /// Reads a key, seeing this transaction's own writes. Reads go to sled: a transaction
    /// must register what it read for conflict detection.
    pub fn get<K: AsRef<[u8]>>(&self, key: K) -> UnabortableTransactionResult<Option<IVec>> {
        self.inner.get(key)
    }

    /// Applies a [`Batch`] inside the transaction.
    pub fn apply_batch(&self, batch: &Batch) -> UnabortableTransactionResult<()> {
        for key in &batch.inserted {
            self.shared.filter.insert(key);
        }
        self.shared.before_write().map_err(storage)?;
        self.inner.apply_batch(&batch.inner)
    }

    /// Flushes the database after the transaction commits.
    pub fn flush(&self) {
        self.inner.flush()
    }

    /// A monotonic id (see `Db::generate_id`).
    pub fn generate_id(&self) -> sled::Result<u64> {
        self.inner.generate_id()
    }
}

/// A bloomsled error inside a transaction, as the storage error sled's types can carry.
fn storage(e: crate::Error) -> UnabortableTransactionError {
    UnabortableTransactionError::Storage(match e {
        crate::Error::Sled(e) => e,
        crate::Error::Io(e) => sled::Error::Io(e),
        other => sled::Error::Unsupported(other.to_string()),
    })
}

fn admit(shared: &TreeShared, key: &[u8]) -> UnabortableTransactionResult<()> {
    shared.admit(key).map_err(storage)
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
        sled::Transactional::transaction(&self.inner, |tx| f(&TransactionalTree::wrap(tx, self)))
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
    trees: impl Iterator<Item = &'a Tree> + Clone,
    f: F,
) -> TransactionResult<A, E>
where
    F: Fn(&Vec<TransactionalTree>) -> ConflictableTransactionResult<A, E>,
{
    let inner: Vec<sled::Tree> = trees.clone().map(|t| t.inner.clone()).collect();
    sled::Transactional::transaction(inner.as_slice(), |txs: &Vec<_>| {
        let view = txs
            .iter()
            .zip(trees.clone())
            .map(|(tx, t)| TransactionalTree::wrap(tx, t))
            .collect();
        f(&view)
    })
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
                sled::Transactional::transaction(&inner, |txs| {
                    let view = ($(TransactionalTree::wrap(&txs.$idx, self.$idx),)+);
                    f(&view)
                })
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

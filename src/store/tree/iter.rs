//! `Iter`: sled's tree iterator, yielding bloomsled's [`Result`].

use std::fmt;

use sled::IVec;

use crate::error::{Error, Result};

/// A double-ended iterator over a tree's entries in key order, from [`crate::Tree::iter`],
/// [`crate::Tree::range`] and [`crate::Tree::scan_prefix`]: `sled::Iter` with its items'
/// errors as [`crate::Error`], so `?` and `match` work as on every other bloomsled result.
///
/// Iteration reads the store, never the filter.
///
/// ```
/// # let db = bloomsled::Config::new().temporary(true).open()?;
/// for k in ["a", "b", "c"] {
///     db.insert(k, k)?;
/// }
/// let keys: Vec<_> = db.iter().keys().rev().collect::<bloomsled::Result<_>>()?;
/// assert_eq!(keys, ["c", "b", "a"]);
/// let (k, v) = db.range("b"..).next().unwrap()?;
/// assert_eq!((&*k, &*v), (&b"b"[..], &b"b"[..]));
/// # Ok::<(), bloomsled::Error>(())
/// ```
pub struct Iter {
    inner: sled::Iter,
}

impl Iter {
    pub(crate) fn new(inner: sled::Iter) -> Self {
        Iter { inner }
    }

    /// The keys alone, in the same order (sled's `Iter::keys`).
    pub fn keys(self) -> impl DoubleEndedIterator<Item = Result<IVec>> + Send + Sync {
        self.map(|r| r.map(|(k, _)| k))
    }

    /// The values alone, in key order (sled's `Iter::values`).
    pub fn values(self) -> impl DoubleEndedIterator<Item = Result<IVec>> + Send + Sync {
        self.map(|r| r.map(|(_, v)| v))
    }
}

impl Iterator for Iter {
    type Item = Result<(IVec, IVec)>;

    fn next(&mut self) -> Option<Self::Item> {
        self.inner.next().map(|r| r.map_err(Error::from))
    }

    fn last(self) -> Option<Self::Item> {
        self.inner.last().map(|r| r.map_err(Error::from))
    }
}

impl DoubleEndedIterator for Iter {
    fn next_back(&mut self) -> Option<Self::Item> {
        self.inner.next_back().map(|r| r.map_err(Error::from))
    }
}

impl fmt::Debug for Iter {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Iter").finish_non_exhaustive()
    }
}

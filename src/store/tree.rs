//! `Tree`: a sled tree with its filter in front. Its methods are grouped by job in the
//! files of `tree/`: writes, ordered reads, statistics, snapshots, verification, rebuilds;
//! with the types its methods return (`Batch`, `Iter`, `Subscriber`).

pub(super) mod batch;
pub(super) mod iter;
mod order;
mod rebuild;
mod snapshot;
mod stats;
pub(super) mod subscriber;
mod verify;
mod write;

use std::fmt;
use std::sync::Arc;

use sled::IVec;

use super::filters::Filters;
use super::fp_memory::Hashed;
use super::state::TreeState;
use crate::error::{Error, Result};
use iter::Iter;

pub use sled::CompareAndSwapError;

/// The result of [`Tree::compare_and_swap`]: the outer error is a storage failure, the
/// inner one a lost race (the current value is returned).
pub type CompareAndSwapResult = Result<std::result::Result<(), CompareAndSwapError>>;

/// A key-value tree with the API of `sled::Tree`, answering lookups of absent keys from
/// its Bloom filter without touching the store.
///
/// Cheap to clone (two `Arc`s), `Send + Sync`. Every method has sled's signature, except
/// that errors are [`crate::Error`]. Writes go to the filter first, then to sled.
///
/// ```
/// let db = bloomsled::Config::new().temporary(true).open()?;
/// let tree = db.open_tree("users")?;
/// assert_eq!(tree.insert(b"alice", b"1".to_vec())?, None);
/// assert_eq!(tree.get(b"alice")?.as_deref(), Some(&b"1"[..]));
/// assert_eq!(tree.get(b"bob")?, None); // answered by the filter
/// # Ok::<(), bloomsled::Error>(())
/// ```
#[derive(Clone)]
pub struct Tree {
    pub(in crate::store) inner: sled::Tree,
    pub(in crate::store) state: Arc<TreeState>,
}

impl fmt::Debug for Tree {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Tree")
            .field("name", &String::from_utf8_lossy(&self.inner.name()))
            .field("mode", &self.state.mode)
            .finish()
    }
}

/// The store's front door for the layer above (windows): the filters' validated-read
/// protocol, and [`Tree::get_passed`] / [`Tree::contains_passed`] for the reads a filter
/// lets through. Nothing above the store reads a `Tree`'s fields.
impl Tree {
    /// The tree's filters: [`Filters::probe_racy`], [`Filters::pinned`],
    /// [`Filters::still`] and [`Filters::contains_many`] read them with the same validation
    /// against a concurrent swap that the tree's own lookups use.
    #[inline(always)]
    pub(crate) fn filters(&self) -> &Filters {
        &self.state.filters
    }
}

/// Keys a batch call ([`Tree::get_many`], [`Tree::contains_many`], a window's) probes
/// before it reads the store for those the filter passed: enough for the batched probe to
/// overlap their cache misses, few enough that their filter lines do not push sled's cached
/// nodes out before its reads. Probed 1,024 at a time, `get_many` of present keys read 1.09× sled's
/// own `get`s; in runs of 64, 0.99–1.01× (`get` one by one: 1.05–1.06×).
pub(crate) const RUN: usize = 64;

impl Tree {
    pub(crate) fn new(inner: sled::Tree, state: Arc<TreeState>) -> Self {
        Tree { inner, state }
    }

    /// Retrieves a value; an absent key the filter rejects returns without a store access.
    ///
    /// # Examples
    ///
    /// ```
    /// # let db = bloomsled::Config::new().temporary(true).open()?;
    /// db.insert(&[0], vec![0])?;
    /// assert_eq!(db.get(&[0]), Ok(Some(sled::IVec::from(vec![0]))));
    /// assert_eq!(db.get(&[1]), Ok(None));
    /// # Ok::<(), bloomsled::Error>(())
    /// ```
    #[inline(always)]
    pub fn get<K: AsRef<[u8]>>(&self, key: K) -> Result<Option<IVec>> {
        let key = key.as_ref();
        let Some(hashed) = self.state.probe(key) else {
            return Ok(None);
        };
        // Converted here, not in the call: the call's result (returned through memory) is
        // then a temporary of its own, and the value `get` returns is built in the caller's
        // registers from it or from the constant above. Returned by the call itself, the
        // absent answer would be one byte written to that memory, which a caller that moves
        // the value (`.unwrap()`, `?`) then reads back with wide loads that wait for the
        // byte's store to retire (a store-forwarding stall: ~4 ns of an absent `get`).
        self.get_from_store(key, Some(hashed)).map_err(Error::from)
    }

    /// The store's part of [`Tree::get`], out of line: the filter's part stays small enough
    /// to inline into the caller's loop, and a rejected key pays no prologue for sled's call.
    #[inline(never)]
    pub(super) fn get_from_store(
        &self,
        key: &[u8],
        hashed: Option<Hashed>,
    ) -> sled::Result<Option<IVec>> {
        let Some(ticket) = self.state.recall(key, hashed) else {
            return Ok(None); // a remembered false positive
        };
        let v = self.inner.get(key)?;
        if v.is_none() {
            self.state.store_missed(ticket, key);
        }
        Ok(v)
    }

    /// [`Tree::get`] of a key the caller's probe of this tree's filter passed: the
    /// false-positive memory, then the store (a window's lookup of one generation). The
    /// second value is true if the store was read and missed (a false positive).
    #[inline]
    pub(crate) fn get_passed(&self, key: &[u8]) -> Result<(Option<IVec>, bool)> {
        let Some(ticket) = self.state.recall(key, None) else {
            return Ok((None, false));
        };
        let v = self.inner.get(key)?;
        if v.is_none() {
            self.state.filters.memory().record(ticket, key);
            return Ok((None, true));
        }
        Ok((v, false))
    }

    /// [`Tree::get_passed`] for [`Tree::contains_key`]: whether the tree holds `key`, and
    /// whether the store was read and missed.
    #[inline]
    pub(crate) fn contains_passed(&self, key: &[u8]) -> Result<(bool, bool)> {
        let Some(ticket) = self.state.recall(key, None) else {
            return Ok((false, false));
        };
        if self.inner.contains_key(key)? {
            return Ok((true, false));
        }
        self.state.filters.memory().record(ticket, key);
        Ok((false, true))
    }

    /// True if the tree holds `key`; filter first, then the store.
    ///
    /// # Examples
    ///
    /// ```
    /// # let db = bloomsled::Config::new().temporary(true).open()?;
    /// db.insert("k", "v")?;
    /// assert!(db.contains_key("k")?);
    /// assert!(!db.contains_key("other")?);
    /// # Ok::<(), bloomsled::Error>(())
    /// ```
    #[inline(always)]
    pub fn contains_key<K: AsRef<[u8]>>(&self, key: K) -> Result<bool> {
        let key = key.as_ref();
        let Some(hashed) = self.state.probe(key) else {
            return Ok(false);
        };
        self.contains_in_store(key, Some(hashed))
    }

    /// The store's part of [`Tree::contains_key`] (see [`Tree::get_from_store`]).
    #[inline(never)]
    pub(super) fn contains_in_store(&self, key: &[u8], hashed: Option<Hashed>) -> Result<bool> {
        let Some(ticket) = self.state.recall(key, hashed) else {
            return Ok(false); // a remembered false positive
        };
        let found = self.inner.contains_key(key)?;
        if !found {
            self.state.store_missed(ticket, key);
        }
        Ok(found)
    }

    /// The filter's answer alone, with no store access: `false` means the key is certainly
    /// absent, `true` that it may be present.
    ///
    /// # Examples
    ///
    /// ```
    /// # let db = bloomsled::Config::new().temporary(true).open()?;
    /// db.insert("seen", "")?;
    /// assert!(db.may_contain("seen"));
    /// # Ok::<(), bloomsled::Error>(())
    /// ```
    #[inline]
    pub fn may_contain<K: AsRef<[u8]>>(&self, key: K) -> bool {
        self.state.filters.contains(key.as_ref())
    }

    /// The store's answer alone: sled's own `get`, without asking the filter first and
    /// without counting in [`Stats`](crate::Stats). Read-only.
    ///
    /// For checking the filter (every key this finds, [`Tree::may_contain`] must accept)
    /// and for measuring what it saves: `get` against this on the same store.
    ///
    /// # Examples
    ///
    /// ```
    /// # let db = bloomsled::Config::new().temporary(true).open()?;
    /// db.insert("k", "v")?;
    /// assert_eq!(db.get_unfiltered("k")?, db.get("k")?);
    /// assert_eq!(db.get_unfiltered("other")?, None);
    /// # Ok::<(), bloomsled::Error>(())
    /// ```
    #[inline]
    pub fn get_unfiltered<K: AsRef<[u8]>>(&self, key: K) -> Result<Option<IVec>> {
        Ok(self.inner.get(key)?)
    }

    /// `contains_key` for many keys: batched, prefetched filter probes, then the store only
    /// for the keys the filter could not rule out (64 keys at a time).
    ///
    /// # Examples
    ///
    /// ```
    /// # let db = bloomsled::Config::new().temporary(true).open()?;
    /// db.insert("a", "1")?;
    /// assert_eq!(db.contains_many(&["a", "b"])?, vec![true, false]);
    /// # Ok::<(), bloomsled::Error>(())
    /// ```
    pub fn contains_many<K: AsRef<[u8]>>(&self, keys: &[K]) -> Result<Vec<bool>> {
        let mut out = vec![false; keys.len()];
        self.batch(keys, |i, hashed| {
            out[i] = self.contains_in_store(keys[i].as_ref(), Some(hashed))?;
            Ok(())
        })?;
        Ok(out)
    }

    /// `get` for many keys, with the batched filter probe of [`Tree::contains_many`].
    ///
    /// # Examples
    ///
    /// ```
    /// # let db = bloomsled::Config::new().temporary(true).open()?;
    /// db.insert("a", "1")?;
    /// let got = db.get_many(&["a", "b"])?;
    /// assert_eq!(got[0].as_deref(), Some(&b"1"[..]));
    /// assert_eq!(got[1], None);
    /// # Ok::<(), bloomsled::Error>(())
    /// ```
    pub fn get_many<K: AsRef<[u8]>>(&self, keys: &[K]) -> Result<Vec<Option<IVec>>> {
        let mut out = vec![None; keys.len()];
        self.batch(keys, |i, hashed| {
            out[i] = self.get_from_store(keys[i].as_ref(), Some(hashed))?;
            Ok(())
        })?;
        Ok(out)
    }

    /// A batch call's lookups, [`RUN`] keys at a time: the run's filter probe, batched and
    /// counted, then `read(i, hashed)` for each key `keys[i]` it passed, in order, with the
    /// next passed key's hash taken and its false-positive memory set prefetched before the
    /// store is read for this one.
    fn batch<K: AsRef<[u8]>>(
        &self,
        keys: &[K],
        mut read: impl FnMut(usize, Hashed) -> Result<()>,
    ) -> Result<()> {
        let memory = self.state.filters.memory();
        let mut maybe = [false; RUN];
        for (r, run) in keys.chunks(RUN).enumerate() {
            let maybe = &mut maybe[..run.len()];
            self.state.probe_many(run, maybe);
            self.count_batch(maybe);
            let mut passed = maybe
                .iter()
                .enumerate()
                .filter(|&(_, &m)| m)
                .map(|(i, _)| (r * RUN + i, memory.hash_prefetched(run[i].as_ref())));
            let mut next = passed.next();
            while let Some((i, this)) = next {
                next = passed.next(); // hashed and prefetched before this key's store read
                read(i, this)?;
            }
        }
        Ok(())
    }

    pub(super) fn count_batch(&self, maybe: &[bool]) {
        let negatives = maybe.iter().filter(|m| !**m).count() as u64;
        self.state
            .counters
            .lookups(negatives, maybe.len() as u64 - negatives);
    }
}

impl IntoIterator for &Tree {
    type Item = Result<(IVec, IVec)>;
    type IntoIter = Iter;

    fn into_iter(self) -> Iter {
        self.iter()
    }
}

//! Lookups of a window: every live generation's filter asked in one validated pass, the
//! stores of the generations whose filter says "maybe" read newest first.

use sled::IVec;

use super::handle::Window;
use super::ring::{Gen, Ring};
use crate::clock::generations::Generations;
use crate::error::Result;
use crate::filter::Filter;
use crate::store::{read_any_filter, BATCH_RUN as RUN};

/// A filter's answer for `key`, hashed `h` under `seed` (a filter with another seed hashes
/// the key itself).
#[inline(always)]
fn probe(f: &Filter, key: &[u8], seed: u64, h: u64) -> bool {
    if f.seed() == seed {
        f.contains_hash(h)
    } else {
        f.contains(key)
    }
}

/// The filter states one lookup read, one per live generation: inline for up to 16
/// generations, on the heap beyond.
struct States {
    inline: [u64; 16],
    heap: Vec<u64>,
    n: usize,
}

impl States {
    #[inline(always)]
    fn new(n: usize) -> States {
        States {
            inline: [0; 16],
            heap: if n > 16 { vec![0; n] } else { Vec::new() },
            n,
        }
    }

    #[inline(always)]
    fn slots(&mut self) -> &mut [u64] {
        if self.n > 16 {
            &mut self.heap
        } else {
            &mut self.inline[..self.n]
        }
    }

    /// True if no generation's filter was swapped since its state was read.
    #[inline(always)]
    fn unchanged(&mut self, live: &[Gen]) -> bool {
        self.slots()
            .iter()
            .zip(live)
            .all(|(s, g)| g.tree.filters().still(*s))
    }
}

impl Window {
    /// Asks the live generations' filters about `key`, newest first, and calls `visit` on
    /// each generation whose filter says "maybe" until it returns `Some`. `Ok(None)`: no
    /// live generation holds the key.
    ///
    /// The key is hashed once (with the ring's seed; a filter with another seed hashes it
    /// itself); a key no filter holds is answered by one validated pass over every filter
    /// ([`read_any_filter`]); otherwise the filters are read one by one as
    /// [`crate::store`]'s lookups read them: an "absent" answer counts only if no rebuild
    /// swapped the filter meanwhile (else the whole lookup runs again).
    #[inline(always)]
    pub(super) fn lookup<R>(
        ring: &Ring,
        generations: &Generations,
        newest: u64,
        key: &[u8],
        visit: impl FnMut(&Gen) -> Result<Option<R>>,
    ) -> Result<Option<R>> {
        let h = ring.hasher.hash(key);
        Self::lookup_hashed(ring, generations, newest, key, h, true, visit)
    }

    /// [`Window::lookup`] of a key hashed `h` with the ring's seed. With `any_first`, a key
    /// no filter holds is answered by one validated pass first; a batch, which has just
    /// seen some filter pass the key, leaves it out.
    #[inline(always)]
    fn lookup_hashed<R>(
        ring: &Ring,
        generations: &Generations,
        newest: u64,
        key: &[u8],
        h: u64,
        any_first: bool,
        mut visit: impl FnMut(&Gen) -> Result<Option<R>>,
    ) -> Result<Option<R>> {
        let live = Self::live(ring, generations, newest);
        let seed = ring.hasher.seed();
        // Most lookups of a window are of keys no generation holds: one validated probe of
        // every filter at once answers those (see `Window::may_contain`).
        if any_first && read_any_filter(Self::filters(live), seed, h) == Some(false) {
            return Ok(None);
        }
        let mut states = States::new(live.len());
        loop {
            for (s, g) in states.slots().iter_mut().zip(live) {
                let maybe;
                (*s, maybe) = g.tree.filters().probe_racy(|f| probe(f, key, seed, h));
                if maybe {
                    if let Some(r) = visit(g)? {
                        return Ok(Some(r));
                    }
                }
            }
            if states.unchanged(live) {
                return Ok(None);
            }
        }
    }

    /// The newest value of `key` in the live generations. Filters are asked newest first;
    /// a generation's store is read only where its filter says "maybe".
    ///
    /// ```
    /// # use std::time::Duration;
    /// # let db = bloomsled::Config::new().temporary(true).open()?;
    /// # let w = db.open_window("w", bloomsled::window::WindowConfig::new(Duration::from_secs(60), 6))?;
    /// w.insert("k", "1")?;
    /// assert_eq!(w.get("k")?.as_deref(), Some(&b"1"[..]));
    /// assert_eq!(w.get("other")?, None);
    /// # Ok::<(), bloomsled::Error>(())
    /// ```
    #[inline]
    pub fn get<K: AsRef<[u8]>>(&self, key: K) -> Result<Option<IVec>> {
        let key = key.as_ref();
        let (ring, newest) = self.ring_for_lookup();
        self.state.counters.lookup();
        let h = ring.hasher.hash(key);
        self.found(&ring, newest, key, h, false)
    }

    /// True if a live generation holds `key`; filters first, newest first.
    ///
    /// ```
    /// # use std::time::Duration;
    /// # let db = bloomsled::Config::new().temporary(true).open()?;
    /// # let w = db.open_window("w", bloomsled::window::WindowConfig::new(Duration::from_secs(60), 6))?;
    /// w.insert("k", "")?;
    /// assert!(w.contains_key("k")?);
    /// # Ok::<(), bloomsled::Error>(())
    /// ```
    #[inline]
    pub fn contains_key<K: AsRef<[u8]>>(&self, key: K) -> Result<bool> {
        let key = key.as_ref();
        let (ring, newest) = self.ring_for_lookup();
        self.state.counters.lookup();
        let c = &self.state.counters;
        let mut passed = false;
        let found = Self::lookup(&ring, &self.state.generations, newest, key, |g| {
            if !std::mem::replace(&mut passed, true) {
                c.passed_on();
            }
            let (found, missed) = g.tree.contains_passed(key)?;
            if found {
                return Ok(Some(()));
            }
            if missed {
                c.false_positive();
            }
            Ok(None)
        })?;
        Ok(found.is_some())
    }

    /// The filters' answer alone, with no store access: `false` means no live generation
    /// holds `key`.
    ///
    /// ```
    /// # use std::time::Duration;
    /// # let db = bloomsled::Config::new().temporary(true).open()?;
    /// # let w = db.open_window("w", bloomsled::window::WindowConfig::new(Duration::from_secs(60), 6))?;
    /// w.insert("k", "")?;
    /// assert!(w.may_contain("k"));
    /// # Ok::<(), bloomsled::Error>(())
    /// ```
    #[inline]
    pub fn may_contain<K: AsRef<[u8]>>(&self, key: K) -> bool {
        let key = key.as_ref();
        let (ring, newest) = self.ring_for_lookup();
        let live = Self::live(&ring, &self.state.generations, newest);
        let (seed, h) = (ring.hasher.seed(), ring.hasher.hash(key));
        // Every generation's filter probed in one call: the key's draws computed once, each
        // filter's block tested with no branch on what another's held, so the blocks' loads
        // overlap; validated against filter swaps like a tree's lookup.
        if let Some(any) = read_any_filter(Self::filters(live), seed, h) {
            return any;
        }
        // Filters that cannot share one call (another seed or `k`): one at a time.
        let mut states = States::new(live.len());
        loop {
            // Every generation probed, the answers or-ed: no branch on what a probe loads,
            // so the probes' cache misses overlap (see `store::filters`).
            let mut any = false;
            for (s, g) in states.slots().iter_mut().zip(live) {
                let maybe;
                (*s, maybe) = g.tree.filters().probe_racy(|f| probe(f, key, seed, h));
                any |= maybe;
            }
            if any || states.unchanged(live) {
                return any;
            }
        }
    }

    /// The filters of `live`, for [`read_any_filter`].
    #[inline(always)]
    fn filters(live: &[Gen]) -> impl Iterator<Item = &crate::store::Filters> + Clone {
        live.iter().map(|g| g.tree.filters())
    }

    /// The live generations of `ring` when the newest is `newest`, newest first.
    #[inline(always)]
    pub(super) fn live<'r>(ring: &'r Ring, generations: &Generations, newest: u64) -> &'r [Gen] {
        if newest == ring.newest {
            return &ring.gens; // a ring holds the live generations of its newest
        }
        // Expired generations, if any (a rotation that failed), are the oldest: at the end.
        let n = ring
            .gens
            .iter()
            .take_while(|g| !generations.is_expired(g.index, newest))
            .count();
        &ring.gens[..n]
    }

    /// The filters' answer for `keys` into `out`, with their hashes under the ring's seed
    /// into `hashes` (both as long as `keys`): one pass that hashes each key once and probes
    /// every live generation's filter, their blocks prefetched together.
    fn probe_into<K: AsRef<[u8]>>(
        ring: &Ring,
        live: &[Gen],
        keys: &[K],
        hashes: &mut [u64],
        out: &mut [bool],
    ) {
        if live.is_empty() {
            return out.fill(false);
        }
        let seed = ring.hasher.seed();
        for (h, k) in hashes.iter_mut().zip(keys) {
            *h = ring.hasher.hash(k.as_ref());
        }
        loop {
            let pinned: Vec<(u64, Option<&Filter>)> =
                live.iter().map(|g| g.tree.filters().pinned()).collect();
            let filters: Option<Vec<&Filter>> = pinned
                .iter()
                .map(|(_, f)| f.filter(|f| f.seed() == seed))
                .collect();
            let Some(filters) = filters else {
                // Mixed seeds (a generation reopened with another seed): one pass each.
                out.fill(false);
                for g in live {
                    let maybe = g.tree.filters().contains_many(keys);
                    out.iter_mut().zip(maybe).for_each(|(o, m)| *o |= m);
                }
                return;
            };
            Filter::contains_any_hash_many(&filters, hashes, out);
            let unchanged = live
                .iter()
                .zip(&pinned)
                .all(|(g, (s, _))| g.tree.filters().still(*s));
            if unchanged || out.iter().all(|&m| m) {
                return;
            }
        }
    }

    /// A batch call's lookups, [`RUN`] keys at a time (as a tree's batches): the run's
    /// filter probe, batched, then `read` for each key of the run in order, with its hash
    /// and whether some filter passed it. A run's filter blocks are still cached when its
    /// keys' lookups probe them again, and no more of them arrive than the store reads
    /// between can keep beside them.
    fn batch<K: AsRef<[u8]>>(
        &self,
        ring: &Ring,
        newest: u64,
        keys: &[K],
        mut read: impl FnMut(&[u8], u64, bool) -> Result<()>,
    ) -> Result<()> {
        let live = Self::live(ring, &self.state.generations, newest);
        let (mut hashes, mut maybe) = ([0u64; RUN], [false; RUN]);
        for run in keys.chunks(RUN) {
            let (hashes, maybe) = (&mut hashes[..run.len()], &mut maybe[..run.len()]);
            Self::probe_into(ring, live, run, hashes, maybe);
            self.count_batch(maybe);
            for ((key, &h), &m) in run.iter().zip(&*hashes).zip(&*maybe) {
                read(key.as_ref(), h, m)?;
            }
        }
        Ok(())
    }

    /// [`Window::may_contain`] for many keys, batched: each key hashed once, the blocks of
    /// every live generation's filter prefetched together, no store access.
    ///
    /// ```
    /// # use std::time::Duration;
    /// # let db = bloomsled::Config::new().temporary(true).open()?;
    /// # let w = db.open_window("w", bloomsled::window::WindowConfig::new(Duration::from_secs(60), 6))?;
    /// w.insert("a", "")?;
    /// assert_eq!(w.may_contain_many(&["a"]), vec![true]);
    /// # Ok::<(), bloomsled::Error>(())
    /// ```
    pub fn may_contain_many<K: AsRef<[u8]>>(&self, keys: &[K]) -> Vec<bool> {
        let (ring, newest) = self.ring_for_lookup();
        let live = Self::live(&ring, &self.state.generations, newest);
        // No store read follows: the whole batch in one pipelined pass.
        let (mut hashes, mut out) = (vec![0; keys.len()], vec![true; keys.len()]);
        Self::probe_into(&ring, live, keys, &mut hashes, &mut out);
        out
    }

    /// `contains_key` for many keys: one batched probe of every generation's filter (see
    /// [`Window::may_contain`]), then the stores only for the keys some filter passed.
    ///
    /// ```
    /// # use std::time::Duration;
    /// # let db = bloomsled::Config::new().temporary(true).open()?;
    /// # let w = db.open_window("w", bloomsled::window::WindowConfig::new(Duration::from_secs(60), 6))?;
    /// w.insert("a", "")?;
    /// assert_eq!(w.contains_many(&["a", "b"])?, vec![true, false]);
    /// # Ok::<(), bloomsled::Error>(())
    /// ```
    pub fn contains_many<K: AsRef<[u8]>>(&self, keys: &[K]) -> Result<Vec<bool>> {
        let (ring, newest) = self.ring_for_lookup();
        let mut out = Vec::with_capacity(keys.len());
        self.batch(&ring, newest, keys, |key, h, maybe| {
            out.push(maybe && self.found(&ring, newest, key, h, true)?.is_some());
            Ok(())
        })?;
        Ok(out)
    }

    /// `get` for many keys, with the batched probe of [`Window::contains_many`].
    ///
    /// ```
    /// # use std::time::Duration;
    /// # let db = bloomsled::Config::new().temporary(true).open()?;
    /// # let w = db.open_window("w", bloomsled::window::WindowConfig::new(Duration::from_secs(60), 6))?;
    /// w.insert("a", "1")?;
    /// let got = w.get_many(&["a", "b"])?;
    /// assert_eq!((got[0].as_deref(), &got[1]), (Some(&b"1"[..]), &None));
    /// # Ok::<(), bloomsled::Error>(())
    /// ```
    pub fn get_many<K: AsRef<[u8]>>(&self, keys: &[K]) -> Result<Vec<Option<IVec>>> {
        let (ring, newest) = self.ring_for_lookup();
        let mut out = Vec::with_capacity(keys.len());
        self.batch(&ring, newest, keys, |key, h, maybe| {
            out.push(match maybe {
                true => self.found(&ring, newest, key, h, true)?,
                false => None,
            });
            Ok(())
        })?;
        Ok(out)
    }

    fn count_batch(&self, maybe: &[bool]) {
        let passed = maybe.iter().filter(|m| **m).count() as u64;
        self.state
            .counters
            .lookups(maybe.len() as u64 - passed, passed);
    }

    /// The newest value of `key` (hashed `h` with the ring's seed) in the live generations,
    /// counted as one lookup's store reads; `batched`: a batch's key, which the batch counted
    /// as passed on and some filter has just passed.
    fn found(
        &self,
        ring: &Ring,
        newest: u64,
        key: &[u8],
        h: u64,
        batched: bool,
    ) -> Result<Option<IVec>> {
        let c = &self.state.counters;
        let mut passed = batched;
        let generations = &self.state.generations;
        Self::lookup_hashed(ring, generations, newest, key, h, !batched, |g| {
            if !std::mem::replace(&mut passed, true) {
                c.passed_on();
            }
            // The generation's false-positive memory first (its writes forget the key).
            let (v, missed) = g.tree.get_passed(key)?;
            if missed {
                c.false_positive();
            }
            Ok(v)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::clock::ManualClock;
    use crate::store::{Config, TreeConfig};
    use crate::window::WindowConfig;
    use std::time::Duration;

    const W: u64 = 1_000;
    const T0: u64 = 1_700_000_000_000;

    fn key(g: u64, i: u64) -> Vec<u8> {
        format!("https://example.com/g{g}/{i}").into_bytes()
    }

    /// A batch (runs of [`RUN`] keys, the last one short) answers and counts exactly as its
    /// keys one by one: present keys of every generation with their own values, absent ones,
    /// and the false positives of small filters, at the same places in the output.
    #[test]
    fn batches_answer_and_count_as_their_keys_one_by_one() {
        let clock = ManualClock::new(T0);
        // No false-positive memory: it would answer the second pass's false positives.
        let db = Config::new()
            .temporary(true)
            .false_positive_memory(0)
            .open()
            .unwrap();
        let config = WindowConfig::new(Duration::from_millis(3 * W), 3)
            .tree_config(TreeConfig::new().expected_items(100).bits_per_key(4.0))
            .clock(clock.clone());
        let w = db.open_window("batches", config).unwrap();
        for g in 0..3 {
            clock.set(T0 + g * W);
            for i in 0..100 {
                w.insert(key(g, i), key(g, i)).unwrap();
            }
        }
        // Present keys of all three generations between absent ones, 2.5 runs in all.
        let keys: Vec<Vec<u8>> = (0..160)
            .map(|i| {
                if i % 2 == 0 {
                    key(i % 3, i / 2)
                } else {
                    key(9, i)
                }
            })
            .collect();
        let counts = |w: &Window| {
            let s = w.stats();
            (s.lookups, s.store_lookups_skipped, s.false_positives)
        };
        let minus = |a: (u64, u64, u64), b: (u64, u64, u64)| (a.0 - b.0, a.1 - b.1, a.2 - b.2);
        let before = counts(&w);
        let got: Vec<Option<IVec>> = keys.iter().map(|k| w.get(k).unwrap()).collect();
        let one_by_one = minus(counts(&w), before);
        let before = counts(&w);
        assert_eq!(w.get_many(&keys).unwrap(), got);
        assert_eq!(minus(counts(&w), before), one_by_one, "get_many's counts");
        let before = counts(&w);
        let found: Vec<bool> = got.iter().map(Option::is_some).collect();
        assert_eq!(w.contains_many(&keys).unwrap(), found);
        assert_eq!(
            minus(counts(&w), before),
            one_by_one,
            "contains_many's counts"
        );
        for (i, v) in got.iter().enumerate() {
            assert_eq!(v.as_deref(), (i % 2 == 0).then(|| &keys[i][..]), "key {i}");
        }
        let (lookups, skipped, false_positives) = one_by_one;
        assert_eq!(lookups, 160);
        assert!(skipped < 80 && false_positives > 0, "{one_by_one:?}"); // 80 absent keys
    }

    /// Generations whose filters have different seeds (the window reopened with another
    /// tree seed) cannot share one probe: `read_any_filter` declines, and lookups ask each
    /// filter with its own hash, still finding every key and ruling out absent ones.
    #[test]
    fn generations_with_different_seeds_are_probed_one_by_one() {
        let dir = tempfile::tempdir().unwrap();
        let clock = ManualClock::new(T0);
        let config = |seed: u64| {
            WindowConfig::new(Duration::from_millis(3 * W), 3)
                .tree_config(TreeConfig::new().expected_items(1_000).seed(seed))
                .clock(clock.clone())
        };
        {
            let db = Config::new().path(dir.path()).open().unwrap();
            let w = db.open_window("seeds", config(1)).unwrap();
            for i in 0..300 {
                w.insert(key(0, i), &b"v"[..]).unwrap();
            }
        }
        clock.set(T0 + W);
        let db = Config::new().path(dir.path()).open().unwrap();
        let w = db.open_window("seeds", config(2)).unwrap();
        for i in 0..300 {
            w.insert(key(1, i), &b"v"[..]).unwrap();
        }
        let (ring, newest) = w.ring_for_lookup();
        let live = Window::live(&ring, &w.state.generations, newest);
        let seeds: Vec<u64> = live
            .iter()
            .map(|g| g.tree.filters().pinned().1.unwrap().seed())
            .collect();
        assert_eq!(seeds, vec![2, 1], "the generations' seeds, newest first");
        let h = ring.hasher.hash(b"any key");
        assert_eq!(
            read_any_filter(Window::filters(live), ring.hasher.seed(), h),
            None
        );
        drop(ring);
        let keys: Vec<Vec<u8>> = (0..300).flat_map(|i| [key(0, i), key(1, i)]).collect();
        for k in &keys {
            assert!(w.may_contain(k) && w.contains_key(k).unwrap(), "{k:?}");
        }
        assert!(w.may_contain_many(&keys).iter().all(|m| *m));
        let maybe = (0..1_000).filter(|i| w.may_contain(key(7, *i))).count();
        assert!(
            maybe < 100,
            "{maybe} of 1,000 absent keys passed the filters"
        );
    }
}

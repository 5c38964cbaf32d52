//! Lookups of a window: every live generation's filter asked in one validated pass, the
//! stores of the generations whose filter says "maybe" read newest first.

use sled::IVec;

use super::handle::Window;
use super::ring::{Gen, Ring};
use crate::clock::generations::Generations;
use crate::error::Result;
use crate::filter::Filter;
use crate::store::read_any_filter;

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
        mut visit: impl FnMut(&Gen) -> Result<Option<R>>,
    ) -> Result<Option<R>> {
        let live = Self::live(ring, generations, newest);
        let (seed, h) = (ring.hasher.seed(), ring.hasher.hash(key));
        // Most lookups of a window are of keys no generation holds: one validated probe of
        // every filter at once answers those (see `Window::may_contain`).
        if read_any_filter(Self::filters(live), seed, h) == Some(false) {
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
        self.found(&ring, newest, key, true)
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

    /// The filters' answer for many keys: one pass that hashes each key once and probes
    /// every live generation's filter, their blocks prefetched together.
    fn probe_many<K: AsRef<[u8]>>(&self, ring: &Ring, newest: u64, keys: &[K]) -> Vec<bool> {
        let gens: Vec<&Gen> = Self::live(ring, &self.state.generations, newest)
            .iter()
            .collect();
        if gens.is_empty() {
            return vec![false; keys.len()];
        }
        let mut out = vec![true; keys.len()];
        let seed = ring.hasher.seed();
        let hashes: Vec<u64> = keys.iter().map(|k| ring.hasher.hash(k.as_ref())).collect();
        loop {
            let pinned: Vec<(u64, Option<&Filter>)> =
                gens.iter().map(|g| g.tree.filters().pinned()).collect();
            let filters: Option<Vec<&Filter>> = pinned
                .iter()
                .map(|(_, f)| f.filter(|f| f.seed() == seed))
                .collect();
            let Some(filters) = filters else {
                // Mixed seeds (a generation reopened with another seed): one pass each.
                out.fill(false);
                for g in &gens {
                    let maybe = g.tree.filters().contains_many(keys);
                    out.iter_mut().zip(maybe).for_each(|(o, m)| *o |= m);
                }
                return out;
            };
            Filter::contains_any_hash_many(&filters, &hashes, &mut out);
            let unchanged = gens
                .iter()
                .zip(&pinned)
                .all(|(g, (s, _))| g.tree.filters().still(*s));
            if unchanged || out.iter().all(|&m| m) {
                return out;
            }
        }
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
        self.probe_many(&ring, newest, keys)
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
        let mut out = self.probe_many(&ring, newest, keys);
        self.count_batch(&out);
        for (key, maybe) in keys.iter().zip(out.iter_mut()) {
            if *maybe {
                *maybe = self.found(&ring, newest, key.as_ref(), false)?.is_some();
            }
        }
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
        let maybe = self.probe_many(&ring, newest, keys);
        self.count_batch(&maybe);
        keys.iter()
            .zip(maybe)
            .map(|(key, maybe)| {
                if maybe {
                    self.found(&ring, newest, key.as_ref(), false)
                } else {
                    Ok(None)
                }
            })
            .collect()
    }

    fn count_batch(&self, maybe: &[bool]) {
        let passed = maybe.iter().filter(|m| **m).count() as u64;
        self.state
            .counters
            .lookups(maybe.len() as u64 - passed, passed);
    }

    /// The newest value of `key` in the live generations, counted as one lookup's store
    /// reads (and as passed on, if `count_passed`).
    fn found(
        &self,
        ring: &Ring,
        newest: u64,
        key: &[u8],
        count_passed: bool,
    ) -> Result<Option<IVec>> {
        let c = &self.state.counters;
        let mut passed = !count_passed;
        Self::lookup(ring, &self.state.generations, newest, key, |g| {
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

//! The filters of one tree: the current one that lookups read and, while a rebuild runs,
//! the one being built.
//!
//! ## Lookups: lock-free, and never misled by a swap
//! Filters live in a fixed array of write-once slots that lives as long as the tree, so a
//! reference to a slot is always valid memory. `state` packs a version and the index of the
//! current slot; beside it, on the same cache line, is a pointer to that slot's filter. A
//! lookup reads both, probes the filter, then checks that `state` has not moved (a seqlock
//! read): a retired filter is only ever zeroed (its memory given back to the operating system,
//! which reads as zeros, or zeroed and refilled by a later rebuild of the same shape) *after*
//! `state` moved past it, so a lookup that raced a reuse sees the change and probes again. (Only an "absent" answer needs the check, a false positive being
//! harmless, but checking every answer keeps the lookup free of a branch on it.) This costs
//! one load of a read-mostly cache line, not the locked instructions an `Arc` swap would put
//! on every lookup.
//!
//! The pointer saves the lookup a chain of dependent loads (slot index, the slot's
//! `OnceLock`, its box) before the filter's own fields.
//!
//! ## Writers and the rebuild scan: the gate
//! Writers hold the `gate` (a read lock) for their whole operation: the filter update before
//! the sled write, the sled write, and any counting-mode correction after it. A rebuild
//! publishes its new filter and reads each round of keys under the write side, so no write
//! is in flight while it does. The key space is cut into ranges, scanned in parallel within
//! a round; `cursor` holds, per range, the last key scanned. A writer applies its change to
//! the new filter too exactly when its key is at or before its range's cursor
//! ([`Cursor::passed`]); a key beyond it is read by the scan later, after the write. Every
//! key therefore reaches the new filter exactly once, which keeps counting mode exact, and
//! the scan never depends on how sled's iterators behave under concurrent writes.

pub(crate) mod read_any;
mod slots;

use std::cell::RefCell;
use std::rc::Rc;
use std::sync::TryLockError;

use super::fp_memory::{FpMemory, Hashed, Pending};
use super::scan::Cursor;
use crate::error::{Error, Result};
use crate::filter::any::AnyFilter;
use crate::filter::Filter;
use crate::sync::{
    fence, AtomicPtr, AtomicU64, AtomicUsize, Ordering, RwLock, RwLockReadGuard, RwLockWriteGuard,
};
use slots::Slots;

/// Most filters a tree may allocate over its life. Rebuilds reuse a retired filter of the
/// same shape and capacities grow by doubling, so a tree needs about one slot per size it
/// ever had, plus one.
pub(crate) const MAX_SLOTS: usize = 64;
const _: () = assert!(MAX_SLOTS.is_power_of_two() && MAX_SLOTS as u64 <= INDEX_MASK + 1);
// `released` has a bit per slot.
const _: () = assert!(MAX_SLOTS <= 64);

const INDEX_BITS: u32 = 8;
const INDEX_MASK: u64 = (1 << INDEX_BITS) - 1;

/// `state` on a pair of cache lines of its own: every lookup reads it, only a rebuild
/// (a slot filled, a swap) writes it. The slots, which only rebuilds write, share the pair
/// instead of padding it.
// `repr(C)`: the word and the pointer first, on one line.
#[repr(C, align(128))]
struct State {
    /// The version and the index of the current slot.
    word: AtomicU64,
    /// The bits of the current slot's filter, on the same line as `word`: a lookup reaches
    /// the filter with two independent loads of this line, not a chain of loads through the
    /// slot index, the slot's `OnceLock` and its box. Always the address of the [`Filter`]
    /// inside a filled slot's box (set in [`Filters::new`] and [`Filters::swap`], before
    /// `word`, so a lookup that reads a new `word` reads the new pointer too).
    bits: AtomicPtr<Filter>,
    /// Write-once slots, a few inline and the rest allocated by the first rebuild that needs
    /// them (see [`Slots`]).
    slots: Slots,
}

/// What the rebuild has published; changed only under the gate's write side.
#[derive(Debug, Default)]
pub(crate) struct Gate {
    /// The slot being built, if a rebuild is running.
    pub(crate) building: Option<usize>,
    /// Where the rebuild's scan stands in each key range.
    pub(crate) cursor: Cursor,
}

/// A writer's view of the gate, fixed while it holds the gate.
#[derive(Clone, Debug)]
struct View {
    current: usize,
    building: Option<usize>,
    cursor: Cursor,
    /// The false-positive memory's sets the hold's writes began in (see
    /// [`super::fp_memory`]): shared by nested holds, ended by the outermost one, after
    /// the store writes of everything nested in it (a transaction's commit included).
    pending: Rc<RefCell<Pending>>,
}

#[cfg(not(bloomsled_loom))]
thread_local! {
    /// The gates this thread holds, with their views: an operation nested in another on the
    /// same tree (a write inside a transaction closure) reuses the outer hold instead of
    /// queueing behind a rebuild that waits for the outer one.
    static HELD: RefCell<Vec<(usize, View)>> = const { RefCell::new(Vec::new()) };
}

// Under loom, one per loom thread (loom runs its threads on one OS thread); loom's macro
// takes no `const` initializer.
#[cfg(bloomsled_loom)]
loom::thread_local! {
    static HELD: RefCell<Vec<(usize, View)>> = RefCell::new(Vec::new());
}

pub(crate) struct Filters {
    state: State,
    gate: RwLock<Gate>,
    /// Writers blocked on the gate: the rebuild lets them in between chunks.
    waiting: AtomicUsize,
    /// The tree's memory of false positives (see [`super::fp_memory`]), beside the block
    /// above: with it, the gate and the rest, two blocks in all.
    memory: FpMemory,
    /// A bit per slot whose retired filter gave its memory back ([`Filters::release_retired`]).
    released: AtomicU64,
}

impl Filters {
    /// Filters with no false-positive memory.
    #[cfg(test)]
    pub(crate) fn new(first: AnyFilter) -> Filters {
        Filters::with_memory(first, 0)
    }

    /// Filters starting with `first`, and a false-positive memory of about `memory` keys
    /// (0: none) hashed with `first`'s seed (a tree's seed never changes while it is open:
    /// rebuilds keep it).
    pub(crate) fn with_memory(first: AnyFilter, memory: usize) -> Filters {
        let memory = FpMemory::new(memory, first.bits().seed());
        let slots = Slots::default();
        let _ = slots.cell(0).set(Box::new(first));
        // Taken from the slot, after the box moved into it (a pointer taken from the box
        // before the move would not be the slot's).
        let bits: *const Filter = slots.get(0).expect("slot 0 was just filled").bits();
        Filters {
            state: State {
                word: AtomicU64::new(0),
                bits: AtomicPtr::new(bits.cast_mut()),
                slots,
            },
            gate: RwLock::new(Gate::default()),
            waiting: AtomicUsize::new(0),
            memory,
            released: AtomicU64::new(0),
        }
    }

    /// The tree's false-positive memory, for lookups the filter passed.
    #[inline(always)]
    pub(crate) fn memory(&self) -> &FpMemory {
        &self.memory
    }

    /// The filter in slot `i`, where `i < MAX_SLOTS` (every index `state` holds is one:
    /// [`Filters::swap`] is only given slots that exist).
    #[inline(always)]
    fn slot(&self, i: usize) -> Option<&AnyFilter> {
        self.state.slots.get(i % MAX_SLOTS)
    }

    /// The current filter and the state it was read under. Lookups must validate a negative
    /// answer with [`Filters::unchanged`]; writers and snapshots use [`Filters::enter`].
    #[inline(always)]
    fn current_racy(&self) -> (u64, Option<&AnyFilter>) {
        let s = self.state.word.load(Ordering::Acquire);
        (s, self.slot((s & INDEX_MASK) as usize))
    }

    /// True if `state` is still `s`: every filter word read before this call came from a
    /// filter that was current (not being recycled) when read.
    #[inline(always)]
    fn unchanged(&self, s: u64) -> bool {
        fence(Ordering::Acquire);
        self.state.word.load(Ordering::Relaxed) == s
    }

    /// The filter's answer for `key`: `false` only if the key is certainly absent.
    #[inline]
    pub(crate) fn contains(&self, key: &[u8]) -> bool {
        // Inlined by force (`Filter::contains` too): left to the compiler, the probe was called
        // out of line, 2.4-3.7 ns a key (a tenth) of the scalar kernel's `may_contain`.
        self.read(
            #[inline(always)]
            |f| f.contains(key),
        )
    }

    /// [`Filters::contains`] for a caller that branches on the answer (`Tree::get`,
    /// `Tree::contains_key`): the same answer, probed with `Filter::contains_hash_for_lookup`, and
    /// the key's hash under the seed of the filter that answered, for the false-positive
    /// memory (see [`Hashed`]).
    #[inline(always)]
    pub(crate) fn contains_for_lookup(&self, key: &[u8]) -> (bool, Hashed) {
        self.read(
            #[inline(always)]
            |f| {
                let h = f.hash(key);
                (f.contains_hash_for_lookup(h), Hashed { h, seed: f.seed() })
            },
        )
    }

    /// `probe`'s answer on the current filter, probed again if a swap raced it: whether a key
    /// may be present (`false` only if certainly absent), with what `probe` computed on the way.
    #[inline(always)]
    pub(crate) fn read<T>(&self, probe: impl Fn(&Filter) -> T) -> T {
        loop {
            // Called itself: through a reference (`&probe`) the compiler kept it out of line.
            let (s, f) = self.current_bits_racy();
            let answer = probe(f);
            // Validated whatever the answer (a "maybe" needs no check, but checking costs one
            // load of a cached line, and retrying one after a swap is merely redundant), so
            // the only branch here is on the state, never on the answer: branching on the
            // answer mispredicts on every change between present and absent keys. Written as
            // `maybe || unchanged`, the compiler turns it back into a branch on `maybe`.
            if self.unchanged(s) {
                return answer;
            }
        }
    }

    /// `probe`'s answer on the current filter and the state it was read under, unvalidated:
    /// an "absent" answer counts only if [`Filters::still`] then holds for that state (a
    /// caller probing several trees validates them together).
    #[inline(always)]
    pub(crate) fn probe_racy(&self, probe: impl Fn(&Filter) -> bool) -> (u64, bool) {
        let (s, f) = self.current_bits_racy();
        (s, probe(f))
    }

    /// The current filter's bits and the state they were read under, unvalidated: whatever
    /// is read from the filter counts only if [`Filters::unchanged`] then holds for that
    /// state.
    #[inline(always)]
    fn current_bits_racy(&self) -> (u64, &Filter) {
        let s = self.state.word.load(Ordering::Acquire);
        // Acquire, pairing with the release in `swap`: the pointer may be newer than `s` (a
        // swap can land between the two loads), and the filter it points to may have been
        // made by another thread; reading its fields needs that thread's writes to happen
        // before this read, which a relaxed load would not give (on x86 both are a plain
        // load).
        let p = self.state.bits.load(Ordering::Acquire);
        // SAFETY: `bits` only ever holds the address of the `Filter` inside the box of a
        // filled slot (see `State::bits`), and a filled slot is never emptied, refilled nor
        // freed while `self` lives: slots are write-once `OnceLock`s (the array of the outer
        // ones too, see `Slots`), nothing takes `&mut` to them, and a box's contents do not
        // move. So the reference is valid for this borrow
        // of `self`. `Filter` is `Sync` (its bits are atomics), so reading it while a writer
        // admits a key or a rebuild zeroes a retired filter races on atomics only; the
        // caller's state check catches a filter retired meanwhile.
        #[allow(unsafe_code)]
        let f = unsafe { &*p };
        (s, f)
    }

    /// Batched, prefetched probe of many keys (see `Filter::contains_many`).
    pub(crate) fn contains_many<K: AsRef<[u8]>>(&self, keys: &[K]) -> Vec<bool> {
        let mut out = vec![true; keys.len()];
        self.contains_many_into(keys, &mut out);
        out
    }

    /// [`Filters::contains_many`] into `out` (as long as `keys`).
    pub(crate) fn contains_many_into<K: AsRef<[u8]>>(&self, keys: &[K], out: &mut [bool]) {
        loop {
            let (s, f) = self.current_racy();
            let Some(f) = f else {
                out.fill(true);
                return;
            };
            f.bits().contains_many_into(keys, out);
            if out.iter().all(|&m| m) || self.unchanged(s) {
                return;
            }
        }
    }

    /// The current filter, for a probe the caller validates with [`Filters::unchanged`]
    /// (given the first value) before trusting an "absent" answer.
    #[inline]
    pub(crate) fn pinned(&self) -> (u64, Option<&Filter>) {
        let (s, f) = self.current_racy();
        (s, f.map(AnyFilter::bits))
    }

    /// True if no swap happened since [`Filters::pinned`] returned `s`.
    #[inline]
    pub(crate) fn still(&self, s: u64) -> bool {
        self.unchanged(s)
    }

    /// Holds the gate (read side) for a write or a copy; see the module docs.
    pub(crate) fn enter(&self) -> Entered<'_> {
        let key = self as *const Filters as usize;
        let nested = HELD.with(|h| {
            h.borrow()
                .iter()
                .rev()
                .find(|(k, _)| *k == key)
                .map(|(_, v)| v.clone())
        });
        if let Some(view) = nested {
            return Entered {
                filters: self,
                _guard: None,
                view,
                key: None,
            };
        }
        let guard = match self.gate.try_read() {
            Ok(g) => g,
            Err(TryLockError::Poisoned(p)) => p.into_inner(),
            Err(TryLockError::WouldBlock) => {
                self.waiting.fetch_add(1, Ordering::SeqCst);
                let g = self.gate.read().unwrap_or_else(|p| p.into_inner());
                self.waiting.fetch_sub(1, Ordering::SeqCst);
                g
            }
        };
        let view = View {
            current: (self.state.word.load(Ordering::Acquire) & INDEX_MASK) as usize,
            building: guard.building,
            cursor: if guard.building.is_some() {
                guard.cursor.clone()
            } else {
                Cursor::default()
            },
            pending: Rc::default(),
        };
        HELD.with(|h| h.borrow_mut().push((key, view.clone())));
        Entered {
            filters: self,
            _guard: Some(guard),
            view,
            key: Some(key),
        }
    }

    /// True if writers are blocked on the gate (the rebuild yields to them between chunks,
    /// or it could take the gate back before the woken writers run).
    pub(crate) fn writers_waiting(&self) -> bool {
        self.waiting.load(Ordering::SeqCst) > 0
    }

    /// The gate's write side: no writer is in flight while it is held.
    pub(crate) fn close_gate(&self) -> RwLockWriteGuard<'_, Gate> {
        self.gate.write().unwrap_or_else(|p| p.into_inner())
    }

    /// A slot for a new filter that `accept` takes (by mode, shape and capacity): a retired
    /// one, emptied, if one fits; otherwise a new one made by `make`. Only the rebuild calls
    /// this, one at a time.
    pub(crate) fn prepare(
        &self,
        accept: impl Fn(&AnyFilter) -> bool,
        make: impl FnOnce() -> Result<AnyFilter>,
    ) -> Result<usize> {
        let current = (self.state.word.load(Ordering::Acquire) & INDEX_MASK) as usize;
        for i in 0..MAX_SLOTS {
            let s = self.state.slots.cell(i);
            match s.get() {
                Some(f) if i != current && accept(f) => {
                    // Every lookup that could still be reading this filter started before
                    // `state` moved away from it; the fence orders that move before the
                    // zeroing, so such a lookup's validation fails and it probes again.
                    fence(Ordering::Release);
                    f.zero();
                    self.released.fetch_and(!(1 << i), Ordering::Relaxed);
                    return Ok(i);
                }
                Some(_) => {}
                None => {
                    let _ = s.set(Box::new(make()?));
                    return Ok(i);
                }
            }
        }
        Err(Error::config(format!(
            "the tree has allocated {MAX_SLOTS} filters of different shapes; no room for \
             another size (reopen the database to start afresh)"
        )))
    }

    /// The filter in slot `i` (for the rebuild, which owns the slot it is building).
    pub(crate) fn get(&self, i: usize) -> Option<&AnyFilter> {
        (i < MAX_SLOTS).then(|| self.state.slots.get(i)).flatten()
    }

    /// Makes slot `i` current. Must be called with the gate closed (`_gate`).
    pub(crate) fn swap(&self, _gate: &mut RwLockWriteGuard<'_, Gate>, i: usize) {
        // The rebuild swaps only to the slot `prepare` filled for it; anything else leaves
        // the current filter, which holds every key, in place.
        let Some(f) = self.get(i) else {
            debug_assert!(false, "swap to slot {i}, which holds no filter");
            return;
        };
        let s = self.state.word.load(Ordering::Relaxed);
        let next = ((s >> INDEX_BITS) + 1) << INDEX_BITS | i as u64;
        // The pointer before the word (SeqCst, so also a release): a lookup that reads
        // `next` reads this pointer or a later one, never the retired filter's. The pointer's
        // own release publishes the filter behind it to a lookup that reads the pointer
        // before the word moves (see `contains`).
        self.state
            .bits
            .store((f.bits() as *const Filter).cast_mut(), Ordering::Release);
        self.state.word.store(next, Ordering::SeqCst);
    }

    /// Bytes of every filter allocated, the current one included (not those whose memory
    /// was given back).
    pub(crate) fn allocated_bytes(&self) -> usize {
        let released = self.released.load(Ordering::Relaxed);
        (0..MAX_SLOTS)
            .filter(|i| released & (1 << i) == 0)
            .filter_map(|i| self.state.slots.get(i))
            .map(|f| f.memory_bytes())
            .sum()
    }

    /// Gives back the memory of every retired filter that can give it (large ones; see
    /// `Blocks::release`): a tree that grew by doubling would otherwise keep every size it
    /// had, about as much again as its current filter. Called by the rebuild (the only
    /// caller of [`Filters::prepare`]) after its swap, outside the gate: a lookup that
    /// still reads a retired filter reads zeros and then finds `state` moved, as after
    /// [`Filters::prepare`]'s zeroing, and probes again.
    pub(crate) fn release_retired(&self) {
        let current = (self.state.word.load(Ordering::Acquire) & INDEX_MASK) as usize;
        // Orders the swap before the memory is zeroed (see `prepare`).
        fence(Ordering::Release);
        for i in 0..MAX_SLOTS {
            let already = self.released.load(Ordering::Relaxed) & (1 << i) != 0;
            if let Some(f) = self.state.slots.get(i).filter(|_| i != current && !already) {
                if f.release() {
                    self.released.fetch_or(1 << i, Ordering::Relaxed);
                }
            }
        }
    }
}

/// A hold on the gate: the filters a writer must update, stable until dropped.
pub(crate) struct Entered<'a> {
    filters: &'a Filters,
    _guard: Option<RwLockReadGuard<'a, Gate>>,
    view: View,
    /// Set if this hold registered itself in `HELD` (the outermost one).
    key: Option<usize>,
}

impl Entered<'_> {
    /// The current filter (stable while the gate is held).
    pub(crate) fn current(&self) -> &AnyFilter {
        self.filters
            .slot(self.view.current)
            .expect("the current slot is always filled")
    }

    /// The filter under construction, if the rebuild has already scanned past `key`.
    #[inline]
    fn building_for(&self, key: &[u8]) -> Option<&AnyFilter> {
        let b = self.view.building?;
        if self.view.cursor.passed(key) {
            self.filters.slot(b)
        } else {
            None
        }
    }

    /// Applies `f` with `key`'s hash to the current filter, and to the one being built if
    /// the scan has passed `key`.
    /// Returns the hash.
    #[inline]
    fn each(&self, key: &[u8], f: impl Fn(&AnyFilter, u64)) -> u64 {
        let h = self.current().bits().hash(key);
        self.each_hashed(key, h, f);
        h
    }

    /// [`Entered::each`] with `key`'s hash `h` under [`Entered::seed`] already known.
    #[inline]
    fn each_hashed(&self, key: &[u8], h: u64, f: impl Fn(&AnyFilter, u64)) {
        f(self.current(), h);
        if let Some(b) = self.building_for(key) {
            f(b, h);
        }
    }

    /// Counts `key` in (before its sled write), and takes it out of the false-positive
    /// memory until the hold ends; returns its hash under [`Entered::seed`].
    #[inline]
    pub(crate) fn admit(&self, key: &[u8]) -> u64 {
        let h = self.current().bits().hash(key);
        self.admit_hashed(key, h);
        h
    }

    /// [`Entered::admit`] for many keys (a batch's), their hashes pushed to `hashes`:
    /// each run of keys is hashed and its filter blocks prefetched before any of them is
    /// counted in, so that their cache misses overlap instead of coming one by one.
    pub(crate) fn admit_all(&self, keys: &[&[u8]], hashes: &mut Vec<u64>) {
        /// Keys hashed and prefetched ahead of their inserts.
        const RUN: usize = 32;
        let bits = self.current().bits();
        for run in keys.chunks(RUN) {
            let from = hashes.len();
            for key in run {
                let h = bits.hash(key);
                bits.prefetch_hashes(std::slice::from_ref(&h));
                hashes.push(h);
            }
            for (key, &h) in run.iter().zip(&hashes[from..]) {
                self.admit_hashed(key, h);
            }
        }
    }

    /// [`Entered::admit`] with `key`'s hash `h` under [`Entered::seed`] already known.
    #[inline]
    fn admit_hashed(&self, key: &[u8], h: u64) {
        self.each_hashed(key, h, AnyFilter::admit_hash);
        let memory = &self.filters.memory;
        let hm = if self.seed() == memory.seed() {
            h
        } else {
            crate::hash::hash_key(key, memory.seed())
        };
        memory.forget(hm, &self.view.pending);
    }

    /// Counts `key` out (after sled removed it); only counting filters act on it. Returns
    /// its hash under [`Entered::seed`].
    #[inline]
    pub(crate) fn release(&self, key: &[u8]) -> u64 {
        self.each(key, AnyFilter::release_hash)
    }

    /// The seed of the hashes [`Entered::admit`] and [`Entered::release`] return.
    #[inline]
    pub(crate) fn seed(&self) -> u64 {
        self.current().bits().seed()
    }
}

impl Drop for Entered<'_> {
    fn drop(&mut self) {
        if let Some(key) = self.key {
            // The outermost hold: every write under it reached the store (or failed).
            self.filters.memory.end(&mut self.view.pending.borrow_mut());
            HELD.with(|h| {
                let mut h = h.borrow_mut();
                if let Some(pos) = h.iter().rposition(|(k, _)| *k == key) {
                    h.remove(pos);
                }
            });
        }
    }
}

#[cfg(test)]
mod tests;

/// The model of the lookup racing publish and retire under loom (see its file).
#[cfg(all(test, bloomsled_loom))]
mod loom_model;

//! A tree's memory of its false positives: keys its filter passed and its store did not
//! hold, so that a false positive found once (by chance, or by someone probing for them)
//! is paid once, not on every lookup of the same key.
//!
//! ## What it holds
//! A set-associative table of `(hash, tag)` pairs: the key's 64-bit filter hash (which
//! writers already have in hand) and a second 64-bit hash of the key under another seed,
//! compared only when the first matches. A "remembered" answer therefore needs both 64-bit
//! hashes of a stored key to equal a remembered absent key's. Sets of [`WAYS`] entries
//! fill one 128-byte pair of cache lines; a set's entries are evicted by CLOCK. Each set's
//! word (below) and a byte of each entry's hash (its fingerprint) sit apart, in a 16-byte
//! head, the heads of all sets side by side: most keys the filter passes are stored ones,
//! which the head rules out without the set's lines (read only when a fingerprint
//! matches), so a lookup pays no more than a read of a few hot cache lines. Keys the filter rejects never come here. Lossy by design: a record that
//! races another is dropped, never waited for.
//!
//! ## No false negatives: the set's word
//! The danger is a reader that reads the store just before a writer stores the key, and
//! records the key as absent just after: from then on the key would be answered "absent"
//! though the store holds it. Each set has one word: a version, the number of writers in
//! flight, and a lock bit.
//! - A **writer** ([`FpMemory::forget`], from the write guard, before the store write)
//!   waits while the set is locked, then raises the version and its in-flight count in one
//!   compare-and-swap, removes any entry with the key's hash, writes the store, and only
//!   then ([`FpMemory::end`], when the write guard is dropped) lowers its count.
//! - A **reader** reads the word *before* it reads the store ([`FpMemory::recall`]), and
//!   does not record if a writer was in flight then. To record ([`FpMemory::record`]) it
//!   swaps that exact word for the same word locked, writes the entry, and unlocks by
//!   raising the version.
//!
//! All changes to a word are read-modify-writes, so they have one order. If a reader's lock
//! succeeded, no writer began between its read of the word and its lock (a begin changes
//! the version), and none was in flight at the read: any writer of the key either ended
//! before the read, so the reader's store read (after its acquiring load of the word,
//! which read the writer's releasing end) saw the key and no record is made, or begins
//! after the lock: it waits for the unlock, whose release publishes the entry, and removes
//! it before its store write. A lookup answers "remembered" only if the word is unlocked,
//! with no writer in flight, and the same after the entries were read (a seqlock read):
//! an entry is only ever written under the lock or by a writer in flight, so the pair read
//! is one that was recorded, and no write of the key ended before the first read of the
//! word that did not remove it. The loom model (`fp_memory/loom_model.rs`) checks every
//! interleaving of a writer with two readers.

use std::cell::RefCell;

use crate::filter::prefetch;
use crate::hash::hash_key;
use crate::sync::{fence, AtomicU64, Ordering};

/// Entries per set: with the set's word and CLOCK word, 128 bytes.
#[cfg(not(bloomsled_loom))]
pub(crate) const WAYS: usize = 7;
/// Under loom, two: the protocol does not depend on the number of ways, and each relaxed
/// load multiplies the values loom must try.
#[cfg(bloomsled_loom)]
pub(crate) const WAYS: usize = 2;

/// Keys of filter capacity per entry of the memory (see [`FpMemory::entries_for`]): at the
/// default rate, a filter spends about 1.8 bytes a key, so the memory (about 21 bytes an
/// entry: 16, and a seventh of its set's CLOCK word and 16-byte head) costs at most an
/// eleventh of its filter.
pub(crate) const KEYS_PER_ENTRY: u64 = 128;

const LOCK: u64 = 1;
const WRITER: u64 = 1 << 1;
/// Writers in flight on one set: at most one per thread holding a tree's write gate.
const WRITERS: u64 = ((1 << 20) - 1) << 1;
const VERSION: u64 = 1 << 21;

/// A hash of 0 marks an empty entry; a key whose filter hash is 0 is remembered as 1 (a
/// stored key of hash 1 is then removed by writers of either).
#[inline(always)]
fn nonzero(h: u64) -> u64 {
    h | u64::from(h == 0)
}

/// The salt of the tag's seed: the tag is xxh3 of the key under another seed than the
/// filter's.
const TAG_SALT: u64 = 0x9e37_79b9_7f4a_7c15;

/// A set's word and its entries' fingerprints, apart from the entries: 16 bytes a set, so
/// the heads of a memory's sets share a few cache lines, which every lookup the filter
/// passed reads and which therefore stay cached where the sets' own lines would not.
#[repr(align(16))]
struct Head {
    /// Version, writers in flight, lock (see the module docs).
    word: AtomicU64,
    /// Byte `w`: the [`fingerprint`] of way `w`'s hash, written with the entry (under the
    /// lock). A hint only: a way whose byte differs from a key's does not hold the key.
    fingerprints: AtomicU64,
}

impl Head {
    fn new() -> Head {
        Head {
            word: AtomicU64::new(0),
            fingerprints: AtomicU64::new(0),
        }
    }
}

/// The byte of a hash its way's fingerprint holds (not the bits [`FpMemory::set_of`] takes).
#[inline(always)]
fn fingerprint(h: u64) -> u64 {
    (h >> 8) & 0xff
}

/// True if one of the first [`WAYS`] bytes of `fingerprints` is `fp`.
#[inline(always)]
fn may_hold(fingerprints: u64, fp: u64) -> bool {
    const ONES: u64 = 0x0101_0101_0101_0101;
    const USED: u64 = u64::MAX >> (64 - 8 * WAYS);
    // A zero byte of `x` is a way whose fingerprint is `fp` (the unused bytes set to
    // non-zero); the classic zero-byte test.
    let x = (fingerprints ^ fp.wrapping_mul(ONES)) | !USED;
    x.wrapping_sub(ONES) & !x & (ONES << 7) != 0
}

#[repr(align(128))]
struct Set {
    /// CLOCK: a referenced bit per way (bits 0..WAYS) and the hand (bits 8..16).
    clock: AtomicU64,
    /// `(hash, tag)`; hash 0: empty.
    ways: [[AtomicU64; 2]; WAYS],
}

impl Set {
    fn new() -> Set {
        Set {
            clock: AtomicU64::new(0),
            ways: std::array::from_fn(|_| [AtomicU64::new(0), AtomicU64::new(0)]),
        }
    }
}

/// A key's hash and the seed of the filter that took it, from the probe that passed the
/// key: [`FpMemory::recall_hashed`] uses it instead of hashing the key again when the seed
/// is the memory's (always, unless a rebuild changed the tree's seed).
#[derive(Clone, Copy, Debug)]
pub struct Hashed {
    /// The key's hash ([`crate::hash::hash_key`] under `seed`).
    pub h: u64,
    /// The seed of the filter that took `h`.
    pub seed: u64,
}

/// A lookup's place in the memory, taken before its store read (see [`FpMemory::recall`]).
#[derive(Clone, Copy, Debug)]
pub struct Ticket {
    set: usize,
    word: u64,
    h: u64,
}

/// [`FpMemory::recall`]'s answer.
#[derive(Debug)]
pub enum Recall {
    /// The key is a remembered false positive: absent, without a store read.
    Absent,
    /// Not remembered: read the store, then [`FpMemory::record`] a miss with the ticket
    /// (`None`: a miss cannot be recorded, the memory is off or a writer is in flight).
    Unknown(Option<Ticket>),
}

/// The sets a write guard has begun writing in, ended when it is dropped: the first inline
/// (a single-key write allocates nothing), the others in a bitmap over the sets (a batch
/// finds whether it began a set in constant time).
#[derive(Debug, Default)]
pub struct Pending {
    first: Option<usize>,
    more: Vec<u64>,
}

/// A tree's false-positive memory (see the module docs). Off (no sets) when sized 0.
pub struct FpMemory {
    heads: Box<[Head]>,
    sets: Box<[Set]>,
    /// The tree's seed (its filters'). Keys are hashed with [`hash_key`], not a
    /// precomputed secret as the filter's probe is: only keys the filter passed are hashed
    /// here, on their way to the store, and 192 bytes per tree are worth more than the
    /// nanoseconds the secret saves.
    seed: u64,
    tag_seed: u64,
}

impl FpMemory {
    /// A memory of about `entries` false positives (rounded up to whole sets; 0: off) of a
    /// filter with hash seed `seed`.
    pub fn new(entries: usize, seed: u64) -> FpMemory {
        let n = entries.div_ceil(WAYS);
        FpMemory {
            heads: (0..n).map(|_| Head::new()).collect(),
            sets: (0..n).map(|_| Set::new()).collect(),
            seed,
            tag_seed: seed ^ TAG_SALT,
        }
    }

    /// The entries a tree's memory gets: the `configured` most, and no more than one per
    /// [`KEYS_PER_ENTRY`] keys of the filter's `capacity` (at least one set), so a small
    /// tree's memory is a few cache lines, not the whole allowance.
    pub fn entries_for(configured: usize, capacity: u64) -> usize {
        let fits = usize::try_from(capacity / KEYS_PER_ENTRY).unwrap_or(usize::MAX);
        configured.min((fits / WAYS).max(1) * WAYS)
    }

    /// False positives it can hold (0: off).
    pub fn capacity(&self) -> usize {
        self.sets.len() * WAYS
    }

    /// The seed its hashes are taken with (the tree's filter's).
    pub fn seed(&self) -> u64 {
        self.seed
    }

    #[inline(always)]
    fn set_of(&self, h: u64) -> usize {
        // The low half of the hash (the filter's block takes the high bits).
        (((h & 0xffff_ffff) * self.sets.len() as u64) >> 32) as usize
    }

    #[inline(always)]
    fn tag(&self, key: &[u8]) -> u64 {
        hash_key(key, self.tag_seed)
    }

    /// Whether `key` (which the filter passed) is a remembered false positive; if not, the
    /// ticket to record it with after a store read that finds nothing.
    #[inline]
    pub fn recall(&self, key: &[u8]) -> Recall {
        if self.sets.is_empty() {
            return Recall::Unknown(None);
        }
        self.recall_h(key, hash_key(key, self.seed))
    }

    /// [`FpMemory::recall`] with the hash the filter's probe took, when its seed is this
    /// memory's: a present key's lookup hashes the key once.
    #[inline]
    pub fn recall_hashed(&self, key: &[u8], hashed: Hashed) -> Recall {
        if self.sets.is_empty() {
            return Recall::Unknown(None);
        }
        let h = if hashed.seed == self.seed() {
            hashed.h
        } else {
            hash_key(key, self.seed)
        };
        self.recall_h(key, h)
    }

    /// `key`'s hash for [`FpMemory::recall_hashed`], with the first line of its set
    /// prefetched: a batch's store phase takes the next key's before it reads the store for
    /// this one, so the memory's cache miss overlaps that read instead of adding to the next
    /// (a lone lookup's overlaps its filter probe's by itself).
    #[inline]
    pub(crate) fn hash_prefetched(&self, key: &[u8]) -> Hashed {
        let seed = self.seed();
        if self.sets.is_empty() {
            // Off: `recall_hashed` answers before it reads the hash.
            return Hashed { h: 0, seed };
        }
        let h = hash_key(key, self.seed);
        prefetch(&self.heads[self.set_of(nonzero(h))]);
        Hashed { h, seed }
    }

    /// [`FpMemory::recall`] of `key`, whose hash under [`FpMemory::seed`] is `h`.
    #[inline(always)]
    fn recall_h(&self, key: &[u8], h: u64) -> Recall {
        let h = nonzero(h);
        let i = self.set_of(h);
        let head = &self.heads[i];
        let word = head.word.load(Ordering::Acquire);
        if word & (LOCK | WRITERS) != 0 {
            return Recall::Unknown(None);
        }
        let ticket = Recall::Unknown(Some(Ticket { set: i, word, h }));
        // Most keys here are stored ones: ruled out by the head, the set's lines not read.
        if !may_hold(head.fingerprints.load(Ordering::Relaxed), fingerprint(h)) {
            return ticket;
        }
        let set = &self.sets[i];
        for (w, way) in set.ways.iter().enumerate() {
            if way[0].load(Ordering::Relaxed) == h
                && way[1].load(Ordering::Relaxed) == self.tag(key)
            {
                fence(Ordering::Acquire);
                if head.word.load(Ordering::Relaxed) == word {
                    let bit = 1 << w;
                    if set.clock.load(Ordering::Relaxed) & bit == 0 {
                        set.clock.fetch_or(bit, Ordering::Relaxed);
                    }
                    return Recall::Absent;
                }
                return Recall::Unknown(None);
            }
        }
        ticket
    }

    /// Remembers `key` as a false positive: the store did not hold it when read after
    /// `ticket` was taken. Dropped if a writer began on its set since (or another record).
    pub fn record(&self, ticket: Option<Ticket>, key: &[u8]) {
        let Some(t) = ticket else { return };
        let (head, set) = (&self.heads[t.set], &self.sets[t.set]);
        if head
            .word
            .compare_exchange(t.word, t.word | LOCK, Ordering::Acquire, Ordering::Relaxed)
            .is_err()
        {
            return;
        }
        // The lock before the entry's stores, for lookups reading the entry (seqlock).
        fence(Ordering::Release);
        let victim = self.clock_victim(set);
        set.ways[victim][0].store(t.h, Ordering::Relaxed);
        set.ways[victim][1].store(self.tag(key), Ordering::Relaxed);
        // Only a record (under the lock) writes the fingerprints.
        let shift = 8 * victim;
        let fps = head.fingerprints.load(Ordering::Relaxed);
        let fps = (fps & !(0xff << shift)) | (fingerprint(t.h) << shift);
        head.fingerprints.store(fps, Ordering::Relaxed);
        head.word
            .store(t.word.wrapping_add(VERSION), Ordering::Release);
    }

    /// The way a new entry takes (under the set's lock): an empty one, else CLOCK's.
    fn clock_victim(&self, set: &Set) -> usize {
        if let Some(w) = set
            .ways
            .iter()
            .position(|way| way[0].load(Ordering::Relaxed) == 0)
        {
            return w;
        }
        let c = set.clock.load(Ordering::Relaxed);
        let (mut refs, mut hand) = (c & 0xff, ((c >> 8) & 0xff) as usize % WAYS);
        // Referenced entries get a second chance; within one turn an unreferenced one is
        // found.
        while refs & (1 << hand) != 0 {
            refs &= !(1 << hand);
            hand = (hand + 1) % WAYS;
        }
        let cleared = (c & 0xff) & !refs;
        set.clock.fetch_and(!(cleared | 0xff00), Ordering::Relaxed);
        set.clock
            .fetch_or((((hand + 1) % WAYS) as u64) << 8, Ordering::Relaxed);
        hand
    }

    /// Takes the key of filter hash `h` (under [`FpMemory::seed`]) out of the memory,
    /// **before** its store write, and keeps its set from recording until
    /// [`FpMemory::end`] with `pending` (after the store write).
    #[inline]
    pub fn forget(&self, h: u64, pending: &RefCell<Pending>) {
        if self.sets.is_empty() {
            return;
        }
        let h = nonzero(h);
        let i = self.set_of(h);
        let set = &self.sets[i];
        if pending.borrow_mut().add(i, self.sets.len()) {
            Self::begin(&self.heads[i]);
        }
        for way in &set.ways {
            if way[0].load(Ordering::Relaxed) == h {
                way[0].store(0, Ordering::Relaxed);
            }
        }
    }

    /// Begins a write on `set`: waits while it is locked, then raises its version and its
    /// count of writers in flight in one compare-and-swap (see the module docs).
    #[inline]
    fn begin(head: &Head) {
        let mut spins = 0u32;
        loop {
            let w = head.word.load(Ordering::Relaxed);
            if w & LOCK == 0
                && head
                    .word
                    .compare_exchange_weak(
                        w,
                        w.wrapping_add(VERSION + WRITER),
                        Ordering::AcqRel,
                        Ordering::Relaxed,
                    )
                    .is_ok()
            {
                break;
            }
            // A record holds the lock for a few stores.
            spins += 1;
            if spins < 64 && !cfg!(bloomsled_loom) {
                std::hint::spin_loop();
            } else {
                crate::sync::yield_now();
            }
        }
        // The begin before the removals, for lookups reading the entries (seqlock).
        fence(Ordering::Release);
    }

    /// [`FpMemory::forget`] of every key at once, for a store write whose keys are not
    /// known one by one (another store's restore of an older state, a rename): every set
    /// is begun in `pending` and emptied, **before** the store write; [`FpMemory::end`]
    /// after it.
    pub fn forget_all(&self, pending: &RefCell<Pending>) {
        for (i, set) in self.sets.iter().enumerate() {
            if pending.borrow_mut().add(i, self.sets.len()) {
                Self::begin(&self.heads[i]);
            }
            for way in &set.ways {
                way[0].store(0, Ordering::Relaxed);
            }
        }
    }

    /// The writes of `pending` reached the store (or failed): their sets may record again.
    pub fn end(&self, pending: &mut Pending) {
        let more = pending.more.iter().enumerate().flat_map(|(w, &bits)| {
            (0..64)
                .filter(move |b| (bits >> b) & 1 == 1)
                .map(move |b| w * 64 + b)
        });
        for i in pending.first.into_iter().chain(more) {
            self.heads[i].word.fetch_sub(WRITER, Ordering::Release);
        }
        pending.first = None;
        pending.more.clear();
    }
}

impl Pending {
    /// Adds set `i` of `sets`; false if it was there.
    fn add(&mut self, i: usize, sets: usize) -> bool {
        match self.first {
            None => {
                self.first = Some(i);
                true
            }
            Some(f) if f == i => false,
            Some(_) => {
                if self.more.is_empty() {
                    self.more.resize(sets.div_ceil(64), 0);
                }
                let (w, bit) = (i / 64, 1u64 << (i % 64));
                let new = self.more[w] & bit == 0;
                self.more[w] |= bit;
                new
            }
        }
    }
}

#[cfg(test)]
mod tests;

/// The record/forget protocol under loom (see its file).
#[cfg(all(test, bloomsled_loom))]
mod loom_model;

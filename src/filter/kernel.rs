//! The probe and the insert of one block, compiled once for every `k` and picked once per
//! filter.
//!
//! `k` is a filter's constant, but a run-time value to the compiler: a probe written over
//! `0..k` keeps a loop, its trip count and a bound on `k` in every lookup. Here each `k` in
//! `1..=MAX_HASHES` has its own copy with the draws unrolled ([`layout::all_set_k`]), and a
//! filter keeps pointers to the two copies of its `k`. A lookup makes one indirect call,
//! whose target never changes and is always predicted (a `match` on `k` at every lookup
//! would do as well; the loop over `0..k` does not).
//!
//! Inserts ([`Kernel::insert`]) first run the probe: a key whose bits are all set writes
//! nothing, and never takes the line away from other cores. Otherwise every draw's bit gets
//! a locked `or` whose result is unused (`lock or`), with no branch on which bits were
//! missing: a branch per draw, to set only the missing bits, would go either way about half
//! the time, and `fetch_or` with its result read compiles to a compare-and-swap loop on x86.
//! (The insert's cost beside fastbloom's is in `benches/stream.rs`.)

use super::bits::Block;
#[cfg(test)]
use super::bits::Blocks;
use super::layout::MAX_HASHES;

/// Tests hash `h` against its block.
pub(crate) type ContainsFn = fn(&Block, u64) -> bool;
/// Inserts hash `h` into its block; true if it was new (see [`Kernel::insert`]).
pub(crate) type InsertFn = fn(&Block, u64) -> bool;
/// Tests hash `h` against several blocks, each its own filter's block for `h` (filters of
/// one `k`): true if any of them holds all of `h`'s bits.
pub(crate) type ContainsAnyFn = fn(&[&Block], u64) -> bool;

/// The two kernels of one `k`.
#[derive(Clone, Copy)]
pub(crate) struct Kernel {
    pub(crate) contains: ContainsFn,
    /// The probe of one key in the blocks of several filters (a window's generations): one
    /// call for all of them, no early exit, so their loads overlap.
    pub(crate) contains_any: ContainsAnyFn,
    insert: InsertFn,
}

fn contains_k<const K: usize>(b: &Block, h: u64) -> bool {
    b.contains_k::<K>(h)
}

fn contains_any_k<const K: usize>(blocks: &[&Block], h: u64) -> bool {
    // `|`, not `||`: no branch on what a load returned.
    blocks
        .iter()
        .fold(false, |any, b| any | b.contains_k::<K>(h))
}

fn insert_k<const K: usize>(b: &Block, h: u64) -> bool {
    if b.contains_k::<K>(h) {
        return false;
    }
    b.set_k::<K>(h);
    true
}

macro_rules! kernels {
    ($k:expr; $($n:literal)*) => {
        match $k {
            $($n => Some(Kernel {
                contains: contains_k::<$n>,
                contains_any: contains_any_k::<$n>,
                insert: insert_k::<$n>,
            }),)*
            _ => None,
        }
    };
}

impl Kernel {
    /// Inserts hash `h` into block `b`; true if it was new (some bit was unset when read).
    ///
    /// When several threads insert the same new key at once, each bit is unset when the
    /// first of them reads it (a thread's probe of a word comes before its own `or` into it),
    /// so at least one of them is told the key is new. Bits are never cleared here (only
    /// counting mode clears, under the block's lock).
    #[inline(always)]
    pub(crate) fn insert(&self, b: &Block, h: u64) -> bool {
        (self.insert)(b, h)
    }

    /// The kernels for `k` bits per key; `None` outside `1..=MAX_HASHES`. The probe is the
    /// AVX-512 one where the CPU has it (`filter::simd`), the unrolled scalar one elsewhere.
    pub(crate) fn for_k(k: u32) -> Option<Kernel> {
        let scalar = Kernel::for_scalar(k)?;
        // (Not under loom: its atomics are not the 64 bytes the vector load reads.)
        #[cfg(all(target_arch = "x86_64", not(loom)))]
        if let (Some(contains), Some(contains_any)) = (
            super::simd::contains_for(k),
            super::simd::contains_any_for(k),
        ) {
            return Some(Kernel {
                contains,
                contains_any,
                ..scalar
            });
        }
        Some(scalar)
    }

    /// The scalar kernels for `k`, on any CPU.
    pub(crate) fn for_scalar(k: u32) -> Option<Kernel> {
        const _: () = assert!(MAX_HASHES == 32, "one arm per k below");
        kernels!(k; 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 18 19 20 21 22 23 24 25 26 27 28 29 30 31 32)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::filter::layout::{self, block_index};
    use crate::hash::hash_key;

    /// Every `k`'s kernels set exactly the documented bits and test them like the generic
    /// probe does, on blocks full of other keys too.
    #[test]
    fn every_k_sets_and_tests_the_layouts_bits() {
        assert!(Kernel::for_k(0).is_none());
        assert!(Kernel::for_k(MAX_HASHES + 1).is_none());
        let both =
            (1..=MAX_HASHES).flat_map(|k| [(k, Kernel::for_k(k)), (k, Kernel::for_scalar(k))]);
        for (k, kern) in both {
            let kern = kern.expect("a kernel for every valid k");
            let b = Blocks::zeroed(4).unwrap();
            for i in 0..300u64 {
                let h = hash_key(&i.to_le_bytes(), u64::from(k));
                let blk = block_index(h, 4);
                let before: Vec<u64> = b.words().collect();
                let generic = layout::all_set(h, k, |j| before[blk * 8 + j]);
                assert_eq!((kern.contains)(b.block(blk), h), generic, "k = {k}");
                let new = kern.insert(b.block(blk), h);
                assert_eq!(new, !generic, "insert says new iff a bit was unset");
                let after: Vec<u64> = b.words().collect();
                let masks = layout::block_masks(h, k);
                for j in 0..8 {
                    assert_eq!(after[blk * 8 + j], before[blk * 8 + j] | masks[j]);
                }
                assert!((kern.contains)(b.block(blk), h));
                assert!(!kern.insert(b.block(blk), h), "a second insert is not new");
            }
        }
    }

    /// Every `k`'s several-block probe (vector and scalar) answers what the single-block
    /// probes answer or-ed, for any number of blocks, on blocks from empty to full.
    #[test]
    fn the_several_block_probe_ors_the_single_ones() {
        let both =
            (1..=MAX_HASHES).flat_map(|k| [(k, Kernel::for_k(k)), (k, Kernel::for_scalar(k))]);
        for (k, kern) in both {
            let kern = kern.expect("a kernel for every valid k");
            let b = Blocks::zeroed(6).unwrap();
            // Block i holds about 4^i keys' bits: empty, sparse, ..., saturated.
            for i in 0..6u64 {
                for j in 0..4u64.pow(i as u32) {
                    kern.insert(b.block(i as usize), hash_key(&j.to_le_bytes(), i + 100));
                }
            }
            let blocks: Vec<&Block> = (0..6).map(|i| b.block(i)).collect();
            let (mut yes, mut no) = (0, 0);
            for j in 0..400u64 {
                // Keys inserted into block 1 or 2, and others (blocks 0 to 2, empty to
                // sparse, must then give both answers).
                let h = match j % 3 {
                    0 => hash_key(&(j % 4).to_le_bytes(), 101),
                    1 => hash_key(&(j % 16).to_le_bytes(), 102),
                    _ => hash_key(&j.to_be_bytes(), 7),
                };
                for n in 0..=blocks.len() {
                    for from in 0..=(blocks.len() - n) {
                        let some = &blocks[from..from + n];
                        let want = some.iter().any(|blk| (kern.contains)(blk, h));
                        assert_eq!((kern.contains_any)(some, h), want, "k = {k}, {n} blocks");
                        if (n, from) == (3, 0) {
                            if want {
                                yes += 1;
                            } else {
                                no += 1;
                            }
                        }
                    }
                }
            }
            assert!(yes > 0 && no > 0, "k = {k}: {yes} yes, {no} no");
        }
    }

    /// Threads inserting the same new keys at once: every key is then present, and each
    /// key was reported new by at least one thread. Keys are picked one per block, so no
    /// other key can have set their bits: "new" is the only right answer for the first.
    #[test]
    fn concurrent_inserts_of_one_key_tell_at_least_one_thread_it_is_new() {
        use std::sync::atomic::{AtomicU32, Ordering::Relaxed};
        const BLOCKS: usize = 4096;
        let kern = Kernel::for_k(6).unwrap();
        let b = Blocks::zeroed(BLOCKS).unwrap();
        let mut taken = vec![false; BLOCKS];
        let keys: Vec<u64> = (0..100_000u64)
            .map(|i| hash_key(&i.to_le_bytes(), 5))
            .filter(|&h| !std::mem::replace(&mut taken[block_index(h, BLOCKS as u64)], true))
            .collect();
        assert!(keys.len() > 4_000);
        let told_new: Vec<AtomicU32> = keys.iter().map(|_| AtomicU32::new(0)).collect();
        let start = std::sync::Barrier::new(4);
        std::thread::scope(|s| {
            for _ in 0..4 {
                s.spawn(|| {
                    start.wait();
                    for (h, t) in keys.iter().zip(&told_new) {
                        if kern.insert(b.block(block_index(*h, BLOCKS as u64)), *h) {
                            t.fetch_add(1, Relaxed);
                        }
                    }
                });
            }
        });
        for (h, t) in keys.iter().zip(&told_new) {
            assert!((kern.contains)(b.block(block_index(*h, BLOCKS as u64)), *h));
            assert!(t.load(Relaxed) >= 1, "no thread was told {h:#x} is new");
        }
    }
}

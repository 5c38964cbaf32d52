//! The bit array: cache-line-aligned 512-bit blocks of `AtomicU64` words.
//!
//! Knows nothing of keys or hashing: it stores masks into a block and tests them. Inserts
//! are lock-free `fetch_or`s; reads are plain relaxed loads. Ordering with respect to the
//! store is the caller's business (bits are set before the key is written to sled, and the
//! store's own release/acquire publishes them along with the key).

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

use crate::hash::BLOCK_WORDS;

/// One 512-bit block, aligned to a cache line so that a probe touches exactly one line.
#[repr(C, align(64))]
#[derive(Default)]
pub(crate) struct Block([AtomicU64; BLOCK_WORDS]);

pub(crate) struct Blocks {
    blocks: Box<[Block]>,
}

impl Blocks {
    /// `n` zeroed blocks; `None` if the allocation is refused.
    pub(crate) fn zeroed(n: usize) -> Option<Self> {
        let mut v: Vec<Block> = Vec::new();
        v.try_reserve_exact(n).ok()?;
        v.resize_with(n, Block::default);
        Some(Blocks {
            blocks: v.into_boxed_slice(),
        })
    }

    /// Blocks holding exactly `words` (8 per block); `None` on a length that is not a whole
    /// number of blocks or a refused allocation.
    pub(crate) fn from_words(words: &[u64]) -> Option<Self> {
        if words.len() % BLOCK_WORDS != 0 {
            return None;
        }
        let b = Self::zeroed(words.len() / BLOCK_WORDS)?;
        for (block, chunk) in b.blocks.iter().zip(words.chunks_exact(BLOCK_WORDS)) {
            for (w, &v) in block.0.iter().zip(chunk) {
                w.store(v, Relaxed);
            }
        }
        Some(b)
    }

    #[inline(always)]
    pub(crate) fn len(&self) -> usize {
        self.blocks.len()
    }

    /// ORs `masks` into block `i`; returns true if any bit was newly set.
    #[inline(always)]
    pub(crate) fn set(&self, i: usize, masks: &[u64; BLOCK_WORDS]) -> bool {
        let block = &self.blocks[i].0;
        let mut changed = false;
        for (w, &m) in block.iter().zip(masks) {
            // Skip the locked RMW when the bits are already there: re-inserting a present
            // key (updates, replays) then writes nothing and never bounces the line.
            if m != 0 && w.load(Relaxed) & m != m {
                changed |= w.fetch_or(m, Relaxed) & m != m;
            }
        }
        changed
    }

    /// Clears the bits of `masks` in block `i` (counting mode: their counters reached zero).
    #[inline]
    pub(crate) fn clear(&self, i: usize, masks: &[u64; BLOCK_WORDS]) {
        for (w, &m) in self.blocks[i].0.iter().zip(masks) {
            if m != 0 && w.load(Relaxed) & m != 0 {
                w.fetch_and(!m, Relaxed);
            }
        }
    }

    /// Sets every word of every block to zero (a recycled filter before its rebuild).
    pub(crate) fn zero(&self) {
        for b in self.blocks.iter() {
            for w in &b.0 {
                w.store(0, Relaxed);
            }
        }
    }

    /// Stores `v` into word `j` (0..8) of block `i`.
    #[inline]
    pub(crate) fn store_word(&self, i: usize, j: usize, v: u64) {
        self.blocks[i].0[j].store(v, Relaxed);
    }

    /// True if every bit of `masks` is set in block `i`.
    #[inline(always)]
    pub(crate) fn test(&self, i: usize, masks: &[u64; BLOCK_WORDS]) -> bool {
        let block = &self.blocks[i].0;
        let mut missing = 0u64;
        for (w, &m) in block.iter().zip(masks) {
            missing |= !w.load(Relaxed) & m;
        }
        missing == 0
    }

    /// True if bit `pos` (0..512) of block `i` is set.
    #[inline(always)]
    pub(crate) fn bit(&self, i: usize, pos: usize) -> bool {
        self.blocks[i].0[pos >> 6].load(Relaxed) & (1u64 << (pos & 63)) != 0
    }

    /// Hints the CPU to start loading block `i` (no-op off x86-64).
    #[inline(always)]
    pub(crate) fn prefetch(&self, i: usize) {
        #[cfg(target_arch = "x86_64")]
        {
            use std::arch::x86_64::{_mm_prefetch, _MM_HINT_T0};
            let p = self.blocks[i].0.as_ptr().cast::<i8>();
            // SAFETY: SSE is part of the x86-64 baseline, so the intrinsic's target feature is
            // always present; a prefetch never faults nor reads into Rust-visible state, and
            // `p` points into a live allocation anyway (bounds-checked index above).
            #[allow(unsafe_code)]
            unsafe {
                _mm_prefetch::<_MM_HINT_T0>(p)
            };
        }
        #[cfg(not(target_arch = "x86_64"))]
        let _ = i;
    }

    /// Number of set bits in block `i`.
    #[inline]
    pub(crate) fn count_ones(&self, i: usize) -> u32 {
        self.blocks[i]
            .0
            .iter()
            .map(|w| w.load(Relaxed).count_ones())
            .sum()
    }

    /// Every word, in order (a relaxed snapshot: concurrent inserts may or may not show).
    pub(crate) fn words(&self) -> impl Iterator<Item = u64> + '_ {
        self.blocks
            .iter()
            .flat_map(|b| b.0.iter().map(|w| w.load(Relaxed)))
    }

    /// ORs every word of `other` (same length) into `self`.
    pub(crate) fn union(&self, other: &Blocks) {
        for (a, b) in self.blocks.iter().zip(other.blocks.iter()) {
            for (x, y) in a.0.iter().zip(b.0.iter()) {
                let v = y.load(Relaxed);
                if v != 0 {
                    x.fetch_or(v, Relaxed);
                }
            }
        }
    }
}

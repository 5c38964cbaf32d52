//! The bit array: cache-line-aligned 512-bit blocks of `AtomicU64` words.
//!
//! Knows nothing of keys or hashing: it stores masks into a block and tests them. Inserts
//! are lock-free `fetch_or`s; reads are plain relaxed loads. Ordering with respect to the
//! store is the caller's business (bits are set before the key is written to sled, and the
//! store's own release/acquire publishes them along with the key).

use crate::sync::{AtomicU64, Ordering::Relaxed};

use super::layout::{self, BLOCK_WORDS};

/// One 512-bit block, aligned to a cache line so that a probe touches exactly one line.
///
/// `filter::simd` relies on the alignment and size: it loads a block as one 64-byte vector.
#[repr(C, align(64))]
#[derive(Default)]
#[cfg_attr(not(loom), derive(zerocopy::FromZeros))]
pub(crate) struct Block([AtomicU64; BLOCK_WORDS]);

impl Block {
    /// True if every one of hash `h`'s `K` bits is set (see [`layout::all_set_k`]: no early
    /// exit, no data-dependent branch). `K` is fixed at compile time; `filter::kernel` picks
    /// the copy of a filter's `k`.
    #[inline(always)]
    pub(crate) fn contains_k<const K: usize>(&self, h: u64) -> bool {
        layout::all_set_k::<K>(h, |j| self.0[j & (BLOCK_WORDS - 1)].load(Relaxed))
    }

    /// Sets hash `h`'s `K` bits, each with a locked `or` whose result is unused (`lock or`,
    /// not a compare-and-swap loop), with no branch on what the words held. The caller
    /// probes first (`Kernel::insert`), so a key seen before writes nothing.
    #[inline(always)]
    pub(crate) fn set_k<const K: usize>(&self, h: u64) {
        layout::for_each_bit_k::<K>(h, |j, bit| {
            self.0[j & (BLOCK_WORDS - 1)].fetch_or(bit, Relaxed);
        });
    }
}

pub(crate) struct Blocks {
    blocks: Box<[Block]>,
}

impl Blocks {
    /// `n` zeroed blocks; `None` if the allocation is refused. A large filter asks for
    /// transparent huge pages before its memory is first touched (see [`advise_huge_pages`]).
    ///
    /// The memory comes from the allocator already zeroed (`calloc`), so a large filter's
    /// pages are backed only when first written: a sparse filter (a new tree sized for a
    /// million keys that holds a few) costs what it touches, not its full size.
    #[cfg(not(loom))]
    pub(crate) fn zeroed(n: usize) -> Option<Self> {
        use zerocopy::FromZeros;
        let blocks = <[Block]>::new_box_zeroed_with_elems(n).ok()?;
        advise_huge_pages(blocks.as_ptr() as usize, n * std::mem::size_of::<Block>());
        Some(Blocks { blocks })
    }

    /// Under loom, blocks of loom's atomics, made one by one (they are not plain zeroes).
    #[cfg(loom)]
    pub(crate) fn zeroed(n: usize) -> Option<Self> {
        Some(Blocks {
            blocks: (0..n).map(|_| Block::default()).collect(),
        })
    }

    /// Blocks holding exactly `words` (8 per block); `None` on a length that is not a whole
    /// number of blocks or a refused allocation.
    pub(crate) fn from_words(words: &[u64]) -> Option<Self> {
        if !words.len().is_multiple_of(BLOCK_WORDS) {
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
    ///
    /// Check-and-set in one pass over the block: the words are read first, and only the
    /// words missing some of their bits get a locked `fetch_or` (a present key, or a replay,
    /// writes nothing and never bounces the line). The answer comes from the `fetch_or`
    /// results, not from the reads: when several threads insert the same key at once, the
    /// one whose `fetch_or` sets a bit first sees it unset, so at least one of them is told
    /// the key is new. (Bits are only cleared in counting mode, under the block's lock.)
    #[inline(always)]
    pub(crate) fn set(&self, i: usize, masks: &[u64; BLOCK_WORDS]) -> bool {
        let block = &self.blocks[i].0;
        let need: [u64; BLOCK_WORDS] = std::array::from_fn(|j| masks[j] & !block[j].load(Relaxed));
        if need.iter().all(|&n| n == 0) {
            return false;
        }
        let mut changed = false;
        for (w, &n) in block.iter().zip(&need) {
            if n != 0 {
                changed |= w.fetch_or(n, Relaxed) & n != n;
            }
        }
        changed
    }

    /// Block `i`.
    #[inline(always)]
    pub(crate) fn block(&self, i: usize) -> &Block {
        &self.blocks[i]
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

    /// Word `j` (0..8) of block `i`.
    #[inline]
    #[cfg_attr(not(feature = "redis"), allow(dead_code))]
    pub(crate) fn load_word(&self, i: usize, j: usize) -> u64 {
        self.blocks[i].0[j].load(Relaxed)
    }

    /// Stores `v` into word `j` (0..8) of block `i`.
    #[inline]
    pub(crate) fn store_word(&self, i: usize, j: usize, v: u64) {
        self.blocks[i].0[j].store(v, Relaxed);
    }

    /// Hints the CPU to start loading block `i` (`prefetcht0` on x86-64, `prfm pldl1keep` on
    /// aarch64, a no-op elsewhere). The batched lookups call it whatever the probe kernel.
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
        #[cfg(target_arch = "aarch64")]
        {
            let p = self.blocks[i].0.as_ptr();
            // SAFETY: `prfm` is a hint: it never faults, writes nothing and changes no
            // register or flag; `p` points into a live allocation anyway (bounds-checked
            // index above).
            #[allow(unsafe_code)]
            unsafe {
                std::arch::asm!(
                    "prfm pldl1keep, [{p}]",
                    p = in(reg) p,
                    options(nostack, preserves_flags, readonly)
                );
            }
        }
        #[cfg(not(any(target_arch = "x86_64", target_arch = "aarch64")))]
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

/// Filters at least this large ask for transparent huge pages.
#[cfg_attr(loom, allow(dead_code))]
const HUGE_PAGE_MIN_BYTES: usize = 8 << 20;

/// Asks the kernel to back the 2 MiB-aligned part of `[addr, addr + len)` with transparent
/// huge pages (Linux `madvise(MADV_HUGEPAGE)`; a no-op elsewhere, for small filters, or when
/// the kernel says no). A probe of a filter far larger than the TLB's reach otherwise pays a
/// page walk on top of its cache miss; with 2 MiB pages a 64 MB filter needs 32 TLB entries
/// instead of 16,384. Called before the memory is first written, so the first touch can
/// allocate huge pages directly, which matters where THP is in `madvise` mode.
#[cfg_attr(loom, allow(dead_code))]
fn advise_huge_pages(addr: usize, len: usize) {
    #[cfg(target_os = "linux")]
    {
        const HUGE: usize = 2 << 20;
        if len < HUGE_PAGE_MIN_BYTES {
            return;
        }
        let start = addr.next_multiple_of(HUGE);
        let end = (addr + len) / HUGE * HUGE;
        if end <= start {
            return;
        }
        // SAFETY: `[start, end)` lies inside an allocation this function's caller owns and
        // has reserved but not yet initialized, so no Rust reference points into it.
        // MADV_HUGEPAGE is advice about how to back those pages: it never reads or writes
        // their contents, and a failure (THP disabled, old kernel) leaves the memory as it
        // was, so the result is deliberately ignored.
        #[allow(unsafe_code)]
        unsafe {
            libc::madvise(start as *mut libc::c_void, end - start, libc::MADV_HUGEPAGE);
        }
    }
    #[cfg(not(target_os = "linux"))]
    let _ = (addr, len, HUGE_PAGE_MIN_BYTES);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_large_filter_asks_for_huge_pages_and_still_reads_and_writes() {
        // 16 MiB: past the threshold, so the madvise path runs.
        let n = (16 << 20) / 64;
        let b = Blocks::zeroed(n).unwrap();
        assert_eq!(b.len(), n);
        assert!(b.words().all(|w| w == 0));
        let mut m = [0u64; BLOCK_WORDS];
        m[3] = 1 << 17;
        for i in (0..n).step_by(4099) {
            assert!(b.set(i, &m));
            assert!(!b.set(i, &m));
            assert_eq!(b.count_ones(i), 1);
        }
        assert_eq!(
            (0..n).map(|i| u64::from(b.count_ones(i))).sum::<u64>(),
            n.div_ceil(4099) as u64
        );
    }
}

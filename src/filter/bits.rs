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
#[cfg_attr(not(bloomsled_loom), derive(zerocopy::FromZeros))]
pub(crate) struct Block([AtomicU64; BLOCK_WORDS]);

impl Block {
    /// True if every one of hash `h`'s `K` bits is set (see [`layout::all_set_k`]: no early
    /// exit, no data-dependent branch). `K` is fixed at compile time; `filter::kernel` picks
    /// the copy of a filter's `k`.
    #[inline(always)]
    pub(crate) fn contains_k<const K: usize>(&self, h: u64) -> bool {
        layout::all_set_k::<K>(h, |j| self.0[j & (BLOCK_WORDS - 1)].load(Relaxed))
    }

    /// [`Block::contains_k`] with one early exit after the first draws (see
    /// [`layout::all_set_k_early`]), for callers that branch on the answer.
    #[inline(always)]
    pub(crate) fn contains_k_early<const K: usize>(&self, h: u64) -> bool {
        layout::all_set_k_early::<K>(h, |j| self.0[j & (BLOCK_WORDS - 1)].load(Relaxed))
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
    blocks: Owned,
}

/// The blocks' memory, owned: a boxed slice, or (a large filter on Linux) an anonymous
/// mapping of its own. Dereferences to the blocks with no branch on which it is.
struct Owned {
    ptr: std::ptr::NonNull<Block>,
    len: usize,
    /// `Some((base, bytes))` if the blocks live in a mapping `Drop` unmaps; `None` if they
    /// are a `Box<[Block]>` given up with `Box::into_raw`.
    mapping: Option<(usize, usize)>,
}

// SAFETY: `Owned` owns its blocks exactly as a `Box<[Block]>` does (nothing else points to
// them, `Drop` frees them once), and `Block` is `Send` and `Sync` (atomics only).
#[allow(unsafe_code)]
unsafe impl Send for Owned {}
// SAFETY: as above: shared access is `&[Block]`, which is `Sync`.
#[allow(unsafe_code)]
unsafe impl Sync for Owned {}

impl Owned {
    fn boxed(b: Box<[Block]>) -> Owned {
        let len = b.len();
        let ptr = std::ptr::NonNull::from(Box::leak(b)).cast::<Block>();
        Owned {
            ptr,
            len,
            mapping: None,
        }
    }

    /// `n` zeroed blocks in an anonymous mapping of their own, starting on a huge-page
    /// boundary, asked for transparent huge pages, and each huge page backed by a write (see
    /// [`Blocks::zeroed`]); `None` if the mapping is refused.
    #[cfg(all(target_os = "linux", not(bloomsled_loom)))]
    fn mapped(n: usize) -> Option<Owned> {
        let len = n.checked_mul(std::mem::size_of::<Block>())?;
        let huge_len = huge_backed_len(len);
        let map_len = huge_len.max(len).checked_add(HUGE_PAGE_BYTES)?;
        // SAFETY: a new private anonymous mapping at an address the kernel picks: it
        // overlaps no memory Rust knows of. It is zero-filled by the kernel.
        #[allow(unsafe_code)]
        let base = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                map_len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            )
        };
        if base == libc::MAP_FAILED {
            return None;
        }
        let start = (base as usize).next_multiple_of(HUGE_PAGE_BYTES);
        let huge = advise_huge_pages(start, huge_len);
        let owned = Owned {
            // `start` is inside the mapping (less than a huge page past its page-aligned
            // base, and `len` bytes fit before its end), so not null, and 64-byte aligned.
            ptr: std::ptr::NonNull::new(start as *mut Block)?,
            len: n,
            mapping: Some((base as usize, map_len)),
        };
        let per_huge = HUGE_PAGE_BYTES / std::mem::size_of::<Block>();
        for i in huge.step_by(per_huge).take_while(|&i| i < n) {
            owned[i].0[0].store(0, Relaxed);
        }
        Some(owned)
    }
}

impl std::ops::Deref for Owned {
    type Target = [Block];

    #[inline(always)]
    fn deref(&self) -> &[Block] {
        // SAFETY: `ptr` points to `len` initialized (zeroed or stored) blocks that `self`
        // owns and frees only in `Drop`; they are only ever shared (`&`), their words
        // being atomics.
        #[allow(unsafe_code)]
        unsafe {
            std::slice::from_raw_parts(self.ptr.as_ptr(), self.len)
        }
    }
}

impl Drop for Owned {
    fn drop(&mut self) {
        match self.mapping {
            #[cfg(all(target_os = "linux", not(bloomsled_loom)))]
            Some((base, bytes)) => {
                // SAFETY: `[base, base + bytes)` is the mapping `Owned::mapped` made, unmapped
                // only here; no reference into it outlives `self`.
                #[allow(unsafe_code)]
                unsafe {
                    libc::munmap(base as *mut libc::c_void, bytes);
                }
            }
            #[cfg(not(all(target_os = "linux", not(bloomsled_loom))))]
            Some(_) => unreachable!("mappings are made on Linux only"),
            None => {
                let slice = std::ptr::slice_from_raw_parts_mut(self.ptr.as_ptr(), self.len);
                // SAFETY: `ptr` and `len` came from `Box::leak` of a `Box<[Block]>` in
                // `Owned::boxed`, rebuilt once, here.
                #[allow(unsafe_code)]
                drop(unsafe { Box::from_raw(slice) });
            }
        }
    }
}

impl Blocks {
    /// `n` zeroed blocks; `None` if the allocation is refused.
    ///
    /// A large filter (at least [`HUGE_PAGE_MIN_BYTES`], on Linux) gets a mapping of its own
    /// asking for transparent huge pages, each backed at once by a write: a probe of a
    /// filter far past the TLB's reach otherwise pays a page walk on top of its cache miss
    /// (with 2 MiB pages a 64 MB filter needs 32 TLB entries instead of 16,384). Neither the
    /// allocator nor the first touch can be left to do it: Rust's allocator zeroes memory
    /// aligned to 64 bytes by writing it (`aligned_alloc` then `memset`), which backs every
    /// page with a 4 KiB one before any advice can be given, and a page first touched by a
    /// read (a lookup, or an insert's probe, which reads before it writes) maps the shared
    /// zero page, which the write after it replaces with a 4 KiB page. Measured
    /// (`benches/after_load.rs`): a 59 MiB filter filled by inserts had 8 MiB in huge pages
    /// before, all of its aligned part after. Filters this large are sized for millions of
    /// keys; they are paid for when made, not page by page. Smaller filters come zeroed
    /// from the allocator. The threshold is 8/9 of a huge page (1.78 MiB), where one huge page
    /// costs at most an eighth more memory: a 3.9 MB filter (2M keys at the default 0.1%)
    /// in small pages needs 950 TLB entries, which a store's own reads
    /// between lookups evict (measured, `benches/stream.rs` kernel table: the absent `get`
    /// after each 1,024 of sled's `get`s, scalar probe, 106 ns in small pages, 80 ns in huge
    /// ones; at 1M keys, a 1.94 MB filter, AVX2 probe, 113 ns in small pages, 99 ns in one
    /// huge page, medians of five processes). Where a filter's last huge page costs at most
    /// an eighth more memory, it is backed too (see `huge_backed_len`).
    #[cfg(not(bloomsled_loom))]
    pub(crate) fn zeroed(n: usize) -> Option<Self> {
        use zerocopy::FromZeros;
        #[cfg(target_os = "linux")]
        if n.saturating_mul(std::mem::size_of::<Block>()) >= HUGE_PAGE_MIN_BYTES {
            if let Some(blocks) = Owned::mapped(n) {
                return Some(Blocks { blocks });
            }
        }
        let blocks = <[Block]>::new_box_zeroed_with_elems(n).ok()?;
        Some(Blocks {
            blocks: Owned::boxed(blocks),
        })
    }

    /// Under loom, blocks of loom's atomics, made one by one (they are not plain zeroes).
    #[cfg(bloomsled_loom)]
    pub(crate) fn zeroed(n: usize) -> Option<Self> {
        Some(Blocks {
            blocks: Owned::boxed((0..n).map(|_| Block::default()).collect()),
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

    /// Gives a retired filter's memory back to the operating system, if it has a mapping of
    /// its own (a large filter on Linux): its words then read as zeros until written again,
    /// and its pages cost nothing. Returns whether it did; a smaller filter is zeroed
    /// instead (its memory stays with the allocator). The caller guarantees that no reader
    /// answers from this filter without checking that it is still the current one (see
    /// `store::filters`), as for [`Blocks::zero`].
    pub(crate) fn release(&self) -> bool {
        #[cfg(all(target_os = "linux", not(bloomsled_loom)))]
        if self.blocks.mapping.is_some() {
            let page = 4096;
            let start = self.blocks.ptr.as_ptr() as usize;
            let len = self.blocks.len * std::mem::size_of::<Block>() / page * page;
            // SAFETY: `[start, start + len)` lies inside the private anonymous mapping
            // `Owned::mapped` made for these blocks (`start` is huge-page aligned, so a page
            // boundary, and `len` whole pages of the blocks' bytes), which stays mapped until
            // `Drop`. MADV_DONTNEED on such memory makes later reads see zero-filled pages:
            // every word is an `AtomicU64`, shared only through `&` (interior mutability, no
            // reference assumes the words unchanged) and zero is a valid value of each, as if
            // `zero` had stored it. A failure leaves the memory as it was.
            #[allow(unsafe_code)]
            let released =
                unsafe { libc::madvise(start as *mut libc::c_void, len, libc::MADV_DONTNEED) == 0 };
            if released {
                // The tail past the last whole page, if any, by hand.
                let tail = len / std::mem::size_of::<Block>();
                for b in &self.blocks[tail..] {
                    for w in &b.0 {
                        w.store(0, Relaxed);
                    }
                }
                return true;
            }
        }
        self.zero();
        false
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
    pub(crate) fn load_word(&self, i: usize, j: usize) -> u64 {
        self.blocks[i].0[j].load(Relaxed)
    }

    /// Stores `v` into word `j` (0..8) of block `i`.
    #[inline]
    pub(crate) fn store_word(&self, i: usize, j: usize, v: u64) {
        self.blocks[i].0[j].store(v, Relaxed);
    }

    /// Hints the CPU to start loading block `i` (see [`prefetch`]). The batched lookups
    /// call it whatever the probe kernel.
    #[inline(always)]
    pub(crate) fn prefetch(&self, i: usize) {
        prefetch(&self.blocks[i]);
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

/// Filters at least this large ask for transparent huge pages: the smallest filter whose one
/// huge page costs at most an eighth more memory (see `huge_backed_len`), 8/9 of a huge page
/// (1.78 MiB; 1M keys at the default 0.1% take 1.94 MB).
#[cfg_attr(any(bloomsled_loom, not(target_os = "linux")), allow(dead_code))]
const HUGE_PAGE_MIN_BYTES: usize = (HUGE_PAGE_BYTES * 8).div_ceil(9);

/// The size of a transparent huge page (x86-64 and aarch64 with 4 KiB base pages).
#[cfg_attr(any(bloomsled_loom, not(target_os = "linux")), allow(dead_code))]
const HUGE_PAGE_BYTES: usize = 2 << 20;

/// The bytes of a filter of `len` bytes (starting on a huge-page boundary) to back with huge
/// pages: all of it, its last huge page extending past its end, if that costs at most an
/// eighth more memory (a 3.9 MB filter, 2M keys at 0.1%, then takes two huge pages instead
/// of one and 950 small ones); otherwise its whole huge pages, the rest in small pages.
#[cfg(all(target_os = "linux", not(bloomsled_loom)))]
fn huge_backed_len(len: usize) -> usize {
    let whole = len / HUGE_PAGE_BYTES * HUGE_PAGE_BYTES;
    match len.checked_next_multiple_of(HUGE_PAGE_BYTES) {
        Some(rounded) if rounded - len <= len / 8 => rounded,
        _ => whole,
    }
}

/// Asks the kernel to back the 2 MiB-aligned part of `[addr, addr + len)` with transparent
/// huge pages (Linux `madvise(MADV_HUGEPAGE)`; a no-op elsewhere, for small filters, or when
/// the kernel says no), and returns the blocks (64 bytes each, counted from `addr`) of that
/// part: the caller writes one word per huge page before anything reads them (see
/// [`Blocks::zeroed`]). Called before the memory is first touched, so the first write can
/// allocate huge pages directly, which matters where THP is in `madvise` mode.
#[cfg(all(target_os = "linux", not(bloomsled_loom)))]
fn advise_huge_pages(addr: usize, len: usize) -> std::ops::Range<usize> {
    if len < HUGE_PAGE_MIN_BYTES {
        return 0..0;
    }
    let start = addr.next_multiple_of(HUGE_PAGE_BYTES);
    let end = (addr + len) / HUGE_PAGE_BYTES * HUGE_PAGE_BYTES;
    if end <= start {
        return 0..0;
    }
    // SAFETY: `[start, end)` lies inside the mapping `Owned::mapped` just made, not yet
    // touched, and no Rust reference points into it. MADV_HUGEPAGE is advice about how to
    // back those pages: it never reads or writes their contents, and a failure (THP
    // disabled, old kernel) leaves the memory as it was, so the result only decides
    // whether to back the huge pages now.
    #[allow(unsafe_code)]
    let advised =
        unsafe { libc::madvise(start as *mut libc::c_void, end - start, libc::MADV_HUGEPAGE) == 0 };
    if !advised {
        return 0..0;
    }
    let block = std::mem::size_of::<Block>();
    (start - addr) / block..(end - addr) / block
}

/// Hints the CPU to start loading the cache line that holds `r` (`prefetcht0` on x86-64,
/// `prfm pldl1keep` on aarch64, a no-op elsewhere).
#[inline(always)]
pub(crate) fn prefetch<T>(r: &T) {
    #[cfg(target_arch = "x86_64")]
    {
        use std::arch::x86_64::{_mm_prefetch, _MM_HINT_T0};
        let p = std::ptr::from_ref(r).cast::<i8>();
        // SAFETY: SSE is part of the x86-64 baseline, so the intrinsic's target feature is
        // always present; a prefetch never faults nor reads into Rust-visible state, and `p`
        // points into a live value anyway (it comes from a reference).
        #[allow(unsafe_code)]
        unsafe {
            _mm_prefetch::<_MM_HINT_T0>(p)
        };
    }
    #[cfg(target_arch = "aarch64")]
    {
        let p = std::ptr::from_ref(r);
        // SAFETY: `prfm` is a hint: it never faults, writes nothing and changes no register
        // or flag; `p` points into a live value anyway (it comes from a reference).
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
    let _ = r;
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
        // On Linux, a mapping of its own starting on a huge-page boundary; a small filter
        // stays on the heap.
        #[cfg(target_os = "linux")]
        {
            assert!(b.blocks.mapping.is_some());
            assert_eq!(b.blocks.ptr.as_ptr() as usize % HUGE_PAGE_BYTES, 0);
            assert!(Blocks::zeroed(1000).unwrap().blocks.mapping.is_none());
        }
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

    /// A filter whose last huge page would be mostly its own (2M keys at 0.1%: 3.9 MB) is
    /// backed by huge pages to its end, the mapping long enough for that last page; one
    /// whose tail is small keeps it in small pages; below one huge page, none. Every block,
    /// the tail's too, reads zero and keeps what is written.
    #[cfg(all(target_os = "linux", not(bloomsled_loom)))]
    #[test]
    fn a_mid_sized_filter_is_huge_paged_to_its_end_when_that_wastes_little() {
        const MIB: usize = 1 << 20;
        assert_eq!(huge_backed_len(3_900_000), 4 * MIB);
        assert_eq!(huge_backed_len(16 * MIB), 16 * MIB);
        // From 16 MiB on, the last huge page never costs more than an eighth.
        assert_eq!(huge_backed_len(16 * MIB + 64), 18 * MIB);
        assert_eq!(huge_backed_len(2 * MIB + MIB / 2), 2 * MIB); // 1.5 MiB more: too much
        assert_eq!(huge_backed_len(MIB), 0);
        // One huge page from 8/9 of one (1M keys at 0.1% take 1.94 MB); below that, none.
        assert_eq!(huge_backed_len(1_950_016), 2 * MIB);
        assert_eq!(huge_backed_len(HUGE_PAGE_MIN_BYTES), 2 * MIB);
        assert_eq!(huge_backed_len(HUGE_PAGE_MIN_BYTES - 64), 0);
        assert!(Blocks::zeroed((HUGE_PAGE_MIN_BYTES - 64) / 64)
            .unwrap()
            .blocks
            .mapping
            .is_none());
        for bytes in [1_950_016usize, 3_900_032, 2 * MIB + 64] {
            let n = bytes / 64;
            let b = Blocks::zeroed(n).unwrap();
            assert_eq!(b.len(), n);
            let (_, map_len) = b.blocks.mapping.expect("a mapping of its own");
            let start = b.blocks.ptr.as_ptr() as usize;
            assert_eq!(start % HUGE_PAGE_BYTES, 0);
            let base = b.blocks.mapping.unwrap().0;
            assert!(start + huge_backed_len(bytes).max(bytes) <= base + map_len);
            assert!(b.words().all(|w| w == 0));
            let mut m = [0u64; BLOCK_WORDS];
            m[7] = 1 << 63;
            for i in (0..n).step_by(997).chain([n - 1]) {
                assert!(b.set(i, &m));
                assert_eq!(b.count_ones(i), 1);
            }
        }
    }
}

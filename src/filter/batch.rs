//! Batched probes and inserts: hash a batch of keys, prefetch their blocks, then test them,
//! so that the cache misses of many keys overlap.

use super::layout::block_index;
use super::Filter;

/// How many keys a batched probe hashes and prefetches before it tests them: enough misses
/// in flight to cover DRAM latency, few enough that the blocks are still in L1 when tested
/// (32 blocks are 2 KiB).
const BATCH: usize = 32;

/// How many batches ahead `contains_hash_many` prefetches. With hashes given, testing a
/// batch takes less than a DRAM miss, so a prefetch issued one batch ahead may still be in
/// flight when its block is tested; two ahead leave it time to land (more gain nothing).
/// The 64 blocks in flight are 4 KiB, still far inside L1.
const AHEAD: usize = 2;

impl Filter {
    /// Inserts every key of `keys`.
    pub fn insert_many<K: AsRef<[u8]>>(&self, keys: &[K]) {
        for chunk in keys.chunks(BATCH) {
            let mut hashes = [0u64; BATCH];
            let n = chunk.len();
            for (h, k) in hashes.iter_mut().zip(chunk) {
                *h = self.hash(k.as_ref());
                self.blocks
                    .prefetch(block_index(*h, self.blocks.len() as u64));
            }
            for &h in &hashes[..n] {
                self.insert_hash(h);
            }
        }
    }

    /// Tests many keys at once: hashes a batch, prefetches every block, then tests them, so
    /// the cache misses overlap instead of following each other. `out[i]` is
    /// `contains(keys[i])`.
    pub fn contains_many<K: AsRef<[u8]>>(&self, keys: &[K]) -> Vec<bool> {
        let mut out = vec![false; keys.len()];
        self.contains_many_into(keys, &mut out);
        out
    }

    /// [`Filter::contains_many`] into a caller's buffer.
    ///
    /// # Panics
    /// If `out` is shorter than `keys`.
    pub fn contains_many_into<K: AsRef<[u8]>>(&self, keys: &[K], out: &mut [bool]) {
        assert!(
            out.len() >= keys.len(),
            "contains_many_into: output buffer has {} slots for {} keys",
            out.len(),
            keys.len()
        );
        // Batch c + 1 is hashed, each block prefetched as soon as its hash is known, before
        // batch c is tested: the hashing overlaps batch c's misses (rather than prefetching
        // batch c + 1 during the test of batch c, as `contains_hash_many` does, whose hashes
        // are given); hashing further ahead gains nothing.
        let (mut now, mut then) = ([0u64; BATCH], [0u64; BATCH]);
        let mut chunks = keys.chunks(BATCH).zip(out.chunks_mut(BATCH)).peekable();
        if let Some((keys, _)) = chunks.peek() {
            self.hash_prefetch(keys, &mut now);
        }
        while let Some((keys, out)) = chunks.next() {
            if let Some((next, _)) = chunks.peek() {
                self.hash_prefetch(next, &mut then);
            }
            self.probe_batch(&now[..keys.len()], &[], out);
            std::mem::swap(&mut now, &mut then);
        }
    }

    /// Hashes `keys` (at most [`BATCH`]) into `hashes` and prefetches each key's block.
    #[inline(always)]
    fn hash_prefetch<K: AsRef<[u8]>>(&self, keys: &[K], hashes: &mut [u64; BATCH]) {
        let n_blocks = self.blocks.len() as u64;
        for (h, k) in hashes.iter_mut().zip(keys) {
            *h = self.hash(k.as_ref());
            self.blocks.prefetch(block_index(*h, n_blocks));
        }
    }

    /// Prefetches the blocks of `hashes`.
    #[inline(always)]
    pub(crate) fn prefetch_hashes(&self, hashes: &[u64]) {
        let n_blocks = self.blocks.len() as u64;
        for &h in hashes {
            self.blocks.prefetch(block_index(h, n_blocks));
        }
    }

    /// [`Filter::contains_many_into`] for precomputed hashes (see [`Filter::insert_hash`]).
    ///
    /// # Panics
    /// If `out` is shorter than `hashes`.
    pub fn contains_hash_many(&self, hashes: &[u64], out: &mut [bool]) {
        assert!(
            out.len() >= hashes.len(),
            "contains_hash_many: output buffer has {} slots for {} hashes",
            out.len(),
            hashes.len()
        );
        // Batch c + AHEAD's blocks are prefetched while batch c is tested.
        self.prefetch_hashes(&hashes[..hashes.len().min(AHEAD * BATCH)]);
        for (c, (chunk, out)) in hashes.chunks(BATCH).zip(out.chunks_mut(BATCH)).enumerate() {
            let ahead = hashes.get((c + AHEAD) * BATCH..).unwrap_or(&[]);
            self.probe_batch(chunk, &ahead[..ahead.len().min(BATCH)], out);
        }
    }

    /// Probes up to [`BATCH`] hashes whose blocks were prefetched earlier, and prefetches
    /// the blocks of `ahead`, a later batch, one per key tested.
    ///
    /// Pipelining: the misses of a later batch are in flight while batch c is tested, and
    /// issuing them one per key, between the tests, keeps the line-fill buffers from
    /// filling up and stalling on a burst of 32 prefetches (as prefetching a whole batch,
    /// then testing it, would). The probe itself has no branch on loaded data, so the tests
    /// of a batch overlap too.
    #[inline(always)]
    fn probe_batch(&self, hashes: &[u64], ahead: &[u64], out: &mut [bool]) {
        let n_blocks = self.blocks.len() as u64;
        for (j, (o, &h)) in out.iter_mut().zip(hashes).enumerate() {
            if let Some(&a) = ahead.get(j) {
                self.blocks.prefetch(block_index(a, n_blocks));
            }
            *o = self.probe(h, block_index(h, n_blocks));
        }
    }

    /// For each hash, whether any of `filters` may hold it: `out[i]` is true if some
    /// filter's [`Filter::contains_hash`] is. Every filter must use the seed the hashes were
    /// computed with. One pass over the hashes: the blocks of a batch in every filter are
    /// prefetched together, one batch ahead, so the misses of all filters overlap.
    ///
    /// # Panics
    /// If `out` is shorter than `hashes`.
    pub(crate) fn contains_any_hash_many(filters: &[&Filter], hashes: &[u64], out: &mut [bool]) {
        assert!(
            out.len() >= hashes.len(),
            "contains_any_hash_many: short output"
        );
        let prefetch = |chunk: &[u64]| {
            for f in filters {
                f.prefetch_hashes(chunk);
            }
        };
        let mut chunks = hashes.chunks(BATCH).zip(out.chunks_mut(BATCH)).peekable();
        if let Some((first, _)) = chunks.peek() {
            prefetch(first);
        }
        while let Some((chunk, out)) = chunks.next() {
            if let Some((next, _)) = chunks.peek() {
                prefetch(next);
            }
            for (o, &h) in out.iter_mut().zip(chunk) {
                // `|` rather than `||`: no branch on loaded data, the probes overlap.
                *o = filters.iter().fold(false, |any, f| {
                    any | f.probe(h, block_index(h, f.blocks.len() as u64))
                });
            }
        }
    }
}

//! One probe of many trees' filters for one key (a window's generations): `read_any`.

use super::Filters;

use crate::sync::{fence, Ordering};

/// Blocks [`read_any`] tests per kernel call (more trees take more calls).
const READ_ANY_CHUNK: usize = 8;

/// Whether any of `trees`' current filters may hold the key whose hash under `seed` is `h`:
/// `false` only if every one of them rules it out. `None` if some filter has another seed
/// (the caller then probes them one by one).
///
/// The filters are read as [`Filters::read`] reads one, all at once: each one's state is
/// read before its words (its block for `h`), the blocks are tested together
/// ([`crate::filter::Filter::contains_in_any`]: `h`'s draws computed once, no branch on what a block
/// holds, so the blocks' loads overlap), then every state is read again after one fence,
/// and the whole probe is repeated if any moved. For each filter that is the single-tree
/// protocol (module docs): its words were read between two reads of its state, and the
/// answer counts only if they agree.
///
/// The states are compared through their sums, so the lookup keeps no copy of them: a
/// state word only ever grows ([`Filters::swap`] raises the version above the index bits
/// and nothing else writes it), and a later read of a word by the same thread never
/// returns an older value than an earlier one (read-read coherence), so each second read is
/// at least its first, and the sums (in `u128`, which cannot overflow) are equal exactly
/// when every word is unchanged.
#[inline]
pub(crate) fn read_any<'a, I>(trees: I, seed: u64, h: u64) -> Option<bool>
where
    I: Iterator<Item = &'a Filters> + Clone,
{
    loop {
        let mut it = trees.clone();
        let (mut before, mut any) = (0u128, false);
        while let Some(first) = it.next() {
            let (s, f) = first.current_bits_racy();
            if f.seed() != seed {
                return None;
            }
            before += u128::from(s);
            // One kernel call per chunk of filters of one `k` (the first one's).
            let k = f.num_hashes();
            let mut blocks = [f.block_for(h); READ_ANY_CHUNK];
            let mut n = 1;
            while n < READ_ANY_CHUNK {
                let Some(t) = it.clone().next() else { break };
                let (s, g) = t.current_bits_racy();
                if g.seed() != seed {
                    return None;
                }
                if g.num_hashes() != k {
                    break; // it starts the next chunk
                }
                it.next();
                before += u128::from(s);
                blocks[n] = g.block_for(h);
                n += 1;
            }
            any |= f.contains_in_any(&blocks[..n], h);
        }
        // One fence for every check (see `Filters::unchanged`).
        fence(Ordering::Acquire);
        let after: u128 = trees
            .clone()
            .map(|t| u128::from(t.state.word.load(Ordering::Relaxed)))
            .sum();
        if after == before {
            return Some(any);
        }
    }
}

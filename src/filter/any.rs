//! A tree's filter: plain or counting, behind one interface.

use super::{CountingFilter, Filter};
use crate::error::{Error, FilterShape, Result};

/// Whether a filter can forget keys.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum FilterMode {
    /// Bits only: removed keys leave their bits set (counted as stale) until a rebuild.
    #[default]
    Plain,
    /// 4-bit saturating counters behind the bits: removes clear what they can.
    Counting,
}

impl FilterMode {
    /// The mode's name: "plain" or "counting".
    pub fn name(self) -> &'static str {
        match self {
            FilterMode::Plain => "plain",
            FilterMode::Counting => "counting",
        }
    }
}

/// The filter of a tree in either mode.
///
/// `repr(C)`: both variants' payloads start at the same offset, and a `CountingFilter` starts
/// with its bits, so the `Filter` that lookups read is at the same address in either mode and
/// [`AnyFilter::bits`] is the same address in both arms, which the compiler folds: no load
/// of the tag on the lookup path.
#[repr(C)]
pub(crate) enum AnyFilter {
    Plain(Filter),
    Counting(CountingFilter),
}

impl AnyFilter {
    pub(crate) fn new(mode: FilterMode, shape: FilterShape, capacity: u64) -> Result<AnyFilter> {
        Ok(match mode {
            FilterMode::Plain => AnyFilter::Plain(Filter::with_shape(shape, capacity)?),
            FilterMode::Counting => {
                AnyFilter::Counting(CountingFilter::with_shape(shape, capacity)?)
            }
        })
    }

    /// Rebuilds a filter from the words of a snapshot of the given kind.
    pub(crate) fn from_words(
        mode: FilterMode,
        words: &[u64],
        num_hashes: u32,
        seed: u64,
        capacity: u64,
        items: u64,
    ) -> Result<AnyFilter> {
        Ok(match mode {
            FilterMode::Plain => AnyFilter::Plain(Filter::from_parts(
                words, num_hashes, seed, capacity, items,
            )?),
            FilterMode::Counting => AnyFilter::Counting(CountingFilter::from_counter_words(
                words, num_hashes, seed, capacity, items,
            )?),
        })
    }

    /// A one-block filter whose every bit (every counter, stuck at its maximum, in counting
    /// mode) is set: it answers "maybe" for every key, forever, whatever is added or
    /// removed. A tree serves with it while its real filter is rebuilt; `seed` is the one
    /// the real filter uses, since writers hash once for both.
    pub(crate) fn pass_all(mode: FilterMode, num_hashes: u32, seed: u64) -> Result<AnyFilter> {
        let words = match mode {
            FilterMode::Plain => vec![u64::MAX; super::layout::BLOCK_WORDS],
            FilterMode::Counting => vec![u64::MAX; super::counting::COUNTER_WORDS],
        };
        AnyFilter::from_words(mode, &words, num_hashes, seed, 1, 0)
    }

    pub(crate) fn mode(&self) -> FilterMode {
        match self {
            AnyFilter::Plain(_) => FilterMode::Plain,
            AnyFilter::Counting(_) => FilterMode::Counting,
        }
    }

    /// The bits lookups read.
    #[inline(always)]
    pub(crate) fn bits(&self) -> &Filter {
        match self {
            AnyFilter::Plain(f) => f,
            AnyFilter::Counting(c) => c.bits(),
        }
    }

    /// Counts a key in: sets its bits (plain) or raises its counters (counting).
    #[inline]
    pub(crate) fn admit_hash(&self, h: u64) {
        match self {
            AnyFilter::Plain(f) => {
                f.insert_hash(h);
            }
            AnyFilter::Counting(c) => c.insert_hash(h),
        }
    }

    /// Counts a key out (counting mode); a plain filter cannot forget and ignores it.
    #[inline]
    pub(crate) fn release_hash(&self, h: u64) {
        if let AnyFilter::Counting(c) = self {
            c.remove_hash(h);
        }
    }

    /// Keys counted in: bit-setting inserts (plain, removed keys included) or inserts less
    /// removes (counting).
    pub(crate) fn items(&self) -> u64 {
        match self {
            AnyFilter::Plain(f) => f.items(),
            AnyFilter::Counting(c) => c.items(),
        }
    }

    pub(crate) fn capacity(&self) -> u64 {
        self.bits().capacity()
    }

    pub(crate) fn memory_bytes(&self) -> usize {
        match self {
            AnyFilter::Plain(f) => f.memory_bytes(),
            AnyFilter::Counting(c) => c.memory_bytes(),
        }
    }

    /// The words a snapshot stores: the bits (plain) or the counters (counting).
    pub(crate) fn image_words(&self) -> Result<Vec<u64>> {
        let words = match self {
            AnyFilter::Plain(f) => f.try_words(),
            AnyFilter::Counting(c) => c.try_counter_words(),
        };
        words.ok_or(Error::OutOfMemory {
            what: "a snapshot copy of the filter",
            bytes: self.memory_bytes() as u64,
        })
    }

    /// Counters stuck at their maximum (0 in plain mode). O(size).
    pub(crate) fn stuck_counters(&self) -> u64 {
        match self {
            AnyFilter::Plain(_) => 0,
            AnyFilter::Counting(c) => c.stuck_counters(),
        }
    }

    /// Empties a retired filter, giving its memory back to the operating system where it
    /// can (a large plain filter on Linux); true if it did.
    pub(crate) fn release(&self) -> bool {
        match self {
            AnyFilter::Plain(f) => f.release(),
            AnyFilter::Counting(c) => {
                c.zero();
                false
            }
        }
    }

    /// Empties the filter for reuse.
    pub(crate) fn zero(&self) {
        match self {
            AnyFilter::Plain(f) => f.zero(),
            AnyFilter::Counting(c) => c.zero(),
        }
    }

    /// True if a filter of this mode, shape and capacity would be identical to this one.
    pub(crate) fn same_kind(&self, mode: FilterMode, shape: &FilterShape, capacity: u64) -> bool {
        self.mode() == mode && self.bits().shape() == *shape && self.capacity() == capacity
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pass_all_says_maybe_for_every_key_whatever_is_removed() {
        for mode in [FilterMode::Plain, FilterMode::Counting] {
            let f = AnyFilter::pass_all(mode, 7, 42).unwrap();
            let keys: Vec<Vec<u8>> = (0..2_000u32).map(|i| i.to_le_bytes().to_vec()).collect();
            for k in &keys {
                let h = f.bits().hash(k);
                f.admit_hash(h);
                f.release_hash(h);
                f.release_hash(h);
            }
            assert!(keys.iter().all(|k| f.bits().contains(k)), "{mode:?}");
            assert_eq!(f.bits().seed(), 42);
        }
    }
}

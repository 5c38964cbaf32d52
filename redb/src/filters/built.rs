//! One table's filter as a build made it, and the rule that says when a transaction may
//! trust it (rule 3 of `filters.rs`: the epoch, and the state it was scanned at).

use bloomsled::reuse::Hashed;
use bloomsled::{Filter, FilterConfig};

/// The smallest capacity a table's filter is sized for.
pub(super) const MIN_CAPACITY: u64 = 1024;
/// The false-positive rate a filter is sized for, at its capacity: the core's default
/// (0.1%, 15.5 bits per key). A false positive costs one redb lookup (1.2–1.6 µs warm at 1M
/// keys, ~35 µs cold), so the rate bounds the speed-up of an absent lookup at about its
/// inverse: at 0.3% the cold bench measured 210× on the mean, its false positives' disk
/// reads a hundred nanoseconds of every absent lookup; at 0.1% they cost a third of that.
const FALSE_POSITIVE_RATE: f64 = bloomsled::DEFAULT_FALSE_POSITIVE_RATE;

/// One table's filter as a build made it.
pub(crate) struct Built {
    filter: Filter,
    /// `Some(epoch)`: complete for every state at least as new as `valid_from`, unless the
    /// database's epoch moved since. `None`: still being built, never rules a key out.
    pub(super) trusted_epoch: Option<u64>,
    /// The commit count of the state the build scanned.
    pub(super) valid_from: u64,
}

impl Built {
    pub(super) fn new(seed: u64, capacity: u64) -> Option<Built> {
        let config = FilterConfig::new(capacity.max(MIN_CAPACITY))
            .false_positive_rate(FALSE_POSITIVE_RATE)
            .seed(seed);
        // Under loom, one block and one bit per key: each bit is a loom atomic and each
        // probe a step loom interleaves, and no rule depends on the filter's shape.
        #[cfg(bloomsled_loom)]
        let config = config.expected_items(1).num_hashes(1);
        Some(Built {
            filter: config.build().ok()?,
            trusted_epoch: None,
            valid_from: u64::MAX,
        })
    }

    /// False: no key with these bytes was ever inserted.
    #[inline]
    pub(crate) fn may_contain(&self, key: &[u8]) -> bool {
        self.filter.contains(key)
    }

    /// [`Built::may_contain`] for a lookup that goes on to the false-positive memory:
    /// `Some` (the key's hash, for the memory, which then does not hash the key again) if
    /// the filter passes the key.
    #[inline]
    pub(crate) fn probe(&self, key: &[u8]) -> Option<Hashed> {
        let h = self.filter.hash(key);
        self.filter.contains_hash(h).then_some(Hashed {
            h,
            seed: self.filter.seed(),
        })
    }

    /// A filter loaded from a clean close, not yet trusted (a build installs it).
    pub(super) fn loaded(filter: Filter) -> Built {
        Built {
            filter,
            trusted_epoch: None,
            valid_from: u64::MAX,
        }
    }

    /// The core's filter inside.
    pub(crate) fn filter(&self) -> &Filter {
        &self.filter
    }

    pub(super) fn insert_hash(&self, h: u64) {
        self.filter.insert_hash(h);
    }

    /// True once the filter holds more keys than it was sized for.
    pub(super) fn full(&self) -> bool {
        self.filter.items() > self.filter.capacity()
    }

    /// Whether a transaction whose state is at least `seq` commits new may trust this filter.
    pub(crate) fn trusted_for(&self, epoch: u64, seq: u64) -> bool {
        self.trusted_epoch == Some(epoch) && seq >= self.valid_from
    }
}

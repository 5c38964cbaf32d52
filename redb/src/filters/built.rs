//! One table's filter as a build made it, and the rule that says when a transaction may
//! trust it (rule 3 of `filters.rs`: the epoch, and the state it was scanned at).

use bloomsled::reuse::Hashed;
use bloomsled::{CountingFilter, Filter, FilterConfig};

/// The smallest capacity a table's filter is sized for.
pub(super) const MIN_CAPACITY: u64 = 1024;
/// The false-positive rate a filter is sized for, at its capacity: the core's default
/// (0.1%, 15.5 bits per key). A false positive costs one redb lookup (1.2–1.6 µs warm at 1M
/// keys, ~35 µs cold), so the rate bounds the speed-up of an absent lookup at about its
/// inverse: at 0.3% the cold bench measured 210× on the mean, its false positives' disk
/// reads a hundred nanoseconds of every absent lookup; at 0.1% they cost a third of that.
const FALSE_POSITIVE_RATE: f64 = bloomsled::DEFAULT_FALSE_POSITIVE_RATE;

/// A table's filter: plain bits, or the core's counting filter (counting mode: a removed
/// key is counted out, `docs/redb.md`, "Counting mode").
pub(crate) enum Bits {
    Plain(Filter),
    Counting(CountingFilter),
}

/// One table's filter as a build made it.
pub(crate) struct Built {
    filter: Bits,
    /// `Some(epoch)`: complete for every state at least as new as `valid_from`, unless the
    /// database's epoch moved since. `None`: still being built, never rules a key out.
    pub(super) trusted_epoch: Option<u64>,
    /// The commit count of the state the build scanned.
    pub(super) valid_from: u64,
}

impl Built {
    /// An empty filter for `capacity` keys, counting if `counting`.
    pub(super) fn new(seed: u64, capacity: u64, counting: bool) -> Option<Built> {
        let config = FilterConfig::new(capacity.max(MIN_CAPACITY))
            .false_positive_rate(FALSE_POSITIVE_RATE)
            .seed(seed);
        // Under loom, one block and one bit per key: each bit is a loom atomic and each
        // probe a step loom interleaves, and no rule depends on the filter's shape.
        #[cfg(bloomsled_loom)]
        let config = config.expected_items(1).num_hashes(1);
        let filter = match counting {
            true => Bits::Counting(
                CountingFilter::with_shape(config.shape().ok()?, config.get_expected_items())
                    .ok()?,
            ),
            false => Bits::Plain(config.build().ok()?),
        };
        Some(Built {
            filter,
            trusted_epoch: None,
            valid_from: u64::MAX,
        })
    }

    /// False: no key with these bytes was ever inserted.
    #[inline]
    pub(crate) fn may_contain(&self, key: &[u8]) -> bool {
        self.filter().contains(key)
    }

    /// [`Built::may_contain`] for a lookup that goes on to the false-positive memory:
    /// `Some` (the key's hash, for the memory, which then does not hash the key again) if
    /// the filter passes the key.
    #[inline]
    pub(crate) fn probe(&self, key: &[u8]) -> Option<Hashed> {
        let f = self.filter();
        let h = f.hash(key);
        f.contains_hash(h).then_some(Hashed { h, seed: f.seed() })
    }

    /// A filter loaded from a clean close, not yet trusted (a build installs it).
    pub(super) fn loaded(filter: Bits) -> Built {
        Built {
            filter,
            trusted_epoch: None,
            valid_from: u64::MAX,
        }
    }

    /// The bits lookups read (a counting filter's bits, in counting mode).
    #[inline]
    pub(crate) fn filter(&self) -> &Filter {
        match &self.filter {
            Bits::Plain(f) => f,
            Bits::Counting(c) => c.bits(),
        }
    }

    /// The counting filter inside, in counting mode.
    pub(crate) fn counting(&self) -> Option<&CountingFilter> {
        match &self.filter {
            Bits::Plain(_) => None,
            Bits::Counting(c) => Some(c),
        }
    }

    /// Counts the key of hash `h` in (sets its bits, or raises its counters).
    pub(super) fn insert_hash(&self, h: u64) {
        match &self.filter {
            Bits::Plain(f) => {
                f.insert_hash(h);
            }
            Bits::Counting(c) => c.insert_hash(h),
        }
    }

    /// Counts the key of hash `h` out (counting mode; a plain filter forgets nothing). Only
    /// for a key this filter counted in and whose removal is committed (`commits.rs`).
    pub(super) fn remove_hash(&self, h: u64) {
        if let Bits::Counting(c) = &self.filter {
            c.remove_hash(h);
        }
    }

    /// Keys counted in (less those counted out, in counting mode).
    pub(crate) fn items(&self) -> u64 {
        match &self.filter {
            Bits::Plain(f) => f.items(),
            Bits::Counting(c) => c.items(),
        }
    }

    /// Bytes of memory (bits, and counters in counting mode).
    pub(crate) fn memory_bytes(&self) -> usize {
        match &self.filter {
            Bits::Plain(f) => f.memory_bytes(),
            Bits::Counting(c) => c.memory_bytes(),
        }
    }

    /// True once the filter holds more keys than it was sized for.
    pub(super) fn full(&self) -> bool {
        self.items() > self.filter().capacity()
    }

    /// Whether a transaction whose state is at least `seq` commits new may trust this filter.
    pub(crate) fn trusted_for(&self, epoch: u64, seq: u64) -> bool {
        self.trusted_epoch == Some(epoch) && seq >= self.valid_from
    }
}

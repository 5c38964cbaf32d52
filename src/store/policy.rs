//! When and how a tree's filter is rebuilt: the policy from the configuration, and the
//! bookkeeping every rebuild shares (one at a time, counts, the current filter's limit).

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use crate::error::{FilterShape, Result};
use crate::filter::any::AnyFilter;
use crate::filter::{math, FilterConfig};

/// Below this share of the capacity, the live keys leave room to grow after a rebuild.
pub(crate) const FILL_AFTER_REBUILD: f64 = 0.75;

/// The fewest bits per key at which the blocked model's rate with `k` hashes is within
/// `bound`, to an ulp (bisection: the rate falls as bits per key grow).
fn min_bits_per_key(k: u32, bound: f64) -> f64 {
    // Past a 1/512 chance per key (lo) every bit is set; at 4,096 bits per key (hi) a
    // block holds less than a key: the range covers every bound a model can meet.
    let (mut lo, mut hi) = (0.05_f64, 4096.0_f64);
    while hi - lo > f64::EPSILON * hi {
        let mid = (lo + hi) / 2.0;
        if mid <= lo || mid >= hi {
            break;
        }
        if math::blocked_fpr(mid, k) <= bound {
            hi = mid;
        } else {
            lo = mid;
        }
    }
    hi
}

/// How much larger than its keys a growing tree's rebuilt filter is: `small` times them
/// below [`LARGE_TREE_KEYS`] live keys, `large` times them from there.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct Growth {
    pub(crate) small: f64,
    pub(crate) large: f64,
}

/// From this many live keys a growing tree grows by the large factor.
pub(crate) const LARGE_TREE_KEYS: u64 = 1 << 20;

impl Growth {
    /// The default: doubling while the filter is small (under a million keys, about 2 MB:
    /// few rebuilds, and its memory is small whatever the slack), then
    /// [`DEFAULT_LARGE_GROWTH_FACTOR`](crate::DEFAULT_LARGE_GROWTH_FACTOR), so a large
    /// tree's filter is within that of what its keys need.
    pub(crate) const DEFAULT: Growth = Growth {
        small: crate::store::config::DEFAULT_GROWTH_FACTOR,
        large: crate::store::config::DEFAULT_LARGE_GROWTH_FACTOR,
    };

    /// One factor at every size (a user's [`crate::Config::growth_factor`]).
    pub(crate) fn uniform(factor: f64) -> Growth {
        Growth {
            small: factor,
            large: factor,
        }
    }

    fn factor(&self, live: u64) -> f64 {
        if live >= LARGE_TREE_KEYS {
            self.large
        } else {
            self.small
        }
    }
}

/// When and how to rebuild, from the configuration.
#[derive(Debug, Clone)]
pub(crate) struct RebuildPolicy {
    pub(crate) auto: bool,
    /// Modelled false-positive rate that triggers a rebuild; `None`: twice the target for a
    /// filter sized by a setting, the target itself for one that grows with its tree (so
    /// a tree that grew from nothing ends at its rate, not twice it).
    pub(crate) bound: Option<f64>,
    /// A growing tree's rebuilt filter is for this many times its keys.
    pub(crate) growth: Growth,
    /// Sizing of new filters (capacity, rate or bits per key, k).
    pub(crate) base: FilterConfig,
}

impl RebuildPolicy {
    /// The most items the filter holds before its modelled false-positive rate passes the
    /// bound (plain mode counts removed keys: their bits are still set).
    pub(crate) fn items_limit(&self, f: &AnyFilter) -> u64 {
        let bits = f.bits();
        let k = bits.num_hashes();
        let slack = if self.base.grows() { 1.0 } else { 2.0 };
        let target =
            || math::remembered((k, bits.bits_per_key().to_bits(), 0), || bits.target_fpr());
        let bound = self.bound.unwrap_or_else(|| slack * target());
        // The model depends on bits per key alone and falls as they grow: the limit is
        // `m` over the fewest bits per key that keep it within the bound, found once per
        // `k` and bound (thousands of trees open without a search each).
        let per_key = math::remembered((k, bound.to_bits(), 1), || min_bits_per_key(k, bound));
        let m = bits.num_bits() as f64;
        let mut n = (m / per_key).floor();
        // The bisection ends an ulp or so above the threshold: a count that lands on it
        // (a filter exactly at its own rate) is settled with the model itself.
        let next = m / (n + 1.0);
        if (next / per_key - 1.0).abs() < 1e-9
            && math::remembered((k, next.to_bits(), 2), || math::blocked_fpr(next, k)) <= bound
        {
            n += 1.0;
        }
        if n < 1.0 {
            0
        } else {
            (n as u64).min(bits.num_bits().max(2))
        }
    }

    /// Capacity for `live` keys: for a tree that grows, its growth factor times them (at
    /// least its starting capacity); for a sized one, the configured capacity doubled until
    /// they fill at most three quarters of it.
    pub(crate) fn capacity_for(&self, live: u64) -> u64 {
        if self.base.grows() {
            let want = (live as f64 * self.growth.factor(live)).ceil();
            return (want.min(u64::MAX as f64) as u64).max(self.base.get_expected_items());
        }
        let mut cap = self.base.get_expected_items().max(1);
        while live as f64 > FILL_AFTER_REBUILD * cap as f64 {
            match cap.checked_mul(2) {
                Some(c) => cap = c,
                None => break,
            }
        }
        cap
    }

    /// Whether a filter of `capacity` that a scan of `scanned` keys filled is the one to
    /// keep: within its rate for a growing tree, with room to grow for a sized one.
    pub(crate) fn fits(&self, scanned: u64, capacity: u64) -> bool {
        if self.base.grows() {
            scanned <= capacity
        } else {
            scanned as f64 <= FILL_AFTER_REBUILD * capacity as f64
        }
    }

    /// The shape of a rebuilt filter: the configured sizing at `capacity` keys, hashed with
    /// `seed` (the tree's: a rebuild never changes it).
    pub(crate) fn shape_for(&self, capacity: u64, seed: u64) -> Result<FilterShape> {
        self.base
            .clone()
            .expected_items(capacity)
            .seed(seed)
            .shape()
    }
}

/// Per-tree rebuild bookkeeping.
pub(crate) struct RebuildState {
    pub(crate) policy: RebuildPolicy,
    /// One rebuild at a time.
    pub(crate) lock: Mutex<()>,
    /// An automatic rebuild was started and has not finished.
    pub(crate) pending: AtomicBool,
    pub(crate) running: AtomicBool,
    /// Automatic rebuilds failed once (logged); they are not retried.
    pub(crate) auto_failed: AtomicBool,
    pub(crate) rebuilds: AtomicU64,
    pub(crate) resizes: AtomicU64,
    /// The stale total when the current filter's scan started.
    pub(crate) stale_base: AtomicU64,
    /// `items_limit` of the current filter.
    pub(crate) limit: AtomicU64,
    /// Keys the running scan has read.
    pub(crate) scanned: AtomicU64,
    /// What the last finished scan read, and the tree's insert and remove counts when it
    /// started: with the counts since, an upper bound of the live keys that an overfull
    /// filter's own count (bits newly set) cannot give.
    pub(crate) at_last_scan: Mutex<(u64, u64, u64)>,
    /// The tree's written keys (`TreeState::written`) when the last scan's filter became
    /// current: a rebuild is started again after one ends only for writes since.
    pub(crate) written_at_swap: AtomicU64,
    /// When the running rebuild started, and the keys it expects to read.
    started: Mutex<(Instant, Option<u64>)>,
}

impl RebuildState {
    pub(crate) fn new(policy: RebuildPolicy, limit: u64) -> Self {
        RebuildState {
            policy,
            lock: Mutex::new(()),
            pending: AtomicBool::new(false),
            running: AtomicBool::new(false),
            auto_failed: AtomicBool::new(false),
            rebuilds: AtomicU64::new(0),
            resizes: AtomicU64::new(0),
            stale_base: AtomicU64::new(0),
            limit: AtomicU64::new(limit),
            scanned: AtomicU64::new(0),
            at_last_scan: Mutex::new((0, 0, 0)),
            written_at_swap: AtomicU64::new(0),
            started: Mutex::new((Instant::now(), None)),
        }
    }

    pub(crate) fn in_progress(&self) -> bool {
        self.pending.load(Ordering::Acquire) || self.running.load(Ordering::Acquire)
    }

    /// A rebuild starts now, expecting about `expected` keys if known.
    pub(crate) fn start_progress(&self, expected: Option<u64>) {
        self.scanned.store(0, Ordering::Relaxed);
        *self.started.lock().unwrap_or_else(|p| p.into_inner()) = (Instant::now(), expected);
    }

    /// Keys read by the running rebuild, time since it started and the keys it expects;
    /// `None` if no rebuild is running.
    pub(crate) fn progress(&self) -> Option<(u64, Duration, Option<u64>)> {
        if !self.in_progress() {
            return None;
        }
        let (since, expected) = *self.started.lock().unwrap_or_else(|p| p.into_inner());
        Some((
            self.scanned.load(Ordering::Relaxed),
            since.elapsed(),
            expected,
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn policy(capacity: u64) -> RebuildPolicy {
        RebuildPolicy {
            auto: true,
            bound: None,
            growth: Growth::DEFAULT,
            base: FilterConfig::new(capacity),
        }
    }

    #[test]
    fn capacity_doubles_until_the_live_keys_fit_with_room() {
        let p = policy(1000);
        assert_eq!(p.capacity_for(0), 1000);
        assert_eq!(p.capacity_for(750), 1000);
        assert_eq!(p.capacity_for(751), 2000);
        assert_eq!(p.capacity_for(1001), 2000);
        assert_eq!(p.capacity_for(1_000_000), 2_048_000);
        assert_eq!(
            policy(u64::MAX / 2 + 1).capacity_for(u64::MAX),
            u64::MAX / 2 + 1
        );
    }

    #[test]
    fn items_limit_is_where_the_model_crosses_the_bound() {
        let p = policy(10_000);
        let f = AnyFilter::new(
            crate::filter::FilterMode::Plain,
            p.base.shape().unwrap(),
            10_000,
        )
        .unwrap();
        let limit = p.items_limit(&f);
        let bits = f.bits();
        let fpr = |n: u64| math::blocked_fpr(bits.num_bits() as f64 / n as f64, bits.num_hashes());
        let bound = 2.0 * bits.target_fpr();
        assert!(fpr(limit) <= bound && fpr(limit + 1) > bound);
        // Twice the rate is reached well past capacity, and well before twice capacity.
        assert!(limit > 11_000 && limit < 20_000, "{limit}");
    }

    #[test]
    fn a_growing_filter_is_rebuilt_at_its_rate_not_twice_it() {
        let grows = RebuildPolicy {
            auto: true,
            bound: None,
            growth: Growth::DEFAULT,
            base: FilterConfig::growing(),
        };
        let f = AnyFilter::new(
            crate::filter::FilterMode::Plain,
            grows.base.shape().unwrap(),
            grows.base.get_expected_items(),
        )
        .unwrap();
        let limit = grows.items_limit(&f);
        let bits = f.bits();
        let fpr = |n: u64| math::blocked_fpr(bits.num_bits() as f64 / n as f64, bits.num_hashes());
        let target = bits.target_fpr();
        assert!(fpr(limit) <= target && fpr(limit + 1) > target, "{limit}");
        // Sized by a setting, the same filter is allowed twice its rate.
        let sized = RebuildPolicy {
            base: FilterConfig::new(grows.base.get_expected_items()),
            ..grows.clone()
        };
        assert!(sized.items_limit(&f) > limit + limit / 10);
    }

    #[test]
    fn a_growing_tree_is_rebuilt_for_its_factor_times_its_keys() {
        let p = RebuildPolicy {
            auto: true,
            bound: None,
            growth: Growth::uniform(1.5),
            base: FilterConfig::growing(),
        };
        assert_eq!(p.capacity_for(0), p.base.get_expected_items());
        assert_eq!(p.capacity_for(1_000_000), 1_500_000);
        assert_eq!(p.capacity_for(4_000_000), 6_000_000);
        assert!(p.fits(1_500_000, 1_500_000) && !p.fits(1_500_001, 1_500_000));
        // Sized trees keep room to grow after a rebuild.
        let sized = RebuildPolicy {
            base: FilterConfig::new(1_000),
            ..p
        };
        assert!(sized.fits(750, 1_000) && !sized.fits(751, 1_000));
    }

    #[test]
    fn by_default_a_tree_doubles_while_small_then_grows_by_a_quarter() {
        let p = RebuildPolicy {
            auto: true,
            bound: None,
            growth: Growth::DEFAULT,
            base: FilterConfig::growing(),
        };
        assert_eq!(p.capacity_for(1_000), 2_000);
        assert_eq!(
            p.capacity_for(LARGE_TREE_KEYS - 1),
            2 * (LARGE_TREE_KEYS - 1)
        );
        assert_eq!(p.capacity_for(4_000_000), 5_000_000);
        // Grown to 5M keys from the start, rebuilt each time the keys reach the capacity:
        // the last filter is within 1.25 times what 5M keys need.
        let mut cap = p.base.get_expected_items();
        while cap < 5_000_000 {
            cap = p.capacity_for(cap + 1);
        }
        assert!(cap <= 6_250_000, "{cap}");
    }
}

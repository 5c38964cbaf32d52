//! Generation arithmetic of a window: which generation a time falls in, which generations
//! are live, when one expires. Pure functions of milliseconds since the Unix epoch, so that
//! every client of a shared window (and the local window) computes the same ring.
//!
//! With `w = span / G` (the generation width) and `G` generations:
//! - time `t` belongs to generation `e = floor(t / w)`;
//! - at time `now` the live generations are `[cur - G + 1, cur]`, `cur = floor(now / w)`;
//! - generation `e` expires at `(e + G) · w`.
//!
//! So a key added at `t` (into generation `floor(t / w)`) is found until at least
//! `t + span − w` and forgotten once `t + span` has passed: `e·w ≤ t < (e+1)·w` gives
//! `t + span − w < (e + G)·w ≤ t + span`.

use std::ops::RangeInclusive;

/// The ring's shape: generation width and count.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Ring {
    /// Width of one generation, in milliseconds (at least 1).
    pub width_ms: u64,
    /// Number of live generations (at least 1).
    pub generations: u64,
}

impl Ring {
    /// The span the ring covers: `width · generations`, saturating.
    pub(crate) fn span_ms(self) -> u64 {
        self.width_ms.saturating_mul(self.generations)
    }

    /// The generation time `t` belongs to.
    pub(crate) fn generation_of(self, t_ms: u64) -> u64 {
        t_ms / self.width_ms.max(1)
    }

    /// The live generations at `now`, oldest first.
    pub(crate) fn live(self, now_ms: u64) -> RangeInclusive<u64> {
        let cur = self.generation_of(now_ms);
        cur.saturating_sub(self.generations.saturating_sub(1))..=cur
    }

    /// When generation `e` begins.
    pub(crate) fn starts_at(self, e: u64) -> u64 {
        e.saturating_mul(self.width_ms)
    }

    /// When generation `e` stops being live: `(e + G) · w`.
    pub(crate) fn expires_at(self, e: u64) -> u64 {
        e.saturating_add(self.generations)
            .saturating_mul(self.width_ms)
    }

    /// Whether generation `e` is live at `now` (part of the set the local window shares).
    #[cfg_attr(not(test), allow(dead_code))]
    pub(crate) fn is_live(self, e: u64, now_ms: u64) -> bool {
        self.live(now_ms).contains(&e)
    }

    /// Milliseconds a Redis key of generation `e` should still live at `now`: until the
    /// generation expires, plus `grace`; at least 1 (a relative TTL, so that it follows
    /// the window's clock rather than the server's).
    pub(crate) fn ttl_ms(self, e: u64, now_ms: u64, grace_ms: u64) -> u64 {
        self.expires_at(e)
            .saturating_add(grace_ms)
            .saturating_sub(now_ms)
            .max(1)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn seven_days_in_seven_generations() {
        let day = 86_400_000;
        let r = Ring {
            width_ms: day,
            generations: 7,
        };
        assert_eq!(r.span_ms(), 7 * day);
        let t = 20_000 * day + 5; // just after midnight (UTC) of day 20000
        assert_eq!(r.generation_of(t), 20_000);
        assert_eq!(r.live(t), 19_994..=20_000);
        assert_eq!(r.starts_at(20_000), 20_000 * day);
        assert_eq!(r.expires_at(20_000), 20_007 * day);
        assert!(r.is_live(20_000, 20_007 * day - 1));
        assert!(!r.is_live(20_000, 20_007 * day));
        assert_eq!(r.ttl_ms(20_000, 20_007 * day - 10, 60_000), 60_010);
        // Past its expiry plus grace a key still gets a positive TTL.
        assert_eq!(r.ttl_ms(20_000, 20_100 * day, 60_000), 1);
    }

    #[test]
    fn early_times_and_extremes_do_not_overflow() {
        let r = Ring {
            width_ms: 1000,
            generations: 7,
        };
        assert_eq!(r.live(0), 0..=0);
        assert_eq!(r.live(2_500), 0..=2);
        let big = Ring {
            width_ms: u64::MAX / 2,
            generations: u64::MAX,
        };
        assert_eq!(big.span_ms(), u64::MAX);
        assert_eq!(big.expires_at(3), u64::MAX);
        assert_eq!(big.ttl_ms(3, 0, u64::MAX), u64::MAX);
        assert_eq!(big.live(u64::MAX), 0..=2);
        let one = Ring {
            width_ms: 1,
            generations: 1,
        };
        assert_eq!(one.live(42), 42..=42);
        assert_eq!(one.expires_at(42), 43);
    }

    proptest! {
        /// The guarantee: a key added at `t` is found (its generation is live) at every
        /// time up to `t + span − w`, and at no time from `t + span` on.
        #[test]
        fn found_until_span_minus_width_forgotten_after_span(
            width in 1u64..10_000_000,
            generations in 1u64..64,
            t in 0u64..(1 << 42),
            dt in 0u64..(1 << 30),
        ) {
            let r = Ring { width_ms: width, generations };
            let e = r.generation_of(t);
            let span = r.span_ms();
            prop_assert!(r.is_live(e, t));
            let later = t + dt;
            if later <= t + span - width {
                prop_assert!(r.is_live(e, later), "forgotten early at {later}");
            }
            if later >= t + span {
                prop_assert!(!r.is_live(e, later), "remembered late at {later}");
            }
            // Expiry is within (t + span − w, t + span].
            prop_assert!(r.expires_at(e) > t + span - width && r.expires_at(e) <= t + span);
            // The live range holds G generations once the clock is past the first span.
            if t >= span {
                prop_assert_eq!(r.live(t).count() as u64, generations);
            }
        }
    }
}

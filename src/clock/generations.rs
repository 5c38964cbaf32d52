//! The generation arithmetic of a window, in one place: which generation a time belongs to,
//! which generations are live, when one expires. Pure integer math on milliseconds since the
//! Unix epoch: no sled, no clock, no I/O, so a local window and a window kept elsewhere (on
//! Redis) that use it compute the same ring from the same times.
//!
//! With `G` generations over a span `S`, each generation covers `w = S / G` ms:
//! - time `t` belongs to generation `e = floor(t / w)`, its *index*;
//! - at time `now`, with `cur = floor(now / w)`, the live generations are the `G` newest
//!   indices `cur - G + 1 ..= cur`;
//! - generation `e` is expired (dropped) once `cur >= e + G`, that is from time
//!   `(e + G) * w` on.
//!
//! Hence a key written at `t` is found at every `now < (e + G) * w`, which is at least
//! `t + S - w` (as `e * w > t - w`), and forgotten from `(e + G) * w <= t + S` on (as
//! `e * w <= t`): kept for at least `S - w`, never past `S`.
//!
//! **The one rule on a window's shape**, local or shared: `1 ..= MAX_GENERATIONS` (256)
//! generations, and a span of whole milliseconds that the generations divide exactly (no
//! rounding: the span asked for is the span kept). A recorded shape (a window's record in
//! sled's meta tree or on Redis) is checked by the same rule when it is read.

use std::ops::RangeInclusive;
use std::time::Duration;

use crate::error::{Error, Result};

/// Most generations a window may have. Every lookup of an absent key probes every live
/// generation's filter, so the cost of a lookup grows with this; 256 covers a week in hours
/// (168) with room to spare.
///
/// ```
/// assert_eq!(bloomsled::clock::MAX_GENERATIONS, 256);
/// ```
pub const MAX_GENERATIONS: u32 = 256;

/// A window's time partition: `generations` generations of `width_ms` each. **API
/// boundary**: the generation math every window uses, the local one and the shared one of
/// `bloomsled-redis`, so both compute the same ring from the same times.
///
/// ```
/// let g = bloomsled::clock::Generations::new(std::time::Duration::from_secs(60), 6).unwrap();
/// assert_eq!(g.live(g.generation_of(65_000)), 1..=6);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Generations {
    width_ms: u64,
    generations: u32,
}

impl Generations {
    /// The partition of `span` into `generations` equal generations. `span` must be a whole
    /// number of milliseconds that `generations` divides, and `generations` in
    /// `1..=MAX_GENERATIONS`: anything else is [`Error::InvalidConfig`] saying which.
    ///
    /// ```
    /// let g = bloomsled::clock::Generations::new(std::time::Duration::from_secs(60), 6).unwrap();
    /// assert_eq!(g.width_ms(), 10_000);
    /// assert!(bloomsled::clock::Generations::new(std::time::Duration::from_secs(60), 7).is_err());
    /// ```
    pub fn new(span: Duration, generations: u32) -> Result<Generations> {
        if generations == 0 {
            return Err(Error::config("a window needs at least 1 generation, got 0"));
        }
        if generations > MAX_GENERATIONS {
            return Err(Error::config(format!(
                "a window may have at most {MAX_GENERATIONS} generations (every lookup probes \
                 each one), got {generations}"
            )));
        }
        if span.is_zero() {
            return Err(Error::config("a window's span must be longer than zero"));
        }
        if !span.subsec_nanos().is_multiple_of(1_000_000) {
            return Err(Error::config(format!(
                "a window's span must be a whole number of milliseconds, got {span:?}"
            )));
        }
        let span_ms = u64::try_from(span.as_millis()).map_err(|_| {
            Error::config(format!(
                "a window's span of {span:?} is too long to count in ms"
            ))
        })?;
        if !span_ms.is_multiple_of(u64::from(generations)) {
            return Err(Error::config(format!(
                "a window's span ({span_ms} ms) must divide into {generations} generations of \
                 whole milliseconds ({} ms is left over)",
                span_ms % u64::from(generations)
            )));
        }
        Generations::from_parts(span_ms / u64::from(generations), generations)
    }

    /// The partition with generations of `width_ms` (as recorded), checked like
    /// [`Generations::new`].
    ///
    /// ```
    /// let g = bloomsled::clock::Generations::new(std::time::Duration::from_secs(60), 6).unwrap();
    /// assert_eq!(bloomsled::clock::Generations::from_parts(10_000, 6).unwrap(), g);
    /// ```
    pub fn from_parts(width_ms: u64, generations: u32) -> Result<Generations> {
        if width_ms == 0 || generations == 0 || generations > MAX_GENERATIONS {
            return Err(Error::config(format!(
                "impossible window partition: {generations} generations of {width_ms} ms"
            )));
        }
        if width_ms.checked_mul(u64::from(generations)).is_none() {
            return Err(Error::config(format!(
                "a window of {generations} generations of {width_ms} ms is too long"
            )));
        }
        Ok(Generations {
            width_ms,
            generations,
        })
    }

    /// Milliseconds each generation covers (`w`).
    ///
    /// ```
    /// let g = bloomsled::clock::Generations::new(std::time::Duration::from_secs(60), 6).unwrap();
    /// assert_eq!(g.width_ms(), 10_000);
    /// ```
    pub fn width_ms(&self) -> u64 {
        self.width_ms
    }

    /// The number of generations (`G`).
    ///
    /// ```
    /// let g = bloomsled::clock::Generations::new(std::time::Duration::from_secs(60), 6).unwrap();
    /// assert_eq!(g.generations(), 6);
    /// ```
    pub fn generations(&self) -> u32 {
        self.generations
    }

    /// The span, `G * w` ms.
    ///
    /// ```
    /// let g = bloomsled::clock::Generations::new(std::time::Duration::from_secs(60), 6).unwrap();
    /// assert_eq!(g.span_ms(), 60_000);
    /// ```
    pub fn span_ms(&self) -> u64 {
        self.width_ms * u64::from(self.generations)
    }

    /// The generation time `t_ms` belongs to: `floor(t / w)`.
    ///
    /// ```
    /// let g = bloomsled::clock::Generations::new(std::time::Duration::from_secs(60), 6).unwrap();
    /// assert_eq!(g.generation_of(25_000), 2);
    /// ```
    #[inline]
    pub fn generation_of(&self, t_ms: u64) -> u64 {
        t_ms / self.width_ms
    }

    /// True once generation `e` is past its horizon when the newest generation is `cur`:
    /// `cur >= e + G`.
    ///
    /// ```
    /// let g = bloomsled::clock::Generations::new(std::time::Duration::from_secs(60), 6).unwrap();
    /// assert!(!g.is_expired(2, 7));
    /// assert!(g.is_expired(2, 8));
    /// ```
    #[inline]
    pub fn is_expired(&self, e: u64, cur: u64) -> bool {
        cur >= e.saturating_add(u64::from(self.generations))
    }

    /// The live generations when the newest is `cur`: `cur - G + 1 ..= cur` (from 0 near
    /// the start of time). (The local ring keeps its generations in a list; the shared
    /// window enumerates them with this.)
    ///
    /// ```
    /// let g = bloomsled::clock::Generations::new(std::time::Duration::from_secs(60), 6).unwrap();
    /// assert_eq!(g.live(7), 2..=7);
    /// ```
    pub fn live(&self, cur: u64) -> RangeInclusive<u64> {
        cur.saturating_sub(u64::from(self.generations) - 1)..=cur
    }

    /// The first millisecond of generation `e`.
    ///
    /// ```
    /// let g = bloomsled::clock::Generations::new(std::time::Duration::from_secs(60), 6).unwrap();
    /// assert_eq!(g.starts_at_ms(2), 20_000);
    /// ```
    pub fn starts_at_ms(&self, e: u64) -> u64 {
        e.saturating_mul(self.width_ms)
    }

    /// The first millisecond at which generation `e` is expired: `(e + G) * w`.
    ///
    /// ```
    /// let g = bloomsled::clock::Generations::new(std::time::Duration::from_secs(60), 6).unwrap();
    /// assert_eq!(g.expires_at_ms(2), 80_000);
    /// ```
    pub fn expires_at_ms(&self, e: u64) -> u64 {
        self.starts_at_ms(e.saturating_add(u64::from(self.generations)))
    }

    /// Milliseconds something of generation `e` should still live at `now_ms`: until the
    /// generation expires, plus `grace_ms`; at least 1. (A shared window gives a
    /// generation's Redis keys this relative TTL, so that it follows the window's clock
    /// rather than the server's.)
    ///
    /// ```
    /// let g = bloomsled::clock::Generations::new(std::time::Duration::from_secs(60), 6).unwrap();
    /// assert_eq!(g.ttl_ms(2, 70_000, 500), 10_500);
    /// ```
    pub fn ttl_ms(&self, e: u64, now_ms: u64, grace_ms: u64) -> u64 {
        self.expires_at_ms(e)
            .saturating_add(grace_ms)
            .saturating_sub(now_ms)
            .max(1)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn ep(span_ms: u64, g: u32) -> Generations {
        Generations::new(Duration::from_millis(span_ms), g).unwrap()
    }

    #[test]
    fn a_week_in_days() {
        let day = 86_400_000;
        let e = ep(7 * day, 7);
        assert_eq!(e.width_ms(), day);
        assert_eq!(e.span_ms(), 7 * day);
        assert_eq!(e.generation_of(0), 0);
        assert_eq!(e.generation_of(day - 1), 0);
        assert_eq!(e.generation_of(day), 1);
        assert_eq!(e.live(10), 4..=10);
        assert_eq!(e.live(3), 0..=3);
        assert!(!e.is_expired(4, 10));
        assert!(e.is_expired(3, 10));
        assert_eq!(e.expires_at_ms(3), 10 * day);
        assert_eq!(e.starts_at_ms(3), 3 * day);
        // At a realistic time: just after midnight (UTC) of day 20000.
        let t = 20_000 * day + 5;
        assert_eq!(e.generation_of(t), 20_000);
        assert_eq!(e.live(e.generation_of(t)), 19_994..=20_000);
        assert_eq!(e.expires_at_ms(20_000), 20_007 * day);
    }

    #[test]
    fn ttl_runs_to_the_expiry_plus_grace_and_stays_positive() {
        let day = 86_400_000;
        let e = ep(7 * day, 7);
        assert_eq!(e.ttl_ms(20_000, 20_007 * day - 10, 60_000), 60_010);
        assert_eq!(e.ttl_ms(20_000, 20_007 * day, 0), 1);
        // Past its expiry plus grace something still gets a positive TTL.
        assert_eq!(e.ttl_ms(20_000, 20_100 * day, 60_000), 1);
        // Extremes saturate.
        let big = Generations::from_parts(u64::MAX / 256, 256).unwrap();
        assert_eq!(big.expires_at_ms(3), u64::MAX);
        assert_eq!(big.ttl_ms(3, 0, u64::MAX), u64::MAX);
        let one = Generations::from_parts(1, 1).unwrap();
        assert_eq!(one.live(42), 42..=42);
        assert_eq!(one.expires_at_ms(42), 43);
    }

    #[test]
    fn bad_partitions_are_refused_with_the_reason() {
        let msg = |r: Result<Generations>| match r {
            Err(Error::InvalidConfig { what }) => what,
            other => panic!("{other:?}"),
        };
        assert!(msg(Generations::new(Duration::ZERO, 7)).contains("longer than zero"));
        assert!(msg(Generations::new(Duration::from_secs(7), 0)).contains("at least 1"));
        assert!(msg(Generations::new(
            Duration::from_secs(7),
            MAX_GENERATIONS + 1
        ))
        .contains("at most"));
        assert!(msg(Generations::new(Duration::from_secs(7), u32::MAX)).contains("at most"));
        assert!(msg(Generations::new(Duration::from_millis(1000), 7)).contains("left over"));
        assert!(msg(Generations::new(Duration::from_micros(1500), 1)).contains("whole number"));
        assert!(msg(Generations::new(Duration::MAX, 1)).contains("whole number"));
        assert!(msg(Generations::new(Duration::from_secs(u64::MAX), 1)).contains("too long"));
        assert!(Generations::from_parts(0, 7).is_err());
        assert!(Generations::from_parts(u64::MAX, 2).is_err());
        assert!(Generations::new(Duration::from_millis(7), 7).is_ok());
    }

    #[test]
    fn saturates_instead_of_overflowing() {
        let e = ep(7, 7);
        assert!(!e.is_expired(u64::MAX - 7, u64::MAX - 1));
        assert!(e.is_expired(u64::MAX - 7, u64::MAX));
        assert_eq!(e.expires_at_ms(u64::MAX), u64::MAX);
        assert_eq!(e.live(0), 0..=0);
    }

    proptest! {
        /// The guarantee: a key written at t is found until at least t + span - w and is
        /// forgotten once t + span has passed.
        #[test]
        fn written_at_t_found_until_span_minus_w_forgotten_after_span(
            w in 1u64..10_000,
            g in 1u32..=MAX_GENERATIONS,
            t in 0u64..1 << 48,
            later in 0u64..3_000_000,
        ) {
            let e = Generations::from_parts(w, g).unwrap();
            let span = e.span_ms();
            let now = t + later;
            let written = e.generation_of(t);
            let expired = e.is_expired(written, e.generation_of(now));
            if now < t + span - w {
                prop_assert!(!expired, "forgotten early at {now} (written {t})");
            }
            if now >= t + span {
                prop_assert!(expired, "remembered past the span at {now} (written {t})");
            }
            // Expiry happens exactly at the generation's boundary.
            prop_assert_eq!(expired, now >= e.expires_at_ms(written));
            // A TTL given while the key is found runs out exactly a grace after its
            // generation expires, so never past `t + span + grace`; it is never zero.
            let grace = later % 100_000;
            let ttl = e.ttl_ms(written, now, grace);
            prop_assert!(ttl >= 1);
            if !expired {
                prop_assert_eq!(now + ttl, e.expires_at_ms(written) + grace);
                prop_assert!(now + ttl <= t + span + grace);
            }
        }

        /// The live range holds exactly the generations that are not expired, G of them
        /// once time is past the first span.
        #[test]
        fn live_is_exactly_the_unexpired(w in 1u64..1000, g in 1u32..64, cur in 0u64..10_000) {
            let ep = Generations::from_parts(w, g).unwrap();
            let live = ep.live(cur);
            for e in cur.saturating_sub(2 * u64::from(g))..=cur {
                prop_assert_eq!(live.contains(&e), !ep.is_expired(e, cur));
            }
            if cur + 1 >= u64::from(g) {
                prop_assert_eq!(live.count() as u64, u64::from(g));
            }
        }

        /// A time belongs to the generation whose interval holds it.
        #[test]
        fn index_interval_holds_the_time(w in 1u64..100_000, t in 0u64..1 << 50) {
            let ep = Generations::from_parts(w, 3).unwrap();
            let e = ep.generation_of(t);
            prop_assert!(ep.starts_at_ms(e) <= t && t < ep.starts_at_ms(e + 1));
        }
    }
}

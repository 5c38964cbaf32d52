//! A window's statistics: per live generation and for the window as a whole.

use sled::IVec;

use super::handle::Window;
use crate::persist::RecoveryReport;
use crate::stats::Stats;
use std::time::Duration;

/// One generation's report, in [`WindowStats`].
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct GenerationStats {
    /// The generation's index: it covers `index * width` to `(index + 1) * width` ms.
    pub index: u64,
    /// When the generation starts, in ms since the Unix epoch.
    pub starts_at_ms: u64,
    /// When it expires (is dropped), in ms since the Unix epoch.
    pub expires_at_ms: u64,
    /// Its tree's name (reserved: see [`crate::window`]).
    pub tree: IVec,
    /// Its filter.
    pub stats: Stats,
    /// How its filter was restored at open.
    pub recovery: RecoveryReport,
}

/// A window's report: its partition, its lookups, and each live generation, newest first.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct WindowStats {
    /// The window's name.
    pub name: IVec,
    /// The span of the window.
    pub span: Duration,
    /// The number of generations.
    pub generations: u32,
    /// The newest generation the window has reached.
    pub newest_index: u64,
    /// Lookups (`get`, `contains_key`, `contains_many`, `get_many`; per key).
    pub lookups: u64,
    /// Lookups every generation's filter answered "absent".
    pub store_lookups_skipped: u64,
    /// Store reads of a generation whose filter said "maybe" and that did not hold the key.
    pub false_positives: u64,
    /// The live generations, newest first.
    pub live: Vec<GenerationStats>,
}

impl Window {
    /// The window's report: its lookups and each live generation's filter.
    ///
    /// ```
    /// # use std::time::Duration;
    /// # use bloomsled::window::WindowConfig;
    /// # let db = bloomsled::Config::new().temporary(true).open()?;
    /// // A manual clock: no generation ends between the insert and the report.
    /// let clock = bloomsled::clock::ManualClock::new(0);
    /// let w = db.open_window("w", WindowConfig::new(Duration::from_secs(60), 6).clock(clock))?;
    /// w.insert("a", "")?;
    /// w.get("b")?;
    /// let s = w.stats();
    /// assert_eq!((s.generations, s.lookups, s.live.len()), (6, 1, 1));
    /// assert_eq!(s.live[0].stats.items, 1);
    /// # Ok::<(), bloomsled::Error>(())
    /// ```
    pub fn stats(&self) -> WindowStats {
        let (ring, newest) = self.ring_for_lookup();
        let ep = &self.state.generations;
        let (lookups, skipped) = self.state.counters.lookups_and_skipped();
        WindowStats {
            name: self.state.name.clone(),
            span: self.span(),
            generations: ep.generations(),
            newest_index: newest,
            lookups,
            store_lookups_skipped: skipped,
            false_positives: self.state.counters.false_positives(),
            live: Self::live(&ring, ep, newest)
                .iter()
                .map(|g| GenerationStats {
                    index: g.index,
                    starts_at_ms: ep.starts_at_ms(g.index),
                    expires_at_ms: ep.expires_at_ms(g.index),
                    tree: g.tree.name(),
                    stats: g.tree.stats(),
                    recovery: g.tree.recovery_report(),
                })
                .collect(),
        }
    }
}

//! What a shared window holds ([`SharedWindowStats`]), read from Redis in one pipeline.

use std::time::Duration;

use redis::Value;

use crate::error::Result;
use crate::stats::SharedStats;

use super::record::gen_field;
use super::SharedWindow;

/// One live generation in [`SharedWindowStats`].
#[derive(Debug, Clone, PartialEq)]
pub struct GenerationStats {
    /// The generation's index: `floor(t / width)` for the times `t` it covers.
    pub index: u64,
    /// When it began (ms since the Unix epoch).
    pub starts_at_ms: u64,
    /// When it stops being live (ms since the Unix epoch).
    pub expires_at_ms: u64,
    /// Its filter.
    pub filter: SharedStats,
}

/// What a shared window holds: its settings and each live generation that exists.
#[derive(Debug, Clone, PartialEq)]
pub struct SharedWindowStats {
    /// The window's name.
    pub name: String,
    /// The window's incarnation tag: random, non-zero, chosen when it was created.
    pub incarnation: u64,
    /// Span: `width × generations`.
    pub span: Duration,
    /// Width of one generation.
    pub width: Duration,
    /// Number of generations.
    pub generations: u64,
    /// How long a generation's Redis keys outlive it.
    pub grace: Duration,
    /// The window's time when the stats were taken (ms since the Unix epoch).
    pub now_ms: u64,
    /// The current generation.
    pub current: u64,
    /// The live generations that were written to, newest first.
    pub live: Vec<GenerationStats>,
}

impl SharedWindow {
    /// Settings and the filter statistics of every live generation that exists (one
    /// `BITCOUNT` pipeline per generation). A live generation that was lost is an error.
    ///
    /// ```no_run
    /// # use bloomsled_redis::{Endpoint, SharedWindow};
    /// # let w = SharedWindow::open(&Endpoint::url("redis://127.0.0.1:6379/"), "crawled")?;
    /// for g in w.stats()?.live {
    ///     println!("generation {}: ~{} keys", g.index, g.filter.estimated_items);
    /// }
    /// # Ok::<(), bloomsled_redis::Error>(())
    /// ```
    pub fn stats(&self) -> Result<SharedWindowStats> {
        let now = self.now();
        let read = self.read_range(now);
        let fields: Vec<String> = read.clone().map(gen_field).collect();
        let reply = self
            .session
            .run_fast(|w| self.write_ring_read(w, &fields))?
            .into_iter()
            .next()
            .unwrap_or(Value::Nil);
        let ring = self.read_ring(reply, read.clone())?;
        self.reconcile(&ring)?;
        let mut live = Vec::new();
        for (e, g) in self.known(&read).into_iter().rev() {
            live.push(GenerationStats {
                index: e,
                starts_at_ms: self.config.ring.starts_at_ms(e),
                expires_at_ms: self.config.ring.expires_at_ms(e),
                filter: g.stats()?,
            });
        }
        Ok(SharedWindowStats {
            name: self.name.clone(),
            incarnation: self.incarnation,
            span: self.span(),
            width: self.width(),
            generations: u64::from(self.config.ring.generations()),
            grace: self.grace(),
            now_ms: now,
            current: self.config.ring.generation_of(now),
            live,
        })
    }
}

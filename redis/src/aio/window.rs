//! The async shared window: the sync [`SharedWindow`] itself, run on tokio's blocking pool.

use std::sync::Arc;
use std::time::Duration;

use crate::error::Result;
use bloomsled::blocking::off_the_runtime;
use bloomsled::clock::Clock;

use super::super::conn::Endpoint;
use super::super::record::SharedShape;
use super::super::window::{SharedWindow, SharedWindowConfig, SharedWindowStats};

/// A [`SharedWindow`] for async code: each call that talks to Redis runs the sync window's
/// own code on tokio's blocking pool (`spawn_blocking`), so it never parks a runtime
/// worker, and every guarantee is the sync window's by construction: the same Redis keys
/// and records (sync and async handles share one window), the ring check in every lookup,
/// a generation lost early or a window flushed is [`crate::Error::SharedFilterLost`]
/// (never "absent"), and rotation by many processes at once.
///
/// The cost of that: a blocking-pool thread per call in flight, and the calls of one handle
/// take turns on its one connection (open a handle per task for parallel throughput). The
/// getters that need no Redis (`name`, `span`, `current_generation`, ...) are plain
/// methods.
///
/// ```no_run
/// use bloomsled_redis::{AsyncSharedWindow, Endpoint, SharedWindowConfig};
/// use bloomsled::FilterConfig;
/// use std::time::Duration;
/// # async fn demo() -> bloomsled_redis::Result<()> {
/// let redis = Endpoint::url("redis://127.0.0.1:6379/");
/// let week = SharedWindowConfig::new(Duration::from_secs(7 * 86_400), 7, FilterConfig::new(1_000_000));
/// let crawled = AsyncSharedWindow::create(&redis, "crawled", &week).await?;
/// if !crawled.contains(b"https://example.com/").await? {
///     // ... crawl it ...
///     crawled.insert(b"https://example.com/").await?;
/// }
/// # Ok(())
/// # }
/// ```
#[derive(Debug, Clone)]
#[cfg_attr(docsrs, doc(cfg(feature = "tokio")))]
pub struct AsyncSharedWindow {
    window: Arc<SharedWindow>,
}

/// Owned copies of a batch's keys, to move onto the blocking pool.
fn owned<K: AsRef<[u8]>>(keys: &[K]) -> Vec<Vec<u8>> {
    keys.iter().map(|k| k.as_ref().to_vec()).collect()
}

impl AsyncSharedWindow {
    /// [`SharedWindow::create`], awaited: creates the window `name` or opens it if it exists
    /// with the same settings.
    ///
    /// ```no_run
    /// use bloomsled_redis::{AsyncSharedWindow, Endpoint, SharedWindowConfig};
    /// use bloomsled::FilterConfig;
    /// use std::time::Duration;
    /// # async fn demo() -> bloomsled_redis::Result<()> {
    /// let redis = Endpoint::url("redis://127.0.0.1:6379/");
    /// let hour = SharedWindowConfig::new(Duration::from_secs(3600), 6, FilterConfig::new(10_000));
    /// let revoked = AsyncSharedWindow::create(&redis, "revoked-tokens", &hour).await?;
    /// # let _ = revoked;
    /// # Ok(())
    /// # }
    /// ```
    pub async fn create(
        endpoint: &Endpoint,
        name: &str,
        config: &SharedWindowConfig,
    ) -> Result<Self> {
        let (endpoint, name, config) = (endpoint.clone(), name.to_owned(), config.clone());
        let window = off_the_runtime("AsyncSharedWindow::create", move || {
            SharedWindow::create(&endpoint, &name, &config)
        })
        .await?;
        Ok(Self::from(window))
    }

    /// [`SharedWindow::open`], awaited: opens the existing window `name` with the system
    /// clock.
    ///
    /// ```no_run
    /// use bloomsled_redis::{AsyncSharedWindow, Endpoint};
    /// # async fn demo() -> bloomsled_redis::Result<()> {
    /// let w = AsyncSharedWindow::open(&Endpoint::url("redis://127.0.0.1:6379/"), "crawled").await?;
    /// println!("{:?} in {} generations", w.span(), w.generations());
    /// # Ok(())
    /// # }
    /// ```
    pub async fn open(endpoint: &Endpoint, name: &str) -> Result<Self> {
        Self::open_with_clock(endpoint, name, bloomsled::clock::SystemClock).await
    }

    /// [`SharedWindow::open_with_clock`], awaited: opens the existing window `name`, reading
    /// time from `clock`.
    ///
    /// ```no_run
    /// use bloomsled::clock::ManualClock;
    /// use bloomsled_redis::{AsyncSharedWindow, Endpoint};
    /// # async fn demo() -> bloomsled_redis::Result<()> {
    /// let clock = ManualClock::starting_now();
    /// let ep = Endpoint::url("redis://127.0.0.1:6379/");
    /// let w = AsyncSharedWindow::open_with_clock(&ep, "crawled", clock.clone()).await?;
    /// # let _ = w;
    /// # Ok(())
    /// # }
    /// ```
    pub async fn open_with_clock(
        endpoint: &Endpoint,
        name: &str,
        clock: impl Clock + 'static,
    ) -> Result<Self> {
        let (endpoint, name) = (endpoint.clone(), name.to_owned());
        let window = off_the_runtime("AsyncSharedWindow::open", move || {
            SharedWindow::open_with_clock(&endpoint, &name, clock)
        })
        .await?;
        Ok(Self::from(window))
    }

    /// Inserts `key` into the current generation; returns `true` if it was new there.
    ///
    /// ```no_run
    /// # use bloomsled_redis::AsyncSharedWindow;
    /// # async fn demo(w: &AsyncSharedWindow) -> bloomsled_redis::Result<()> {
    /// w.insert(b"https://example.com/").await?;
    /// # Ok(())
    /// # }
    /// ```
    pub async fn insert(&self, key: &[u8]) -> Result<bool> {
        let (w, key) = (self.window.clone(), key.to_vec());
        off_the_runtime("AsyncSharedWindow::insert", move || w.insert(&key)).await
    }

    /// True if `key` was added within the window (or is a false positive), false if it
    /// certainly was not.
    ///
    /// ```no_run
    /// # use bloomsled_redis::AsyncSharedWindow;
    /// # async fn demo(w: &AsyncSharedWindow) -> bloomsled_redis::Result<()> {
    /// if !w.contains(b"https://example.com/").await? { /* not seen this week */ }
    /// # Ok(())
    /// # }
    /// ```
    pub async fn contains(&self, key: &[u8]) -> Result<bool> {
        let (w, key) = (self.window.clone(), key.to_vec());
        off_the_runtime("AsyncSharedWindow::contains", move || w.contains(&key)).await
    }

    /// [`SharedWindow::insert_many`], awaited: inserts every key into the current generation.
    ///
    /// ```no_run
    /// # use bloomsled_redis::AsyncSharedWindow;
    /// # async fn demo(w: &AsyncSharedWindow) -> bloomsled_redis::Result<()> {
    /// let new = w.insert_many(&[&b"a"[..], b"b"]).await?;
    /// assert_eq!(new.len(), 2);
    /// # Ok(())
    /// # }
    /// ```
    pub async fn insert_many<K: AsRef<[u8]>>(&self, keys: &[K]) -> Result<Vec<bool>> {
        let (w, keys) = (self.window.clone(), owned(keys));
        off_the_runtime("AsyncSharedWindow::insert_many", move || {
            w.insert_many(&keys)
        })
        .await
    }

    /// [`SharedWindow::contains_many`], awaited: every key looked up in every live
    /// generation; every key answered, or an error.
    ///
    /// ```no_run
    /// # use bloomsled_redis::AsyncSharedWindow;
    /// # async fn demo(w: &AsyncSharedWindow) -> bloomsled_redis::Result<()> {
    /// let seen = w.contains_many(&[&b"a"[..], b"b"]).await?;
    /// assert_eq!(seen.len(), 2);
    /// # Ok(())
    /// # }
    /// ```
    pub async fn contains_many<K: AsRef<[u8]>>(&self, keys: &[K]) -> Result<Vec<bool>> {
        let (w, keys) = (self.window.clone(), owned(keys));
        off_the_runtime("AsyncSharedWindow::contains_many", move || {
            w.contains_many(&keys)
        })
        .await
    }

    /// Records this handle's metrics (label `window`), as [`SharedWindow::record_metrics`]
    /// does: the counters of its calls, then gauges over its live generations from
    /// [`AsyncSharedWindow::stats`] (read on the blocking pool; the facade is called on the
    /// calling task's thread). If the stats cannot be read, the counters are recorded and
    /// the error returned.
    ///
    /// ```no_run
    /// # use bloomsled_redis::AsyncSharedWindow;
    /// # async fn demo(w: &AsyncSharedWindow) -> bloomsled_redis::Result<()> {
    /// w.record_metrics().await?; // from a scrape handler
    /// # Ok(())
    /// # }
    /// ```
    #[cfg(feature = "metrics")]
    #[cfg_attr(docsrs, doc(cfg(feature = "metrics")))]
    pub async fn record_metrics(&self) -> Result<()> {
        let stats = self.stats().await;
        self.window.record_counters_and(stats.as_ref().ok());
        stats.map(drop)
    }

    /// [`SharedWindow::stats`], awaited.
    ///
    /// ```no_run
    /// # use bloomsled_redis::AsyncSharedWindow;
    /// # async fn demo(w: &AsyncSharedWindow) -> bloomsled_redis::Result<()> {
    /// for g in w.stats().await?.live {
    ///     println!("generation {}: ~{} keys", g.index, g.filter.estimated_items);
    /// }
    /// # Ok(())
    /// # }
    /// ```
    pub async fn stats(&self) -> Result<SharedWindowStats> {
        let w = self.window.clone();
        off_the_runtime("AsyncSharedWindow::stats", move || w.stats()).await
    }

    /// The window's name.
    ///
    /// ```no_run
    /// # use bloomsled_redis::AsyncSharedWindow;
    /// # fn demo(w: &AsyncSharedWindow) {
    /// println!("window {}", w.name());
    /// # }
    /// ```
    pub fn name(&self) -> &str {
        self.window.name()
    }

    /// The window's incarnation tag (a sync handle of it has the same).
    ///
    /// ```no_run
    /// # use bloomsled_redis::AsyncSharedWindow;
    /// # fn demo(w: &AsyncSharedWindow) {
    /// assert_ne!(w.incarnation(), 0);
    /// # }
    /// ```
    pub fn incarnation(&self) -> u64 {
        self.window.incarnation()
    }

    /// The span: `width × generations`.
    ///
    /// ```no_run
    /// # use bloomsled_redis::AsyncSharedWindow;
    /// # fn demo(w: &AsyncSharedWindow) {
    /// assert_eq!(w.span(), w.width() * w.generations() as u32);
    /// # }
    /// ```
    pub fn span(&self) -> Duration {
        self.window.span()
    }

    /// The width of one generation.
    ///
    /// ```no_run
    /// # use bloomsled_redis::AsyncSharedWindow;
    /// # fn demo(w: &AsyncSharedWindow) {
    /// println!("a generation lasts {:?}", w.width());
    /// # }
    /// ```
    pub fn width(&self) -> Duration {
        self.window.width()
    }

    /// The number of generations.
    ///
    /// ```no_run
    /// # use bloomsled_redis::AsyncSharedWindow;
    /// # fn demo(w: &AsyncSharedWindow) {
    /// assert!(w.generations() >= 1);
    /// # }
    /// ```
    pub fn generations(&self) -> u64 {
        self.window.generations()
    }

    /// The shape of every generation's filter.
    ///
    /// ```no_run
    /// # use bloomsled_redis::AsyncSharedWindow;
    /// # fn demo(w: &AsyncSharedWindow) {
    /// println!("{} keys per generation", w.shape().capacity);
    /// # }
    /// ```
    pub fn shape(&self) -> SharedShape {
        self.window.shape()
    }

    /// The generation the window's clock is in now (where adds go).
    ///
    /// ```no_run
    /// # use bloomsled_redis::AsyncSharedWindow;
    /// # fn demo(w: &AsyncSharedWindow) {
    /// println!("adding to generation {}", w.current_generation());
    /// # }
    /// ```
    pub fn current_generation(&self) -> u64 {
        self.window.current_generation()
    }

    /// The Redis key of the window's record.
    ///
    /// ```no_run
    /// # use bloomsled_redis::AsyncSharedWindow;
    /// # fn demo(w: &AsyncSharedWindow) {
    /// assert!(w.record_key().ends_with(":window"));
    /// # }
    /// ```
    pub fn record_key(&self) -> String {
        self.window.record_key()
    }
}

impl From<SharedWindow> for AsyncSharedWindow {
    /// The async form of a sync handle (same connection, same known generations).
    ///
    /// ```no_run
    /// use bloomsled_redis::{AsyncSharedWindow, Endpoint, SharedWindow};
    /// let w = SharedWindow::open(&Endpoint::url("redis://127.0.0.1:6379/"), "crawled")?;
    /// let w = AsyncSharedWindow::from(w);
    /// # let _ = w;
    /// # Ok::<(), bloomsled_redis::Error>(())
    /// ```
    fn from(window: SharedWindow) -> Self {
        AsyncSharedWindow {
            window: Arc::new(window),
        }
    }
}

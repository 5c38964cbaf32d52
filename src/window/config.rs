//! `WindowConfig`: a window's span, its generations, each generation's filter, its clock.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use super::RotationStep;
use crate::clock::generations::Generations;
use crate::clock::{Clock, SystemClock};
use crate::error::Result;
use crate::store::TreeConfig;

/// Settings of a window, for [`crate::Db::open_window`]: its span and number of generations,
/// the filter settings of each generation (a [`TreeConfig`], sized for the items one
/// generation receives), and the clock.
///
/// ```
/// use std::time::Duration;
/// use bloomsled::TreeConfig;
/// use bloomsled::window::WindowConfig;
/// let week = WindowConfig::new(Duration::from_secs(7 * 86_400), 7)
///     .tree_config(TreeConfig::new().expected_items(1_000_000).false_positive_rate(0.001));
/// # let _ = week;
/// ```
#[derive(Clone)]
pub struct WindowConfig {
    pub(crate) span: Duration,
    pub(crate) generations: u32,
    pub(crate) tree: Option<TreeConfig>,
    pub(crate) clock: Arc<dyn Clock>,
    pub(crate) hook: Option<Arc<dyn Fn(RotationStep) + Send + Sync>>,
}

impl fmt::Debug for WindowConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("WindowConfig")
            .field("span", &self.span)
            .field("generations", &self.generations)
            .field("tree", &self.tree)
            .field("clock", &self.clock)
            .finish()
    }
}

impl WindowConfig {
    /// A window of `generations` generations covering `span` together, each
    /// `span / generations` long (a whole number of milliseconds: `span` must divide
    /// evenly), on the wall clock. Each generation's filter has the database's sizing
    /// until [`WindowConfig::tree_config`] says otherwise.
    pub fn new(span: Duration, generations: u32) -> WindowConfig {
        WindowConfig {
            span,
            generations,
            tree: None,
            clock: Arc::new(SystemClock),
            hook: None,
        }
    }

    /// Each generation's filter settings: expected items *per generation*, rate or bits
    /// per key, mode (see [`TreeConfig`]).
    pub fn tree_config(mut self, config: TreeConfig) -> WindowConfig {
        self.tree = Some(config);
        self
    }

    /// The clock the window reads (default: [`SystemClock`]).
    pub fn clock(mut self, clock: impl Clock + 'static) -> WindowConfig {
        self.clock = Arc::new(clock);
        self
    }

    /// Test seam (feature `failpoints`): `hook` is called after each step of every
    /// rotation (crash tests stop a child process there and kill it).
    ///
    /// ```
    /// use std::time::Duration;
    /// use bloomsled::window::WindowConfig;
    /// let config = WindowConfig::new(Duration::from_secs(60), 3)
    ///     .rotation_hook(|step| eprintln!("rotation step {step:?}"));
    /// # let _ = config;
    /// ```
    #[cfg(feature = "failpoints")]
    #[cfg_attr(docsrs, doc(cfg(feature = "failpoints")))]
    pub fn rotation_hook(mut self, hook: impl Fn(RotationStep) + Send + Sync + 'static) -> Self {
        self.hook = Some(Arc::new(hook));
        self
    }

    /// The partition, checked.
    pub(crate) fn generations(&self) -> Result<Generations> {
        if let Some(t) = &self.tree {
            t.validate()?;
        }
        Generations::new(self.span, self.generations)
    }
}

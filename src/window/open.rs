//! Opening windows from a database: `Db::open_window` and the windows a database holds.
//! (An inherent impl of the store's `Db` written here, in the window layer, so that the
//! store never names windows.)

use sled::IVec;

use super::config::WindowConfig;
use super::handle::Window;
use crate::error::{Error, Result};
use crate::store::Db;
use std::time::Duration;

impl Db {
    /// Opens (creating if needed) the window `name`: a ring of `config`'s generations whose
    /// keys and filters expire together (see [`crate::window`]). A window reopened after a
    /// restart keeps its generations and their times; one left half-way through a rotation
    /// by a crash is completed here. Opening it with another span or number of generations
    /// than it was created with is [`Error::InvalidConfig`].
    ///
    /// ```
    /// use std::time::Duration;
    /// use bloomsled::window::WindowConfig;
    /// let db = bloomsled::Config::new().temporary(true).open()?;
    /// let recent = db.open_window("recent", WindowConfig::new(Duration::from_secs(3600), 6))?;
    /// recent.insert("token-1", "revoked")?;
    /// assert!(recent.contains_key("token-1")?);
    /// # Ok::<(), bloomsled::Error>(())
    /// ```
    pub fn open_window<N: AsRef<[u8]>>(&self, name: N, config: WindowConfig) -> Result<Window> {
        Window::open(self, name.as_ref(), config)
    }

    /// The names of the windows this database holds (those with a record; none for a
    /// temporary database).
    pub fn window_names(&self) -> Result<Vec<IVec>> {
        Ok(match self.meta() {
            Some(m) => super::record::names(m)?
                .into_iter()
                .map(IVec::from)
                .collect(),
            None => vec![],
        })
    }

    /// Opens the existing window `name` with the span and generations it was created with,
    /// on the wall clock (for tools such as `bloomsled stats`). A window with no record is
    /// [`Error::InvalidConfig`].
    pub fn open_existing_window<N: AsRef<[u8]>>(&self, name: N) -> Result<Window> {
        let name = name.as_ref();
        let r = self
            .meta()
            .map(|m| super::record::read(m, name))
            .transpose()?
            .flatten()
            .ok_or_else(|| {
                Error::config(format!(
                    "no window {:?} in this database",
                    String::from_utf8_lossy(name)
                ))
            })?
            .map_err(Error::Decode)?;
        let span = Duration::from_millis(r.width_ms.saturating_mul(u64::from(r.generations)));
        Window::open(self, name, WindowConfig::new(span, r.generations))
    }
}

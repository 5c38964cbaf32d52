//! Running blocking work from async code (feature `tokio`): on the current tokio runtime's
//! blocking pool, so that no runtime worker waits on a disk, a scan, a lock or a socket.
//! **API boundary**: the async forms of the core (`Config::open_async`, ...) and of
//! `bloomsled-redis` (its async shared window) run their blocking work through it.

use crate::error::{Error, Result};

/// Runs `work` on the current tokio runtime's blocking pool and awaits it. A panic in
/// `work` is resumed in the caller, as if it had run here; a runtime that shuts down before
/// `work` finished is [`Error::Closed`]; a call outside any tokio runtime is
/// [`Error::Unsupported`] (not a panic). `what` names the call in those errors, which reach
/// the caller as its own error type `E` (any that converts from [`Error`]).
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() {
/// let n = bloomsled::blocking::off_the_runtime("count", || Ok::<_, bloomsled::Error>(2 + 2));
/// assert_eq!(n.await.unwrap(), 4);
/// # }
/// ```
pub async fn off_the_runtime<T, E, F>(what: &str, work: F) -> Result<T, E>
where
    T: Send + 'static,
    E: From<Error> + Send + 'static,
    F: FnOnce() -> Result<T, E> + Send + 'static,
{
    let runtime = tokio::runtime::Handle::try_current().map_err(|_| {
        E::from(Error::Unsupported(format!(
            "{what} was awaited outside a tokio runtime (it runs on tokio's blocking pool)"
        )))
    })?;
    match runtime.spawn_blocking(work).await {
        Ok(r) => r,
        Err(e) if e.is_panic() => std::panic::resume_unwind(e.into_panic()),
        Err(e) => Err(E::from(Error::Closed(format!(
            "{what}: the runtime shut down first ({e})"
        )))),
    }
}

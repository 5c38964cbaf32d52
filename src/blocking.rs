//! Running blocking work from async code (feature `tokio`): on the current tokio runtime's
//! blocking pool, so that no runtime worker waits on a disk, a scan, a lock or a socket.

use crate::error::{Error, Result};

/// Runs `work` on the current tokio runtime's blocking pool and awaits it. A panic in
/// `work` is resumed in the caller, as if it had run here; a runtime that shuts down before
/// `work` finished is [`Error::Closed`]; a call outside any tokio runtime is
/// [`Error::Unsupported`] (not a panic). `what` names the call in those errors.
pub(crate) async fn off_the_runtime<T, F>(what: &str, work: F) -> Result<T>
where
    T: Send + 'static,
    F: FnOnce() -> Result<T> + Send + 'static,
{
    let runtime = tokio::runtime::Handle::try_current().map_err(|_| {
        Error::Unsupported(format!(
            "{what} was awaited outside a tokio runtime (it runs on tokio's blocking pool)"
        ))
    })?;
    match runtime.spawn_blocking(work).await {
        Ok(r) => r,
        Err(e) if e.is_panic() => std::panic::resume_unwind(e.into_panic()),
        Err(e) => Err(Error::Closed(format!(
            "{what}: the runtime shut down first ({e})"
        ))),
    }
}

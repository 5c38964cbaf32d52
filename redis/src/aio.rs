//! The shared filter and window for async code (feature `tokio`): [`AsyncSharedFilter`] and
//! [`AsyncSharedWindow`].
//!
//! The commands and the reading of their replies are the sync filter's own (the filter's
//! `Incarnation`: which block a key uses, the `BITFIELD` and `GETRANGE` it sends, the incarnation
//! check that turns a lost filter into an error), so a sync and an async client interoperate
//! on one filter. Only the transport differs: redis-rs's `MultiplexedConnection` to one
//! server, its async `ClusterConnection` to a cluster, and tokio timers for every wait.

//!
//! [`AsyncSharedWindow`] runs the sync window's own code on tokio's blocking pool: its
//! guarantees are the sync window's by construction, at the cost of a blocking-pool thread
//! per call in flight. (Its ring logic lives in the sync window's methods; giving it the
//! filter's treatment, a transport-free core, is the way to a native async window.)

mod filter;
mod session;
mod window;

pub use filter::AsyncSharedFilter;
pub use window::AsyncSharedWindow;

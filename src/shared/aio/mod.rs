//! The shared filter for async code (feature `tokio`): [`AsyncSharedFilter`].
//!
//! The commands and the reading of their replies are the sync filter's own (the filter's
//! `Incarnation`: which block a key uses, the `BITFIELD` and `GETRANGE` it sends, the epoch
//! check that turns a lost filter into an error), so a sync and an async client interoperate
//! on one filter. Only the transport differs: redis-rs's `MultiplexedConnection` to one
//! server, its async `ClusterConnection` to a cluster, and tokio timers for every wait.

mod filter;
mod session;

pub use filter::AsyncSharedFilter;

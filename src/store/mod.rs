//! The sled-shaped store: `Db`, `Tree`, `Config`, `Batch`, transactions.

#[cfg(feature = "tokio")]
mod aio;
mod batch;
mod config;
mod db;
mod db_export;
mod db_info;
mod filters;
mod fp_memory;
mod holds;
mod iter;
mod policy;
mod ready;
mod rebuild;
mod recovery;
mod scan;
mod snapshotter;
mod state;
mod subscriber;
#[cfg(feature = "metrics")]
pub(crate) mod telemetry;
mod torn;
mod torn_conf;
pub mod transaction;
mod tree;
mod tree_open;
mod tree_order;
mod tree_rebuild;
mod tree_recovery;
mod tree_snapshot;
mod tree_stats;
mod tree_verify;
mod tree_write;
mod write;

pub use batch::Batch;
pub use config::{Config, TreeConfig, DEFAULT_FALSE_POSITIVE_MEMORY};
pub(crate) use db::RESERVED_TREE_PREFIX;
pub use db::{open, Db};
pub(crate) use filters::{read_any as read_any_filter, Filters};
pub use iter::Iter;
pub use rebuild::RebuildReport;
pub use subscriber::Subscriber;
pub use tree::{CompareAndSwapError, CompareAndSwapResult, Tree};

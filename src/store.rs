//! The sled-shaped store: `Db`, `Tree`, `Config`, `Batch`, transactions.

#[cfg(feature = "tokio")]
mod aio;
mod config;
mod db;
mod filters;
pub(crate) mod fp_memory;
mod holds;
mod lock;
mod policy;
mod ready;
mod rebuild;
mod records;
mod recovery;
mod repair;
mod scan;
mod state;
#[cfg(feature = "metrics")]
pub(crate) mod telemetry;
pub mod transaction;
mod tree;
mod write;

pub use config::{
    Config, TreeConfig, DEFAULT_FALSE_POSITIVE_MEMORY, DEFAULT_GROWTH_FACTOR,
    DEFAULT_LARGE_GROWTH_FACTOR,
};
pub(crate) use db::RESERVED_TREE_PREFIX;
pub use db::{open, Db};
pub(crate) use filters::read_any::read_any as read_any_filter;
pub(crate) use filters::Filters;
pub use rebuild::RebuildReport;
pub use tree::batch::Batch;
pub use tree::iter::Iter;
pub use tree::subscriber::Subscriber;
pub(crate) use tree::RUN as BATCH_RUN;
pub use tree::{CompareAndSwapError, CompareAndSwapResult, Tree};

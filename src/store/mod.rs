//! The sled-shaped store: `Db`, `Tree`, `Config`, `Batch`, transactions.

mod batch;
mod config;
mod db;
mod filters;
mod holds;
mod iter;
mod policy;
mod ready;
mod rebuild;
mod recovery;
mod scan;
mod state;
mod subscriber;
#[cfg(feature = "metrics")]
pub(crate) mod telemetry;
mod torn;
pub mod transaction;
mod tree;
mod tree_filter;
mod write;

pub use batch::Batch;
pub use config::{Config, TreeConfig};
pub(crate) use db::GENERATION_PREFIX;
pub use db::{open, Db};
pub(crate) use filters::{read_any as read_any_filter, Filters};
pub use iter::Iter;
pub use rebuild::RebuildReport;
pub use subscriber::Subscriber;
pub use tree::{CompareAndSwapError, CompareAndSwapResult, Tree};

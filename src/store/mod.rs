//! The sled-shaped store: `Db`, `Tree`, `Config`, `Batch`, transactions.

mod batch;
mod config;
mod db;
mod filters;
mod maintenance;
mod rebuild;
pub mod transaction;
mod tree;

pub use batch::Batch;
pub use config::Config;
pub use db::{open, Db, RESERVED_PREFIX};
pub use maintenance::{stored_filter, StoredFilter};
pub use rebuild::RebuildReport;
pub use tree::{CompareAndSwapError, CompareAndSwapResult, Tree};

//! The sled-shaped store: `Db`, `Tree`, `Config`, `Batch`, transactions.

mod batch;
mod config;
mod db;
mod filters;
mod rebuild;
mod scan;
mod torn;
pub mod transaction;
mod tree;

pub use batch::Batch;
pub use config::{Config, TreeConfig};
pub use db::{open, Db};
pub use rebuild::RebuildReport;
pub use tree::{CompareAndSwapError, CompareAndSwapResult, Tree};

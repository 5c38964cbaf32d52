//! # bloomsled-redis
//!
//! A Bloom filter shared through Redis or Redis Cluster, by many processes and hosts, that
//! reports a lost filter instead of answering "absent".
//!
//! [`SharedFilter`] keeps the local [`bloomsled::Filter`]'s blocks in Redis strings: the same
//! xxh3 hash, the same 512-bit block per key, the same bits in it, so a key means the same
//! block locally and remotely and [`SharedFilter::push`] / [`SharedFilter::pull`] are byte
//! copies. A lookup is one `GETRANGE`, an add one `BITFIELD`; batches are pipelined.
//!
//! - **Sharded**: the blocks are spread over several keys (`bloomsled:{NAME:i:salt}`), at
//!   most 512 MiB each, whose hash tags fall in evenly spaced cluster slots, so a filter can
//!   exceed one Redis string and spreads over every master of a cluster.
//! - **Config record** at `bloomsled:{NAME}:config`: format version, layout, hash, seed,
//!   `k`, blocks and shards, capacity, incarnation. Creating with another shape is
//!   [`Error::RedisShapeMismatch`]; concurrent creators end with one filter
//!   (`SET NX`).
//! - **Never a silent false negative**: every block carries the filter's random incarnation in an
//!   8-byte tag, read by the very `GETRANGE` or `BITFIELD` that uses the block. A shard that
//!   was flushed, evicted, expired, lost in a restart or failover, deleted, or recreated by
//!   another `create` answers [`Error::SharedFilterLost`], never "absent".
//!
//! See `layout` for the byte layout and the bit numbering.
//!
//! [`SharedWindow`] is a window of keys that expire: one shared filter per generation, each
//! with its incarnation tags and a Redis TTL a little past its horizon, and a ring record that
//! tells a generation nobody wrote to (no keys, no error) from one that was lost (an error).
//! A key added at `t` is found until at least `t + span − span/generations` and forgotten
//! once `t + span` has passed.
//!
//! [`AsyncSharedFilter`] (feature `tokio`) is the same filter for async code: the same
//! commands and checks, sent over redis-rs's async connections without blocking a thread;
//! [`AsyncSharedWindow`] runs the window on tokio's blocking pool.
//!
//! [`ClassicFilter`] reads and extends the bitmaps of the PHP `BloomFilterRedis` class (one
//! bucket key, the classic string hashes of [`bloomsled::hash::classic`] as bit offsets), bit for
//! bit, for services moving from PHP.

#![deny(missing_docs)]
#![deny(unsafe_code)]
#![warn(unreachable_pub)]
#![cfg_attr(docsrs, feature(doc_cfg))]

/// The getters and the `Debug` of a shared filter handle, sync or async: both hold the
/// filter's `layout`, `shape` and `incarnation` and a `session`, and answer these without Redis.
/// One definition, so the two types cannot drift apart.
macro_rules! filter_getters {
    ($ty:ident) => {
        impl $ty {
            /// The filter's name.
            ///
            /// ```no_run
            #[doc = concat!("# fn demo(f: &bloomsled_redis::", stringify!($ty), ") {")]
            /// println!("filter {}", f.name());
            /// # }
            /// ```
            pub fn name(&self) -> &str {
                &self.layout.name
            }

            /// The filter's shape, as recorded in Redis.
            ///
            /// ```no_run
            #[doc = concat!("# fn demo(f: &bloomsled_redis::", stringify!($ty), ") {")]
            /// println!("{} bits per key", f.shape().num_blocks * 512 / f.shape().capacity);
            /// # }
            /// ```
            pub fn shape(&self) -> $crate::SharedShape {
                self.shape
            }

            /// The filter's incarnation tag (random, non-zero, set at
            /// creation): every handle of one filter, sync or async, has the same.
            ///
            /// ```no_run
            #[doc = concat!("# fn demo(f: &bloomsled_redis::", stringify!($ty), ") {")]
            /// assert_ne!(f.incarnation(), 0);
            /// # }
            /// ```
            pub fn incarnation(&self) -> u64 {
                self.incarnation
            }

            /// The Redis keys holding the blocks, shard by shard.
            ///
            /// ```no_run
            #[doc = concat!("# fn demo(f: &bloomsled_redis::", stringify!($ty), ") {")]
            /// assert_eq!(f.shard_keys().len() as u64, f.shape().shards);
            /// # }
            /// ```
            pub fn shard_keys(&self) -> Vec<String> {
                self.layout.shard_keys()
            }

            /// The Redis key of the config record.
            ///
            /// ```no_run
            #[doc = concat!("# fn demo(f: &bloomsled_redis::", stringify!($ty), ") {")]
            /// assert!(f.config_key().ends_with(":config"));
            /// # }
            /// ```
            pub fn config_key(&self) -> String {
                $crate::layout::config_key(&self.layout.name)
            }
        }

        impl std::fmt::Debug for $ty {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.debug_struct(stringify!($ty))
                    .field("name", &self.layout.name)
                    .field("endpoint", &self.session.endpoint().urls())
                    .field("shape", &self.shape)
                    .field("incarnation", &format_args!("{:#x}", self.incarnation))
                    .finish()
            }
        }
    };
}

#[cfg(feature = "tokio")]
mod aio;
mod classic;
mod conn;
mod error;
mod exact;
mod filter;
mod init;
mod layout;
mod ops;
mod record;
mod resp;
mod retry;
mod session;
mod stats;
mod tally;
#[cfg(feature = "metrics")]
#[cfg_attr(docsrs, doc(cfg(feature = "metrics")))]
pub mod telemetry;
mod transfer;
mod value;
mod window;

#[cfg(feature = "tokio")]
#[cfg_attr(docsrs, doc(cfg(feature = "tokio")))]
pub use aio::{AsyncSharedFilter, AsyncSharedWindow};
pub use classic::ClassicFilter;
pub use conn::Endpoint;
pub use error::{Error, Result};
pub use filter::{SharedFilter, SharedOptions};
pub use record::SharedShape;
pub use stats::SharedStats;
pub use window::{GenerationStats, SharedWindow, SharedWindowConfig, SharedWindowStats};

/// The one answer of a batch call made for one key. A batch always answers every key, so
/// anything else is a bug, reported as one: never read as "absent".
fn one(answers: Vec<bool>) -> error::Result<bool> {
    match answers[..] {
        [answer] => Ok(answer),
        _ => Err(Error::ReportableBug(format!(
            "a one-key batch returned {} answers",
            answers.len()
        ))),
    }
}

/// The error for a shard of `f` found lost.
fn lost(f: &SharedFilter, shard: usize, why: String) -> Error {
    Error::SharedFilterLost {
        name: f.layout.name.clone(),
        key: f.layout.key(shard).to_owned(),
        why,
    }
}

/// The Redis document's examples, compiled and run as doc tests.
#[doc = include_str!("../docs/redis.md")]
#[cfg(doctest)]
pub struct RedisDoctests;

/// The README's example, compiled as a doc test.
#[doc = include_str!("../README.md")]
#[cfg(doctest)]
pub struct ReadmeDoctests;

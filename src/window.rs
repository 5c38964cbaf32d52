//! Windows: keys that expire together with their filters.
//!
//! A Bloom filter cannot forget one key, and a filter that forgets a key the store still
//! holds gives false negatives. So a [`Window`] is a ring of *generation* trees, each a
//! full bloomsled tree with its own filter, snapshot, trust record, crash safety and
//! stats. Writes go to the newest generation; lookups ask every live generation's filter,
//! newest first, and read a generation's store only where its filter says "maybe"; a
//! generation past its horizon is dropped whole (its sled tree, filter, record and snapshot
//! file), never key by key.
//!
//! # The guarantee
//! A window of `G` generations over a span `S` (`Db::open_window(name,
//! WindowConfig::new(S, G))`) cuts time, in milliseconds since the Unix epoch as its
//! [`Clock`] tells it, into generations of `w = S / G`: time `t` belongs to generation
//! `floor(t / w)`. With `cur` the newest generation the window has reached (the clock's,
//! or a later one the clock was at before it went back), the live generations are
//! `cur - G + 1 ..= cur`; older ones are dropped at the next operation. Hence, with times
//! read from the window's clock, **a key written at `t` is found until at least
//! `t + S - w`, and forgotten once `t + S` has passed**: kept between `S - w` and `S`.
//! "Forgotten" means no generation holds it any more; its filter bits are gone with its
//! generation, so it is "maybe" again only at the false-positive rate of the live
//! generations together (about `G` times one generation's rate, when all are full).
//!
//! A clock that goes back never expires anything early: expiry follows the newest
//! generation reached, and writes while the clock is behind go to that newest generation
//! (never to one already dropped). Times are recorded, so a restart on the wall clock
//! keeps each generation's place in time.
//!
//! # Names
//! Generation trees are named `__bloomsled_window:<length of name>:<name>:<generation>`.
//! The prefix is reserved: [`Db::open_tree`](crate::Db::open_tree) and [`Db::drop_tree`](crate::Db::drop_tree) refuse such names, and
//! [`Db::tree_names`](crate::Db::tree_names) leaves them out (list windows with [`Db::window_names`](crate::Db::window_names), their trees
//! with [`Window::tree_names`]). Export includes them and import restores them; the window
//! then adopts them when it is next opened.
//!
//! # Crash safety
//! The ring is recorded in bloomsled's meta tree under `w/` + the window's name (tree
//! records live under `t/` + a tree's name, so the two can never collide): the partition
//! (`G`, `w`), the newest generation, the live generations and the expired ones still being
//! dropped. Open and every rotation make one transition, in this order:
//!
//! 1. the new ring is recorded and flushed: newest generation, live ones, and the ones to
//!    drop;
//! 2. the tree of each live generation is opened, the new one created (through the same
//!    path as any tree: its own trust record, made durable before its first write);
//! 3. the new ring is published to lookups and writes (a rotation takes the write side of
//!    the ring's lock: no operation still uses an old generation);
//! 4. each expired generation is dropped with [`Db::drop_tree`](crate::Db::drop_tree)'s machinery (sled's tree,
//!    then its trust record and snapshot file), then the record is rewritten without them.
//!
//! Killed anywhere, the next open finds the record of step 1 or the one before it:
//! - before step 1 is durable: the old record, and no tree was created or dropped yet;
//!   open then makes the whole transition itself;
//! - after it: every tree the window may have is listed, as live or as dropping. Open
//!   re-runs the transition from the record: a missing live tree is created (it was
//!   empty: nothing was written to it before step 3), a dropping one is dropped again —
//!   dropping is idempotent and also removes a trust record and snapshot file whose sled
//!   tree is already gone, so nothing half-dropped stays. A generation tree the record
//!   lists nowhere (none can exist by this order, but a restored backup might hold one)
//!   is dropped too.
//!
//! No key inside its horizon is lost: a generation is only ever dropped once the recorded
//! newest generation has moved past its horizon, and the live ones are ordinary trees with
//! bloomsled's own crash safety (a tree whose snapshot cannot be trusted after a crash is
//! rebuilt from its keys). A damaged window record is not trusted: the window adopts every
//! generation tree it finds and drops only those past their horizon at the current time.
//!
//! # Lookups
//! Each operation reads the clock once ([`SystemClock`] reads the kernel's coarse clock,
//! a few ns) and compares its generation with the ring's newest: a rotation is due only
//! when it has moved on. The ring sits behind striped read locks (each thread takes its
//! own stripe's, so lookups in many threads share no written cache line). A key is hashed
//! once for every generation (their filters share a seed) and every generation's filter is
//! probed in one pass: one kernel call tests all their blocks, with no branch on what one
//! holds, and the filters' states are checked after it as a tree's lookup checks its own.
//! [`Window::contains_many`] probes all generations' filters for a batch in one pass, with
//! their blocks prefetched together.
//! See `docs/windows.md` for the measured cost.
//!
//! [`Clock`]: crate::clock::Clock
//! [`SystemClock`]: crate::clock::SystemClock

mod config;
mod handle;
mod lookup;
mod names;
mod open;
// The window's record in the meta tree (public only to the fuzz targets and the crate's
// own tests, through the `fuzzing` feature).
#[cfg(feature = "fuzzing")]
#[doc(hidden)]
pub mod record;
#[cfg(not(feature = "fuzzing"))]
#[allow(unreachable_pub)]
mod record;
mod ring;
mod stats;
#[cfg(feature = "metrics")]
mod telemetry;

pub use config::WindowConfig;
pub use handle::Window;
pub use stats::{GenerationStats, WindowStats};

/// The steps of a rotation, a test seam: public with the feature `failpoints`
/// (`WindowConfig::rotation_hook`), crate-private otherwise.
mod rotation_step {
    /// The steps of a rotation, for crash tests (see `WindowConfig::rotation_hook`).
    #[allow(unreachable_pub)]
    #[derive(Debug, Clone, Copy, PartialEq, Eq)]
    pub enum RotationStep {
        /// The new ring is recorded durably.
        Recorded,
        /// The live generations' trees are open (the new one created).
        Created,
        /// The new ring serves operations.
        Published,
        /// One expired generation was dropped.
        Dropped {
            /// Its index.
            index: u64,
        },
        /// The record lists no generation being dropped.
        Done,
    }
}
#[cfg(feature = "failpoints")]
#[cfg_attr(docsrs, doc(cfg(feature = "failpoints")))]
pub use rotation_step::RotationStep;
#[cfg(not(feature = "failpoints"))]
pub(crate) use rotation_step::RotationStep;

//! The ring of a window: its generations in memory, its record on disk, and the one
//! transition that moves both (at open and at each rotation). See the crash argument in
//! [`crate::window`].

use std::collections::BTreeSet;

use sled::IVec;

use super::names::{generation_name, parse_generation_name};
use super::record::{self, WindowRecord};
use super::RotationStep;
use crate::clock::generations::Generations;
use crate::error::{Error, Result};
use crate::hash::SeededHash;
use crate::store::{Db, Tree, TreeConfig};

/// One live generation.
pub(crate) struct Gen {
    pub(crate) index: u64,
    pub(crate) tree: Tree,
}

/// The live generations, newest first; `gens[0]` is generation `newest`, always present.
pub(crate) struct Ring {
    pub(crate) newest: u64,
    pub(crate) gens: Vec<Gen>,
    /// The first millisecond after generation `newest`: before it, no rotation is due (a
    /// comparison on every operation instead of a division).
    pub(crate) ends_ms: u64,
    /// xxh3 with the seed of the newest generation's filter when the ring was made: keys
    /// are hashed with it once for every generation (a filter with another seed hashes
    /// for itself).
    pub(crate) hasher: SeededHash,
}

/// What the ring is made to become: recorded first, then carried out.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Target {
    pub(crate) newest: u64,
    /// Ascending.
    pub(crate) live: Vec<u64>,
    /// Ascending: expired generations whose trees (or their records and files) may remain.
    pub(crate) dropping: Vec<u64>,
}

/// The ring after the newest generation becomes `max(newest, now)`: the generations of
/// `live` that are still live, plus the newest; everything else to drop (`dropping`, the
/// expired ones of `live`, and `orphans`: trees the record does not list).
pub(crate) fn target(
    generations: &Generations,
    newest: u64,
    live: &[u64],
    dropping: &[u64],
    orphans: &[u64],
    now: u64,
) -> Target {
    let newest = newest.max(now);
    let (keep, expired): (Vec<u64>, Vec<u64>) = live
        .iter()
        .partition(|&&e| !generations.is_expired(e, newest));
    let live: BTreeSet<u64> = keep.into_iter().chain([newest]).collect();
    let dropping: BTreeSet<u64> = dropping
        .iter()
        .chain(&expired)
        .chain(orphans)
        .copied()
        .filter(|e| !live.contains(e))
        .collect();
    Target {
        newest,
        live: live.into_iter().collect(),
        dropping: dropping.into_iter().collect(),
    }
}

/// A window's identity and the handles it needs to carry out a transition.
pub(crate) struct Site<'a> {
    pub(crate) db: &'a Db,
    pub(crate) name: &'a [u8],
    pub(crate) generations: &'a Generations,
    pub(crate) tree: &'a Option<TreeConfig>,
    pub(crate) hook: &'a dyn Fn(RotationStep),
}

impl Site<'_> {
    /// The window's record, as found at open: `Ok(None)` if there is none (a new window,
    /// a temporary database, or a record that does not decode, which is logged).
    pub(crate) fn read_record(&self) -> Result<Option<WindowRecord>> {
        let Some(meta) = self.db.meta() else {
            return Ok(None);
        };
        match record::read(meta, self.name)? {
            None => Ok(None),
            Some(Ok(r)) => {
                if r.width_ms != self.generations.width_ms()
                    || r.generations != self.generations.generations()
                {
                    return Err(Error::config(format!(
                        "window {:?} was created with {} generations of {} ms; opening it with \
                         {} of {} ms would misplace its keys in time",
                        String::from_utf8_lossy(self.name),
                        r.generations,
                        r.width_ms,
                        self.generations.generations(),
                        self.generations.width_ms()
                    )));
                }
                Ok(Some(r))
            }
            Some(Err(e)) => {
                log::warn!(
                    "bloomsled: the record of window {:?} is damaged ({e}); adopting the \
                     generation trees that exist",
                    String::from_utf8_lossy(self.name)
                );
                Ok(None)
            }
        }
    }

    /// The indexes of this window's generation trees that sled holds.
    pub(crate) fn trees_on_disk(&self) -> Vec<u64> {
        self.db
            .sled_tree_names()
            .iter()
            .filter_map(|n| match parse_generation_name(n) {
                Some((w, e)) if w == self.name => Some(e),
                _ => None,
            })
            .collect()
    }

    fn write(&self, t: &Target, dropping: bool, durable: bool) -> Result<()> {
        let Some(meta) = self.db.meta() else {
            return Ok(());
        };
        let record = WindowRecord {
            generations: self.generations.generations(),
            width_ms: self.generations.width_ms(),
            newest: t.newest,
            live: t.live.clone(),
            dropping: if dropping { t.dropping.clone() } else { vec![] },
        };
        record::write(meta, self.name, &record, durable)
    }

    /// Opens (creating if needed) generation `e`'s tree; a new one gets `seed` unless the
    /// window's tree configuration fixes one.
    pub(crate) fn open_generation(&self, e: u64, seed: Option<u64>) -> Result<Tree> {
        self.db
            .open_tree_inner(&generation_name(self.name, e), self.tree.clone(), seed)
    }

    /// Steps 1 and 2 of a transition: the target recorded durably, then the trees of its
    /// live generations that `have` lacks opened (created). Returns the new ring, newest
    /// first, reusing the trees of `have`.
    pub(crate) fn record_and_create(&self, t: &Target, have: &[Gen]) -> Result<Ring> {
        self.write(t, true, true)?;
        (self.hook)(RotationStep::Recorded);
        let mut gens: Vec<Gen> = Vec::with_capacity(t.live.len());
        // One seed for every generation, so a lookup hashes a key once: a new generation
        // takes the newest existing one's (the first opened here, newest first, if the ring
        // had none), and the window's first generation a secret one of its own.
        let seed_of = |g: &Gen| g.tree.filters().pinned().1.map(|f| f.seed());
        for &e in t.live.iter().rev() {
            let tree = match have.iter().find(|g| g.index == e) {
                Some(g) => g.tree.clone(),
                None => {
                    let seed = have.first().or(gens.first()).and_then(seed_of);
                    self.open_generation(e, seed)?
                }
            };
            gens.push(Gen { index: e, tree });
        }
        (self.hook)(RotationStep::Created);
        let seed = match gens.first() {
            Some(g) => g.tree.filters().pinned().1.map_or(0, |f| f.seed()),
            None => 0,
        };
        Ok(Ring {
            newest: t.newest,
            gens,
            ends_ms: self.generations.starts_at_ms(t.newest.saturating_add(1)),
            hasher: SeededHash::new(seed),
        })
    }

    /// Step 4 (after the new ring is published, so no operation uses the old trees): the
    /// trees of `dropping` dropped whole, each with its record and snapshot file; then
    /// the record lists none. Returns the indexes whose drop failed (kept for a retry).
    pub(crate) fn drop_expired(&self, t: &Target) -> Result<()> {
        for &e in &t.dropping {
            self.db.drop_tree_inner(&generation_name(self.name, e))?;
            (self.hook)(RotationStep::Dropped { index: e });
        }
        self.write(t, false, false)?;
        (self.hook)(RotationStep::Done);
        Ok(())
    }
}

/// The names of a ring's trees, newest first.
pub(crate) fn tree_names(ring: &Ring) -> Vec<IVec> {
    ring.gens.iter().map(|g| g.tree.name()).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn target_keeps_the_live_adds_the_newest_drops_the_rest() {
        let ep = Generations::from_parts(10, 3).unwrap();
        let t = target(&ep, 5, &[3, 4, 5], &[1], &[2, 9], 7);
        assert_eq!(t.newest, 7);
        assert_eq!(t.live, vec![5, 7]);
        assert_eq!(t.dropping, vec![1, 2, 3, 4, 9]);
        // A clock behind the newest generation moves nothing.
        let t = target(&ep, 5, &[3, 4, 5], &[], &[], 2);
        assert_eq!((t.newest, t.live, t.dropping), (5, vec![3, 4, 5], vec![]));
        // Far ahead: everything expires, the newest is created.
        let t = target(&ep, 5, &[3, 4, 5], &[], &[], 100);
        assert_eq!((t.live, t.dropping), (vec![100], vec![3, 4, 5]));
    }
}

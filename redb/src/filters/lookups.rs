//! What a table's lookups did: the core's striped counters (`bloomsled::reuse`) per table.
//!
//! Every `get` of a table through this crate counts one lookup, before the filter answers
//! (so the counter it bumps does not wait for the probe); the lookups that read redb count
//! one store lookup, and those of them that found nothing with a trusted filter in front
//! (the filter said "maybe") one false positive. Ruled out = lookups − store lookups.
//! Counters are the core's: a plain load and store on this thread's stripe, no locked
//! instruction.

use std::sync::Arc;

use bloomsled::reuse::Counters;

use super::{Built, Shared, TableFilter};

const LOOKUPS: usize = 0;
const STORE: usize = 1;
const FALSE_POSITIVES: usize = 2;

/// A table's lookup counters (see the module docs).
#[derive(Default)]
pub(crate) struct Lookups(Counters<4>);

impl Lookups {
    /// One lookup, before the filter answers.
    #[inline]
    pub(crate) fn lookup(&self) {
        self.0.add(LOOKUPS, 1);
    }

    /// One lookup that read redb, and whether it was a false positive.
    #[inline]
    pub(crate) fn stored(&self, false_positive: bool) {
        self.0.add(STORE, 1);
        if false_positive {
            self.0.add(FALSE_POSITIVES, 1);
        }
    }

    /// Lookups, ruled out by the filter, read from redb, false positives.
    pub(crate) fn totals(&self) -> (u64, u64, u64, u64) {
        // Store lookups read before the lookups: a lookup landing between the reads only
        // makes "ruled out" larger by one in flight, never negative.
        let store = self.0.sum(STORE);
        let fps = self.0.sum(FALSE_POSITIVES);
        let lookups = self.0.sum(LOOKUPS);
        (lookups, lookups.saturating_sub(store), store, fps)
    }
}

/// What a read table asks before redb: its table's counters and the filter it may trust.
pub(crate) struct ReadSide {
    pub(crate) tf: Arc<TableFilter>,
    pub(crate) built: Option<Arc<Built>>,
}

impl ReadSide {
    /// A lookup of `key` through the filter, then `get` (redb), counted.
    #[inline]
    pub(crate) fn get<G, E>(
        &self,
        key: &[u8],
        get: impl FnOnce() -> Result<Option<G>, E>,
    ) -> Result<Option<G>, E> {
        self.tf.lookups.lookup();
        let trusted = match &self.built {
            Some(b) if !b.may_contain(key) => return Ok(None),
            Some(_) => true,
            None => false,
        };
        let v = get()?;
        self.tf.lookups.stored(trusted && v.is_none());
        Ok(v)
    }
}

impl ReadSide {
    /// The read side of `tf` for a read transaction whose state is `seq` (rule 3 decides
    /// whether it may trust the filter, once, at the table's open).
    pub(crate) fn new(shared: &Arc<Shared>, tf: Arc<TableFilter>, seq: u64) -> ReadSide {
        ReadSide {
            built: shared.trusted_current(&tf, seq),
            tf,
        }
    }
}

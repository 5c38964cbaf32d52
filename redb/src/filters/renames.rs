//! A restore's distrust of every table, a rename's of its two and a delete's of its one
//! (rule 3 of `filters.rs`): each table has an epoch of its own, and a filter is trusted at
//! the database's epoch plus its table's, so a rename or a delete moves only the epochs of
//! the names it involves, and the other tables keep their filters. A restore moves the
//! database's (`Shared::unsettle`). The argument is in `docs/redb.md`, "Savepoints and
//! renames".

use std::sync::Arc;
use std::sync::atomic::Ordering::SeqCst;

use super::{Shared, TableFilter};

impl Shared {
    /// `tf`'s epoch (rule 3): the database's plus the table's own. Both only grow, so two
    /// reads give the same sum only if neither moved between them (each is read once).
    pub(crate) fn epoch_of(&self, tf: &TableFilter) -> u64 {
        self.epoch.load(SeqCst).wrapping_add(tf.epoch.load(SeqCst))
    }

    /// Marks the start of a rename to or from `tf`'s name, or of its delete (see
    /// `UnsettleTable`): only that table's filter is distrusted, and its builds wait.
    /// Raised before the epoch moves (`Shared::settled_epoch`).
    pub(crate) fn unsettle_table(self: &Arc<Self>, tf: &Arc<TableFilter>) -> UnsettleTable {
        tf.unsettled.fetch_add(1, SeqCst);
        tf.epoch.fetch_add(1, SeqCst);
        self.changed();
        UnsettleTable {
            tf: tf.clone(),
            shared: self.clone(),
        }
    }
}

/// `Unsettle` for one table: held by a write transaction from a rename to or from the
/// table's name, or its delete, until it ends (that table's builds wait, and its epoch
/// moves again at the end).
pub(crate) struct UnsettleTable {
    tf: Arc<TableFilter>,
    shared: Arc<Shared>,
}

impl Drop for UnsettleTable {
    fn drop(&mut self) {
        self.tf.epoch.fetch_add(1, SeqCst);
        self.shared.changed();
        self.tf.unsettled.fetch_sub(1, SeqCst);
    }
}

impl Shared {
    /// Marks the start of a restore (see `Unsettle`).
    pub(crate) fn unsettle(self: &Arc<Self>) -> Unsettle {
        self.unsettled.fetch_add(1, SeqCst);
        self.epoch.fetch_add(1, SeqCst);
        self.changed();
        Unsettle {
            shared: self.clone(),
        }
    }
}

/// Held by a write transaction from its first restore until it ends: builds wait, and the
/// epoch moves again at the end, so no filter built before the transaction's state is
/// visible is trusted after it.
pub(crate) struct Unsettle {
    shared: Arc<Shared>,
}

impl Drop for Unsettle {
    fn drop(&mut self) {
        self.shared.epoch.fetch_add(1, SeqCst);
        self.shared.changed();
        self.shared.unsettled.fetch_sub(1, SeqCst);
    }
}

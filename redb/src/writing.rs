//! The filter side of a table open in a write transaction, shared by `Table` and
//! `MultimapTable`: every key a write may create goes through [`Writing::admit`] before
//! redb stores it, and a lookup asks [`Writing::get`] before redb.

use std::sync::Arc;

use bloomsled::reuse::Pending;

use crate::filters::{Builder, Kind, TableFilter};
use crate::transactions::WriteTransaction;

/// One table's filter as a write transaction sees it, and the hashes of the keys written
/// through this handle (handed to the transaction when the handle drops, so that its
/// commit can re-insert them into a filter a build installed meanwhile).
pub(crate) struct Writing<'txn> {
    txn: &'txn WriteTransaction,
    kind: Kind,
    name: String,
    /// `None` when filters are off (another process may write).
    filter: Option<Arc<TableFilter>>,
    /// The build generation the transaction saw when it first opened the table.
    gen_seen: u64,
    log: Vec<u64>,
    /// The sets of the table's false-positive memory this handle's writes began in, handed
    /// to the transaction when the handle drops (ended when it ends).
    pending: Pending,
}

impl<'txn> Writing<'txn> {
    /// The filter of table `name` for `txn`, built by `build` if it has none yet.
    pub(crate) fn open(
        txn: &'txn WriteTransaction,
        kind: Kind,
        name: String,
        build: Builder,
    ) -> Writing<'txn> {
        let (filter, gen_seen) = match txn.filter_for(kind, &name, build) {
            Some((tf, g)) => (Some(tf), g),
            None => (None, 0),
        };
        Writing {
            txn,
            kind,
            name,
            filter,
            gen_seen,
            log: Vec::new(),
            pending: Pending::default(),
        }
    }

    /// The table's name.
    pub(crate) fn name(&self) -> &str {
        &self.name
    }

    /// Sets the key's bits before a write that may create it.
    pub(crate) fn admit(&mut self, key: &[u8]) {
        if let Some(tf) = &self.filter {
            self.log.push(tf.insert(key, &mut self.pending));
        }
    }

    fn probe(&self, key: &[u8]) -> Option<bool> {
        let tf = self.filter.as_ref()?;
        tf.probe_written(
            self.gen_seen,
            || self.txn.settled(),
            self.txn.shared(),
            self.txn.seq(),
            key,
        )
    }

    /// A lookup of `key` in this transaction's view: the filter, then `get` (redb), counted
    /// in the table's lookups.
    #[inline]
    pub(crate) fn get<G, E>(
        &self,
        key: &[u8],
        get: impl FnOnce() -> Result<Option<G>, E>,
    ) -> Result<Option<G>, E> {
        let Some(tf) = &self.filter else {
            return get();
        };
        tf.lookups.lookup();
        let probe = self.probe(key);
        if probe == Some(false) {
            return Ok(None);
        }
        let v = get()?;
        tf.lookups.stored(probe.is_some() && v.is_none());
        Ok(v)
    }

    /// The filter and the log, for a cursor that writes through this handle.
    pub(crate) fn for_cursor(&mut self) -> (Option<&TableFilter>, &mut Vec<u64>, &mut Pending) {
        (self.filter.as_deref(), &mut self.log, &mut self.pending)
    }
}

impl Drop for Writing<'_> {
    fn drop(&mut self) {
        self.txn.append_log(self.kind, &self.name, &mut self.log);
        if let Some(tf) = &self.filter {
            self.txn
                .forgets()
                .keep(tf.clone(), std::mem::take(&mut self.pending));
        }
    }
}

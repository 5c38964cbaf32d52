//! What a write transaction does before it changes a table: the records of clean closes
//! and the journal marks it removes or writes, and the tables whose commit counts its
//! commit moves.

use redb::TableError;

use super::WriteTransaction;
use crate::filters::Kind;
use crate::persist;

impl WriteTransaction {
    /// Before this transaction changes table `name`: removes its record of a clean close,
    /// in this transaction, so redb commits or loses the change and the mark together; and
    /// writes its journal mark (`writes`: it opens the table for writing, and this session
    /// journals it) or removes it (a delete or rename, or no journal), likewise.
    ///
    /// And counts the table among those this transaction may change: its commit moves the
    /// table's commit count (`filters/commits.rs`), made here, before redb sees the change.
    pub(super) fn touch(&self, kind: Kind, name: &str, writes: bool) -> Result<(), TableError> {
        if self.shared.enabled {
            self.touched.add(self.shared.table(kind, name).as_ref());
        }
        let key = persist::key(kind, name);
        self.journal_touch(kind, name, &key, writes)?;
        let mut unmarked = self.unmarked.lock().unwrap_or_else(|e| e.into_inner());
        if unmarked.1 || unmarked.0.contains(&key) || !self.shared.on_disk().keys.contains(&key) {
            return Ok(());
        }
        persist::mark_dirty(&self.inner, [key.as_str()])?;
        unmarked.0.push(key);
        Ok(())
    }

    /// The journal side of [`WriteTransaction::touch`]: the mark this session's journal
    /// needs committed before the table's keys are (see `journals.rs`).
    fn journal_touch(
        &self,
        kind: Kind,
        name: &str,
        key: &str,
        writes: bool,
    ) -> Result<(), TableError> {
        let mut marks = self.marks.lock().unwrap_or_else(|e| e.into_inner());
        let restored = self.unmarked.lock().unwrap_or_else(|e| e.into_inner()).1;
        if writes && marks.contains_key(key) {
            return Ok(()); // done in this transaction (a delete or rename ends it again)
        }
        // Whether the table does not exist in this transaction's view (asked at most once,
        // before this transaction opens it): only then may a chain of the empty base start.
        let absent = std::cell::OnceCell::new();
        let absent = || *absent.get_or_init(|| self.lacks_table(kind, name));
        let want = if writes && !restored {
            self.shared.journal_mark(kind, name, key, self.seq, absent)
        } else {
            None
        };
        let committed = self.shared.on_disk().marks.get(key).copied();
        // An empty mark is committed only with the table's making, or in place of one of
        // the same chain (a later session's): never for a table that held keys before it.
        let want = want.filter(|m| {
            let same_chain = committed.is_some_and(|c| c.empty && c.base == m.base);
            !m.empty || committed == Some(*m) || same_chain || absent()
        });
        // A base this session writes goes with the chain's first committed mark (again, if
        // the transaction that wrote it first aborted: a superset of the filter then).
        let want = match want {
            Some(m)
                if self.shared.journals.writes_base(key)
                    && committed.map(|c| c.base) != Some(m.base) =>
            {
                self.write_base(kind, name, key, &m)?.then_some(m)
            }
            other => other,
        };
        if want.is_none() {
            self.shared.journals.stop(key); // a delete, rename, restore, or no journal
        }
        match want {
            Some(m) if committed == Some(m) => {}
            Some(m) => persist::write_mark(&self.inner, key, &m)?,
            None => {
                let written = marks.get(key).is_some_and(Option::is_some);
                if written || self.shared.on_disk().marked.contains(key) {
                    persist::remove_mark(&self.inner, key)?;
                }
            }
        }
        marks.insert(key.to_string(), want);
        Ok(())
    }

    /// Writes the base of this session's chain of table `name` (`mark`'s) in this
    /// transaction: its filter, if it is still trusted for this transaction's state.
    fn write_base(
        &self,
        kind: Kind,
        name: &str,
        key: &str,
        mark: &persist::Mark,
    ) -> Result<bool, TableError> {
        let tf = self.shared.table(kind, name);
        let Some(base) = tf.and_then(|tf| self.shared.trusted_current(&tf, self.seq)) else {
            return Ok(false);
        };
        persist::write_base(&self.inner, key, mark, base.filter())
    }

    /// True if no table `name` of `kind` exists in this transaction's view (false on an
    /// error: then no empty base is trusted).
    fn lacks_table(&self, kind: Kind, name: &str) -> bool {
        match kind {
            Kind::Table => self
                .inner
                .list_tables()
                .is_ok_and(|mut t| t.all(|t| redb::TableHandle::name(&t) != name)),
            Kind::Multimap => self
                .inner
                .list_multimap_tables()
                .is_ok_and(|mut t| t.all(|t| redb::MultimapTableHandle::name(&t) != name)),
        }
    }
}

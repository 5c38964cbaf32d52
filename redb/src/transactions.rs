//! `WriteTransaction`: redb's, with each write logged for the filters; `ReadTransaction` in
//! `transactions/read.rs`.

use std::collections::HashMap;
use std::sync::atomic::Ordering::SeqCst;
use std::sync::{Arc, Mutex};

use redb::{
    CommitError, DatabaseStats, Durability, Key, MultimapTableDefinition, SetDurabilityError,
    StorageError, TableDefinition, TableError, UntypedMultimapTableHandle, UntypedTableHandle,
    Value,
};

use crate::filters::{
    Builder, Forgets, Kind, Out, Shared, TableFilter, Touched, Unsettle, UnsettleTable, Written,
};
use crate::multimap::{MultimapKeys, MultimapTable};
use crate::persist;
use crate::table::{Table, TableKeys};
use crate::writing::Poison;
use crate::{MultimapTableHandle, TableHandle};

mod read;
mod savepoints;
mod touch;

pub use read::ReadTransaction;

/// What a write transaction did to one table's filter: the build generation it saw when it
/// first opened the table, and the hashes of the keys it wrote since.
pub(crate) struct WriteLog {
    filter: Arc<TableFilter>,
    /// Builds this table's filter (`true`: rebuilds it larger), knowing its types.
    build: Builder,
    gen_seen: u64,
    hashes: Vec<u64>,
    /// Counting mode: hashes counted out at the commit (`Writing::count_out`).
    outs: Vec<Out>,
}

/// A write transaction (redb's `WriteTransaction`, same methods).
///
/// Every key it writes is in its table's filter before redb stores it; its commit makes
/// sure a filter built meanwhile holds them too.
///
/// ```
/// use bloomsled_redb::{Database, TableDefinition};
/// const T: TableDefinition<u64, u64> = TableDefinition::new("t");
/// # let dir = tempfile::tempdir().unwrap();
/// let db = Database::create(dir.path().join("a.redb"))?;
/// let w = db.begin_write()?;
/// {
///     let mut t = w.open_table(T)?;
///     t.insert(1, 2)?;
/// }
/// w.commit()?;
/// # Ok::<(), bloomsled_redb::Error>(())
/// ```
pub struct WriteTransaction {
    inner: redb::WriteTransaction,
    shared: Arc<Shared>,
    /// Commits that began before this transaction: its state is theirs.
    seq: u64,
    logs: Mutex<HashMap<(Kind, String), WriteLog>>,
    /// Set from the first restore until the transaction ends (after `inner`).
    unsettle: Mutex<Option<Unsettle>>,
    /// The tables renamed from or to, or deleted, since: each distrusted until the
    /// transaction ends.
    renamed: Mutex<Vec<UnsettleTable>>,
    /// The records of clean closes this transaction removed (`persist`), and whether it
    /// removed them all (a restore).
    unmarked: Mutex<(Vec<String>, bool)>,
    /// The journal marks this transaction wrote (`Some`) or removed (`None`), by table key
    /// (`journals.rs`).
    marks: Mutex<HashMap<String, Option<persist::Mark>>>,
    /// The false-positive memory's forgets of this transaction's writes, ended when it ends
    /// (after `inner`: see `filters/lookups.rs`).
    forgets: Forgets,
    /// The tables this transaction may change, whose commit counts its commit moves
    /// (`filters/commits.rs`).
    touched: Touched,
    /// Set by a panic in a lookup this crate added to a mutation: the commit is refused.
    pub(crate) poison: Poison,
    _alive: Alive,
}

/// Counts a write transaction in `Shared::writers` while it lives.
struct Alive(Arc<Shared>);

impl Drop for Alive {
    fn drop(&mut self) {
        self.0.writers.fetch_sub(1, SeqCst);
    }
}

impl WriteTransaction {
    pub(crate) fn new(inner: redb::WriteTransaction, shared: Arc<Shared>) -> WriteTransaction {
        // This transaction holds redb's write lock: every commit counted in `started` has
        // returned from redb, so the state it sees is the one after them.
        let seq = shared.started.load(SeqCst);
        shared.writers.fetch_add(1, SeqCst);
        WriteTransaction {
            inner,
            _alive: Alive(shared.clone()),
            shared,
            seq,
            logs: Mutex::default(),
            unsettle: Mutex::default(),
            renamed: Mutex::default(),
            unmarked: Mutex::default(),
            marks: Mutex::default(),
            forgets: Forgets::default(),
            touched: Touched::default(),
            poison: Poison::default(),
        }
    }

    fn unsettled(&self) -> bool {
        self.unsettle
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .is_some()
    }

    fn unsettle(&self) {
        let mut u = self.unsettle.lock().unwrap_or_else(|e| e.into_inner());
        if u.is_none() {
            *u = Some(self.shared.unsettle());
            // Before redb's restore: any key may come back (`filters/lookups.rs`), in any
            // table (`filters/commits.rs`).
            self.forgets.forget_all(&self.shared);
            self.touched.all();
        }
    }

    /// Before redb renames table `from` to `to` (`Some`), or deletes `from` (`None`): those
    /// tables' filters are distrusted until this transaction ends (rule 3: their epochs
    /// move now and at its end, and their builds wait), then rebuilt from a scan of what it
    /// left; `to`'s memory forgets every key (it gets `from`'s keys), ended with the
    /// transaction. The other tables keep their filters and memories: a rename or a delete
    /// changes no other table. (`touch` noted them for their commit counts.)
    fn unsettle_tables(&self, kind: Kind, from: &str, to: Option<&str>) {
        if !self.shared.enabled {
            return;
        }
        // A filter that cannot be made: every table, as a restore.
        let Some(from) = self.shared.table(kind, from) else {
            return self.unsettle();
        };
        let to = match to.map(|to| self.shared.table(kind, to)) {
            Some(None) => return self.unsettle(),
            to => to.flatten(),
        };
        let mut renamed = self.renamed.lock().unwrap_or_else(|e| e.into_inner());
        renamed.push(self.shared.unsettle_table(&from));
        if let Some(to) = to {
            renamed.push(self.shared.unsettle_table(&to));
            self.forgets.forget_table(&to);
        }
    }

    /// The table's filter for this transaction, and the generation it first saw. At the
    /// table's first open in this transaction, `build` runs first (unless a restore or
    /// rename of this transaction made the latest committed state not its own).
    pub(crate) fn filter_for(
        &self,
        kind: Kind,
        name: &str,
        build: Builder,
    ) -> Option<(Arc<TableFilter>, u64)> {
        let tf = self.shared.table(kind, name)?;
        self.touched.add(Some(&tf));
        let key = (kind, name.to_string());
        let first = !self
            .logs
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .contains_key(&key);
        if first && self.settled() {
            self.shared.build_if_needed(&tf, false, || build.clone());
        }
        let mut logs = self.logs.lock().unwrap_or_else(|e| e.into_inner());
        let log = logs.entry(key).or_insert_with(|| WriteLog {
            gen_seen: tf.build_gen(),
            filter: tf.clone(),
            build,
            hashes: Vec::new(),
            outs: Vec::new(),
        });
        Some((tf, log.gen_seen))
    }

    /// Builds the table's filter before its first touch (`touch.rs`), as its first open
    /// would just after: a small table's is then trusted when its session's journal starts,
    /// and may be the chain's base (`filters/journals.rs`).
    fn prebuild(&self, kind: Kind, name: &str, build: impl FnOnce() -> Builder) {
        if let Some(tf) = self.shared.table(kind, name).filter(|_| self.settled()) {
            self.shared.build_if_needed(&tf, false, build);
        }
    }

    /// Appends a table handle's logged hashes, and those it counts out at the commit,
    /// when it is dropped.
    pub(crate) fn append_log(
        &self,
        kind: Kind,
        name: &str,
        hashes: &mut Vec<u64>,
        outs: &mut Vec<Out>,
    ) {
        if hashes.is_empty() && outs.is_empty() {
            return;
        }
        let mut logs = self.logs.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(log) = logs.get_mut(&(kind, name.to_string())) {
            log.hashes.append(hashes);
            log.outs.append(outs);
        }
    }

    /// The forgets this transaction's writes made, ended when it ends.
    pub(crate) fn forgets(&self) -> &Forgets {
        &self.forgets
    }

    pub(crate) fn shared(&self) -> &Shared {
        &self.shared
    }

    /// True if this transaction may build or trust filters (it restored or renamed nothing).
    pub(crate) fn settled(&self) -> bool {
        !self.unsettled()
    }

    pub(crate) fn seq(&self) -> u64 {
        self.seq
    }

    /// Opens (creating it if needed) a table. Its filter is built now, from a scan of the
    /// latest committed state, if it has none that this transaction may trust.
    ///
    /// ```
    /// use bloomsled_redb::{Database, TableDefinition};
    /// const T: TableDefinition<&str, &str> = TableDefinition::new("t");
    /// # let dir = tempfile::tempdir().unwrap();
    /// # let db = Database::create(dir.path().join("a.redb"))?;
    /// let w = db.begin_write()?;
    /// w.open_table(T)?.insert("k", "v")?;
    /// w.commit()?;
    /// # Ok::<(), bloomsled_redb::Error>(())
    /// ```
    pub fn open_table<'txn, K: Key + 'static, V: Value + 'static>(
        &'txn self,
        definition: TableDefinition<K, V>,
    ) -> Result<Table<'txn, K, V>, TableError> {
        let name = redb::TableHandle::name(&definition);
        self.prebuild(Kind::Table, name, || TableKeys::<K, V>::shared(name));
        self.touch(Kind::Table, name, true)?;
        let inner = self.inner.open_table(definition)?;
        Ok(Table::new(inner, self))
    }

    /// Opens (creating it if needed) a multimap table.
    ///
    /// ```
    /// use bloomsled_redb::{Database, MultimapTableDefinition};
    /// const M: MultimapTableDefinition<&str, u64> = MultimapTableDefinition::new("m");
    /// # let dir = tempfile::tempdir().unwrap();
    /// # let db = Database::create(dir.path().join("a.redb"))?;
    /// let w = db.begin_write()?;
    /// w.open_multimap_table(M)?.insert("k", 1)?;
    /// w.commit()?;
    /// # Ok::<(), bloomsled_redb::Error>(())
    /// ```
    pub fn open_multimap_table<'txn, K: Key + 'static, V: Key + 'static>(
        &'txn self,
        definition: MultimapTableDefinition<K, V>,
    ) -> Result<MultimapTable<'txn, K, V>, TableError> {
        let name = redb::MultimapTableHandle::name(&definition);
        self.prebuild(Kind::Multimap, name, || MultimapKeys::<K, V>::shared(name));
        self.touch(Kind::Multimap, name, true)?;
        let inner = self.inner.open_multimap_table(definition)?;
        Ok(MultimapTable::new(inner, self))
    }

    /// Renames a table. The two names' filters are distrusted until rebuilt after this
    /// transaction ends (the new name's keys were the old name's); every other table keeps
    /// its filter.
    ///
    /// ```
    /// use bloomsled_redb::{Database, TableDefinition};
    /// const A: TableDefinition<u64, u64> = TableDefinition::new("a");
    /// const B: TableDefinition<u64, u64> = TableDefinition::new("b");
    /// # let dir = tempfile::tempdir().unwrap();
    /// # let db = Database::create(dir.path().join("a.redb"))?;
    /// let w = db.begin_write()?;
    /// w.open_table(A)?.insert(1, 1)?;
    /// w.rename_table(A, B)?;
    /// w.commit()?;
    /// assert!(db.get_latest(B, 1)?.is_some());
    /// # Ok::<(), bloomsled_redb::Error>(())
    /// ```
    pub fn rename_table(
        &self,
        definition: impl TableHandle,
        new_name: impl TableHandle,
    ) -> Result<(), TableError> {
        let name = definition.name().to_string();
        drop(definition);
        self.touch(Kind::Table, &name, false)?;
        self.touch(Kind::Table, new_name.name(), false)?;
        self.unsettle_tables(Kind::Table, &name, Some(new_name.name()));
        self.inner.rename_table(
            TableDefinition::<(), ()>::new(&name),
            TableDefinition::<(), ()>::new(new_name.name()),
        )
    }

    /// Renames a multimap table (see [`WriteTransaction::rename_table`]).
    ///
    /// ```
    /// use bloomsled_redb::{Database, MultimapTableDefinition};
    /// const A: MultimapTableDefinition<u64, u64> = MultimapTableDefinition::new("a");
    /// const B: MultimapTableDefinition<u64, u64> = MultimapTableDefinition::new("b");
    /// # let dir = tempfile::tempdir().unwrap();
    /// # let db = Database::create(dir.path().join("a.redb"))?;
    /// let w = db.begin_write()?;
    /// w.open_multimap_table(A)?.insert(1, 1)?;
    /// w.rename_multimap_table(A, B)?;
    /// w.commit()?;
    /// # Ok::<(), bloomsled_redb::Error>(())
    /// ```
    pub fn rename_multimap_table(
        &self,
        definition: impl MultimapTableHandle,
        new_name: impl MultimapTableHandle,
    ) -> Result<(), TableError> {
        let name = definition.name().to_string();
        drop(definition);
        self.touch(Kind::Multimap, &name, false)?;
        self.touch(Kind::Multimap, new_name.name(), false)?;
        self.unsettle_tables(Kind::Multimap, &name, Some(new_name.name()));
        self.inner.rename_multimap_table(
            MultimapTableDefinition::<(), ()>::new(&name),
            MultimapTableDefinition::<(), ()>::new(new_name.name()),
        )
    }

    /// Deletes a table. Its filter is distrusted from the call until the transaction ends,
    /// then rebuilt from a scan (as a rename's two): the deleted keys do not stay as false
    /// positives, and a read transaction begun before the commit, which still sees them,
    /// never trusts the rebuilt filter (its snapshot is older than the scan).
    ///
    /// ```
    /// use bloomsled_redb::{Database, TableDefinition};
    /// const T: TableDefinition<u64, u64> = TableDefinition::new("t");
    /// # let dir = tempfile::tempdir().unwrap();
    /// # let db = Database::create(dir.path().join("a.redb"))?;
    /// let w = db.begin_write()?;
    /// w.open_table(T)?;
    /// assert!(w.delete_table(T)?);
    /// w.commit()?;
    /// # Ok::<(), bloomsled_redb::Error>(())
    /// ```
    pub fn delete_table(&self, definition: impl TableHandle) -> Result<bool, TableError> {
        let name = definition.name().to_string();
        drop(definition);
        self.touch(Kind::Table, &name, false)?;
        self.unsettle_tables(Kind::Table, &name, None);
        self.inner
            .delete_table(TableDefinition::<(), ()>::new(&name))
    }

    /// Deletes a multimap table (see [`WriteTransaction::delete_table`]).
    ///
    /// ```
    /// use bloomsled_redb::{Database, MultimapTableDefinition};
    /// const M: MultimapTableDefinition<u64, u64> = MultimapTableDefinition::new("m");
    /// # let dir = tempfile::tempdir().unwrap();
    /// # let db = Database::create(dir.path().join("a.redb"))?;
    /// let w = db.begin_write()?;
    /// assert!(!w.delete_multimap_table(M)?);
    /// # Ok::<(), bloomsled_redb::Error>(())
    /// ```
    pub fn delete_multimap_table(
        &self,
        definition: impl MultimapTableHandle,
    ) -> Result<bool, TableError> {
        let name = definition.name().to_string();
        drop(definition);
        self.touch(Kind::Multimap, &name, false)?;
        self.unsettle_tables(Kind::Multimap, &name, None);
        self.inner
            .delete_multimap_table(MultimapTableDefinition::<(), ()>::new(&name))
    }

    /// The tables' names (bloomsled's own, under [`crate::RESERVED_PREFIX`], are not listed).
    ///
    /// ```
    /// use bloomsled_redb::{Database, TableDefinition, TableHandle};
    /// const T: TableDefinition<u64, u64> = TableDefinition::new("t");
    /// # let dir = tempfile::tempdir().unwrap();
    /// # let db = Database::create(dir.path().join("a.redb"))?;
    /// let w = db.begin_write()?;
    /// w.open_table(T)?;
    /// assert_eq!(w.list_tables()?.map(|t| t.name().to_string()).collect::<Vec<_>>(), ["t"]);
    /// # Ok::<(), bloomsled_redb::Error>(())
    /// ```
    pub fn list_tables(
        &self,
    ) -> Result<impl Iterator<Item = UntypedTableHandle> + '_, StorageError> {
        Ok(self
            .inner
            .list_tables()?
            .filter(|t| !persist::reserved(redb::TableHandle::name(t))))
    }

    /// The multimap tables' names.
    ///
    /// ```
    /// # let dir = tempfile::tempdir().unwrap();
    /// # let db = bloomsled_redb::Database::create(dir.path().join("a.redb"))?;
    /// let w = db.begin_write()?;
    /// assert_eq!(w.list_multimap_tables()?.count(), 0);
    /// # Ok::<(), bloomsled_redb::Error>(())
    /// ```
    pub fn list_multimap_tables(
        &self,
    ) -> Result<impl Iterator<Item = UntypedMultimapTableHandle> + '_, StorageError> {
        self.inner.list_multimap_tables()
    }

    /// How durable the commit is. `Durability::None` commits may be lost at a crash: their
    /// keys stay in the filters (false positives only).
    ///
    /// ```
    /// # let dir = tempfile::tempdir().unwrap();
    /// # let db = bloomsled_redb::Database::create(dir.path().join("a.redb"))?;
    /// let mut w = db.begin_write()?;
    /// w.set_durability(bloomsled_redb::Durability::None)?;
    /// w.commit()?;
    /// # Ok::<(), bloomsled_redb::Error>(())
    /// ```
    pub fn set_durability(&mut self, durability: Durability) -> Result<(), SetDurabilityError> {
        self.inner.set_durability(durability)
    }

    /// Whether the commit uses redb's two-phase protocol.
    ///
    /// ```
    /// # let dir = tempfile::tempdir().unwrap();
    /// # let db = bloomsled_redb::Database::create(dir.path().join("a.redb"))?;
    /// let mut w = db.begin_write()?;
    /// w.set_two_phase_commit(true);
    /// # Ok::<(), bloomsled_redb::Error>(())
    /// ```
    pub fn set_two_phase_commit(&mut self, enabled: bool) {
        self.inner.set_two_phase_commit(enabled)
    }

    /// Whether the commit saves the allocator state for a quick repair.
    ///
    /// ```
    /// # let dir = tempfile::tempdir().unwrap();
    /// # let db = bloomsled_redb::Database::create(dir.path().join("a.redb"))?;
    /// let mut w = db.begin_write()?;
    /// w.set_quick_repair(true);
    /// # Ok::<(), bloomsled_redb::Error>(())
    /// ```
    pub fn set_quick_repair(&mut self, enabled: bool) {
        self.inner.set_quick_repair(enabled)
    }

    /// redb's statistics of the database as this transaction sees it.
    ///
    /// ```
    /// # let dir = tempfile::tempdir().unwrap();
    /// # let db = bloomsled_redb::Database::create(dir.path().join("a.redb"))?;
    /// let w = db.begin_write()?;
    /// assert!(w.stats()?.page_size() > 0);
    /// # Ok::<(), bloomsled_redb::Error>(())
    /// ```
    pub fn stats(&self) -> Result<DatabaseStats, StorageError> {
        self.inner.stats()
    }

    /// Commits. Before redb's commit, a filter built since this transaction first opened a
    /// table gets the keys it wrote there (rule 2 of the filters' protocol). After it, a
    /// filter this transaction filled past its capacity is rebuilt larger, sized for its
    /// keys, from a scan (in a background thread, unless the table is small; lookups use
    /// the full filter meanwhile).
    ///
    /// ```
    /// # let dir = tempfile::tempdir().unwrap();
    /// # let db = bloomsled_redb::Database::create(dir.path().join("a.redb"))?;
    /// db.begin_write()?.commit()?;
    /// # Ok::<(), bloomsled_redb::Error>(())
    /// ```
    pub fn commit(self) -> Result<(), CommitError> {
        if self.poison.is_set() {
            self.abort()?;
            return Err(CommitError::TransactionPoisoned);
        }
        let WriteTransaction {
            inner,
            shared,
            logs,
            unsettle,
            renamed,
            unmarked,
            marks,
            forgets,
            touched,
            seq,
            ..
        } = self;
        let logs = logs.into_inner().unwrap_or_else(|e| e.into_inner());
        let written = logs.values().map(|log| Written {
            filter: &log.filter,
            gen_seen: log.gen_seen,
            hashes: &log.hashes,
            outs: &log.outs,
        });
        let result = shared.commit_guarded(written, &touched, || {
            let result = inner.commit();
            if let (Err(CommitError::Storage(e)), Some(path)) = (&result, &shared.path)
                && crate::db::taint::is_write_failure(e)
            {
                crate::db::taint::mark(path);
            }
            if result.is_ok() {
                shared.committed_marks(
                    unmarked.into_inner().unwrap_or_else(|e| e.into_inner()),
                    marks.into_inner().unwrap_or_else(|e| e.into_inner()),
                );
            }
            result
        });
        // After redb's commit returned and was counted: its keys are in every snapshot
        // begun from now on (`filters/lookups.rs`). Then its misses are recorded (rule 6).
        let settled = unsettle.lock().unwrap_or_else(|e| e.into_inner()).is_none()
            && renamed.lock().unwrap_or_else(|e| e.into_inner()).is_empty();
        match &result {
            Ok(()) => forgets.end_and_record(&shared, seq, settled, |tf, h| {
                (logs.values()).any(|l| std::ptr::eq(&*l.filter, tf) && l.hashes.contains(&h))
            }),
            Err(_) => drop(forgets),
        }
        drop(unsettle);
        drop(renamed);
        if result.is_ok() {
            for log in logs.values().filter(|log| log.filter.wants_growth()) {
                shared.build_if_needed(&log.filter, true, || log.build.clone());
            }
        }
        result
    }

    /// Aborts: nothing is stored; keys already in filters are false positives only.
    ///
    /// ```
    /// # let dir = tempfile::tempdir().unwrap();
    /// # let db = bloomsled_redb::Database::create(dir.path().join("a.redb"))?;
    /// db.begin_write()?.abort()?;
    /// # Ok::<(), bloomsled_redb::Error>(())
    /// ```
    pub fn abort(self) -> Result<(), StorageError> {
        self.inner.abort()
    }
}

impl std::fmt::Debug for WriteTransaction {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WriteTransaction").finish_non_exhaustive()
    }
}

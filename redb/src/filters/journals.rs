//! Crash journals: after `kill -9` (same boot), a table written since the last clean close
//! gets its filter back from the filter that close stored (or the empty filter, for a table
//! made since that close) plus the hashes of the keys written since, without reading a key.
//! The journal's bytes, its counter file (in `/dev/shm` by default, cleared by a reboot),
//! the boot id and the trust rule are the core's ([`bloomsled::persist::JournalWriter`],
//! [`bloomsled::persist::replay_journals`]); this module binds them to redb's tables and
//! commits.
//!
//! * **Where.** A database opened by path keeps its journals in the folder
//!   `<file>.bloomsled` beside it: `<table id>.<session>.jnl`. None is kept for a file
//!   opened from a `File` or a backend, for a read-only open, or with filters off.
//! * **The binding** (what a journal extends, [`binding`]): database id = the last clean
//!   close's sequence and random nonce; table id = the table's tree id
//!   (`persist::table_tree`: xxh3 of its key with its seed); base = the snapshot id of the
//!   filter that close left stored for the table (zeros for an empty mark); and the table's
//!   seed. A journal of another database, table, close or base is refused by the core's
//!   rule.
//! * **Writes.** The first write transaction of a session (a handle) that opens a table for
//!   writing, if the last clean close stored the table's filter (its record is there, or a
//!   mark of an earlier session names that close), creates the session's journal, sequence
//!   1 for the first session since the close, then the mark's `last + 1`, and writes the
//!   table's mark (`persist::Mark`, `last` = this session) **in that transaction**: redb
//!   commits the data and the mark together. A table with neither record nor mark gets a
//!   chain only if it does not exist in that transaction's view (redb's `list_tables`,
//!   before the open makes it): its mark is then an **empty mark** (`empty`, sequence 1),
//!   committed with the table's making. An empty mark is written only by such a transaction
//!   or in place of a committed empty mark of the same chain (by a later session); a table
//!   that exists without one (a small table the close did not store, a table made without a
//!   journal) is never given an empty base: its chain's base is its filter as that
//!   transaction finds it (trusted for its state, so holding every key of the latest
//!   committed state, which no commit changes while it holds redb's write lock; at most
//!   16 KiB), written by it as a snapshot with the mark (`persist::write_base`), and again
//!   with a mark written again after it aborted. Each key's hash is then appended to the journal
//!   in the same step that sets its bits, before redb stores it (rule 1 of `filters.rs`). A
//!   journal that cannot be made (no boot id, no counter folder, a full disk) writes no
//!   mark and removes the table's mark in the transaction: the next open after a crash
//!   scans, and the write goes on.
//! * **Replay** (`filters/build.rs`, at a table's first use, when it has no record): the
//!   mark must name the last close and the table's seed; the core's rule
//!   (`bloomsled::persist::judge_named`) must trust the stored snapshot for the database,
//!   tree, snapshot id and sequence the mark names (an empty mark names no snapshot, and
//!   the hashes go into an empty filter sized for
//!   twice the table's keys, as a scan's: an empty filter of any size holds no key, so it
//!   is not rebuilt larger at once); every journal `1..=last` must pass the core's rule
//!   (this boot, database, table, base and seed; counter file there, same incarnation, no
//!   record erased, no overflow). Then the hashes go into the loaded filter, which is
//!   installed by the build protocol (rules 2, 3), and only if the mark is unchanged when
//!   the build's second transaction begins. Anything else: a scan, as before, with the
//!   core's reason kept for `Database::table_filter_source`.
//! * **Why nothing is missed.** Every key of the latest committed state was in the table at
//!   the close (so in its stored filter), or was written by a later commit (for an empty
//!   mark: every key was written at or after the commit of the chain's first mark, since
//!   the table did not exist before the transaction that made it, and a delete, rename or
//!   restore since removed the mark); that commit wrote in a session whose first commit
//!   touching the table committed the mark naming the session's journal (or removed it),
//!   and the session's sequence is at most the mark's `last`, because sequences only grow
//!   from the committed mark; its key's hash reached that journal before redb stored the
//!   key. A session that could not journal removed the mark in its first commit: then no
//!   replay. Delete, rename and restore remove marks in their transaction and stop the
//!   session's journaling of those tables.
//! * **Clean close.** The close's commit removes every mark; then this handle's journals
//!   and the old close's counter files are removed.

use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::Ordering::SeqCst;

use bloomsled::persist::{JournalBinding, JournalWriter};

use super::{Kind, Shared};
use crate::persist::{self, Close, Mark, Record};
use crate::sync::{AtomicBool, Mutex, MutexGuard};

/// The journals of one database handle.
pub(crate) struct Journals {
    /// `<file>.bloomsled`; `None`: no journal is kept or replayed.
    dir: Option<PathBuf>,
    /// Per table key: the mark of this session's journal, or `None` once the table cannot
    /// be journaled in this session (no stored filter, no journal, a delete, rename or
    /// restore).
    chains: Mutex<HashMap<String, Option<Mark>>>,
    /// Set by a restore: no table is journaled for the rest of the session.
    stopped: AtomicBool,
    /// The tables whose chain this session based on their filter, written with the mark
    /// (tables the last clean close did not store).
    based: Mutex<HashSet<String>>,
}

/// The largest filter a session writes as a chain's base (a small table's is about 2 KiB):
/// a larger one keeps its scan after a crash rather than add megabytes to a write.
const BASE_MAX_BYTES: usize = 16 << 10;

/// The folder of the journals of the database file at `path`.
pub(crate) fn dir_of(path: &Path) -> PathBuf {
    let mut name = path.as_os_str().to_owned();
    name.push(".bloomsled");
    PathBuf::from(name)
}

/// What the journals of table `key` marked by `mark` extend (see the module doc).
pub(crate) fn binding(key: &str, mark: &Mark) -> JournalBinding {
    mark.chain(key).binding
}

/// True if `mark` is an empty mark naming no snapshot: its journals' hashes are then all
/// its table's keys (a replay adds them to an empty filter of any size).
pub(crate) fn extends_empty(mark: &Mark) -> bool {
    mark.empty && mark.base.snapshot == [0; 16] && mark.base.sequence == 0
}

impl Journals {
    pub(crate) fn new(dir: Option<PathBuf>) -> Journals {
        Journals {
            dir,
            chains: Mutex::default(),
            stopped: AtomicBool::new(false),
            based: Mutex::default(),
        }
    }

    pub(crate) fn dir(&self) -> Option<&Path> {
        self.dir.as_deref()
    }

    fn chains(&self) -> MutexGuard<'_, HashMap<String, Option<Mark>>> {
        self.chains.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// This session stops journaling table `key` (a delete or rename, or its journals
    /// were refused).
    pub(crate) fn stop(&self, key: &str) {
        self.chains().insert(key.to_string(), None);
    }

    /// True if this session's chain of table `key` extends the filter it wrote as its base
    /// (the mark's transaction writes that base too: `persist::write_base`).
    pub(crate) fn writes_base(&self, key: &str) -> bool {
        (self.based.lock().unwrap_or_else(|e| e.into_inner())).contains(key)
    }

    /// This session stops journaling every table (a restore): every chain known so far
    /// ends, and tables not seen yet start none.
    pub(crate) fn stop_all(&self) {
        self.stopped.store(true, SeqCst);
        self.chains().values_mut().for_each(|c| *c = None);
    }
}

impl Shared {
    /// The mark a write transaction must have committed for table `name` (`key`) before it
    /// writes it, starting this session's journal of it at its first call; `None`: the
    /// table is not journaled in this session (its mark must be removed). `absent`: the
    /// table does not exist in the transaction's view (an empty base may start); `seq`: the
    /// transaction's (a filter trusted for it may be a chain's base).
    pub(crate) fn journal_mark(
        &self,
        kind: Kind,
        name: &str,
        key: &str,
        seq: u64,
        absent: impl FnOnce() -> bool,
    ) -> Option<Mark> {
        // Counting mode: no journal. Its hashes are count-ins only, so a replay could not
        // count removals out: a counting table is scanned after a crash (`build.rs`).
        if self.counting {
            return None;
        }
        let dir = self.journals.dir()?;
        let mut chains = self.journals.chains();
        if self.journals.stopped.load(SeqCst) {
            return None;
        }
        if let Some(chain) = chains.get(key) {
            return *chain;
        }
        let started = self.start_journal(kind, name, key, dir, (seq, absent));
        chains.insert(key.to_string(), started);
        started
    }

    /// Creates this session's journal of table `key` and hands it to the table's filter.
    fn start_journal(
        &self,
        kind: Kind,
        name: &str,
        key: &str,
        dir: &Path,
        (seq, absent): (u64, impl FnOnce() -> bool),
    ) -> Option<Mark> {
        let tf = self.table(kind, name)?;
        // Read before the records' lock: a commit takes the table's lock, then that one.
        let trusted = self.trusted_current(&tf, seq);
        let mark = {
            let on_disk = self.on_disk();
            let close = on_disk.close?;
            if let Some(r) = on_disk.records.get(key) {
                Mark {
                    close,
                    base: *r,
                    empty: false,
                    last: 1,
                }
            } else if let Some(m) = on_disk.marks.get(key) {
                Mark {
                    last: m.last.checked_add(1)?,
                    ..*m
                }
            } else if !absent() {
                // The close did not store it (too small): its filter now, complete for the
                // latest committed state (the transaction holds redb's write lock and has
                // not written the table yet), is the chain's base, written with the mark.
                let base = trusted.clone()?;
                if base.filter().memory_bytes() > BASE_MAX_BYTES {
                    return None;
                }
                let sequence = close.sequence;
                let snapshot = persist::random_id().ok()?;
                let seed = tf.seed();
                (self
                    .journals
                    .based
                    .lock()
                    .unwrap_or_else(|e| e.into_inner()))
                .insert(key.to_string());
                Mark {
                    close,
                    base: Record {
                        seed,
                        snapshot,
                        sequence,
                    },
                    empty: false,
                    last: 1,
                }
            } else {
                // Made by this transaction: its filter so far is the empty one of its seed.
                Mark {
                    close,
                    base: Record {
                        seed: tf.seed(),
                        snapshot: [0; 16],
                        sequence: 0,
                    },
                    empty: true,
                    last: 1,
                }
            }
        };
        if tf.seed() != mark.base.seed {
            return None;
        }
        // No journal (no boot id or counter folder, a full disk, a counter file another
        // process holds): the caller removes the mark, and a crash before the next clean
        // close scans the table.
        let writer = JournalWriter::create(dir, &binding(key, &mark), mark.last).ok()?;
        tf.set_journal(Arc::new(writer));
        Some(mark)
    }

    /// After a clean close committed: this handle's journals are dropped and the files of
    /// the close they extended removed (with its counter files).
    pub(crate) fn retire_journals(&self, old: Option<Close>) {
        let Some(dir) = self.journals.dir() else {
            return;
        };
        self.drop_journals();
        if let Some(close) = old {
            bloomsled::persist::remove_journals(dir, &close.id());
        }
        // Only if empty: a folder with files this crate did not make stays.
        let _ = std::fs::remove_dir(dir);
    }

    /// After redb's commit returned `Ok`, under the commit's guards: the records of clean
    /// closes it removed (`keys`, or every one if `all`: a restore) and the journal marks it
    /// removed or wrote are no longer or now on disk.
    pub(crate) fn committed_marks(
        &self,
        (keys, all): (Vec<String>, bool),
        marks: HashMap<String, Option<Mark>>,
    ) {
        let mut on_disk = self.on_disk();
        if all {
            on_disk.keys.clear();
            on_disk.records.clear();
            on_disk.marks.clear();
            on_disk.marked.clear();
        }
        for k in keys {
            on_disk.keys.remove(&k);
            on_disk.records.remove(&k);
        }
        // After a restore the transaction committed no mark (it removed them all).
        for (k, m) in marks.into_iter().filter(|_| !all) {
            match m {
                Some(m) => {
                    on_disk.marked.insert(k.clone());
                    on_disk.marks.insert(k, m);
                }
                None => {
                    on_disk.marked.remove(&k);
                    on_disk.marks.remove(&k);
                }
            }
        }
    }
}

//! The protocol of the parent module (rules 1-4) under loom's model checker: every
//! interleaving, up to a preemption bound, of a write transaction, a commit, a build and
//! lookups, on the real `Shared` and `TableFilter` (their locks and atomics come from
//! `crate::sync`, loom's under `--cfg bloomsled_loom`; the core's `Filter` is loom's too).
//! redb cannot run under loom: [`Store`] stands in for it, a set of committed keys behind a
//! lock (a commit is one step, a read transaction's begin copies the set), driven by the
//! functions the crate's transactions call: `Shared::table`, `TableFilter::build_gen` and
//! `TableFilter::insert` (a table's first open and a write), `Shared::commit_guarded` (the
//! commit around redb's), `Shared::settled_epoch` and `Shared::scan_build_with` (a build,
//! as `build_if_needed` starts it), `Shared::rules_out_latest` (the per-request path and its per-thread cache),
//! `Shared::trusted_current` (a read transaction's table) and
//! `TableFilter::probe_written` (a write transaction's lookup), and for the false-positive
//! memory `ReadSide::get` (a read table's lookup), `Forgets` (a write transaction's
//! forgets, ended when it ends, and its misses, recorded after its commit by
//! `Forgets::end_and_record`) and `Touched` (the tables whose commit counts a commit
//! moves); a rename's `Shared::unsettle_table`; and in counting mode the count-outs of
//! `Shared::commit_guarded` against `ReadSide::get`'s `outs` check. Run with
//! `RUSTFLAGS="--cfg bloomsled_loom" cargo test --release -p bloomsled-redb --lib loom`
//! (see `.ci/run`).

use std::collections::BTreeSet;
use std::sync::Arc;
use std::sync::atomic::Ordering::SeqCst;

use loom::sync::atomic::AtomicBool;

use super::{Forgets, Kind, Out, ReadSide, Shared, Source, TableFilter, Touched, Written};
use crate::persist::{self, OnDisk};
use crate::sync::{Mutex, RwLock};

const TABLE: &str = "t";
/// The key written, removed or restored while the model runs.
const KEY: &[u8] = b"the key a race must not lose";
const SEED: u64 = 7;

/// Runs `body` under loom with a preemption bound of 3 unless `LOOM_MAX_PREEMPTIONS` says
/// otherwise (as the core's models: loom's docs say 2 or 3 find most bugs, and 2 misses
/// the stale `valid_from` of (c)); prints how many interleavings ran.
fn model(what: &str, body: impl Fn() + Sync + Send + 'static) {
    use std::sync::atomic::AtomicUsize as Count;
    let runs = Arc::new(Count::new(0));
    let counted = runs.clone();
    let mut builder = loom::model::Builder::new();
    if builder.preemption_bound.is_none() {
        builder.preemption_bound = Some(3);
    }
    builder.check(move || {
        counted.fetch_add(1, SeqCst);
        body();
    });
    println!(
        "loom: {} interleavings of {what}, no false negative",
        runs.load(SeqCst)
    );
}

/// redb as the protocol sees it: the committed keys of the one table. A commit applies its
/// writes in one step under the lock; a read transaction's begin copies them (its snapshot).
struct Store(Mutex<BTreeSet<&'static [u8]>>);

impl Store {
    fn new(keys: &[&'static [u8]]) -> Store {
        Store(Mutex::new(keys.iter().copied().collect()))
    }

    /// `begin_read`: the state of every commit that returned before it.
    fn begin_read(&self) -> BTreeSet<&'static [u8]> {
        self.0.lock().unwrap().clone()
    }

    /// redb's commit of a transaction that inserted `insert` and removed `remove`.
    fn commit(&self, insert: &[&'static [u8]], remove: &[&'static [u8]]) {
        let mut keys = self.0.lock().unwrap();
        keys.extend(insert.iter().copied());
        for k in remove {
            keys.remove(k);
        }
    }
}

/// A database with filters on, no redb behind it, and table `TABLE` made.
fn database() -> (Arc<Shared>, Arc<TableFilter>) {
    database_in(false)
}

/// [`database`], in counting mode if `counting`.
fn database_in(counting: bool) -> (Arc<Shared>, Arc<TableFilter>) {
    let mut on_disk = OnDisk::default();
    on_disk.seeds.insert(persist::key(Kind::Table, TABLE), SEED);
    let shared = Arc::new(
        Shared::new(
            true,
            Source::ReadWrite(RwLock::new(None)),
            on_disk,
            None,
            None,
        )
        .tuned(crate::filters::Tuning {
            counting,
            ..Default::default()
        }),
    );
    let tf = shared.table(Kind::Table, TABLE).expect("filters are on");
    (shared, tf)
}

/// A build of `tf` from a scan of `store`, as `build_if_needed` starts one (none while a
/// restore or rename is in flight).
fn build(shared: &Shared, tf: &TableFilter, store: &Store) {
    let Some(epoch) = shared.settled_epoch(tf) else {
        return;
    };
    shared.scan_build_with(
        tf,
        epoch,
        1,
        || Some(store.begin_read()),
        |keys, add| keys.iter().all(|k| add(k)),
    );
}

/// A write transaction that opens `tf`, inserts `insert` (through the filter first, rule
/// 1, forgetting each key in the false-positive memory), removes `remove`, commits (rule
/// 2, and the table's commit count; in counting mode, the removed keys counted out), and
/// ends (its forgets end after the commit returned).
fn write_and_commit(
    shared: &Shared,
    tf: &Arc<TableFilter>,
    store: &Store,
    insert: &[&'static [u8]],
    remove: &[&'static [u8]],
) {
    let forgets = Forgets::default();
    // `WriteTransaction::touch`, at the table's open for writing.
    let touched = Touched::default();
    touched.add(Some(tf));
    let gen_seen = tf.build_gen();
    let mut pending = Default::default();
    let log: Vec<u64> = insert.iter().map(|k| tf.insert(k, &mut pending)).collect();
    forgets.keep(tf.clone(), pending);
    // `Table::remove` of a key the table holds (each removed key is, in these models).
    let outs: Vec<Out> = (remove.iter())
        .map(|k| Out {
            h: bloomsled::hash::hash_key(k, tf.seed()),
            extra: false,
        })
        .collect();
    let written = Written {
        filter: tf,
        gen_seen,
        hashes: &log,
        outs: &outs,
    };
    shared
        .commit_guarded([written], &touched, || {
            store.commit(insert, remove);
            Ok::<(), ()>(())
        })
        .unwrap();
    drop(forgets);
}

/// A read transaction's lookup of `key`: whether the filter its table keeps rules the key
/// out, and whether its snapshot holds the key.
fn read_transaction(shared: &Shared, tf: &TableFilter, store: &Store, key: &[u8]) -> (bool, bool) {
    // `Database::begin_read`: the commits finished, then redb's begin.
    let seq = shared.finished.load(SeqCst);
    let snapshot = store.begin_read();
    let ruled_out = shared
        .trusted_current(tf, seq)
        .is_some_and(|built| !built.may_contain(key));
    (ruled_out, snapshot.contains(key))
}

/// A restore on its own thread: moves the epoch, commits the key back without a write
/// through the filter, sets `done`, and moves the epoch again as its transaction ends.
fn spawn_restore(
    shared: &Arc<Shared>,
    store: &Arc<Store>,
    done: &Arc<AtomicBool>,
) -> loom::thread::JoinHandle<()> {
    let (shared, store, done) = (shared.clone(), store.clone(), done.clone());
    loom::thread::spawn(move || {
        let unsettle = shared.unsettle();
        // A restore may change any table.
        let touched = Touched::default();
        touched.all();
        let _ = shared.commit_guarded([], &touched, || {
            store.commit(&[KEY], &[]);
            Ok::<(), ()>(())
        });
        done.store(true, SeqCst);
        drop(unsettle);
    })
}

/// A rename to the table's name on its own thread: moves the table's own epoch (not the
/// database's), commits the key under that name without a write through the filter (it
/// was the other name's), sets `done`, and moves the table's epoch again as its
/// transaction ends.
fn spawn_rename(
    shared: &Arc<Shared>,
    tf: &Arc<TableFilter>,
    store: &Arc<Store>,
    done: &Arc<AtomicBool>,
) -> loom::thread::JoinHandle<()> {
    let (shared, tf, store, done) = (shared.clone(), tf.clone(), store.clone(), done.clone());
    loom::thread::spawn(move || {
        let unsettle = shared.unsettle_table(&tf);
        // A rename changes the two tables it names (`WriteTransaction::touch`).
        let touched = Touched::default();
        touched.add(Some(&tf));
        let _ = shared.commit_guarded([], &touched, || {
            store.commit(&[KEY], &[]);
            Ok::<(), ()>(())
        });
        done.store(true, SeqCst);
        drop(unsettle);
    })
}

/// (a) Rules 1 and 2: a write transaction inserts a new key and commits while a build
/// installs `pending`, scans the committed state and installs its filter. Whatever the
/// interleaving, the key is in the scan or in `pending`: afterwards neither the
/// per-request path nor a new read transaction rules it out.
#[test]
fn loom_a_commit_racing_a_build_keeps_its_key() {
    model("a commit against a build", || {
        let (shared, tf) = database();
        let store = Arc::new(Store::new(&[]));
        let writer = {
            let (shared, tf, store) = (shared.clone(), tf.clone(), store.clone());
            loom::thread::spawn(move || write_and_commit(&shared, &tf, &store, &[KEY], &[]))
        };
        build(&shared, &tf, &store);
        writer.join().unwrap();
        assert!(
            !shared.rules_out_latest(Kind::Table, TABLE, KEY),
            "the per-request path lost a committed key"
        );
        let (ruled_out, stored) = read_transaction(&shared, &tf, &store, KEY);
        assert!(
            stored && !ruled_out,
            "a read transaction lost a committed key"
        );
    });
}

/// (b) Rule 4, a swap: a thread whose per-request cache holds the table's filter looks a
/// key up again while a build installs a new filter and a write transaction then commits
/// the key. A lookup that begins after that commit returned never rules the key out.
#[test]
fn loom_the_per_request_cache_sees_a_swap_and_a_new_key() {
    model("a cached lookup against a swap and a commit", || {
        let (shared, tf) = database();
        let store = Arc::new(Store::new(&[]));
        build(&shared, &tf, &store);
        // This thread caches the filter, which lacks the key.
        assert!(shared.rules_out_latest(Kind::Table, TABLE, KEY));
        let done = Arc::new(AtomicBool::new(false));
        let builder = {
            let (shared, tf, store) = (shared.clone(), tf.clone(), store.clone());
            loom::thread::spawn(move || build(&shared, &tf, &store))
        };
        let writer = {
            let (shared, tf, store, done) =
                (shared.clone(), tf.clone(), store.clone(), done.clone());
            loom::thread::spawn(move || {
                write_and_commit(&shared, &tf, &store, &[KEY], &[]);
                done.store(true, SeqCst);
            })
        };
        let after = done.load(SeqCst);
        let ruled_out = shared.rules_out_latest(Kind::Table, TABLE, KEY);
        assert!(
            !(after && ruled_out),
            "a cached filter ruled out a key committed before the lookup began"
        );
        builder.join().unwrap();
        writer.join().unwrap();
        assert!(!shared.rules_out_latest(Kind::Table, TABLE, KEY));
    });
}

/// (b) Rule 4, an epoch move: a thread whose per-request cache holds a filter built while
/// the key was not stored (as after its removal) looks it up while a restore brings the key back (its transaction
/// moves the epoch, commits the key without a write through the filter, and moves the
/// epoch again when it ends). A lookup that begins after the restore committed never
/// rules the key out.
#[test]
fn loom_the_per_request_cache_sees_a_restore() {
    model("a cached lookup against a restore", || {
        let (shared, tf) = database();
        let store = Arc::new(Store::new(&[]));
        build(&shared, &tf, &store);
        // This thread caches the filter, which lacks the key.
        assert!(shared.rules_out_latest(Kind::Table, TABLE, KEY));
        let done = Arc::new(AtomicBool::new(false));
        let restore = spawn_restore(&shared, &store, &done);
        let after = done.load(SeqCst);
        let ruled_out = shared.rules_out_latest(Kind::Table, TABLE, KEY);
        assert!(
            !(after && ruled_out),
            "a cached filter ruled out a key a restore brought back"
        );
        restore.join().unwrap();
        assert!(!shared.rules_out_latest(Kind::Table, TABLE, KEY));
    });
}

/// (b) Rules 3 and 4 with a build: a build races a restore that brings the key back (the
/// restore moves the epoch before and after its commit). A lookup that begins after the
/// restore committed never rules the key out, whichever filter the build installed.
#[test]
fn loom_a_build_racing_a_restore_is_not_trusted() {
    model("a build against a restore", || {
        let (shared, tf) = database();
        let store = Arc::new(Store::new(&[]));
        let done = Arc::new(AtomicBool::new(false));
        let restore = spawn_restore(&shared, &store, &done);
        let builder = {
            let (shared, tf, store) = (shared.clone(), tf.clone(), store.clone());
            loom::thread::spawn(move || build(&shared, &tf, &store))
        };
        let after = done.load(SeqCst);
        let ruled_out = shared.rules_out_latest(Kind::Table, TABLE, KEY);
        assert!(
            !(after && ruled_out),
            "a filter built during a restore ruled out a key it brought back"
        );
        restore.join().unwrap();
        builder.join().unwrap();
        assert!(!shared.rules_out_latest(Kind::Table, TABLE, KEY));
    });
}

/// (b) Rules 3 and 4 with a rename: a thread whose per-request cache holds the table's
/// filter, and a build, race a rename that gives the table's name the key (it moves only
/// that table's epoch, before and after its commit). A lookup that begins after the rename
/// committed never rules the key out.
#[test]
fn loom_a_rename_distrusts_the_cached_and_the_racing_filter() {
    model("a cached lookup and a build against a rename", || {
        let (shared, tf) = database();
        let store = Arc::new(Store::new(&[]));
        build(&shared, &tf, &store);
        assert!(shared.rules_out_latest(Kind::Table, TABLE, KEY));
        let done = Arc::new(AtomicBool::new(false));
        let rename = spawn_rename(&shared, &tf, &store, &done);
        let builder = {
            let (shared, tf, store) = (shared.clone(), tf.clone(), store.clone());
            loom::thread::spawn(move || build(&shared, &tf, &store))
        };
        let after = done.load(SeqCst);
        let ruled_out = shared.rules_out_latest(Kind::Table, TABLE, KEY);
        assert!(
            !(after && ruled_out),
            "a filter ruled out a key a rename brought to its table"
        );
        rename.join().unwrap();
        builder.join().unwrap();
        assert!(!shared.rules_out_latest(Kind::Table, TABLE, KEY));
        let (ruled_out, stored) = read_transaction(&shared, &tf, &store, KEY);
        assert!(
            stored && !ruled_out,
            "a read transaction lost a renamed key"
        );
    });
}

/// (c) Rule 3: a read transaction that began while the key was stored opens the table
/// while a write transaction removes the key and a build scans a state before or after
/// the removal. A filter it trusts always holds every key of its snapshot.
#[test]
fn loom_an_older_snapshot_never_trusts_a_newer_scan() {
    model("an old snapshot against a removal and a build", || {
        let (shared, tf) = database();
        let store = Arc::new(Store::new(&[]));
        build(&shared, &tf, &store);
        write_and_commit(&shared, &tf, &store, &[KEY], &[]);
        let remover = {
            let (shared, tf, store) = (shared.clone(), tf.clone(), store.clone());
            loom::thread::spawn(move || write_and_commit(&shared, &tf, &store, &[], &[KEY]))
        };
        let builder = {
            let (shared, tf, store) = (shared.clone(), tf.clone(), store.clone());
            loom::thread::spawn(move || build(&shared, &tf, &store))
        };
        let (ruled_out, stored) = read_transaction(&shared, &tf, &store, KEY);
        assert!(
            !(stored && ruled_out),
            "a snapshot holding the key trusted a filter without it"
        );
        remover.join().unwrap();
        builder.join().unwrap();
    });
}

/// (d) A write transaction's own keys: it inserts the key (not committed: in no scan) and
/// looks it up while a build installs `pending`, scans and installs its filter. The
/// transaction's lookup never rules its own key out.
#[test]
fn loom_a_write_transaction_never_loses_its_own_key_to_a_build() {
    model("a write transaction's lookup against a build", || {
        let (shared, tf) = database();
        let store = Arc::new(Store::new(&[]));
        build(&shared, &tf, &store);
        let builder = {
            let (shared, tf, store) = (shared.clone(), tf.clone(), store.clone());
            loom::thread::spawn(move || build(&shared, &tf, &store))
        };
        let seq = shared.started.load(SeqCst);
        let gen_seen = tf.build_gen();
        tf.insert(KEY, &mut Default::default());
        let ruled_out = matches!(
            tf.probe_written(gen_seen, || true, &shared, seq, KEY),
            Some(None)
        );
        assert!(!ruled_out, "a write transaction lost its own key");
        builder.join().unwrap();
    });
}

mod lookups;

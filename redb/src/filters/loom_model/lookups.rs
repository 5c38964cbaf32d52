//! Models of the lookups' rules (see the parent module): the false-positive memory, (e) to
//! (h), and counting mode's count-outs, (j) and (k).

use super::*;

/// A read transaction's lookup of `KEY` through its table (`ReadSide::get`: the filter it
/// trusts, the false-positive memory, then its snapshot): true if it found the key.
fn read_lookup(shared: &Arc<Shared>, tf: &Arc<TableFilter>, store: &Store) -> bool {
    read_lookup_held(shared, tf, store).0
}

/// [`read_lookup`], and whether the snapshot held the key.
fn read_lookup_held(shared: &Arc<Shared>, tf: &Arc<TableFilter>, store: &Store) -> (bool, bool) {
    // `Database::begin_read`: the commits finished, then redb's begin.
    let seq = shared.finished.load(SeqCst);
    let snapshot = store.begin_read();
    let side = ReadSide::new(shared, tf.clone(), seq);
    let found = side
        .get(KEY, || Ok::<_, ()>(snapshot.contains(KEY).then_some(())))
        .unwrap()
        .is_some();
    (found, snapshot.contains(KEY))
}

/// A write transaction that overwrites `KEY` (the table holds it): its admit counts it in
/// once more, and its commit counts that extra count out (`Table::insert` returning the
/// old value).
fn overwrite_and_commit(shared: &Shared, tf: &Arc<TableFilter>, store: &Store) {
    let forgets = Forgets::default();
    let touched = Touched::default();
    touched.add(Some(tf));
    let gen_seen = tf.build_gen();
    let mut pending = Default::default();
    let h = tf.insert(KEY, &mut pending);
    forgets.keep(tf.clone(), pending);
    let written = Written {
        filter: tf,
        gen_seen,
        hashes: &[h],
        outs: &[Out { h, extra: true }],
    };
    shared
        .commit_guarded([written], &touched, || {
            store.commit(&[KEY], &[]);
            Ok::<(), ()>(())
        })
        .unwrap();
    drop(forgets);
}

/// (k) Counting mode: an overwrite's extra count is counted out of `pending` too, which
/// its admit raised, or (if a build began since the transaction opened the table) the
/// commit's re-insert of rule 2 did. The key is committed and counted;
/// a write transaction overwrites it and commits while a build installs `pending`, scans
/// and installs it. Afterwards a new read transaction's filter never rules the key out.
#[test]
fn loom_an_overwrite_racing_a_build_keeps_its_count() {
    model("an overwrite's count-out against a build", || {
        let (shared, tf) = database_in(true);
        let store = Arc::new(Store::new(&[]));
        build(&shared, &tf, &store);
        write_and_commit(&shared, &tf, &store, &[KEY], &[]);
        let builder = {
            let (shared, tf, store) = (shared.clone(), tf.clone(), store.clone());
            loom::thread::spawn(move || build(&shared, &tf, &store))
        };
        overwrite_and_commit(&shared, &tf, &store);
        builder.join().unwrap();
        let (ruled_out, held) = read_transaction(&shared, &tf, &store, KEY);
        assert!(
            held && !ruled_out,
            "an overwrite's count-out dropped the key"
        );
    });
}

/// (j) Counting mode (`commits.rs`, "Count-outs"): the key is committed and counted in; a
/// read transaction takes its snapshot and looks the key up while a write transaction
/// removes it, commits and counts it out of the same filter. A snapshot that holds the
/// key always finds it, whether the count-out cleared its bits before the probe or not.
#[test]
fn loom_an_old_snapshot_never_trusts_a_count_out() {
    model("an old snapshot's lookup against a count-out", || {
        let (shared, tf) = database_in(true);
        let store = Arc::new(Store::new(&[]));
        build(&shared, &tf, &store);
        write_and_commit(&shared, &tf, &store, &[KEY], &[]);
        let remover = {
            let (shared, tf, store) = (shared.clone(), tf.clone(), store.clone());
            loom::thread::spawn(move || write_and_commit(&shared, &tf, &store, &[], &[KEY]))
        };
        let (found, held) = read_lookup_held(&shared, &tf, &store);
        assert!(
            found || !held,
            "a snapshot holding the key was told it is absent"
        );
        remover.join().unwrap();
        // Counted out: a new read transaction's filter rules the key out.
        let (ruled_out, _) = read_transaction(&shared, &tf, &store, KEY);
        assert!(ruled_out, "the removed key was not counted out");
    });
}

/// (e) The false-positive memory (`lookups.rs`): the key was written and removed (its bits
/// stay, so the filter passes it) and is remembered as a false positive. A read
/// transaction takes its snapshot and looks the key up (the memory, its snapshot, a record
/// of the miss) while a write transaction inserts the key, commits and ends. Its snapshot
/// may be older than that commit: it may answer "absent", but it must not leave the key
/// remembered: a read transaction begun after the writer ended finds the key.
#[test]
fn loom_an_old_snapshot_never_remembers_a_key_committed_since() {
    model(
        "an old snapshot's lookup against a commit of the key",
        || {
            let (shared, tf) = database();
            let store = Arc::new(Store::new(&[]));
            build(&shared, &tf, &store);
            write_and_commit(&shared, &tf, &store, &[KEY], &[]);
            write_and_commit(&shared, &tf, &store, &[], &[KEY]);
            // A false positive, paid once: the second lookup is the memory's.
            assert!(!read_lookup(&shared, &tf, &store));
            assert!(!read_lookup(&shared, &tf, &store));
            assert_eq!(tf.lookups.totals().4, 1, "the memory answered");
            let writer = {
                let (shared, tf, store) = (shared.clone(), tf.clone(), store.clone());
                loom::thread::spawn(move || write_and_commit(&shared, &tf, &store, &[KEY], &[]))
            };
            // Either answer is right for a snapshot racing the commit.
            read_lookup(&shared, &tf, &store);
            writer.join().unwrap();
            assert!(
                read_lookup(&shared, &tf, &store),
                "false negative: a lookup remembered a key committed since its snapshot"
            );
        },
    );
}

/// The other table of (f), and its key.
const OTHER_TABLE: &str = "u";
const OTHER_KEY: &[u8] = b"a key of the other table";

/// (f) Per-table commit counts (`commits.rs`): table `TABLE`'s key is a false positive.
/// A read transaction whose snapshot predates a commit to the other table still records
/// and recalls it (the other table's commits do not stop this table's memory). Then a
/// lookup of the key races a commit to the other table and a commit of the key: whatever
/// the interleaving, a read transaction begun after both ended finds the key.
#[test]
fn loom_a_commit_to_another_table_never_hides_a_commit_of_the_key() {
    model(
        "a lookup against commits to its table and to another",
        || {
            let (shared, tf) = database();
            let other = shared
                .table(Kind::Table, OTHER_TABLE)
                .expect("filters are on");
            let store = Arc::new(Store::new(&[]));
            build(&shared, &tf, &store);
            write_and_commit(&shared, &tf, &store, &[KEY], &[]);
            write_and_commit(&shared, &tf, &store, &[], &[KEY]);
            // A snapshot older than a commit to the other table: remembered all the same.
            let seq = shared.finished.load(SeqCst);
            let snapshot = store.begin_read();
            let side = ReadSide::new(&shared, tf.clone(), seq);
            write_and_commit(&shared, &other, &store, &[OTHER_KEY], &[]);
            for _ in 0..2 {
                let found = side.get(KEY, || Ok::<_, ()>(snapshot.contains(KEY).then_some(())));
                assert!(found.unwrap().is_none());
            }
            assert_eq!(tf.lookups.totals().4, 1, "the memory answered");
            let writers = [(other, OTHER_KEY), (tf.clone(), KEY)].map(|(t, k)| {
                let (shared, store) = (shared.clone(), store.clone());
                loom::thread::spawn(move || write_and_commit(&shared, &t, &store, &[k], &[]))
            });
            // Either answer is right for a snapshot racing the commit of the key.
            read_lookup(&shared, &tf, &store);
            for w in writers {
                w.join().unwrap();
            }
            assert!(
                read_lookup(&shared, &tf, &store),
                "false negative: a commit to another table hid a commit of the key"
            );
        },
    );
}

/// (g) Rule 5 against a commit in flight: a read transaction holds a snapshot with the key
/// while one thread removes it and another commits to the other table, and a newer read
/// transaction looks it up (and may remember it, once the removal ended). The old
/// snapshot's lookups, during and after, always find the key (its snapshot holds it).
#[test]
fn loom_an_old_snapshot_never_recalls_a_key_a_racing_commit_removed() {
    model(
        "an old snapshot's lookup against a removal and another table's commit",
        || {
            let (shared, tf) = database();
            let other = shared
                .table(Kind::Table, OTHER_TABLE)
                .expect("filters are on");
            let store = Arc::new(Store::new(&[KEY]));
            build(&shared, &tf, &store);
            let seq = shared.finished.load(SeqCst);
            let snapshot = store.begin_read();
            let old = ReadSide::new(&shared, tf.clone(), seq);
            let old_lookup = || {
                old.get(KEY, || Ok::<_, ()>(snapshot.contains(KEY).then_some(())))
                    .unwrap()
                    .is_some()
            };
            let writers =
                [(other, OTHER_KEY, false), (tf.clone(), KEY, true)].map(|(t, k, remove)| {
                    let (shared, store) = (shared.clone(), store.clone());
                    loom::thread::spawn(move || match remove {
                        true => write_and_commit(&shared, &t, &store, &[], &[k]),
                        false => write_and_commit(&shared, &t, &store, &[k], &[]),
                    })
                });
            read_lookup(&shared, &tf, &store);
            assert!(
                old_lookup(),
                "false negative: an old snapshot recalled a removal"
            );
            for w in writers {
                w.join().unwrap();
            }
            read_lookup(&shared, &tf, &store);
            assert!(
                old_lookup(),
                "false negative: an old snapshot recalled a removal"
            );
        },
    );
}

/// (h) Rule 6: a write transaction that found the key absent (written and removed before:
/// the filter passes it) records that miss after its commit, while the next write
/// transaction, which takes redb's write lock as soon as redb's commit returns, commits the
/// key and ends, perhaps counting `finished` before the first one does. A read transaction
/// begun after both ended finds the key.
#[test]
fn loom_a_write_transactions_miss_never_hides_the_next_commit() {
    model(
        "a write transaction's recorded miss against the next commit",
        || {
            let (shared, tf) = database();
            let store = Arc::new(Store::new(&[]));
            build(&shared, &tf, &store);
            write_and_commit(&shared, &tf, &store, &[KEY], &[]);
            write_and_commit(&shared, &tf, &store, &[], &[KEY]);
            // redb's write lock: this thread's transaction holds it first.
            let lock = Arc::new(Mutex::new(()));
            let held = lock.lock().unwrap();
            let seq = shared.started.load(SeqCst);
            let next = {
                let (shared, tf, store, lock) =
                    (shared.clone(), tf.clone(), store.clone(), lock.clone());
                loom::thread::spawn(move || {
                    let held = lock.lock().unwrap();
                    write_and_commit(&shared, &tf, &store, &[KEY], &[]);
                    drop(held);
                })
            };
            let forgets = Forgets::default();
            forgets.keep_misses(&tf, vec![KEY.into()]);
            let touched = Touched::default();
            touched.add(Some(&tf));
            let _ = shared.commit_guarded([], &touched, || {
                store.commit(&[], &[]);
                drop(held);
                Ok::<(), ()>(())
            });
            forgets.end_and_record(&shared, seq, true, |_, _| false);
            next.join().unwrap();
            assert!(
                read_lookup(&shared, &tf, &store),
                "false negative: a write transaction's miss hid the next commit of the key"
            );
        },
    );
}

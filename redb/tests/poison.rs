//! A panic inside a mutation that redb guards (a multimap `insert` or `remove`) poisons the
//! write transaction: its commit is refused with `CommitError::TransactionPoisoned` and
//! nothing it did is stored, as in redb. In counting mode those mutations first ask redb
//! whether the key is there; a panic in that lookup (the key's `compare`) is a panic in the
//! mutation the user called, and poisons the transaction too. redb's `insert_reserve`
//! does not poison; neither does this crate's, in either mode.

use std::cmp::Ordering;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::atomic::{AtomicBool, Ordering::Relaxed};

use bloomsled_redb::{
    Builder, CommitError, Database, Key, MultimapTableDefinition, ReadableDatabase,
    TableDefinition, TypeName, Value,
};

/// While set, every comparison of a [`Touchy`] key panics.
static PANIC: AtomicBool = AtomicBool::new(false);

/// A u64 key whose comparison panics while [`PANIC`] is set.
#[derive(Debug)]
struct Touchy;

impl Value for Touchy {
    type SelfType<'a> = u64;
    type AsBytes<'a> = [u8; 8];

    fn fixed_width() -> Option<usize> {
        Some(8)
    }

    fn from_bytes<'a>(data: &'a [u8]) -> u64
    where
        Self: 'a,
    {
        u64::from_le_bytes(data.try_into().unwrap())
    }

    fn as_bytes<'a, 'b: 'a>(value: &'a u64) -> [u8; 8]
    where
        Self: 'b,
    {
        value.to_le_bytes()
    }

    fn type_name() -> TypeName {
        TypeName::new("bloomsled_test_touchy")
    }
}

impl Key for Touchy {
    fn compare(a: &[u8], b: &[u8]) -> Ordering {
        assert!(!PANIC.load(Relaxed), "compare panics");
        Self::from_bytes(a).cmp(&Self::from_bytes(b))
    }
}

const M: MultimapTableDefinition<Touchy, u64> = MultimapTableDefinition::new("m");
const T: TableDefinition<Touchy, &[u8]> = TableDefinition::new("t");

/// Runs `op` in a write transaction with every comparison panicking, and checks that the
/// panic poisoned it (the commit is refused) or, if not `poisons`, that it did not; either
/// way the committed state is unchanged.
fn panic_in(
    db: &Database,
    what: &str,
    poisons: bool,
    op: impl FnOnce(&bloomsled_redb::WriteTransaction),
) {
    let w = db.begin_write().unwrap();
    PANIC.store(true, Relaxed);
    let panicked = catch_unwind(AssertUnwindSafe(|| op(&w))).is_err();
    PANIC.store(false, Relaxed);
    assert!(panicked, "{what}: no panic");
    match w.commit() {
        Err(CommitError::TransactionPoisoned) => assert!(poisons, "{what}: poisoned"),
        Ok(()) => assert!(!poisons, "{what}: the commit was not refused"),
        Err(e) => panic!("{what}: {e}"),
    }
    let r = db.begin_read().unwrap();
    let m = r.open_multimap_table(M).unwrap();
    assert_eq!(m.get(7).unwrap().count(), 3, "{what}");
    assert_eq!(m.get(8).unwrap().count(), 0, "{what}");
    let t = r.open_table(T).unwrap();
    assert_eq!(t.get(7).unwrap().unwrap().value(), b"v", "{what}");
    assert!(t.get(8).unwrap().is_none(), "{what}");
}

#[test]
fn a_panic_in_a_mutation_poisons_the_transaction_as_in_redb_in_either_mode() {
    for counting in [false, true] {
        let dir = tempfile::tempdir().unwrap();
        let db = Builder::new()
            .set_counting(counting)
            .create(dir.path().join("p.redb"))
            .unwrap();
        let w = db.begin_write().unwrap();
        {
            let mut m = w.open_multimap_table(M).unwrap();
            for v in 0..3 {
                m.insert(7, v).unwrap();
            }
            m.insert(9, 0).unwrap();
            let mut t = w.open_table(T).unwrap();
            t.insert(7, b"v".as_slice()).unwrap();
            t.insert(9, b"v".as_slice()).unwrap();
        }
        w.commit().unwrap();
        let mode = if counting { "counting" } else { "plain" };
        panic_in(&db, &format!("{mode}: multimap insert"), true, |w| {
            w.open_multimap_table(M).unwrap().insert(8, 1).unwrap();
        });
        panic_in(&db, &format!("{mode}: multimap remove"), true, |w| {
            w.open_multimap_table(M).unwrap().remove(7, 1).unwrap();
        });
        panic_in(&db, &format!("{mode}: insert_reserve"), false, |w| {
            let mut t = w.open_table(T).unwrap();
            t.insert_reserve(8, 1)
                .unwrap()
                .as_mut()
                .copy_from_slice(b"x");
        });
        // An unpoisoned transaction still commits.
        let w = db.begin_write().unwrap();
        w.open_multimap_table(M).unwrap().insert(8, 1).unwrap();
        w.commit().unwrap();
    }
}

//! What the redb tests share: their randomness and the wait for the filters.
#![allow(dead_code)] // each test binary uses part of it

use bloomsled_redb::{Database, ReadableDatabase, TableDefinition};

// The core's generator, one definition for every test crate.
#[path = "../../../tests/common/rng.rs"]
pub mod rng;

/// Starts the build of each table in `tables` that needs one (a table's first use) and
/// waits for them: the checks that follow see every filter in use.
pub fn settle<K: bloomsled_redb::Key + 'static, V: bloomsled_redb::Value + 'static>(
    db: &Database,
    tables: &[TableDefinition<K, V>],
) {
    {
        let r = db.begin_read().unwrap();
        for t in tables {
            let _ = r.open_table(*t);
        }
    }
    db.wait_for_filters();
}

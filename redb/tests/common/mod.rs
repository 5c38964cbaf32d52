//! What the redb tests share: their randomness and the wait for the filters.
#![allow(dead_code)] // each test binary uses part of it

use bloomsled_redb::{Database, ReadableDatabase, TableDefinition};

/// splitmix64: the test's only randomness, reproducible from its seed.
pub struct Rng(pub u64);

impl Rng {
    pub fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    pub fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

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

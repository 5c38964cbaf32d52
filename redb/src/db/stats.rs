//! A table's filter as figures: `Database::table_filter_stats` and its multimap twin, and
//! (feature `metrics`) the same as series through the `metrics` facade.

use std::sync::atomic::Ordering::SeqCst;

use super::{Database, ReadOnlyDatabase};
use crate::filters::{FilterSource, Kind, Shared};
use crate::{MultimapTableHandle, TableHandle};

/// One table's filter, as this handle holds it now (see
/// [`Database::table_filter_stats`]). redb's own [`crate::TableStats`] describes the
/// table's pages; this describes the filter in front of it.
///
/// ```
/// let s = bloomsled_redb::TableFilterStats::default();
/// assert_eq!(s.items, 0);
/// ```
#[derive(Clone, Copy, Debug, Default, PartialEq)]
#[non_exhaustive]
pub struct TableFilterStats {
    /// Keys the filter took that set a new bit (the table's keys, plus those of aborted
    /// writes and removed keys since the last build: their bits stay set). Counting mode:
    /// keys counted in less those counted out (aborted writes stay counted).
    pub items: u64,
    /// Keys the filter is sized for at its target rate; a build resizes it for twice the
    /// table's keys once `items` passes this.
    pub capacity: u64,
    /// Bits in the filter.
    pub num_bits: u64,
    /// Hash functions per key.
    pub num_hashes: u32,
    /// Bits per key at `capacity`.
    pub bits_per_key: f64,
    /// The false-positive rate the filter is sized for (0.1%).
    pub target_fpr: f64,
    /// The false-positive rate its fill predicts now.
    pub estimated_fpr: f64,
    /// Bytes the filter takes (its bits, and its counters in counting mode).
    pub memory_bytes: usize,
    /// Plain, or counting (`Builder::set_counting`): removed keys counted out.
    pub mode: bloomsled::FilterMode,
    /// Counting mode: counters stuck at their maximum ([`bloomsled::COUNTER_MAX`]), never
    /// lowered again (their keys' bits stay set: false positives only). O(size) to count.
    pub stuck_counters: u64,
    /// True if lookups of the latest committed state ask the filter; false while none is
    /// trusted (never built, or distrusted by a restore or rename, until a build installs
    /// one): lookups then go to redb.
    pub in_use: bool,
    /// True while a build (a first use's or a growth) runs for this table.
    pub building: bool,
    /// Filters builds installed for this table in this handle (loaded or scanned).
    pub builds: u64,
    /// Lookups of the table through this handle (`get`, `get_mut`, `get_owned`,
    /// `get_latest`, multimap `get`), whatever answered them.
    pub lookups: u64,
    /// Lookups the filter answered "absent" alone, without redb.
    pub ruled_out: u64,
    /// Lookups that read redb: the filter said "maybe", or no filter was trusted.
    pub store_lookups: u64,
    /// Store lookups that found nothing though a trusted filter said "maybe": its false
    /// positives.
    pub false_positives: u64,
    /// Lookups the filter passed that the table's false-positive memory answered "absent"
    /// without redb: false positives found before, not paid again (see `docs/redb.md`, "The
    /// false-positive memory"). Lookups = ruled out + store lookups + remembered.
    pub false_positives_remembered: u64,
    /// Store lookups that skipped the filter: a table handle whose lookups kept finding
    /// their keys stopped asking it (`Builder::set_bypass_after_hits`).
    pub bypassed: u64,
}

fn source_of(shared: &Shared, kind: Kind, name: &str) -> Option<FilterSource> {
    shared.lookup(kind, name)?.source().0.clone()
}

fn stats_of(shared: &Shared, kind: Kind, name: &str) -> Option<TableFilterStats> {
    let tf = shared.lookup(kind, name)?;
    let built = tf.read().current.clone();
    let f = built.filter();
    let (lookups, ruled_out, store_lookups, false_positives, false_positives_remembered) =
        tf.lookups.totals();
    Some(TableFilterStats {
        items: built.items(),
        capacity: f.capacity(),
        num_bits: f.num_bits(),
        num_hashes: f.num_hashes(),
        bits_per_key: f.bits_per_key(),
        target_fpr: f.target_fpr(),
        estimated_fpr: f.estimated_fpr(),
        memory_bytes: built.memory_bytes(),
        mode: match built.counting() {
            Some(_) => bloomsled::FilterMode::Counting,
            None => bloomsled::FilterMode::Plain,
        },
        stuck_counters: built.counting().map_or(0, |c| c.stuck_counters()),
        in_use: built.trusted_for(shared.epoch_of(&tf), u64::MAX),
        building: tf.building.load(SeqCst),
        builds: tf.builds.load(SeqCst),
        lookups,
        ruled_out,
        store_lookups,
        false_positives,
        false_positives_remembered,
        bypassed: tf.lookups.bypassed_total(),
    })
}

impl Database {
    /// The filter of `table`, or `None` if this handle has not used the table yet (a
    /// table's filter is made at its first `open_table`) or filters are off (a
    /// `ConcurrencyMode` that lets another process write).
    ///
    /// ```
    /// use bloomsled_redb::{Database, TableDefinition};
    /// const T: TableDefinition<u64, u64> = TableDefinition::new("t");
    /// # let dir = tempfile::tempdir().unwrap();
    /// let db = Database::create(dir.path().join("a.redb"))?;
    /// assert!(db.table_filter_stats(T).is_none());
    /// let w = db.begin_write()?;
    /// w.open_table(T)?.insert(1, 1)?;
    /// w.commit()?;
    /// let s = db.table_filter_stats(T).unwrap();
    /// assert!(s.in_use && s.items == 1 && s.estimated_fpr < s.target_fpr);
    /// # Ok::<(), bloomsled_redb::Error>(())
    /// ```
    pub fn table_filter_stats(&self, table: impl TableHandle) -> Option<TableFilterStats> {
        stats_of(&self.shared, Kind::Table, table.name())
    }

    /// Where `table`'s current filter came from: loaded from the last clean close,
    /// replayed from its crash journals over that (or over the empty filter, for a table
    /// made since that close), or scanned (with the reason its
    /// journals were refused, if it had any). `None` until a build installed one in this
    /// handle (or with filters off).
    ///
    /// ```
    /// use bloomsled_redb::{Database, FilterSource, TableDefinition};
    /// const T: TableDefinition<u64, u64> = TableDefinition::new("t");
    /// # let dir = tempfile::tempdir().unwrap();
    /// let db = Database::create(dir.path().join("a.redb"))?;
    /// let w = db.begin_write()?;
    /// w.open_table(T)?.insert(1, 1)?;
    /// w.commit()?;
    /// assert_eq!(db.table_filter_source(T), Some(FilterSource::Scanned { journal: None }));
    /// # Ok::<(), bloomsled_redb::Error>(())
    /// ```
    pub fn table_filter_source(&self, table: impl TableHandle) -> Option<FilterSource> {
        source_of(&self.shared, Kind::Table, table.name())
    }

    /// Where the multimap table `table`'s current filter came from (see
    /// [`Database::table_filter_source`]).
    ///
    /// ```
    /// use bloomsled_redb::{Database, MultimapTableDefinition};
    /// const M: MultimapTableDefinition<u64, u64> = MultimapTableDefinition::new("m");
    /// # let dir = tempfile::tempdir().unwrap();
    /// let db = Database::create(dir.path().join("a.redb"))?;
    /// assert_eq!(db.multimap_table_filter_source(M), None);
    /// # Ok::<(), bloomsled_redb::Error>(())
    /// ```
    pub fn multimap_table_filter_source(
        &self,
        table: impl MultimapTableHandle,
    ) -> Option<FilterSource> {
        source_of(&self.shared, Kind::Multimap, table.name())
    }

    /// The filter of the multimap table `table` (by its keys; see
    /// [`Database::table_filter_stats`]).
    ///
    /// ```
    /// use bloomsled_redb::{Database, MultimapTableDefinition};
    /// const M: MultimapTableDefinition<u64, u64> = MultimapTableDefinition::new("m");
    /// # let dir = tempfile::tempdir().unwrap();
    /// let db = Database::create(dir.path().join("a.redb"))?;
    /// let w = db.begin_write()?;
    /// w.open_multimap_table(M)?.insert(1, 1)?;
    /// w.commit()?;
    /// assert_eq!(db.multimap_table_filter_stats(M).unwrap().items, 1);
    /// # Ok::<(), bloomsled_redb::Error>(())
    /// ```
    pub fn multimap_table_filter_stats(
        &self,
        table: impl MultimapTableHandle,
    ) -> Option<TableFilterStats> {
        stats_of(&self.shared, Kind::Multimap, table.name())
    }
}

impl ReadOnlyDatabase {
    /// The filter of `table` (see [`Database::table_filter_stats`]).
    ///
    /// ```
    /// use bloomsled_redb::{ReadOnlyDatabase, ReadableDatabase, TableDefinition};
    /// const T: TableDefinition<u64, u64> = TableDefinition::new("t");
    /// # let dir = tempfile::tempdir().unwrap();
    /// # let path = dir.path().join("a.redb");
    /// # let db = bloomsled_redb::Database::create(&path)?;
    /// # let w = db.begin_write()?;
    /// # w.open_table(T)?.insert(1, 1)?;
    /// # w.commit()?;
    /// # drop(db);
    /// let db = ReadOnlyDatabase::open(&path)?;
    /// db.begin_read()?.open_table(T)?;
    /// assert!(db.table_filter_stats(T).unwrap().in_use);
    /// # Ok::<(), bloomsled_redb::Error>(())
    /// ```
    pub fn table_filter_stats(&self, table: impl TableHandle) -> Option<TableFilterStats> {
        stats_of(&self.shared, Kind::Table, table.name())
    }
}

/// The series [`Database::record_metrics`] records per table (label `table`, or
/// `multimap_table` for a multimap table: its name): gauges of its filter as
/// [`TableFilterStats`] has them, and counters of builds and of lookups (all, ruled out by
/// the filter, read from redb, false positives, false positives the memory answered).
///
/// ```
/// assert!(bloomsled_redb::TABLE_SERIES.contains(&"bloomsled_redb_items"));
/// ```
#[cfg(feature = "metrics")]
pub const TABLE_SERIES: [&str; 14] = [
    "bloomsled_redb_items",
    "bloomsled_redb_capacity",
    "bloomsled_redb_filter_bytes",
    "bloomsled_redb_fill_ratio",
    "bloomsled_redb_estimated_fpr",
    "bloomsled_redb_filter_in_use",
    "bloomsled_redb_building",
    "bloomsled_redb_builds_total",
    "bloomsled_redb_lookups_total",
    "bloomsled_redb_ruled_out_total",
    "bloomsled_redb_store_lookups_total",
    "bloomsled_redb_false_positives_total",
    "bloomsled_redb_false_positives_remembered_total",
    "bloomsled_redb_bypassed_total",
];

#[cfg(feature = "metrics")]
fn record(shared: &Shared) {
    use bloomsled::telemetry::gauges;
    for (kind, name, tf) in shared.all_tables() {
        let Some(s) = stats_of(shared, kind, &name) else {
            continue;
        };
        let label = match kind {
            Kind::Table => ("table", name.as_str()),
            Kind::Multimap => ("multimap_table", name.as_str()),
        };
        let fill = tf.read().current.filter().fill_ratio();
        gauges(
            label,
            &[
                (TABLE_SERIES[0], s.items as f64),
                (TABLE_SERIES[1], s.capacity as f64),
                (TABLE_SERIES[2], s.memory_bytes as f64),
                (TABLE_SERIES[3], fill),
                (TABLE_SERIES[4], s.estimated_fpr),
                (TABLE_SERIES[5], f64::from(u8::from(s.in_use))),
                (TABLE_SERIES[6], f64::from(u8::from(s.building))),
            ],
        );
        tf.recorded.counters(
            label,
            &[
                (TABLE_SERIES[7], s.builds),
                (TABLE_SERIES[8], s.lookups),
                (TABLE_SERIES[9], s.ruled_out),
                (TABLE_SERIES[10], s.store_lookups),
                (TABLE_SERIES[11], s.false_positives),
                (TABLE_SERIES[12], s.false_positives_remembered),
                (TABLE_SERIES[13], s.bypassed),
            ],
        );
    }
}

#[cfg(feature = "metrics")]
impl Database {
    /// Records every table's filter this handle has used as series through the `metrics`
    /// facade ([`TABLE_SERIES`]), into whatever recorder the program installed. Never on
    /// the lookup path: call it from a scrape handler or a timer (it reads each filter's
    /// words once, for the fill ratio).
    ///
    /// ```
    /// use bloomsled_redb::{Database, TableDefinition};
    /// const T: TableDefinition<u64, u64> = TableDefinition::new("t");
    /// # let dir = tempfile::tempdir().unwrap();
    /// let db = Database::create(dir.path().join("a.redb"))?;
    /// let w = db.begin_write()?;
    /// w.open_table(T)?.insert(1, 1)?;
    /// w.commit()?;
    /// db.record_metrics(); // gauges labelled table="t"
    /// # Ok::<(), bloomsled_redb::Error>(())
    /// ```
    pub fn record_metrics(&self) {
        record(&self.shared);
    }
}

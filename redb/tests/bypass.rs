//! `Builder::set_bypass_after_hits`: a table handle whose lookups keep finding their
//! keys stops asking the filter, and the first lookup that finds nothing brings it back.
//! Every answer stays redb's (checked against the keys written); the cost to the filter's
//! promise is bounded: redb sees at most one absent key per streak of hits, in any order an
//! adversary picks.

use std::sync::Arc;

use bloomsled_redb::{
    Builder, DEFAULT_BYPASS_AFTER_HITS, Database, MultimapTableDefinition, ReadableDatabase,
    ReadableTable, TableDefinition, TableFilterStats,
};

const T: TableDefinition<u64, u64> = TableDefinition::new("t");
const M: MultimapTableDefinition<u64, u64> = MultimapTableDefinition::new("m");
/// Keys 0..PRESENT are stored (even values in `M`); keys from `ABSENT` on never are.
const PRESENT: u64 = 2_000;
const ABSENT: u64 = 1 << 40;

fn loaded(b: &Builder) -> (tempfile::TempDir, Database) {
    let dir = tempfile::tempdir().unwrap();
    let db = b.create(dir.path().join("b.redb")).unwrap();
    let w = db.begin_write().unwrap();
    {
        let mut t = w.open_table(T).unwrap();
        let mut m = w.open_multimap_table(M).unwrap();
        for i in 0..PRESENT {
            t.insert(i, i).unwrap();
            m.insert(i, 2 * i).unwrap();
        }
    }
    w.commit().unwrap();
    db.wait_for_filters();
    (dir, db)
}

fn stats(db: &Database) -> TableFilterStats {
    db.table_filter_stats(T).unwrap()
}

/// Absent keys the filter rules out (its false positives, about 0.1%, skipped), so that
/// each store lookup of one below is the bypass's.
fn ruled_out_keys(db: &Database, n: usize) -> Vec<u64> {
    let t = db.begin_read().unwrap().open_table(T).unwrap();
    let mut keys = Vec::with_capacity(n);
    let mut k = ABSENT;
    while keys.len() < n {
        let before = stats(db).ruled_out;
        assert!(t.get(k).unwrap().is_none());
        if stats(db).ruled_out == before + 1 {
            keys.push(k);
        }
        // Misses only: this handle's streak never forms.
        k += 1;
    }
    keys
}

#[test]
fn a_streak_of_hits_skips_the_filter_until_a_miss() {
    let (_dir, db) = loaded(&Builder::new());
    let absent = ruled_out_keys(&db, 3);
    let t = db.begin_read().unwrap().open_table(T).unwrap();
    let s0 = stats(&db);
    let hits = u64::from(DEFAULT_BYPASS_AFTER_HITS);
    for i in 0..hits {
        assert_eq!(t.get(i).unwrap().unwrap().value(), i);
    }
    assert_eq!(
        stats(&db).bypassed,
        s0.bypassed,
        "the filter asked 64 times"
    );
    assert_eq!(t.get(hits).unwrap().unwrap().value(), hits);
    let s1 = stats(&db);
    assert_eq!(s1.bypassed, s0.bypassed + 1, "the 65th skipped it");
    // The miss during the bypass: redb answers (a store lookup, not a false positive).
    assert!(t.get(absent[0]).unwrap().is_none());
    let s2 = stats(&db);
    assert_eq!(
        (s2.bypassed, s2.store_lookups, s2.false_positives),
        (s1.bypassed + 1, s1.store_lookups + 1, s1.false_positives)
    );
    // ... and ended it: the next absent keys are the filter's alone.
    assert!(t.get(absent[1]).unwrap().is_none());
    assert!(t.get(absent[2]).unwrap().is_none());
    let s3 = stats(&db);
    assert_eq!(
        (s3.ruled_out, s3.store_lookups, s3.bypassed),
        (s2.ruled_out + 2, s2.store_lookups, s2.bypassed)
    );
    // A present key then asks the filter again: the streak starts over.
    assert!(t.get(1).unwrap().is_some());
    assert_eq!(stats(&db).bypassed, s3.bypassed);
}

#[test]
fn zero_never_skips_the_filter() {
    let (_dir, db) = loaded(Builder::new().set_bypass_after_hits(0));
    let t = db.begin_read().unwrap().open_table(T).unwrap();
    for round in 0..5 {
        for i in 0..PRESENT {
            assert_eq!(t.get(i).unwrap().unwrap().value(), i, "round {round}");
        }
    }
    let s = stats(&db);
    assert_eq!(s.bypassed, 0);
    let before = s.ruled_out + s.false_positives;
    assert!(t.get(ABSENT).unwrap().is_none());
    let s = stats(&db);
    assert_eq!(
        s.ruled_out + s.false_positives,
        before + 1,
        "the filter asked"
    );
}

/// The adversary reads our source: it sends exactly enough hits to open a bypass, then
/// absent keys, over and over, and also floods between streaks. redb must see at most one
/// absent key per streak of 64 hits, and every answer must be right.
#[test]
fn an_adversary_reaches_redb_with_at_most_one_absent_key_per_streak() {
    let (_dir, db) = loaded(&Builder::new());
    let absent = ruled_out_keys(&db, 20_000);
    let t = db.begin_read().unwrap().open_table(T).unwrap();
    let s0 = stats(&db);
    let hits = u64::from(DEFAULT_BYPASS_AFTER_HITS);
    let mut absent = absent.iter();
    let (mut present_lookups, mut cycles) = (0u64, 0u64);
    for cycle in 0..200u64 {
        // Exactly the streak, plus `cycle % 3` more bypassed hits.
        for i in 0..hits + cycle % 3 {
            let k = (cycle * 131 + i) % PRESENT;
            assert_eq!(t.get(k).unwrap().unwrap().value(), k);
            present_lookups += 1;
        }
        // Then absent keys: one, or a flood of 99.
        for _ in 0..if cycle % 2 == 0 { 1 } else { 99 } {
            let k = *absent.next().unwrap();
            assert!(t.get(k).unwrap().is_none(), "key {k} is absent");
        }
        cycles += 1;
    }
    let s = stats(&db);
    let store = s.store_lookups - s0.store_lookups;
    let absent_read = store - present_lookups;
    assert_eq!(
        s.false_positives, s0.false_positives,
        "keys chosen ruled out"
    );
    assert!(
        absent_read <= present_lookups / hits,
        "{absent_read} absent keys reached redb for {present_lookups} hits"
    );
    assert_eq!(
        absent_read, cycles,
        "one per streak: the first absent key of each"
    );
}

/// A handle shared by threads (a lost count only moves the heuristic): every answer right.
#[test]
fn a_shared_handle_answers_right_from_every_thread() {
    let (_dir, db) = loaded(Builder::new().set_bypass_after_hits(8));
    let t = Arc::new(db.begin_read().unwrap().open_table(T).unwrap());
    let threads: Vec<_> = (0..4u64)
        .map(|n| {
            let t = t.clone();
            std::thread::spawn(move || {
                let mut x = n + 1;
                for _ in 0..50_000 {
                    x = x.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1);
                    // Mostly hits, one lookup in 16 absent: streaks form and break.
                    let k = if (x >> 60) == 0 {
                        ABSENT + (x >> 20) % 1_000_000
                    } else {
                        (x >> 33) % PRESENT
                    };
                    let got = t.get(k).unwrap().map(|v| v.value());
                    assert_eq!(got, (k < PRESENT).then_some(k), "key {k}");
                }
            })
        })
        .collect();
    for h in threads {
        h.join().unwrap();
    }
    assert!(stats(&db).bypassed > 0, "the streaks formed");
}

/// A bypassing reader keeps its snapshot: keys removed and added by later commits, in
/// counting mode too (where the removals are counted out of the filter), are answered as
/// the snapshot holds them.
#[test]
fn a_bypassing_reader_keeps_its_snapshot() {
    for counting in [false, true] {
        let (_dir, db) = loaded(
            Builder::new()
                .set_bypass_after_hits(4)
                .set_counting(counting),
        );
        let r = db.begin_read().unwrap();
        let t = r.open_table(T).unwrap();
        let m = r.open_multimap_table(M).unwrap();
        for i in 0..10 {
            assert!(t.get(i).unwrap().is_some());
            assert_eq!(m.get(i).unwrap().next().unwrap().unwrap().value(), 2 * i);
        }
        let w = db.begin_write().unwrap();
        {
            let mut wt = w.open_table(T).unwrap();
            let mut wm = w.open_multimap_table(M).unwrap();
            for i in 0..PRESENT / 2 {
                wt.remove(i).unwrap();
                wm.remove_all(i).unwrap();
            }
            wt.insert(ABSENT, 1).unwrap();
        }
        w.commit().unwrap();
        for i in 0..PRESENT {
            assert_eq!(t.get(i).unwrap().unwrap().value(), i, "counting {counting}");
            assert_eq!(m.get(i).unwrap().count(), 1, "counting {counting}");
        }
        assert!(
            t.get(ABSENT).unwrap().is_none(),
            "committed after the snapshot"
        );
        assert!(stats(&db).bypassed > 0);
        let later = db.begin_read().unwrap().open_table(T).unwrap();
        for i in 0..PRESENT {
            assert_eq!(later.get(i).unwrap().is_some(), i >= PRESENT / 2, "key {i}");
        }
        assert!(later.get(ABSENT).unwrap().is_some());
    }
}

/// A write transaction's handle: the same streak, over its own view. Its writes during a
/// bypass are found (redb's), a key it removes is absent, and a miss ends the bypass.
#[test]
fn a_write_transactions_handle_skips_the_filter_after_a_streak() {
    let (_dir, db) = loaded(&Builder::new());
    let absent = ruled_out_keys(&db, 2);
    let w = db.begin_write().unwrap();
    {
        let mut t = w.open_table(T).unwrap();
        let hits = u64::from(DEFAULT_BYPASS_AFTER_HITS);
        let s0 = stats(&db);
        for i in 0..=hits {
            assert_eq!(t.get(i).unwrap().unwrap().value(), i);
        }
        assert_eq!(stats(&db).bypassed, s0.bypassed + 1, "the 65th skipped it");
        // During the bypass: its own insert is found, its own removal is absent (and ends
        // the bypass, as any miss does).
        t.insert(ABSENT - 1, 7).unwrap();
        assert_eq!(t.get(ABSENT - 1).unwrap().unwrap().value(), 7);
        t.remove(3).unwrap();
        assert!(t.get(3).unwrap().is_none());
        let s1 = stats(&db);
        assert_eq!(s1.bypassed, s0.bypassed + 3);
        // The filter again: a ruled-out key costs redb nothing.
        assert!(t.get(absent[0]).unwrap().is_none());
        let s2 = stats(&db);
        assert_eq!(
            (s2.ruled_out, s2.store_lookups, s2.bypassed),
            (s1.ruled_out + 1, s1.store_lookups, s1.bypassed)
        );
        assert!(t.get(absent[1]).unwrap().is_none());
    }
    w.commit().unwrap();
    let t = db.begin_read().unwrap().open_table(T).unwrap();
    assert_eq!(t.get(ABSENT - 1).unwrap().unwrap().value(), 7);
    assert!(t.get(3).unwrap().is_none());
}

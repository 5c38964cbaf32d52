//! Tests of the live journals: appends, overflow, retirement, reads up to a hole.

use super::*;
use crate::persist::journal::{OP_INSERT, OP_REMOVE};
use zerocopy::little_endian::U64;

fn header(sequence: u64, capacity: u64) -> JournalHeader {
    let mut h = JournalHeader::blank();
    h.sequence = U64::new(sequence);
    h.seed = U64::new(5);
    h.capacity = U64::new(capacity);
    h.db_id = [9; 16];
    h.tree_id = [1; 16];
    h.sealed()
}

#[test]
fn the_page_size_is_read_from_the_kernel() {
    if cfg!(target_arch = "x86_64") {
        assert_eq!(page(), 4096);
    }
    assert!(page().is_power_of_two() && page() >= 4096);
}

#[test]
fn concurrent_appends_all_read_back() {
    let dir = tempfile::tempdir().unwrap();
    let js = Journals::new(
        dir.path().join(crate::persist::DIR_NAME).into(),
        &[9; 16],
        &[1; 16],
        Some(dir.path().into()),
        &FoundFiles::default(),
    );
    js.start(header(3, 10_000)).unwrap();
    std::thread::scope(|s| {
        for t in 0..4u64 {
            let js = &js;
            s.spawn(move || {
                for i in 0..1_000 {
                    let op = if i % 7 == 0 { OP_REMOVE } else { OP_INSERT };
                    js.with(3, |j| j.append(op, 5, t << 32 | i));
                }
            });
        }
    });
    js.with(4, |_| panic!("no journal of sequence 4"));
    let mut got = js.read(3).unwrap().records.unwrap();
    got.sort_unstable();
    let mut want: Vec<(u8, u64)> = (0..4u64)
        .flat_map(|t| {
            (0..1_000).map(move |i| {
                let op = if i % 7 == 0 { OP_REMOVE } else { OP_INSERT };
                (op, t << 32 | i)
            })
        })
        .collect();
    want.sort_unstable();
    assert_eq!(got, want);
}

#[test]
fn batched_appends_read_back_and_overflow_past_the_capacity() {
    let dir = tempfile::tempdir().unwrap();
    let js = Journals::new(
        dir.path().join(crate::persist::DIR_NAME).into(),
        &[9; 16],
        &[1; 16],
        Some(dir.path().into()),
        &FoundFiles::default(),
    );
    // Past the first backed page, so that a batch backs more.
    js.start(header(3, 2_000)).unwrap();
    let hashes: Vec<u64> = (0..1_500).collect();
    js.with(3, |j| j.append_all(OP_INSERT, 5, &hashes[..1_000]));
    js.with(3, |j| j.append(OP_REMOVE, 5, 7));
    js.with(3, |j| j.append_all(OP_INSERT, 5, &hashes[1_000..]));
    js.with(3, |j| j.append_all(OP_INSERT, 5, &[]));
    let mut want: Vec<(u8, u64)> = hashes.iter().map(|&h| (OP_INSERT, h)).collect();
    want.insert(1_000, (OP_REMOVE, 7));
    assert_eq!(js.read(3).unwrap().records, Ok(want));
    // A batch running past the capacity: its slots within it are written, the journal
    // reads as overflowed; one of another seed too.
    js.start(header(4, 600)).unwrap();
    js.with(4, |j| j.append_all(OP_INSERT, 5, &hashes[..601]));
    js.start(header(5, 600)).unwrap();
    js.with(5, |j| j.append_all(OP_INSERT, 6, &hashes[..1]));
    for g in [4, 5] {
        assert_eq!(
            js.read(g).unwrap().records,
            Err(JournalFault::Overflowed { sequence: g })
        );
    }
}

#[test]
fn a_full_or_wrong_seed_journal_reads_as_overflowed_and_retire_keeps_the_range() {
    let dir = tempfile::tempdir().unwrap();
    let js = Journals::new(
        dir.path().join(crate::persist::DIR_NAME).into(),
        &[9; 16],
        &[1; 16],
        Some(dir.path().into()),
        &FoundFiles::default(),
    );
    js.start(header(1, 4)).unwrap();
    js.start(header(2, 4)).unwrap();
    for i in 0..5 {
        js.with(1, |j| j.append(OP_INSERT, 5, i));
    }
    js.with(2, |j| j.append(OP_INSERT, 6, 0));
    for g in [1, 2] {
        assert_eq!(
            js.read(g).unwrap().records,
            Err(JournalFault::Overflowed { sequence: g })
        );
    }
    js.retire(2..=2);
    assert_eq!(
        js.read(1).unwrap_err(),
        JournalFault::Missing { sequence: 1 }
    );
    assert!(js.read(2).is_ok());
}

#[test]
fn a_replay_reads_what_was_written_and_finds_a_record_past_a_hole() {
    use std::os::unix::fs::FileExt;
    let dir = tempfile::tempdir().unwrap();
    let js = Journals::new(
        dir.path().join(crate::persist::DIR_NAME).into(),
        &[9; 16],
        &[1; 16],
        Some(dir.path().into()),
        &FoundFiles::default(),
    );
    js.start(header(3, 100_000)).unwrap();
    for i in 0..5 {
        js.with(3, |j| j.append(OP_INSERT, 5, i));
    }
    let path = js.path(3);
    let (bytes, len) = read_data(&path).unwrap();
    assert_eq!(len, file_len(100_000));
    assert!(bytes.len() as u64 <= len);
    println!("read {} of {len} bytes", bytes.len());
    assert_eq!(js.read(3).unwrap().records.unwrap().len(), 5);
    // Bytes written far past the backed pages, behind a hole: still read, and refused.
    let at = RECORDS_OFFSET as u64 + 90_000 * RECORD_LEN as u64;
    let f = fs::OpenOptions::new().write(true).open(&path).unwrap();
    f.write_at(&[0xAB; RECORD_LEN], at).unwrap();
    assert!(matches!(
        js.read(3).unwrap().records,
        Err(JournalFault::Damaged { .. })
    ));
}

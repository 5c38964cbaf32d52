//! Snapshot, page and record parsing on arbitrary bytes: never a panic, and whatever parses
//! re-encodes to exactly the same bytes (so nothing is accepted that a writer would not
//! have produced).
#![no_main]

use bloomsled::format::{self, ChainRecord, DbRecord, SnapshotMeta, TreeRecord};
use bloomsled::persist::JournalChain;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let _ = format::parse_header(data);
    if let Ok(mut r) = TreeRecord::decode(data) {
        assert_eq!(&r.encode()[..], data);
    }
    let _ = DbRecord::decode(data);
    if let Ok(mut r) = ChainRecord::decode(data) {
        assert_eq!(&r.encode()[..], data);
    }
    if let Ok(chain) = JournalChain::decode(data) {
        assert_eq!(chain.encode(), data);
    }
    if let Ok((h, words)) = format::decode(data) {
        let meta = SnapshotMeta {
            filter_kind: h.filter_kind.get(),
            seed: h.seed.get(),
            db_id: h.db_id,
            tree_id: h.tree_id,
            snapshot_id: h.snapshot_id,
            num_hashes: h.num_hashes.get(),
            capacity: h.capacity.get(),
            items: h.items.get(),
            sequence: h.sequence.get(),
        };
        assert_eq!(format::encode(&meta, &words, h.page_size.get()), data);
    }
});

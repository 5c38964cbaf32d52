//! Snapshot, page and marker parsing on arbitrary bytes: never a panic, and whatever parses
//! re-encodes to exactly the same bytes (so nothing is accepted that a writer would not
//! have produced).
#![no_main]

use bloomsled::format::{self, SnapshotMeta};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let _ = format::parse_header(data);
    let _ = format::decode_state(data);
    if let Ok((h, words)) = format::decode(data) {
        let meta = SnapshotMeta {
            filter_kind: h.filter_kind.get(),
            seed: h.seed.get(),
            name_hash: h.name_hash.get(),
            num_hashes: h.num_hashes.get(),
            capacity: h.capacity.get(),
            items: h.items.get(),
            generation: h.generation.get(),
        };
        assert_eq!(format::encode(&meta, &words, h.page_size.get()), data);
    }
});

//! The parsers of a fingerprint set's files (manifest, log header and records, run header,
//! footer, blocks, index) on arbitrary bytes: an error or a value that re-encodes to the
//! same bytes; never a panic.
#![no_main]

use bloomsled_fpset::format::{
    decode_run_footer, decode_wal_record, open_block, open_index, Manifest, RunHeader, WalHeader,
};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(m) = Manifest::decode(data) {
        assert_eq!(m.encode(), data);
    }
    if let Ok(h) = WalHeader::decode(data) {
        assert_eq!(&h.encode()[..], &data[..h.encode().len()]);
    }
    if let Ok(h) = RunHeader::decode(data) {
        assert_eq!(&h.encode()[..], &data[..h.encode().len()]);
        let _ = (h.blocks(), h.file_len(), h.index_offset());
    }
    let _ = decode_run_footer(1, data);
    let _ = decode_wal_record(1, data);
    let _ = open_block(1, 2, data);
    let _ = open_index(1, data);
});

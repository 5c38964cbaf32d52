//! `Filter::from_bytes` on arbitrary bytes: an error or a filter that re-serializes to the
//! same bytes; never a panic or an allocation the input does not justify.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(f) = bloomsled::Filter::from_bytes(data) {
        assert_eq!(f.to_bytes(), data);
        let _ = f.contains(data);
    }
});

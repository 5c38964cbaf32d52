//! Tests of the snapshot format: offsets pinned, every bit flip, truncation, zero pages.
use super::*;
use crate::format::{FILTER_KIND_BLOCKED, FILTER_KIND_COUNTING};

fn sample(words: usize, page_size: u32) -> (SnapshotMeta, Vec<u64>, Vec<u8>) {
    let meta = SnapshotMeta {
        filter_kind: FILTER_KIND_BLOCKED,
        seed: 7,
        db_id: [1; 16],
        tree_id: [2; 16],
        snapshot_id: [3; 16],
        num_hashes: 6,
        capacity: 1000,
        items: 123,
        sequence: 5,
    };
    let w: Vec<u64> = (1..=words as u64)
        .map(|i| i.wrapping_mul(0x9E37_79B9_7F4A_7C15))
        .collect();
    let bytes = encode(&meta, &w, page_size);
    (meta, w, bytes)
}

#[test]
fn layout_matches_the_documented_offsets() {
    assert_eq!(HEADER_LEN, 144);
    assert_eq!(PAGE_HEADER_LEN, 16);
    assert_eq!(std::mem::offset_of!(Header, seed), 24);
    assert_eq!(std::mem::offset_of!(Header, db_id), 32);
    assert_eq!(std::mem::offset_of!(Header, tree_id), 48);
    assert_eq!(std::mem::offset_of!(Header, snapshot_id), 64);
    assert_eq!(std::mem::offset_of!(Header, num_blocks), 80);
    assert_eq!(std::mem::offset_of!(Header, sequence), 112);
    assert_eq!(std::mem::offset_of!(Header, page_count), 128);
    assert_eq!(std::mem::offset_of!(Header, header_crc), 140);
    let (_, w, b) = sample(64, 128);
    assert_eq!(b.len(), HEADER_LEN + 4 * PAGE_HEADER_LEN + 64 * 8);
    assert_eq!(&b[..8], b"BLMSLED\0");
    assert_eq!(&b[32..48], &[1; 16]);
    assert_eq!(u64::from_le_bytes(b[112..120].try_into().unwrap()), 5);
    assert_eq!(&b[HEADER_LEN..HEADER_LEN + 4], b"BPG\0");
    let first = u64::from_le_bytes(b[HEADER_LEN + 16..HEADER_LEN + 24].try_into().unwrap());
    assert_eq!(first, w[0]);
}

#[test]
fn round_trip_with_partial_last_page() {
    let (meta, w, b) = sample(8 * 10, 8 * 24);
    let (h, got) = decode(&b).unwrap();
    assert_eq!(got, w);
    assert_eq!(h.sequence.get(), meta.sequence);
    assert_eq!(h.page_count.get(), 4);
    assert_eq!(h.items.get(), 123);
}

#[test]
fn counting_kind_has_four_times_the_payload_per_block() {
    let (mut meta, w, _) = sample(32 * 3, 256);
    meta.filter_kind = FILTER_KIND_COUNTING;
    let b = encode(&meta, &w, 256);
    let (h, got) = decode(&b).unwrap();
    assert_eq!(h.num_blocks.get(), 3);
    assert_eq!(h.filter_kind.get(), FILTER_KIND_COUNTING);
    assert_eq!(got, w);
    // The same words read as the blocked kind would be 12 blocks: a relabelled kind
    // with the old block count is refused.
    let mut bad = b.clone();
    bad[16..20].copy_from_slice(&FILTER_KIND_BLOCKED.to_le_bytes());
    let c = checksum(&[&bad[..HEADER_CRC_OFFSET]]);
    bad[HEADER_CRC_OFFSET..HEADER_LEN].copy_from_slice(&c.to_le_bytes());
    assert!(matches!(decode(&bad), Err(DecodeError::Inconsistent(_))));
    let mut unknown = b;
    unknown[16..20].copy_from_slice(&3u32.to_le_bytes());
    let c = checksum(&[&unknown[..HEADER_CRC_OFFSET]]);
    unknown[HEADER_CRC_OFFSET..HEADER_LEN].copy_from_slice(&c.to_le_bytes());
    assert!(matches!(
        decode(&unknown),
        Err(DecodeError::Inconsistent(_))
    ));
}

#[test]
fn every_header_bit_flip_is_detected() {
    let (_, _, b) = sample(8 * 4, 64);
    for byte in 0..HEADER_LEN {
        for bit in 0..8 {
            let mut c = b.clone();
            c[byte] ^= 1 << bit;
            assert!(
                decode(&c).is_err(),
                "flip at byte {byte} bit {bit} accepted"
            );
        }
    }
}

#[test]
fn page_flips_name_the_page() {
    let (_, _, b) = sample(8 * 8, 128);
    let page_span = PAGE_HEADER_LEN + 128;
    for page in 0..4u32 {
        let off = HEADER_LEN + page as usize * page_span + PAGE_HEADER_LEN + 17;
        let mut c = b.clone();
        c[off] ^= 0x40;
        match decode(&c) {
            Err(DecodeError::PageChecksum { page: p, .. }) => assert_eq!(p, page),
            other => panic!("{other:?}"),
        }
    }
}

#[test]
fn truncation_and_garbage_are_errors() {
    let (_, _, b) = sample(8 * 8, 128);
    for len in 0..b.len() {
        assert!(decode(&b[..len]).is_err(), "truncated at {len}");
    }
    let mut longer = b.clone();
    longer.push(0);
    assert!(matches!(decode(&longer), Err(DecodeError::Inconsistent(_))));
    assert!(matches!(
        decode(b"hello world"),
        Err(DecodeError::BadMagic { .. })
    ));
    for v in [1u8, 3] {
        let mut other = b.clone();
        other[8] = v;
        assert_eq!(
            decode(&other).unwrap_err(),
            DecodeError::UnsupportedVersion {
                expected: 2,
                got: u32::from(v)
            }
        );
    }
}

#[test]
fn swapped_pages_are_detected() {
    let (_, _, b) = sample(8 * 8, 128);
    let span = PAGE_HEADER_LEN + 128;
    let mut c = b.clone();
    let (p0, p1) = (HEADER_LEN, HEADER_LEN + span);
    let first: Vec<u8> = c[p0..p0 + span].to_vec();
    let second: Vec<u8> = c[p1..p1 + span].to_vec();
    c[p0..p0 + span].copy_from_slice(&second);
    c[p1..p1 + span].copy_from_slice(&first);
    assert!(decode(&c).is_err());
}

#[test]
fn a_snapshot_of_another_hash_kind_is_a_hash_kind_fault() {
    let (_, _, b) = sample(8 * 4, 64);
    assert_eq!(
        u32::from_le_bytes(b[20..24].try_into().unwrap()),
        HASH_KIND_XXH3_BLOCK
    );
    for kind in [crate::format::HASH_KIND_XXH3_GOLDEN, 0, 3, u32::MAX] {
        let mut old = b.clone();
        old[20..24].copy_from_slice(&kind.to_le_bytes());
        let c = checksum(&[&old[..HEADER_CRC_OFFSET]]);
        old[HEADER_CRC_OFFSET..HEADER_LEN].copy_from_slice(&c.to_le_bytes());
        assert_eq!(
            decode(&old).unwrap_err(),
            DecodeError::HashKind {
                expected: HASH_KIND_XXH3_BLOCK,
                got: kind
            }
        );
    }
}

#[test]
fn zero_pages_are_elided_and_read_back_as_zeros() {
    let meta = sample(8, 64).0;
    let mut w = vec![0u64; 8 * 6];
    w[8 * 3 + 5] = 0xdead_beef;
    let b = encode(&meta, &w, 64);
    // Five zero pages as bare headers, one stored page.
    assert_eq!(b.len(), HEADER_LEN + 6 * PAGE_HEADER_LEN + 64);
    assert_eq!(&b[HEADER_LEN..HEADER_LEN + 4], b"BPZ\0");
    let (_, got) = decode(&b).unwrap();
    assert_eq!(got, w);
    // A zero page turned into a stored page of zeros is refused, so that parsing and
    // re-encoding agree byte for byte.
    let all_zero = encode(&meta, &[0u64; 8], 64);
    assert!(decode(&all_zero).is_ok());
    let mut stored = all_zero[..HEADER_LEN].to_vec();
    let mut ph = PageHeader {
        magic: PAGE_MAGIC,
        index: U32::new(0),
        len: U32::new(64),
        crc: U32::new(0),
    };
    ph.crc = U32::new(checksum(&[&ph.as_bytes()[..12], &[0u8; 64]]));
    stored.extend_from_slice(ph.as_bytes());
    stored.extend_from_slice(&[0u8; 64]);
    assert!(matches!(decode(&stored), Err(DecodeError::Inconsistent(_))));
}

#[test]
fn every_page_header_bit_flip_is_detected() {
    let meta = sample(8, 64).0;
    let mut w = vec![0u64; 16];
    w[9] = 1;
    let b = encode(&meta, &w, 64);
    for byte in HEADER_LEN..b.len() {
        for bit in 0..8 {
            let mut c = b.clone();
            c[byte] ^= 1 << bit;
            assert!(
                decode(&c).is_err(),
                "flip at byte {byte} bit {bit} accepted"
            );
        }
    }
}

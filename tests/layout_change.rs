//! The block layout changed (hash kind 1 → 2): a snapshot written with the retired layout is
//! rejected with a typed fault and the filter rebuilt from the keys — never probed with a
//! layout other than the one that wrote it.

use std::fs;

use bloomsled::format::{self, SnapshotMeta, HASH_KIND_XXH3_BLOCK, HASH_KIND_XXH3_GOLDEN};
use bloomsled::hash::hash_key;
use bloomsled::{Config, DecodeError, Distrust, Error, RecoveryOutcome, RecoveryPolicy};

const KEYS: u32 = 3_000;
const G: u64 = 0x9E37_79B9_7F4A_7C15;

fn key(i: u32) -> Vec<u8> {
    format!("https://crawl.example.org/{i}/index.html").into_bytes()
}

fn block_index(h: u64, n: u64) -> usize {
    ((u128::from(h) * u128::from(n)) >> 64) as usize
}

/// The retired layout (hash kind 1), from its documentation: draws `h·G^i >> 55`, i = 1, 2,
/// …, skipping a bit already drawn, until `k` distinct bits (at most 256 draws).
fn old_masks(h: u64, k: u32) -> [u64; 8] {
    let (mut m, mut x, mut set, mut draws) = ([0u64; 8], h, 0, 0);
    while set < k && draws < 256 {
        x = x.wrapping_mul(G);
        let p = (x >> 55) as usize;
        if m[p / 64] & (1 << (p % 64)) == 0 {
            m[p / 64] |= 1 << (p % 64);
            set += 1;
        }
        draws += 1;
    }
    m
}

/// Today's layout (hash kind 2), from its documentation: the first `k` draws, repeats kept.
fn new_masks(h: u64, k: u32) -> [u64; 8] {
    let (mut m, mut x) = ([0u64; 8], h);
    for _ in 0..k {
        x = x.wrapping_mul(G);
        let p = (x >> 55) as usize;
        m[p / 64] |= 1 << (p % 64);
    }
    m
}

fn covers(words: &[u64], block: usize, masks: &[u64; 8]) -> bool {
    masks
        .iter()
        .enumerate()
        .all(|(j, &m)| words[block * 8 + j] & m == m)
}

#[test]
fn a_snapshot_in_the_retired_layout_is_rejected_and_rebuilt_with_no_false_negative() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = || {
        Config::new()
            .path(dir.path())
            .expected_items(u64::from(KEYS))
    };
    let snap = {
        let db = cfg().open().unwrap();
        let t = db.open_tree("t").unwrap();
        for i in 0..KEYS {
            t.insert(key(i), &b"v"[..]).unwrap();
        }
        t.filter_snapshot_path().unwrap().to_path_buf()
    };
    let (header, words) = format::decode(&fs::read(&snap).unwrap()).unwrap();
    assert_eq!(header.hash_kind.get(), HASH_KIND_XXH3_BLOCK);
    let (n, k, seed) = (
        header.num_blocks.get(),
        header.num_hashes.get(),
        header.seed.get(),
    );
    let hashes: Vec<u64> = (0..KEYS).map(|i| hash_key(&key(i), seed)).collect();

    // The snapshot this build wrote holds today's pattern of every key; the retired layout
    // would look for other bits and miss some keys: the layouts are not interchangeable.
    assert!(hashes
        .iter()
        .all(|&h| covers(&words, block_index(h, n), &new_masks(h, k))));
    let old_misses = hashes
        .iter()
        .filter(|&&h| !covers(&words, block_index(h, n), &old_masks(h, k)))
        .count();
    assert!(old_misses > 0, "the layouts agree on every key");

    // The same keys as a bloomsled of hash kind 1 would have snapshotted them.
    let mut old = vec![0u64; words.len()];
    for &h in &hashes {
        let b = block_index(h, n);
        for (j, m) in old_masks(h, k).iter().enumerate() {
            old[b * 8 + j] |= m;
        }
    }
    let meta = SnapshotMeta {
        filter_kind: header.filter_kind.get(),
        seed,
        // The very ids the tree's record names: only the hash kind tells the files apart.
        db_id: header.db_id,
        tree_id: header.tree_id,
        snapshot_id: header.snapshot_id,
        num_hashes: k,
        capacity: header.capacity.get(),
        items: header.items.get(),
        sequence: header.sequence.get(),
    };
    let mut bytes = format::encode(&meta, &old, header.page_size.get());
    bytes[20..24].copy_from_slice(&HASH_KIND_XXH3_GOLDEN.to_le_bytes());
    let crc = crc32fast::hash(&bytes[..format::HEADER_LEN - 4]);
    bytes[format::HEADER_LEN - 4..format::HEADER_LEN].copy_from_slice(&crc.to_le_bytes());
    fs::write(&snap, &bytes).unwrap();
    let fault = Distrust::Decode(DecodeError::HashKind {
        expected: HASH_KIND_XXH3_BLOCK,
        got: HASH_KIND_XXH3_GOLDEN,
    });

    // Strict mode: the typed fault, nothing opened.
    match cfg()
        .recovery(RecoveryPolicy::Strict)
        .open()
        .and_then(|db| db.open_tree("t"))
    {
        Err(Error::SnapshotRejected { tree, fault: f }) => {
            assert_eq!(tree, "t");
            assert_eq!(f, fault);
        }
        Ok(_) => panic!("strict open accepted a snapshot of the retired layout"),
        Err(e) => panic!("unexpected error {e}"),
    }
    // (A strict open changes nothing.)

    // Default mode: rebuilt from the keys, every key found, and the new snapshot is today's.
    {
        let db = cfg().open().unwrap();
        let t = db.open_tree("t").unwrap();
        assert!(t
            .wait_for_filter(std::time::Duration::from_secs(60))
            .unwrap());
        let r = t.recovery_report();
        assert_eq!(r.outcome, RecoveryOutcome::Rebuilt { reason: fault });
        assert_eq!(r.keys_scanned, u64::from(KEYS));
        for i in 0..KEYS {
            assert!(t.may_contain(key(i)), "false negative for key {i}");
            assert!(t.get(key(i)).unwrap().is_some());
        }
        t.snapshot().unwrap();
    }
    let (h2, _) = format::decode(&fs::read(&snap).unwrap()).unwrap();
    assert_eq!(h2.hash_kind.get(), HASH_KIND_XXH3_BLOCK);
    let db = cfg().open().unwrap();
    let t = db.open_tree("t").unwrap();
    assert_eq!(t.recovery_report().outcome, RecoveryOutcome::Loaded);
    assert!((0..KEYS).all(|i| t.may_contain(key(i))));
}

//! The key scan that builds a filter when no snapshot can be trusted.

use std::ops::Bound;
use std::thread;

use sled::IVec;

use super::policy::RebuildPolicy;
use crate::error::Result;
use crate::filter::any::AnyFilter;
use crate::filter::FilterMode;
use crate::hash::hash_key;

/// Builds a tree's filter from a scan of its keys, sized for the configured capacity, or
/// doubled until the keys found fill at most three quarters of it. This is the recovery
/// path when no trusted snapshot exists, so it must see every key: it reads the tree after
/// sled's recovery, before any handle to it is given out. Returns the filter and the number
/// of keys scanned.
pub(crate) fn build_filter(
    tree: &sled::Tree,
    mode: FilterMode,
    policy: &RebuildPolicy,
) -> Result<(AnyFilter, u64)> {
    let seed = policy.base.get_seed();
    let threads = thread::available_parallelism()
        .map_or(1, |n| n.get())
        .min(8);
    let ranges = scan_ranges(tree, threads)?;
    // sled decodes pages as it iterates: scanning key ranges on all cores scales the
    // rebuild with them. The ranges cover the whole key space wherever they are cut.
    let parts: Vec<Result<Vec<u64>>> = thread::scope(|s| {
        let handles: Vec<_> = ranges
            .into_iter()
            .map(|(lo, hi)| {
                s.spawn(move || -> Result<Vec<u64>> {
                    let mut hashes = Vec::new();
                    for key in tree.range::<IVec, _>((lo, hi)).keys() {
                        hashes.push(hash_key(&key?, seed));
                    }
                    Ok(hashes)
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().unwrap_or_else(|p| std::panic::resume_unwind(p)))
            .collect()
    });
    let mut hashes = Vec::new();
    for part in parts {
        hashes.append(&mut part?);
    }
    let capacity = policy.capacity_for(hashes.len() as u64);
    let shape = policy.base.clone().expected_items(capacity).shape()?;
    let filter = AnyFilter::new(mode, shape, capacity)?;
    for &h in &hashes {
        filter.admit_hash(h);
    }
    Ok((filter, hashes.len() as u64))
}

type KeyRange = (Bound<IVec>, Bound<IVec>);

/// Up to `parts` adjacent ranges covering every key: cut points spread evenly over the two
/// bytes that follow the longest prefix shared by the first and the last key. A skewed key
/// distribution only unbalances the work; coverage does not depend on where the cuts fall.
fn scan_ranges(tree: &sled::Tree, parts: usize) -> Result<Vec<KeyRange>> {
    let whole = vec![(Bound::Unbounded, Bound::Unbounded)];
    let (Some((first, _)), Some((last, _))) = (tree.first()?, tree.last()?) else {
        return Ok(whole);
    };
    let p = first
        .iter()
        .zip(last.iter())
        .take_while(|(a, b)| a == b)
        .count();
    let two = |k: &[u8], pad: u8| -> u32 {
        let b = |i: usize| u32::from(k.get(p + i).copied().unwrap_or(pad));
        b(0) << 8 | b(1)
    };
    let (lo, hi) = (two(&first, 0), two(&last, 0xff));
    if parts < 2 || hi <= lo + parts as u32 {
        return Ok(whole);
    }
    let cuts: Vec<IVec> = (1..parts as u32)
        .map(|i| {
            let v = lo + (hi - lo) * i / parts as u32;
            let mut k = first[..p].to_vec();
            k.extend_from_slice(&(v as u16).to_be_bytes());
            IVec::from(k)
        })
        .collect();
    let mut ranges = Vec::with_capacity(parts);
    let mut start = Bound::Unbounded;
    for cut in cuts {
        ranges.push((start, Bound::Excluded(cut.clone())));
        start = Bound::Included(cut);
    }
    ranges.push((start, Bound::Unbounded));
    Ok(ranges)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Whatever the keys, the ranges partition them: every key in exactly one range.
    #[test]
    fn scan_ranges_partition_every_key_set() {
        let sets: Vec<Vec<Vec<u8>>> = vec![
            vec![],
            vec![b"only".to_vec()],
            vec![b"".to_vec(), b"\xff\xff\xff".to_vec(), b"a".to_vec()],
            (0..2_000u32)
                .map(|i| format!("https://h{}.example/{i}", i % 97).into_bytes())
                .collect(),
            (0..2_000u32).map(|i| i.to_be_bytes().to_vec()).collect(),
            (0..300u32)
                .map(|i| vec![7, 7, (i % 256) as u8, (i / 256) as u8])
                .collect(),
            (0..500u32)
                .map(|i| vec![0xff; 1 + (i % 40) as usize])
                .collect(),
        ];
        for (n, keys) in sets.iter().enumerate() {
            let db = sled::Config::new().temporary(true).open().unwrap();
            for k in keys {
                db.insert(k, &[][..]).unwrap();
            }
            for parts in [1, 2, 3, 8] {
                let mut seen = Vec::new();
                for (lo, hi) in scan_ranges(&db, parts).unwrap() {
                    for k in db.range::<IVec, _>((lo, hi)).keys() {
                        seen.push(k.unwrap().to_vec());
                    }
                }
                let mut want: Vec<Vec<u8>> = keys.clone();
                want.sort();
                want.dedup();
                assert_eq!(seen, want, "set {n}, {parts} parts");
            }
        }
    }
}

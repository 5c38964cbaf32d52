//! Key scans that build a filter: the one-shot scan of a temporary database at open, and
//! the rounds of the online rebuild ([`scan_round`]), which read every key range in
//! parallel while the rebuild holds the gate (see [`super::filters`]).

use std::ops::Bound;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

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
    // A tree's sizing always fixes its seed (its record's, or the one drawn at creation).
    let seed = match policy.base.get_seed() {
        Some(s) => s,
        None => crate::hash::secret_seed()?,
    };
    let ranges = scan_ranges(tree, scan_threads())?;
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
    let shape = policy.shape_for(capacity, seed)?;
    let filter = AnyFilter::new(mode, shape, capacity)?;
    for &h in &hashes {
        filter.admit_hash(h);
    }
    Ok((filter, hashes.len() as u64))
}

/// Threads a scan uses: one per core, at most 8.
pub(crate) fn scan_threads() -> usize {
    thread::available_parallelism()
        .map_or(1, |n| n.get())
        .min(8)
}

type KeyRange = (Bound<IVec>, Bound<IVec>);

/// Up to `parts` adjacent ranges covering every key (see [`scan_cuts`]).
fn scan_ranges(tree: &sled::Tree, parts: usize) -> Result<Vec<KeyRange>> {
    let cuts = scan_cuts(tree, parts)?;
    let mut ranges = Vec::with_capacity(cuts.len() + 1);
    let mut start = Bound::Unbounded;
    for cut in cuts {
        ranges.push((start, Bound::Excluded(cut.clone())));
        start = Bound::Included(cut);
    }
    ranges.push((start, Bound::Unbounded));
    Ok(ranges)
}

/// Up to `parts - 1` ascending cut points: range 0 holds the keys below the first cut, range
/// `i` those from cut `i - 1` up to (not including) cut `i`, the last range the rest. The
/// cuts are spread evenly over the two bytes that follow the longest prefix shared by the
/// first and the last key. A skewed key distribution only unbalances the work; coverage does
/// not depend on where the cuts fall, nor on keys written after they were chosen.
pub(crate) fn scan_cuts(tree: &sled::Tree, parts: usize) -> Result<Vec<IVec>> {
    let (Some((first, _)), Some((last, _))) = (tree.first()?, tree.last()?) else {
        return Ok(Vec::new());
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
        return Ok(Vec::new());
    }
    Ok((1..parts as u32)
        .map(|i| {
            let v = lo + (hi - lo) * i / parts as u32;
            let mut k = first[..p].to_vec();
            k.extend_from_slice(&(v as u16).to_be_bytes());
            IVec::from(k)
        })
        .collect())
}

/// Where a scan of one key range stands.
#[derive(Clone, Debug)]
pub(crate) enum At {
    /// Nothing read yet.
    Start,
    /// Every key of the range up to and including this one was read.
    After(IVec),
    /// The whole range was read.
    End,
}

/// The key ranges a rebuild scans (cut points, as [`scan_cuts`] makes them) and where the
/// scan of each stands. Cheap to clone (two `Arc`s): writers take a copy for each write
/// during a rebuild.
#[derive(Clone, Debug, Default)]
pub(crate) struct Cursor {
    cuts: Arc<[IVec]>,
    /// One per range (`cuts.len() + 1` of them); empty before a scan starts.
    at: Arc<[At]>,
}

impl Cursor {
    /// A scan that has read nothing yet of the ranges `cuts` makes.
    pub(crate) fn start(cuts: Vec<IVec>) -> Cursor {
        let at = vec![At::Start; cuts.len() + 1];
        Cursor {
            cuts: cuts.into(),
            at: at.into(),
        }
    }

    /// The range that holds `key`.
    fn range_of(&self, key: &[u8]) -> usize {
        self.cuts.partition_point(|c| &c[..] <= key)
    }

    /// True if the scan has read past `key`'s position: a key there that is written from
    /// now on will not be read by the scan.
    #[inline]
    pub(crate) fn passed(&self, key: &[u8]) -> bool {
        match self.at.get(self.range_of(key)) {
            Some(At::After(last)) => key <= &last[..],
            Some(At::End) => true,
            Some(At::Start) | None => false,
        }
    }

    /// True once every range was read to its end.
    pub(crate) fn done(&self) -> bool {
        self.at.iter().all(|a| matches!(a, At::End))
    }

    /// The keys of range `i` the scan has not read yet.
    fn rest_of(&self, i: usize) -> KeyRange {
        let lo = match &self.at[i] {
            At::After(k) => Bound::Excluded(k.clone()),
            _ if i == 0 => Bound::Unbounded,
            _ => Bound::Included(self.cuts[i - 1].clone()),
        };
        let hi = match self.cuts.get(i) {
            Some(c) => Bound::Excluded(c.clone()),
            None => Bound::Unbounded,
        };
        (lo, hi)
    }
}

/// One round of a rebuild scan: one thread per range not yet read to its end, each reading
/// its range from where the last round stopped and admitting each key's hash (with `seed`)
/// to `into`, until its range ends, `stop(elapsed, keys read this round)` says the round
/// is over (checked every [`STOP_EVERY`] keys and every half millisecond), or the round's
/// threads together have read `limit` keys (checked by each thread every [`STOP_EVERY`]
/// keys, so a round stops near `limit` however late the watcher wakes). Returns the
/// advanced cursor and the keys read. The caller holds the gate's write side for the whole
/// round, so no write is in flight: each thread iterates a quiet tree, and sled's iterators
/// are never relied on under concurrent writes.
pub(crate) fn scan_round(
    tree: &sled::Tree,
    cursor: &Cursor,
    into: &AnyFilter,
    seed: u64,
    limit: u64,
    stop: impl Fn(Duration, u64) -> bool,
) -> Result<(Cursor, u64)> {
    let over = AtomicBool::new(false);
    let read_now = AtomicU64::new(0);
    let read = |i: usize| -> Result<(At, u64)> {
        let mut n = 0u64;
        for key in tree.range::<IVec, _>(cursor.rest_of(i)).keys() {
            let key = key?;
            into.admit_hash(hash_key(&key, seed));
            n += 1;
            if n.is_multiple_of(STOP_EVERY) {
                let all = read_now.fetch_add(STOP_EVERY, Ordering::Relaxed) + STOP_EVERY;
                if over.load(Ordering::Relaxed) || all >= limit {
                    return Ok((At::After(key), n));
                }
            }
        }
        Ok((At::End, n))
    };
    let open: Vec<usize> = (0..cursor.at.len())
        .filter(|&i| !matches!(cursor.at[i], At::End))
        .collect();
    let start = Instant::now();
    let results: Vec<(usize, Result<(At, u64)>)> = thread::scope(|s| {
        let read = &read;
        let handles: Vec<_> = open
            .iter()
            .map(|&i| (i, s.spawn(move || read(i))))
            .collect();
        while !handles.iter().all(|(_, h)| h.is_finished()) {
            if stop(start.elapsed(), read_now.load(Ordering::Relaxed)) {
                over.store(true, Ordering::Relaxed);
                break;
            }
            thread::sleep(Duration::from_micros(500));
        }
        handles
            .into_iter()
            .map(|(i, h)| {
                let r = h.join().unwrap_or_else(|p| std::panic::resume_unwind(p));
                (i, r)
            })
            .collect()
    });
    let mut at: Vec<At> = cursor.at.to_vec();
    let mut total = 0;
    for (i, r) in results {
        let (a, n) = r?;
        at[i] = a;
        total += n;
    }
    Ok((
        Cursor {
            cuts: cursor.cuts.clone(),
            at: at.into(),
        },
        total,
    ))
}

/// Keys a scan thread reads between two looks at whether its round is over.
pub(crate) const STOP_EVERY: u64 = 256;

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

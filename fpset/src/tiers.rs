//! When to merge runs: size-tiered, as a pure function of the runs' sizes.
//!
//! A run's tier is how many times `factor` fits between the memtable's size and its own:
//! a flushed memtable is tier 0, `factor` tier-0 runs merge into a tier-1 run, and so on.
//! The set keeps its runs largest first (members have no age: the set never deletes, so
//! any order of runs answers the same), hence the runs of one tier are neighbours, and a
//! merge is due wherever `factor` of them are: not only among the newest runs. So at most
//! `factor - 1` runs per tier after every flush, O(log n) runs for a lookup to check, and
//! each member rewritten once per tier it climbs: O(log n) times.
//!
//! Looking at the whole list is what repairs a set after a crash: a chain of merges saves
//! each step on its own, so a kill between two steps leaves `factor` runs of one tier
//! behind newer, smaller ones. Looking only at the newest runs, those would never merge
//! again, and every crash would add runs for good.

use std::ops::Range;

/// The tier of a run of `count` members.
pub(crate) fn tier(count: u64, memtable_items: u64, factor: u64) -> u32 {
    let mut t = 0;
    let mut cap = memtable_items.max(1).saturating_mul(factor);
    while count >= cap {
        t += 1;
        cap = cap.saturating_mul(factor);
        if cap == u64::MAX {
            break;
        }
    }
    t
}

/// The runs to merge into one: `factor` neighbours of one tier in `counts` (largest
/// first), the smallest tier first; `None` if no tier has `factor` runs.
pub(crate) fn merge_due(
    counts: &[u64],
    memtable_items: u64,
    factor: usize,
) -> Option<Range<usize>> {
    if factor < 2 || counts.len() < factor {
        return None;
    }
    let t = |c: u64| tier(c, memtable_items, factor as u64);
    let mut end = counts.len();
    while end >= factor {
        let this = t(counts[end - 1]);
        let mut start = end - 1;
        while start > 0 && t(counts[start - 1]) == this {
            start -= 1;
        }
        if end - start >= factor {
            return Some(end - factor..end);
        }
        end = start;
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn runs_stay_logarithmic() {
        let m = 100;
        let mut runs: Vec<u64> = Vec::new();
        let mut most = 0;
        for _ in 0..10_000 {
            runs.push(m);
            while let Some(range) = merge_due(&runs, m, 4) {
                let merged = runs.drain(range).sum();
                runs.push(merged);
                runs.sort_unstable_by_key(|&c| std::cmp::Reverse(c));
            }
            most = most.max(runs.len());
            assert!(runs
                .windows(2)
                .all(|w| tier(w[0], m, 4) >= tier(w[1], m, 4)));
        }
        assert_eq!(runs.iter().sum::<u64>(), 10_000 * m);
        // 10,000 flushes: 7 tiers (4^7 > 10,000), at most 3 runs each.
        assert!(most <= 3 * 7 + 1, "{most} runs");
        assert_eq!(merge_due(&[400, 100, 100, 100], m, 4), None);
        assert_eq!(merge_due(&[100, 100, 100, 100], m, 4), Some(0..4));
    }

    #[test]
    fn a_chain_cut_by_a_crash_is_merged_later() {
        let m = 100;
        // Four tier-1 runs left by a kill between two merges of a chain, then newer
        // tier-0 runs: the tier-1 runs are due, though they are not the newest.
        assert_eq!(merge_due(&[400, 400, 400, 400, 100], m, 4), Some(0..4));
        assert_eq!(
            merge_due(&[1600, 400, 400, 400, 400, 100, 100], m, 4),
            Some(1..5)
        );
        // The smallest tier first: its merge may make the next one due.
        assert_eq!(
            merge_due(&[400, 400, 400, 400, 100, 100, 100, 100], m, 4),
            Some(4..8)
        );
        assert_eq!(merge_due(&[1600, 400, 400, 400, 100, 100, 100], m, 4), None);
    }
}

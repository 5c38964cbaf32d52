//! When to merge runs: size-tiered, as a pure function of the runs' sizes.
//!
//! A run's tier is how many times `factor` fits between the memtable's size and its own:
//! a flushed memtable is tier 0, `factor` tier-0 runs merge into a tier-1 run, and so on.
//! Runs are kept oldest first, so tiers never increase from old to new; when the newest
//! `factor` runs share a tier they are merged into one. Hence at most `factor - 1` runs
//! per tier, O(log n) runs for a lookup to check, and each member rewritten once per
//! tier it climbs: O(log n) times.

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

/// The index of the first of the runs to merge (the last `factor` of `counts`, oldest
/// first), or `None` if no merge is due.
pub(crate) fn merge_due(counts: &[u64], memtable_items: u64, factor: usize) -> Option<usize> {
    if factor < 2 || counts.len() < factor {
        return None;
    }
    let start = counts.len() - factor;
    let t = |c: u64| tier(c, memtable_items, factor as u64);
    let last = t(counts[counts.len() - 1]);
    counts[start..]
        .iter()
        .all(|&c| t(c) == last)
        .then_some(start)
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
            while let Some(start) = merge_due(&runs, m, 4) {
                let merged = runs.drain(start..).sum();
                runs.push(merged);
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
        assert_eq!(merge_due(&[100, 100, 100, 100], m, 4), Some(0));
    }
}

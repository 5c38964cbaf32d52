//! The memtable: the members added since the last flush, back to back in one buffer, with
//! an open-addressing table of their positions (linear probing, xxh3, at most half full).
//! Two allocations in all instead of one per member: at 64k 20-byte members about 1.8 MiB,
//! where a `HashSet<Box<[u8]>>` takes over 4 MiB and 64k allocations per flush.

use xxhash_rust::xxh3::xxh3_64;

/// Members of one width, in insertion order, with a hash index.
#[derive(Debug)]
pub(crate) struct Memtable {
    width: usize,
    /// The members back to back.
    members: Vec<u8>,
    /// 0: empty; `i + 1`: member `i`. Its length is a power of two.
    slots: Vec<u32>,
}

impl Memtable {
    /// An empty memtable for `width`-byte members, sized for `expected` of them.
    pub(crate) fn new(width: usize, expected: usize) -> Memtable {
        Memtable {
            width,
            members: Vec::with_capacity(expected.saturating_mul(width)),
            slots: vec![0; (expected.max(8) * 2).next_power_of_two()],
        }
    }

    /// Number of members.
    pub(crate) fn len(&self) -> usize {
        self.members.len() / self.width
    }

    fn member(&self, i: usize) -> &[u8] {
        &self.members[i * self.width..(i + 1) * self.width]
    }

    /// The slot holding `fp`, or the empty slot where it would go.
    fn slot_of(&self, fp: &[u8]) -> (usize, bool) {
        let mask = self.slots.len() - 1;
        let mut s = xxh3_64(fp) as usize & mask;
        loop {
            match self.slots[s] {
                0 => return (s, false),
                i if self.member(i as usize - 1) == fp => return (s, true),
                _ => s = (s + 1) & mask,
            }
        }
    }

    /// Whether `fp` is a member.
    pub(crate) fn contains(&self, fp: &[u8]) -> bool {
        self.slot_of(fp).1
    }

    /// Adds `fp`; true if it was new.
    pub(crate) fn insert(&mut self, fp: &[u8]) -> bool {
        debug_assert_eq!(fp.len(), self.width);
        if (self.len() + 1) * 2 > self.slots.len() {
            self.grow();
        }
        let (s, found) = self.slot_of(fp);
        if found {
            return false;
        }
        self.members.extend_from_slice(fp);
        self.slots[s] = self.len() as u32;
        true
    }

    fn grow(&mut self) {
        self.slots = vec![0; self.slots.len() * 2];
        for i in 0..self.len() {
            let (s, _) = self.slot_of(self.member(i));
            self.slots[s] = i as u32 + 1;
        }
    }

    /// The members back to back, in insertion order.
    pub(crate) fn as_bytes(&self) -> &[u8] {
        &self.members
    }

    /// The members in ascending order.
    pub(crate) fn sorted(&self) -> Vec<&[u8]> {
        let mut out: Vec<&[u8]> = self.members.chunks_exact(self.width).collect();
        out.sort_unstable();
        out
    }

    /// Removes every member, keeping the memory for the next ones.
    pub(crate) fn clear(&mut self) {
        self.members.clear();
        self.slots.fill(0);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashSet;

    #[test]
    fn agrees_with_a_hash_set_through_growth_and_clear() {
        let mut m = Memtable::new(3, 4);
        let mut model = HashSet::new();
        for round in 0..3u32 {
            for i in 0..5_000u32 {
                let k = (i * 7 % 3_001 + round).to_le_bytes();
                assert_eq!(m.insert(&k[..3]), model.insert(k[..3].to_vec()), "{i}");
            }
            assert_eq!(m.len(), model.len());
            for i in 0..4_000u32 {
                let k = i.to_le_bytes();
                assert_eq!(m.contains(&k[..3]), model.contains(&k[..3]));
            }
            let sorted = m.sorted();
            assert!(sorted.windows(2).all(|w| w[0] < w[1]));
            assert_eq!(sorted.len(), model.len());
            m.clear();
            model.clear();
            assert_eq!(m.len(), 0);
            assert!(!m.contains(&[0, 0, 0]));
        }
    }
}

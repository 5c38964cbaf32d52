//! The map of a database's tables to their filters, and its hasher.

use std::collections::HashMap;
use std::sync::Arc;

use super::TableFilter;

/// The tables' map's hasher: the core's xxh3 (seed 0) instead of SipHash, whose cost per
/// name is most of a per-request lookup's map access. Table names are the program's own,
/// not an adversary's, so a fixed seed is fine here.
#[derive(Default, Clone, Copy)]
pub(super) struct NameHasher(u64);

impl std::hash::Hasher for NameHasher {
    fn write(&mut self, bytes: &[u8]) {
        self.0 = bloomsled::hash::hash_key(bytes, self.0);
    }

    fn finish(&self) -> u64 {
        self.0
    }
}

pub(super) type Names =
    HashMap<String, Arc<TableFilter>, std::hash::BuildHasherDefault<NameHasher>>;

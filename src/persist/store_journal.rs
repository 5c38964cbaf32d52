//! Crash journals for any store: the core's journal files ([`super::journal`]), their
//! counter files (outside the store's folder, cleared by a reboot) and its trust rule
//! (`trust::judge_chain`), bound to a stored filter that the store names itself, rather
//! than to a sled tree's record.
//!
//! A store that keeps a filter's bytes somewhere it trusts (its own records, written with
//! its data) and wants a `kill -9` to cost a replay rather than a scan does this:
//! 1. names the stored filter a journal extends by a [`JournalBinding`]: a database id
//!    and a tree id of its choosing (16 bytes each, random or derived from random values
//!    it stores), a **base** id that changes whenever the stored filter does (so a journal
//!    of another state of the filter is refused), and the filter's hash seed;
//! 2. before the first write of a session to that tree, creates the session's journal
//!    ([`JournalWriter::create`], sequence 1 for the first session after the filter was
//!    stored, then 2, 3, …) and makes the highest sequence durable **with its data** (in
//!    the same commit as the first write of the session: the store's "dirty mark", in the
//!    core's format: a [`JournalChain`]);
//! 3. appends each key's hash ([`JournalWriter::append`]) before the store stores the key;
//! 4. at open, if its mark names sequences `1..=n` of the binding it stored, asks
//!    [`replay_journals`] for their hashes, and inserts them into the stored filter; on
//!    any [`JournalFault`], scans;
//! 5. once a new filter is stored (its clean close), removes the old journals
//!    ([`remove_journals`]).
//!
//! The rule `replay_journals` applies is the sled store's (see [`crate::persist`], "Crash
//! journal"): every sequence's journal there, written in this boot, by this database, for
//! this tree, extending this base, with this seed, its counter file there and of the same
//! incarnation, no record erased or damaged, no overflow.

use std::io;
use std::ops::RangeInclusive;
use std::path::Path;
use std::sync::Arc;

use zerocopy::little_endian::{U32, U64};
use zerocopy::{FromBytes, FromZeros};

use super::boot::boot_id;
use super::journal::{JournalHeader, MAGIC, OP_INSERT, VERSION};
use super::journal_map::{counter_dir, counter_prefix, Journals, CAPACITY};
use super::journal_names::{remove, remove_if_unlocked, FoundFiles};
use super::meta::random_id;
use super::trust::{judge_chain, JournalIdentity};
use crate::error::{DecodeError, JournalFault};
use crate::format::{ChainRecord, FLAG_EMPTY};

/// What a crash journal belongs to and extends: the ids a store gives its database and
/// tree, the **base** (an id of the exact stored filter the journal's hashes are added
/// to), and the seed of that filter's hashes. A journal is replayed only for the binding
/// it was created with.
///
/// ```
/// let b = bloomsled::persist::JournalBinding {
///     database: [1; 16],
///     tree: [2; 16],
///     base: [3; 16],
///     seed: 42,
/// };
/// assert_eq!(b.seed, 42);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct JournalBinding {
    /// The database's id (the store's choice; names the counter files).
    pub database: [u8; 16],
    /// The tree's (or table's) id within the database (names the journal files).
    pub tree: [u8; 16],
    /// The stored filter the journal extends (for example, ids of the stored bytes).
    pub base: [u8; 16],
    /// The seed of the hashes (the filter's).
    pub seed: u64,
}

/// A store's record of one tree's chain of crash journals, the core's bytes (a chain
/// record: 96 bytes, CRC'd, versioned as the tree and database records are): journals `1..=last`, each created
/// with `binding`, extend the stored snapshot `binding.base` of sequence `base_sequence`,
/// or, if `empty`, the empty filter of `binding.seed` (the tree was made after the filter
/// was stored: every key it holds was written since, so its hashes are all in the chain).
///
/// A store writes it in the commit of the first write of each session to the tree, and
/// removes it in any commit that makes the chain not cover the tree's keys (see the module
/// doc).
///
/// ```
/// use bloomsled::persist::{JournalBinding, JournalChain};
/// let binding = JournalBinding { database: [1; 16], tree: [2; 16], base: [3; 16], seed: 42 };
/// let chain = JournalChain { binding, base_sequence: 7, empty: false, last: 2 };
/// assert_eq!(JournalChain::decode(&chain.encode())?, chain);
/// // An empty chain names no snapshot.
/// assert!(JournalChain::decode(&JournalChain { empty: true, ..chain }.encode()).is_err());
/// # Ok::<(), bloomsled::DecodeError>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct JournalChain {
    /// What every journal of the chain was created with.
    pub binding: JournalBinding,
    /// The sequence of the stored snapshot the journals extend (0 if `empty`).
    pub base_sequence: u64,
    /// The journals extend the empty filter of the binding's seed, and the binding's base
    /// is zeros.
    pub empty: bool,
    /// The chain's last journal: its journals are `1..=last`.
    pub last: u64,
}

impl JournalChain {
    /// The record's bytes.
    pub fn encode(&self) -> Vec<u8> {
        let mut r = ChainRecord::new_zeroed();
        r.flags = U32::new(if self.empty { FLAG_EMPTY } else { 0 });
        r.database = self.binding.database;
        r.tree = self.binding.tree;
        r.base = self.binding.base;
        r.base_sequence = U64::new(self.base_sequence);
        r.seed = U64::new(self.binding.seed);
        r.last = U64::new(self.last);
        r.encode().to_vec()
    }

    /// The chain [`JournalChain::encode`] wrote; a [`DecodeError`] for any other bytes (a
    /// flipped bit, another record, an empty chain that names a snapshot), never a panic.
    pub fn decode(bytes: &[u8]) -> Result<JournalChain, DecodeError> {
        let r = ChainRecord::decode(bytes)?;
        Ok(JournalChain {
            binding: JournalBinding {
                database: r.database,
                tree: r.tree,
                base: r.base,
                seed: r.seed.get(),
            },
            base_sequence: r.base_sequence.get(),
            empty: r.flags.get() == FLAG_EMPTY,
            last: r.last.get(),
        })
    }
}

impl JournalBinding {
    fn journals(&self, dir: &Path, counters: Option<&Path>) -> Journals {
        Journals::new(
            Arc::from(dir),
            &self.database,
            &self.tree,
            counters.map(Arc::from),
            &FoundFiles::default(),
        )
    }
}

/// One session's crash journal of one tree: a file in the store's folder mapped shared,
/// with its counter file in the counter folder (`/dev/shm` by default, or
/// `$BLOOMSLED_JOURNAL_COUNTER_DIR`; cleared by a reboot), so an append is a few stores
/// into the page cache, no syscall and no fsync. Linux only (elsewhere there is no boot id
/// and [`JournalWriter::create`] fails). Dropping it unmaps the files and leaves them for
/// [`replay_journals`].
///
/// ```
/// use bloomsled::persist::{JournalBinding, JournalWriter, replay_journals};
/// # let dir = tempfile::tempdir()?;
/// let b = JournalBinding { database: [1; 16], tree: [2; 16], base: [3; 16], seed: 42 };
/// # #[cfg(target_os = "linux")] {
/// let j = JournalWriter::create(dir.path(), &b, 1)?;
/// j.append(7); // before the store stores the key whose hash is 7
/// drop(j); // as a kill -9 would leave it
/// assert_eq!(replay_journals(dir.path(), &b, 1..=1), Ok(vec![7]));
/// # bloomsled::persist::remove_journals(dir.path(), &b.database);
/// # }
/// # Ok::<(), std::io::Error>(())
/// ```
pub struct JournalWriter {
    journals: Journals,
    sequence: u64,
    seed: u64,
}

impl JournalWriter {
    /// Creates (or empties) journal `sequence` of `binding` in the folder `dir` (made if
    /// missing), with its counter file, and maps both. Fails if this platform has no boot
    /// id, there is no counter folder, another process holds the counter file, or a file
    /// cannot be made (a full disk): the store then keeps no journal for this session, and
    /// its next open after a crash scans.
    ///
    /// ```
    /// # let dir = tempfile::tempdir()?;
    /// let b = bloomsled::persist::JournalBinding {
    ///     database: [4; 16],
    ///     tree: [5; 16],
    ///     base: [6; 16],
    ///     seed: 1,
    /// };
    /// # #[cfg(target_os = "linux")] {
    /// let j = bloomsled::persist::JournalWriter::create(dir.path(), &b, 3)?;
    /// assert_eq!(j.sequence(), 3);
    /// # drop(j);
    /// # bloomsled::persist::remove_journals(dir.path(), &b.database);
    /// # }
    /// # Ok::<(), std::io::Error>(())
    /// ```
    pub fn create(dir: &Path, binding: &JournalBinding, sequence: u64) -> io::Result<Self> {
        let boot = boot_id().ok_or_else(|| io::Error::other("no boot id: no crash journal"))?;
        let counters = counter_dir()
            .ok_or_else(|| io::Error::other("no folder for the journal's counter file"))?;
        let journals = binding.journals(dir, Some(&counters));
        let mut h = JournalHeader::blank();
        h.db_id = binding.database;
        h.tree_id = binding.tree;
        // The chain's first journal names its base as its snapshot, later ones as their
        // base: both fields carry it, so every sequence links to it (`judge_chain`).
        h.snapshot_id = binding.base;
        h.base_id = binding.base;
        h.boot_id = boot;
        h.nonce = random_id().map_err(|e| io::Error::other(e.to_string()))?;
        h.sequence = U64::new(sequence);
        h.seed = U64::new(binding.seed);
        h.capacity = U64::new(CAPACITY);
        journals.start(h.sealed())?;
        Ok(JournalWriter {
            journals,
            sequence,
            seed: binding.seed,
        })
    }

    /// The journal's sequence.
    ///
    /// ```
    /// # let dir = tempfile::tempdir()?;
    /// # let b = bloomsled::persist::JournalBinding { database: [7; 16], tree: [7; 16], base: [7; 16], seed: 7 };
    /// # #[cfg(target_os = "linux")] {
    /// let j = bloomsled::persist::JournalWriter::create(dir.path(), &b, 1)?;
    /// assert_eq!(j.sequence(), 1);
    /// # drop(j);
    /// # bloomsled::persist::remove_journals(dir.path(), &b.database);
    /// # }
    /// # Ok::<(), std::io::Error>(())
    /// ```
    pub fn sequence(&self) -> u64 {
        self.sequence
    }

    /// Appends the hash of a key (under the binding's seed), before the store stores the
    /// key. Past the journal's capacity (about a million records) or with no room on the
    /// disk, the journal is marked overflowed, and its replay refused.
    ///
    /// ```
    /// # let dir = tempfile::tempdir()?;
    /// # let b = bloomsled::persist::JournalBinding { database: [8; 16], tree: [8; 16], base: [8; 16], seed: 8 };
    /// # #[cfg(target_os = "linux")] {
    /// let j = bloomsled::persist::JournalWriter::create(dir.path(), &b, 1)?;
    /// j.append(bloomsled::hash::hash_key(b"key", b.seed));
    /// # drop(j);
    /// # bloomsled::persist::remove_journals(dir.path(), &b.database);
    /// # }
    /// # Ok::<(), std::io::Error>(())
    /// ```
    #[inline]
    pub fn append(&self, hash: u64) {
        self.journals
            .with(self.sequence, |j| j.append(OP_INSERT, self.seed, hash));
    }

    /// Appends the hashes of several keys, with one reservation of their slots.
    ///
    /// ```
    /// # let dir = tempfile::tempdir()?;
    /// # let b = bloomsled::persist::JournalBinding { database: [9; 16], tree: [9; 16], base: [9; 16], seed: 9 };
    /// # #[cfg(target_os = "linux")] {
    /// let j = bloomsled::persist::JournalWriter::create(dir.path(), &b, 1)?;
    /// j.append_all(&[1, 2, 3]);
    /// drop(j);
    /// assert_eq!(bloomsled::persist::replay_journals(dir.path(), &b, 1..=1), Ok(vec![1, 2, 3]));
    /// # bloomsled::persist::remove_journals(dir.path(), &b.database);
    /// # }
    /// # Ok::<(), std::io::Error>(())
    /// ```
    pub fn append_all(&self, hashes: &[u64]) {
        self.journals.with(self.sequence, |j| {
            j.append_all(OP_INSERT, self.seed, hashes)
        });
    }
}

/// The hashes journaled in `sequences` of `binding`'s journals in `dir`, if the core's
/// trust rule accepts every one of them (see the module doc), in order; else why not.
/// Reads only (no file is made, changed or removed), so a read-only open may call it. An
/// empty range is [`JournalFault::Missing`] (a store that has nothing to replay does not
/// ask).
///
/// ```
/// use bloomsled::JournalFault;
/// use bloomsled::persist::{JournalBinding, replay_journals};
/// # let dir = tempfile::tempdir()?;
/// let b = JournalBinding { database: [1; 16], tree: [2; 16], base: [3; 16], seed: 42 };
/// // Nothing was journaled: refused, the store scans.
/// assert!(matches!(
///     replay_journals(dir.path(), &b, 1..=2),
///     Err(JournalFault::Missing { .. } | JournalFault::OtherBoot)
/// ));
/// # Ok::<(), std::io::Error>(())
/// ```
pub fn replay_journals(
    dir: &Path,
    binding: &JournalBinding,
    sequences: RangeInclusive<u64>,
) -> Result<Vec<u64>, JournalFault> {
    let first = *sequences.start();
    if sequences.is_empty() {
        return Err(JournalFault::Missing { sequence: first });
    }
    // No boot id: no journal is kept or trusted on this platform.
    let boot = boot_id().ok_or(JournalFault::OtherBoot)?;
    let counters = counter_dir().ok_or(JournalFault::CountersMissing { sequence: first })?;
    let journals = binding.journals(dir, Some(&counters));
    let identity = JournalIdentity {
        db_id: binding.database,
        boot_id: boot,
        seed: binding.seed,
    };
    let records = judge_chain(&identity, &binding.tree, sequences, &binding.base, |g| {
        journals.read(g)
    })?;
    // Only inserts are appended through this API; a remove record (a hand-made file) is
    // skipped: bits kept set are false positives only.
    Ok(records
        .into_iter()
        .flatten()
        .filter(|&(op, _)| op == OP_INSERT)
        .map(|(_, h)| h)
        .collect())
}

/// Removes the journal files in `dir` whose header names database `database`, and that
/// database's counter files no process holds (a live [`JournalWriter`] holds its own):
/// what a store does once the filter they extend was replaced by a newer stored one.
/// Files of other databases, and files it cannot read, are left alone.
///
/// ```
/// # let dir = tempfile::tempdir()?;
/// let b = bloomsled::persist::JournalBinding { database: [5; 16], tree: [2; 16], base: [3; 16], seed: 4 };
/// # #[cfg(target_os = "linux")] {
/// drop(bloomsled::persist::JournalWriter::create(dir.path(), &b, 1)?);
/// bloomsled::persist::remove_journals(dir.path(), &b.database);
/// assert_eq!(std::fs::read_dir(dir.path())?.count(), 0);
/// # }
/// # Ok::<(), std::io::Error>(())
/// ```
pub fn remove_journals(dir: &Path, database: &[u8; 16]) {
    if let Ok(entries) = std::fs::read_dir(dir) {
        for e in entries.flatten() {
            let path = e.path();
            if path.extension().is_some_and(|x| x == "jnl") && names_database(&path, database) {
                remove(&path);
            }
        }
    }
    let Some(counters) = counter_dir() else {
        return;
    };
    let prefix = counter_prefix(database);
    if let Ok(entries) = std::fs::read_dir(&counters) {
        for e in entries.flatten() {
            let name = e.file_name();
            let ours = name
                .to_str()
                .is_some_and(|n| n.starts_with(&prefix) && n.ends_with(".jctr"));
            if ours {
                remove_if_unlocked(&e.path());
            }
        }
    }
}

/// True if the journal file at `path` has a whole header naming `database`.
fn names_database(path: &Path, database: &[u8; 16]) -> bool {
    use std::io::Read;
    let mut bytes = [0u8; std::mem::size_of::<JournalHeader>()];
    let read = std::fs::File::open(path).and_then(|mut f| f.read_exact(&mut bytes));
    let Ok(()) = read else { return false };
    let Ok(h) = JournalHeader::read_from_bytes(&bytes) else {
        return false;
    };
    h.magic == MAGIC
        && h.version.get() == VERSION
        && h.db_id == *database
        && h.sealed().crc == h.crc
}

#[cfg(all(test, target_os = "linux"))]
mod tests {
    use super::*;

    fn binding(tree: u8) -> JournalBinding {
        JournalBinding {
            database: [0xd1; 16],
            tree: [tree; 16],
            base: [0xba; 16],
            seed: 99,
        }
    }

    /// One test: the counter folder is read from the process environment.
    #[test]
    fn a_chain_replays_and_each_mismatch_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let b = binding(1);
        for g in 1..=2 {
            let j = JournalWriter::create(dir.path(), &b, g).unwrap();
            j.append(g * 10);
            j.append_all(&[g * 10 + 1]);
        }
        assert_eq!(
            replay_journals(dir.path(), &b, 1..=2),
            Ok(vec![10, 11, 20, 21])
        );
        // A sequence past the chain, another tree, base or database, another seed.
        assert_eq!(
            replay_journals(dir.path(), &b, 1..=3),
            Err(JournalFault::Missing { sequence: 3 })
        );
        #[allow(clippy::reversed_empty_ranges)] // what a store with nothing to replay passes
        let empty = 2..=1;
        assert_eq!(
            replay_journals(dir.path(), &b, empty),
            Err(JournalFault::Missing { sequence: 2 })
        );
        let other_base = JournalBinding { base: [1; 16], ..b };
        assert_eq!(
            replay_journals(dir.path(), &other_base, 1..=2),
            Err(JournalFault::NotCurrent { sequence: 1 })
        );
        let other_seed = JournalBinding { seed: 1, ..b };
        assert!(matches!(
            replay_journals(dir.path(), &other_seed, 1..=2),
            Err(JournalFault::Seed { .. })
        ));
        // Another tree's journal put in this one's place.
        let other = tempfile::tempdir().unwrap();
        drop(JournalWriter::create(other.path(), &binding(2), 1).unwrap());
        let name =
            |t: &JournalBinding| format!("{}.1.jnl", super::super::journal_names::hex(&t.tree));
        std::fs::copy(
            other.path().join(name(&binding(2))),
            dir.path().join(name(&b)),
        )
        .unwrap();
        assert_eq!(
            replay_journals(dir.path(), &b, 1..=1),
            Err(JournalFault::OtherTree)
        );
        remove_journals(dir.path(), &b.database);
        remove_journals(other.path(), &b.database);
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0);
        assert_eq!(
            replay_journals(dir.path(), &b, 1..=1),
            Err(JournalFault::Missing { sequence: 1 })
        );
    }
}

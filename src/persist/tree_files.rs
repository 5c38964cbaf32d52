//! The files of one tree: its snapshot file and, if it keeps them, its crash journals with
//! the boot id they are written in. Recovery reads them before the tree is open
//! ([`super::recover`]); the live tree ([`super::live::Persistence`]) then owns them and
//! writes them.

use std::path::Path;

use super::boot::boot_id;
use super::files::SnapshotFile;
use super::journal_map::{counter_dir, counter_prefix, Journals};
use super::journal_names::FoundFiles;
use super::meta::Meta;

/// The files of one tree, named by its random id.
pub(crate) struct TreeFiles {
    /// `<tree id>.snap`.
    pub(crate) snapshot: SnapshotFile,
    /// The crash journals (`None`: switched off, or no boot id on this platform).
    pub(crate) journals: Option<TreeJournals>,
}

/// A tree's journals and the boot they are written in.
pub(crate) struct TreeJournals {
    pub(crate) journals: Journals,
    pub(crate) boot_id: [u8; 16],
}

impl TreeFiles {
    /// The files of tree `tree_id` of the database of `meta` at `db_dir`; with its crash
    /// journals if `journal`, this platform has a boot id and there is a folder for the
    /// journals' counter files. Nothing is read or created yet (the database's journal
    /// files are listed once, at its first tree's open).
    pub(crate) fn new(db_dir: &Path, meta: &Meta, tree_id: &[u8; 16], journal: bool) -> Self {
        let db_id = meta.db_id();
        let journals = match (journal, boot_id()) {
            (true, Some(boot_id)) => {
                // The counter folder is read once, with the listing.
                let found = meta.found_files(|| {
                    FoundFiles::list(
                        &db_dir.join(super::DIR_NAME),
                        counter_dir(),
                        &counter_prefix(&db_id),
                    )
                });
                found.counter_dir.clone().map(|counters| TreeJournals {
                    journals: Journals::new(
                        meta.files_dir().clone(),
                        &db_id,
                        tree_id,
                        Some(counters),
                        found,
                    ),
                    boot_id,
                })
            }
            _ => None,
        };
        TreeFiles {
            snapshot: SnapshotFile::new(meta.files_dir().clone(), tree_id),
            journals,
        }
    }
}

//! The files of one tree: its snapshot file and, if it keeps them, its crash journals with
//! the boot id they are written in. Recovery reads them before the tree is open
//! ([`super::recover`]); the live tree ([`super::live::Persistence`]) then owns them and
//! writes them.

use std::path::Path;

use super::boot::boot_id;
use super::files::SnapshotFile;
use super::journal_map::Journals;

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
    /// The files of tree `tree_id` in the database at `db_dir`; with its crash journals if
    /// `journal` and this platform has a boot id. Nothing is read or created yet.
    pub(crate) fn new(db_dir: &Path, tree_id: &[u8; 16], journal: bool) -> Self {
        TreeFiles {
            snapshot: SnapshotFile::new(db_dir, tree_id),
            journals: boot_id().filter(|_| journal).map(|boot_id| TreeJournals {
                journals: Journals::new(db_dir, tree_id),
                boot_id,
            }),
        }
    }
}

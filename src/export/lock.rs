//! The lock that serializes exports into one repository (the daemon's
//! background export and a manual `opfs export`): an exclusive `flock` on
//! `opfs-export.lock` in the git dir, held for the whole run, taken with the
//! crate's one lock type, [`crate::state::lock::FileLock`].

use std::path::Path;

use crate::state::lock::FileLock;

use super::{ExportError, IoContext};

/// The lock file's name inside the git dir (`docs/export.md`).
const LOCK_FILE: &str = "opfs-export.lock";

/// How long an export waits for another export of the same repository
/// (a baseline of a large tree may take minutes).
pub(super) const EXPORT_LOCK_WAIT: std::time::Duration = std::time::Duration::from_secs(30 * 60);

/// An exclusive lock on the repository for the export's duration; released
/// when dropped.
#[must_use = "the lock is released when this value is dropped"]
pub(super) struct ExportLock {
    _lock: FileLock,
}

impl ExportLock {
    /// Opens (creating) `git_dir/opfs-export.lock` and waits for an
    /// exclusive `flock` on it: at most [`EXPORT_LOCK_WAIT`], and not at all
    /// while its holder (a daemon's background export) is stopped.
    ///
    /// Errors: [`ExportError::Io`] naming the lock file when it cannot be
    /// opened or locked, or its holder is frozen or did not let go in time.
    pub(super) fn acquire(git_dir: &Path) -> Result<ExportLock, ExportError> {
        let path = git_dir.join(LOCK_FILE);
        let lock = FileLock::exclusive_within(&path, EXPORT_LOCK_WAIT).at(&path)?;
        Ok(ExportLock { _lock: lock })
    }
}

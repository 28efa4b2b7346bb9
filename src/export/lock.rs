//! The lock that serializes exports into one repository (the daemon's
//! background export and a manual `opfs export`): an exclusive `flock` on
//! `opfs-export.lock` in the git dir, held for the whole run.
//!
//! Kept on its own so it can become the crate's one lock type (a
//! `FileLock` in `state/lock.rs`, which `control`'s `StateLock` will use
//! too) by replacing the body of [`ExportLock::acquire`] and nothing else.

use std::fs::File;
use std::path::Path;

use super::{ExportError, IoContext};

/// The lock file's name inside the git dir (`docs/export.md`).
const LOCK_FILE: &str = "opfs-export.lock";

/// An exclusive lock on the repository for the export's duration; released
/// when dropped (the file closes).
#[must_use = "the lock is released when this value is dropped"]
pub(super) struct ExportLock {
    _file: File,
}

impl ExportLock {
    /// Opens (creating) `git_dir/opfs-export.lock` and waits for an
    /// exclusive `flock` on it.
    ///
    /// Errors: [`ExportError::Io`] naming the lock file when it cannot be
    /// opened or locked.
    // TODO(lead): switch to `crate::state::lock::FileLock` once it is on
    // main; the error stays `ExportError::Io { path: <lock file> }`.
    pub(super) fn acquire(git_dir: &Path) -> Result<ExportLock, ExportError> {
        let path = git_dir.join(LOCK_FILE);
        let file = std::fs::OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(&path)
            .at(&path)?;
        // Blocking; released when the file closes.
        rustix::fs::flock(&file, rustix::fs::FlockOperation::LockExclusive)
            .map_err(std::io::Error::from)
            .at(&path)?;
        Ok(ExportLock { _file: file })
    }
}

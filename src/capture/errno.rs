//! The one mapping from a failed capture to the errno the guarded FUSE
//! operation fails with.

use opfs_fs::Errno;

use super::CaptureError;

impl CaptureError {
    /// The errno the guarded FUSE operation fails with: `ENOSPC` when the
    /// store is full, `EAGAIN` when the index is busy, the system's own
    /// errno when reading the project failed, `EIO` otherwise.
    pub fn errno(&self) -> Errno {
        match self {
            CaptureError::Read { source, .. } => source.raw_os_error().unwrap_or(libc::EIO),
            CaptureError::Blob { source, .. } => source.errno(),
            CaptureError::Log { source, .. } => source.errno(),
            CaptureError::Index { source, .. } => source.errno(),
        }
    }
}

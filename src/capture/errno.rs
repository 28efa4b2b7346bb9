//! The one mapping from a failed capture to the errno the guarded FUSE
//! operation fails with. The store's errors carry no FUSE policy: what a
//! full disk, a busy index or a damaged file means to the agent's system
//! call is decided here, from the store errors' variants and their causes.

use std::io;

use opfs_fs::Errno;

use crate::store::{BlobError, IndexError, LogError};

use super::CaptureError;

impl CaptureError {
    /// The errno the guarded FUSE operation fails with: `ENOSPC` when the
    /// store is full (a blob write failing with `ENOSPC` or `EDQUOT`, or
    /// SQLite reporting a full disk), `EAGAIN` when the index is busy or
    /// locked, the system's own errno when reading the project or writing
    /// the capture log failed, `EIO` otherwise (a missing or corrupt blob, a
    /// damaged log or index, any other SQLite error).
    pub fn errno(&self) -> Errno {
        match self {
            CaptureError::Read { source, .. } => os_errno(source),
            CaptureError::Blob { source, .. } => blob_errno(source),
            CaptureError::Log { source, .. } => log_errno(source),
            CaptureError::Index { source, .. } => index_errno(source),
        }
    }
}

/// The I/O error's own errno, `EIO` for one no system call reported.
fn os_errno(e: &io::Error) -> Errno {
    e.raw_os_error().unwrap_or(libc::EIO)
}

/// A full store (`ENOSPC`, or `EDQUOT` for a quota) is `ENOSPC`; anything
/// else, including a missing or corrupt blob, is `EIO`.
fn blob_errno(e: &BlobError) -> Errno {
    match e {
        BlobError::Io { source, .. }
            if matches!(source.raw_os_error(), Some(libc::ENOSPC | libc::EDQUOT)) =>
        {
            libc::ENOSPC
        }
        BlobError::Io { .. } | BlobError::Missing(_) | BlobError::Corrupt { .. } => libc::EIO,
    }
}

/// The append's own errno (`ENOSPC` for a full disk); a damaged log is
/// `EIO`.
fn log_errno(e: &LogError) -> Errno {
    match e {
        LogError::Io { source, .. } => os_errno(source),
        LogError::Corrupt { .. } => libc::EIO,
    }
}

/// SQLite's full disk is `ENOSPC`, a busy or locked database `EAGAIN`
/// (the agent may retry); every other index error is `EIO`.
fn index_errno(e: &IndexError) -> Errno {
    match e {
        IndexError::Sqlite {
            source: rusqlite::Error::SqliteFailure(failure, _),
            ..
        } => match failure.code {
            rusqlite::ErrorCode::DiskFull => libc::ENOSPC,
            rusqlite::ErrorCode::DatabaseBusy | rusqlite::ErrorCode::DatabaseLocked => libc::EAGAIN,
            _ => libc::EIO,
        },
        IndexError::Kept { source, .. } | IndexError::Pack { source, .. } => blob_errno(source),
        IndexError::Sqlite { .. } | IndexError::Corrupt { .. } | IndexError::Version { .. } => {
            libc::EIO
        }
    }
}

#[cfg(test)]
mod tests {
    use std::path::PathBuf;

    use super::*;

    fn os(code: i32) -> io::Error {
        io::Error::from_raw_os_error(code)
    }

    fn blob(source: BlobError) -> Errno {
        CaptureError::Blob {
            path: "a".into(),
            source,
        }
        .errno()
    }

    fn blob_io(source: io::Error) -> Errno {
        blob(BlobError::Io {
            path: PathBuf::from("blobs/tmp/1"),
            source,
        })
    }

    fn log(source: LogError) -> Errno {
        CaptureError::Log {
            path: "a".into(),
            source,
        }
        .errno()
    }

    fn index(source: IndexError) -> Errno {
        CaptureError::Index {
            path: "a".into(),
            source,
        }
        .errno()
    }

    fn sqlite(code: i32) -> Errno {
        index(IndexError::Sqlite {
            path: PathBuf::from("index.db"),
            source: rusqlite::Error::SqliteFailure(rusqlite::ffi::Error::new(code), None),
        })
    }

    #[test]
    fn a_failed_read_keeps_its_errno() {
        let read = |source| CaptureError::Read {
            path: "a".into(),
            source,
        };
        assert_eq!(read(os(libc::EACCES)).errno(), libc::EACCES);
        assert_eq!(read(os(libc::ENOENT)).errno(), libc::ENOENT);
        assert_eq!(read(io::Error::other("not a syscall")).errno(), libc::EIO);
    }

    #[test]
    fn a_full_blob_store_is_enospc_and_the_rest_eio() {
        assert_eq!(blob_io(os(libc::ENOSPC)), libc::ENOSPC);
        assert_eq!(blob_io(os(libc::EDQUOT)), libc::ENOSPC);
        assert_eq!(blob_io(os(libc::EACCES)), libc::EIO);
        assert_eq!(blob_io(os(libc::EROFS)), libc::EIO);
        assert_eq!(blob_io(io::Error::other("short read")), libc::EIO);
        assert_eq!(blob(BlobError::Missing("00".repeat(32))), libc::EIO);
        assert_eq!(
            blob(BlobError::Corrupt {
                hash: "00".repeat(32),
                actual: "11".repeat(32),
            }),
            libc::EIO
        );
    }

    #[test]
    fn a_failed_log_append_keeps_its_errno_and_a_damaged_log_is_eio() {
        let io = |source| LogError::Io {
            path: PathBuf::from("capture.log"),
            source,
        };
        assert_eq!(log(io(os(libc::ENOSPC))), libc::ENOSPC);
        // Unlike a blob write, the log's own errno is passed on as it is.
        assert_eq!(log(io(os(libc::EDQUOT))), libc::EDQUOT);
        assert_eq!(log(io(io::Error::other("no errno"))), libc::EIO);
        assert_eq!(
            log(LogError::Corrupt {
                path: PathBuf::from("capture.log"),
                offset: 7,
                what: "bad tag".into(),
            }),
            libc::EIO
        );
    }

    #[test]
    fn a_full_index_is_enospc_a_busy_one_eagain_and_the_rest_eio() {
        assert_eq!(sqlite(rusqlite::ffi::SQLITE_FULL), libc::ENOSPC);
        assert_eq!(sqlite(rusqlite::ffi::SQLITE_BUSY), libc::EAGAIN);
        assert_eq!(sqlite(rusqlite::ffi::SQLITE_BUSY_SNAPSHOT), libc::EAGAIN);
        assert_eq!(sqlite(rusqlite::ffi::SQLITE_LOCKED), libc::EAGAIN);
        assert_eq!(sqlite(rusqlite::ffi::SQLITE_CORRUPT), libc::EIO);
        assert_eq!(sqlite(rusqlite::ffi::SQLITE_IOERR), libc::EIO);
        assert_eq!(
            index(IndexError::Sqlite {
                path: PathBuf::from("index.db"),
                source: rusqlite::Error::QueryReturnedNoRows,
            }),
            libc::EIO
        );
        assert_eq!(
            index(IndexError::Corrupt {
                path: PathBuf::from("index.db"),
                what: "bad kind".into(),
            }),
            libc::EIO
        );
        assert_eq!(
            index(IndexError::Version {
                path: PathBuf::from("index.db"),
                found: 99,
            }),
            libc::EIO
        );
    }
}

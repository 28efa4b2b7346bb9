//! The journal's errors: [`CaptureError`] (a pre-image could not be
//! recorded) and [`OpenError`] (the journal could not be opened).

use std::io;
use std::path::PathBuf;

use crate::paths::{self, PathError};
use crate::store::{BlobError, IndexError, LogError};
use crate::view::chain::RangeError;

/// A failure to record a pre-image. The mutation it guarded must not run.
/// [`CaptureError::errno`] is the errno it fails with.
#[derive(Debug, thiserror::Error)]
pub enum CaptureError {
    /// Reading the path's current state from the project failed.
    #[error("cannot read {} in the project: {source}", paths::display(.path))]
    Read {
        /// The path, project-relative raw bytes (rendered with
        /// [`paths::display`]).
        path: Vec<u8>,
        /// The cause.
        source: io::Error,
    },
    /// Storing its content failed.
    #[error("cannot store the pre-image of {}: {source}", paths::display(.path))]
    Blob {
        /// The path, project-relative raw bytes (rendered with
        /// [`paths::display`]).
        path: Vec<u8>,
        /// The cause.
        source: BlobError,
    },
    /// Appending the record to the capture log failed.
    #[error("cannot record the pre-image of {}: {source}", paths::display(.path))]
    Log {
        /// The path, project-relative raw bytes (rendered with
        /// [`paths::display`]).
        path: Vec<u8>,
        /// The cause.
        source: LogError,
    },
    /// Writing the record failed.
    #[error("cannot record the pre-image of {}: {source}", paths::display(.path))]
    Index {
        /// The path, project-relative raw bytes (rendered with
        /// [`paths::display`]).
        path: Vec<u8>,
        /// The cause.
        source: IndexError,
    },
}

impl CaptureError {
    /// A [`CaptureError::Read`] of `path` that no system call reported
    /// (the project is not what the journal expects there).
    pub(super) fn read(path: &[u8], source: io::Error) -> CaptureError {
        CaptureError::from(PathError {
            path: path.to_vec(),
            source,
        })
    }
}

/// `From<PathError<$source>>` for the [`CaptureError`] variant that holds
/// a `$source` about a path.
macro_rules! from_path_error {
    ($($variant:ident($source:ty)),* $(,)?) => {$(
        impl From<PathError<$source>> for CaptureError {
            fn from(e: PathError<$source>) -> CaptureError {
                CaptureError::$variant {
                    path: e.path,
                    source: e.source,
                }
            }
        }
    )*};
}

from_path_error!(
    Read(io::Error),
    Blob(BlobError),
    Log(LogError),
    Index(IndexError)
);

/// A ranged pre-image that cannot be made whole (see
/// [`crate::view::chain::lay_over`]): the mutation fails closed. The
/// saved ranges cannot be read: [`CaptureError::Index`]; the blob store
/// fails: [`CaptureError::Blob`]; the content cannot be put together in
/// memory (a piece is missing or corrupt, the file is too short):
/// [`CaptureError::Read`]; any other reason, as text, in a
/// [`CaptureError::Read`] (errno `EIO`).
impl From<PathError<RangeError>> for CaptureError {
    fn from(e: PathError<RangeError>) -> CaptureError {
        let path = e.path;
        match e.source {
            RangeError::Index(source) => CaptureError::from(PathError { path, source }),
            RangeError::Blob(source) => CaptureError::from(PathError { path, source }),
            RangeError::Patch(source) => CaptureError::from(PathError { path, source }),
            other => CaptureError::read(&path, io::Error::other(other.to_string())),
        }
    }
}

/// Errors opening a journal.
#[derive(Debug, thiserror::Error)]
pub enum OpenError {
    /// The project directory cannot be opened.
    #[error("cannot open project {path}: {source}")]
    Project {
        /// The project path.
        path: PathBuf,
        /// The cause.
        source: io::Error,
    },
    /// The state dir cannot be created.
    #[error("cannot create state dir {path}: {source}")]
    State {
        /// The state dir.
        path: PathBuf,
        /// The cause.
        source: io::Error,
    },
    /// The blob store cannot be opened.
    #[error(transparent)]
    Blob(#[from] BlobError),
    /// The index cannot be opened or read.
    #[error(transparent)]
    Index(#[from] IndexError),
    /// The capture log cannot be read, replayed or opened.
    #[error(transparent)]
    Log(#[from] LogError),
    /// The `[record] exclude` list in effect cannot be read (the message
    /// names the state dir's file and the fix).
    #[error("{0}")]
    Exclude(io::Error),
}

/// An index failure where a blob error is expected (the journal's blob
/// reads commit pending records first). Flattens the cause to text.
pub(super) fn index_as_blob_error(e: IndexError) -> BlobError {
    BlobError::Io {
        path: e.path().to_path_buf(),
        source: io::Error::other(e.to_string()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_stay_bytes_and_render_as_before() {
        let denied = || io::Error::from_raw_os_error(libc::EACCES);
        let e = CaptureError::from(PathError {
            path: b"d/caf\xe9".to_vec(),
            source: denied(),
        });
        assert_eq!(
            e.to_string(),
            format!("cannot read d/caf\\xe9 in the project: {}", denied())
        );
        assert!(matches!(&e, CaptureError::Read { path, .. } if path == b"d/caf\xe9"));
        let e = CaptureError::from(PathError {
            path: b"a/b".to_vec(),
            source: RangeError::Patch(io::Error::other("short")),
        });
        assert_eq!(e.to_string(), "cannot read a/b in the project: short");
    }
}

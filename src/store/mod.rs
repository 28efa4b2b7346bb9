//! The store: the blob directory, the SQLite index and the capture log of
//! one project, and the names of the files in its state dir ([`layout`]).

// The format is fixed here: a u64 never goes into SQLite's i64 (or back)
// by a cast that could wrap (see `index::codec`).
#![deny(clippy::cast_possible_wrap, clippy::cast_sign_loss)]

pub mod blob;
pub mod index;
pub mod kept;
pub mod layout;
pub mod log;
pub mod sparse;

pub use blob::{BlobError, BlobStore, Sweep};
pub use index::{quick_check, Index, IndexError, Target, TopUse};
pub use kept::KeptDir;
pub use layout::StateDir;
pub use log::{CaptureLog, Entry, LogError, INLINE_MAX};
pub use sparse::copy_sparse;

use std::path::Path;

use crate::record::{hex, Hash};

/// Moves the records of the capture log at `log_path` into `index` (one
/// transaction) and empties the log; returns the log open for appending.
/// Kept records (`store::kept`) are resolved first: each kept file in
/// `kept` is hashed and made a blob of `blobs`, and once the log is empty
/// the folder is cleared.
///
/// Durable after `Ok`: the records are committed (to the level `index` was
/// opened with) before the log is emptied, and the log before the kept
/// files go. After `Err` the log and the kept files are untouched.
///
/// Errors: the log cannot be read or is damaged ([`LogError`]); a kept
/// file could not be made a blob ([`BlobError`]); the index refused the
/// records ([`IndexError`]).
pub fn replay_capture_log(
    index: &mut Index,
    log_path: &Path,
    kept: &KeptDir,
    blobs: &BlobStore,
    sync: bool,
) -> Result<CaptureLog, ReplayError> {
    let entries = log::read(log_path)?;
    // A group committed just before a crash is in the log still.
    let mut entries = index.unlisted(entries)?;
    kept::resolve(&mut entries, kept, blobs)?;
    if !entries.is_empty() {
        index.apply(&entries, blobs)?;
    }
    let mut capture_log = CaptureLog::open(log_path, sync)?;
    capture_log.truncate()?;
    kept.clear();
    Ok(capture_log)
}

/// Errors of [`replay_capture_log`].
#[derive(Debug, thiserror::Error)]
pub enum ReplayError {
    /// The capture log cannot be read, is damaged or cannot be emptied.
    #[error(transparent)]
    Log(#[from] LogError),
    /// The index refused the records.
    #[error(transparent)]
    Index(#[from] IndexError),
    /// A kept file could not be made a blob.
    #[error(transparent)]
    Blob(#[from] BlobError),
}

/// The content of blob `hash`, checked against its name: inline in the
/// index for a small file, else the blob file (a saved piece in a range
/// pack is read with [`read_piece`]).
///
/// Errors: [`BlobError::Missing`] when none holds it,
/// [`BlobError::Corrupt`] when the bytes do not hash to `hash`,
/// [`BlobError::Io`] when the index, the pack or the file cannot be read
/// (the error names which).
pub fn read_blob(index: &Index, blobs: &BlobStore, hash: &Hash) -> Result<Vec<u8>, BlobError> {
    match inline(index, hash)? {
        Some(data) => Ok(data),
        None => blobs.read(hash),
    }
}

/// The bytes of a saved piece (`index::Piece`): from its range pack when
/// `at` says where, else blob `hash` ([`read_blob`]); checked against
/// `hash` either way. Errors as [`read_blob`].
pub fn read_piece(
    index: &Index,
    blobs: &BlobStore,
    hash: &Hash,
    at: Option<index::Packed>,
) -> Result<Vec<u8>, BlobError> {
    match at {
        Some(p) => blobs.read_packed(p.turn, p.offset, p.len, hash),
        None => read_blob(index, blobs, hash),
    }
}

/// Checks that blob `hash` is present and hashes to its name; returns its
/// length in bytes. Errors as [`read_blob`].
pub fn verify_blob(index: &Index, blobs: &BlobStore, hash: &Hash) -> Result<u64, BlobError> {
    match inline(index, hash)? {
        Some(data) => Ok(data.len() as u64),
        None => blobs.verify(hash),
    }
}

/// The inline content of `hash`, checked.
fn inline(index: &Index, hash: &Hash) -> Result<Option<Vec<u8>>, BlobError> {
    let data = index.inline_blob(hash).map_err(|e| BlobError::Io {
        path: index.path().to_path_buf(),
        source: std::io::Error::other(e.to_string()),
    })?;
    if let Some(d) = &data {
        let actual = *blake3::hash(d).as_bytes();
        if &actual != hash {
            return Err(BlobError::Corrupt {
                hash: hex(hash),
                actual: hex(&actual),
            });
        }
    }
    Ok(data)
}

//! History a person can read: the log of turns, what turns changed, and a
//! path's content as of the start of a turn.
//!
//! Everything here is derived from path-state records (see
//! `docs/design.md`): a record (turn T, path P, X) says "P was X when T
//! began". The state of P at the start of turn N is its earliest record with
//! turn >= N, or the project's current state when there is none; the
//! project at the *end* of turn T is its state at the start of T + 1.
//!
//! The pieces: [`log`] (`opfs log`), [`changes`] (`opfs diff`), [`show`]
//! (`opfs show`); the states themselves come from [`crate::view`].
//!
//! Reading the project races with a running agent. Every function that reads
//! a path's current state re-reads the records afterwards, after asking the
//! daemon to commit the records pending in its capture log ([`Sources::
//! commit`]): capture appends a record before the mutation it guards runs,
//! so a path that has no newer record after the read was read before
//! anything changed it.

use std::collections::BTreeMap;
use std::io;

use crate::paths;
use crate::record::Hash;
use crate::record::Turn;
use crate::store::{BlobError, BlobStore, Index, IndexError};
use crate::tree::Dir;
use crate::view::{Reader, Resolved, Timeline, TurnError, Version, ViewError};

mod changes;
mod log;
mod show;

pub use changes::{changes, classify, git_file_mode, ChangeKind, PathChange};
pub use log::{log, LogEntry};
pub use show::{show, show_entry, Shown};

/// Errors from history commands. Each names the turn or path it concerns.
#[derive(Debug, thiserror::Error)]
pub enum HistoryError {
    /// The turn cannot be looked at (unknown, dropped by retention, or no
    /// turn recorded yet).
    #[error(transparent)]
    Turn(#[from] TurnError),
    /// A range `N..M` with `N > M`.
    #[error("turn range {from}..{to} is empty: the first turn must not come after the last")]
    EmptyRange {
        /// First turn.
        from: u64,
        /// Last turn.
        to: u64,
    },
    /// `show`: the path did not exist at that point.
    #[error("{path} did not exist when turn {turn} began")]
    Absent {
        /// The path, rendered.
        path: String,
        /// The turn.
        turn: u64,
    },
    /// `show`: the path was a directory or special file, which has no bytes.
    #[error("{path} was a {kind} when turn {turn} began; only files and symlinks have content")]
    NoContent {
        /// The path, rendered.
        path: String,
        /// The turn.
        turn: u64,
        /// What it was.
        kind: &'static str,
    },
    /// `show`: what the path held then is not known: it was created or
    /// replaced outside the mount after the turn began, before the mount
    /// first recorded it ([`crate::record::PreImage::Unknown`]).
    #[error("what {path} held when turn {turn} began is unknown: it was created or replaced outside the mount after that")]
    Unknown {
        /// The path, rendered.
        path: String,
        /// The turn.
        turn: u64,
    },
    /// The path is excluded from history (`.git` at the root).
    #[error("{0} is not part of the history: the project's .git is never recorded")]
    Excluded(String),
    /// The path given is not a valid project-relative path.
    #[error("{path:?} is not a path inside the project: {why}")]
    BadPath {
        /// The path as given.
        path: String,
        /// What is wrong.
        why: &'static str,
    },
    /// Reading the project failed.
    #[error("cannot read {path} in the project: {source}")]
    Project {
        /// The path, rendered.
        path: String,
        /// The cause.
        source: io::Error,
    },
    /// A file's turn-start content, kept as ranges over its later content,
    /// cannot be put together (see `crate::view::ranges`).
    #[error(
        "the recorded content of {path} cannot be put together from its saved ranges: {reason}"
    )]
    Ranges {
        /// The path, rendered.
        path: String,
        /// Why.
        reason: String,
    },
    /// A pre-image's blob is missing or corrupt.
    #[error("the recorded content of {path} cannot be read: {source}")]
    Blob {
        /// The path, rendered.
        path: String,
        /// The cause.
        source: BlobError,
    },
    /// The index failed or is corrupt.
    #[error(transparent)]
    Index(#[from] IndexError),
}

impl HistoryError {
    /// True when the error is the caller's mistake (unknown turn, bad path,
    /// empty range): the CLI exits 2 for these, 1 for the rest.
    pub fn is_usage(&self) -> bool {
        matches!(
            self,
            HistoryError::Turn(_) | HistoryError::EmptyRange { .. } | HistoryError::BadPath { .. }
        )
    }
}

/// What history commands read: the index, the blob store and the project.
#[derive(Clone, Copy)]
pub struct Sources<'a> {
    /// The project's index.
    pub index: &'a Index,
    /// Its blob store.
    pub blobs: &'a BlobStore,
    /// Confined access to the project (for states no record covers).
    pub backing: &'a Dir,
    /// Makes every capture so far visible in `index` (a running daemon
    /// commits its pending records); called before records are re-read
    /// after reading the project.
    pub commit: &'a dyn Fn(),
    /// Contents put together from ranged records (see
    /// [`Sources::timeline`]), by BLAKE3: they are in no store.
    pub resolved: &'a Resolved,
}

impl std::fmt::Debug for Sources<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Sources")
            .field("index", &self.index.path())
            .field("backing", &self.backing)
            .finish_non_exhaustive()
    }
}

impl<'a> Sources<'a> {
    /// The same handles as a [`Reader`], which does the work.
    pub fn reader(&self) -> Reader<'a> {
        Reader {
            index: self.index,
            blobs: self.blobs,
            backing: self.backing,
            commit: self.commit,
            resolved: self.resolved,
        }
    }

    /// Checks that `turn` exists; returns it.
    ///
    /// Errors: [`HistoryError::Turn`] (see [`crate::view::check_turn`]) or
    /// the index.
    pub fn turn(&self, turn: u64) -> Result<Turn, HistoryError> {
        Ok(self.reader().turn(turn)?)
    }

    /// The bytes of blob `hash`: put together from ranges earlier, or from
    /// the store (checked against the hash).
    ///
    /// Errors: as [`crate::store::read_blob`].
    pub fn blob(&self, hash: &Hash) -> Result<Vec<u8>, BlobError> {
        self.reader().blob(hash)
    }

    /// [`Reader::timeline`]: every record with turn >= `from`, ranged ones
    /// put together.
    ///
    /// Errors: the index, a blob or the project cannot be read;
    /// [`HistoryError::Ranges`] when a ranged record cannot be put together.
    pub fn timeline(&self, from: u64) -> Result<Timeline, HistoryError> {
        Ok(self.reader().timeline(from)?)
    }

    /// [`Reader::resolve`]: puts a loaded timeline's ranged records (only
    /// `only`'s when given) together.
    ///
    /// Errors: as [`Sources::timeline`].
    pub fn resolve(
        &self,
        timeline: &mut Timeline,
        only: Option<&[u8]>,
        keep_bytes: bool,
    ) -> Result<(), HistoryError> {
        Ok(self.reader().resolve(timeline, only, keep_bytes)?)
    }

    /// [`Reader::content`]: the bytes of a file or symlink version.
    ///
    /// Errors: [`HistoryError::Blob`] when the blob is missing or corrupt.
    pub fn content(&self, path: &[u8], v: &Version) -> Result<Option<Vec<u8>>, HistoryError> {
        Ok(self.reader().content(path, v)?)
    }

    /// [`Reader::states_at`]: the state of every path in `wanted` at the
    /// start of turn `turn`.
    ///
    /// Errors: the index, a blob or the project cannot be read.
    pub fn states_at(
        &self,
        timeline: &Timeline,
        wanted: &[Vec<u8>],
        turn: u64,
    ) -> Result<BTreeMap<Vec<u8>, Version>, HistoryError> {
        Ok(self.reader().states_at(timeline, wanted, turn)?)
    }
}

impl From<ViewError> for HistoryError {
    fn from(e: ViewError) -> HistoryError {
        match e {
            ViewError::Turn(e) => HistoryError::Turn(e),
            ViewError::Project { path, source } => HistoryError::Project {
                path: paths::display(&path),
                source,
            },
            ViewError::Ranges { path, reason } => HistoryError::Ranges {
                path: paths::display(&path),
                reason: reason.to_string(),
            },
            ViewError::Blob { path, source } => HistoryError::Blob {
                path: paths::display(&path),
                source,
            },
            ViewError::Index(e) => HistoryError::Index(e),
        }
    }
}

/// The index, blob store and project of one state dir, opened for reading
/// (works while a daemon runs: the index is opened read-only).
pub struct Opened {
    index: Index,
    blobs: BlobStore,
    backing: Dir,
    commit: Box<dyn Fn()>,
    resolved: Resolved,
}

impl std::fmt::Debug for Opened {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Opened")
            .field("index", &self.index.path())
            .finish_non_exhaustive()
    }
}

impl Opened {
    /// Opens `state` for history commands. `commit` asks whoever serves
    /// the project to commit the records pending in its capture log (the
    /// CLI passes `control::client::commit_through_daemon`); history never
    /// talks to a daemon itself.
    ///
    /// Errors: the index, the blob directory or the project cannot be
    /// opened.
    pub fn open(
        state: &crate::store::StateDir,
        commit: Box<dyn Fn()>,
    ) -> Result<Opened, HistoryError> {
        let index = Index::open_read_only(&state.index_path())?;
        let blobs =
            BlobStore::open(&state.blobs_dir(), false).map_err(|source| HistoryError::Blob {
                path: state.blobs_dir().display().to_string(),
                source,
            })?;
        let backing = Dir::open(&state.project).map_err(|source| HistoryError::Project {
            path: state.project.display().to_string(),
            source,
        })?;
        Ok(Opened {
            index,
            blobs,
            backing,
            commit,
            resolved: Resolved::default(),
        })
    }

    /// The sources to pass to history functions.
    pub fn sources(&self) -> Sources<'_> {
        Sources {
            index: &self.index,
            blobs: &self.blobs,
            backing: &self.backing,
            commit: &self.commit,
            resolved: &self.resolved,
        }
    }
}

/// Parses `N` or `N..M` into an inclusive turn range.
pub fn parse_range(text: &str) -> Option<(u64, u64)> {
    let num = |s: &str| s.trim().parse::<u64>().ok().filter(|n| *n >= 1);
    match text.split_once("..") {
        Some((a, b)) => Some((num(a)?, num(b)?)),
        None => num(text).map(|n| (n, n)),
    }
}

/// Turns a path as the user typed it (`\xNN` escapes allowed, a leading
/// `./` and trailing `/` ignored) into project-relative bytes.
pub fn parse_path(text: &str) -> Result<Vec<u8>, HistoryError> {
    let mut raw = paths::parse_display(text);
    while raw.starts_with(b"./") {
        raw.drain(..2);
    }
    while raw.len() > 1 && raw.ends_with(b"/") {
        raw.pop();
    }
    if raw == b"." {
        raw.clear();
    }
    paths::validate(&raw).map_err(|why| HistoryError::BadPath {
        path: text.to_string(),
        why,
    })?;
    Ok(raw)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ranges_and_paths_parse() {
        assert_eq!(parse_range("3"), Some((3, 3)));
        assert_eq!(parse_range("2..5"), Some((2, 5)));
        assert_eq!(parse_range("0"), None);
        assert_eq!(parse_range("x..2"), None);
        assert_eq!(parse_path("./a/b/").expect("ok"), b"a/b");
        assert_eq!(parse_path("caf\\xe9").expect("ok"), b"caf\xe9");
        assert!(parse_path("../x").is_err());
    }
}

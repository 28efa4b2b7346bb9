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
//! daemon to commit the records pending in its capture log ([`Reader::
//! commit`]): capture appends a record before the mutation it guards runs,
//! so a path that has no newer record after the read was read before
//! anything changed it.

use std::collections::BTreeMap;
use std::io;
use std::path::PathBuf;

use crate::paths;
use crate::record::Hash;
use crate::record::Turn;
use crate::store::{BlobError, BlobStore, Index, IndexError};
use crate::tree::Dir;
use crate::view::{Reader, Resolved, Timeline, TurnError, Version, ViewError};

mod changes;
mod json;
mod log;
mod outside;
mod refs;
mod show;

pub use changes::{
    changes, classify, dir_changes, git_file_mode, perm_changed, ChangeKind, DirChange, PathChange,
};
pub use json::{base64, log_json, rfc3339, show_json};
pub use log::{log, log_counting, log_turns, LogEntry};
pub use outside::{outside_edits, outside_json, outside_line, show_outside};
pub use refs::{resolve_range_ref, resolve_turn_ref, undo_target, Undo};
pub use show::{show, show_entry, shown, Shown};

/// Errors from history commands. Each names the turn or path it concerns;
/// project paths are kept as raw bytes and rendered with
/// [`paths::display`], so a non-UTF-8 name stays exact.
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
    #[error("{} did not exist when turn {turn} began", paths::display(.path))]
    Absent {
        /// The path, project-relative raw bytes.
        path: Vec<u8>,
        /// The turn.
        turn: u64,
    },
    /// `show`: the path was a directory or special file, which has no bytes.
    #[error(
        "{} was a {kind} when turn {turn} began; only files and symlinks have content",
        paths::display(.path)
    )]
    NoContent {
        /// The path, project-relative raw bytes (`.` for the root).
        path: Vec<u8>,
        /// The turn.
        turn: u64,
        /// What it was.
        kind: &'static str,
    },
    /// `show`: what the path held then is not known: it was created or
    /// replaced outside the mount after the turn began, before the mount
    /// first recorded it ([`crate::record::PreImage::Unknown`]).
    #[error(
        "what {} held when turn {turn} began is unknown: it was created or replaced outside the mount after that",
        paths::display(.path)
    )]
    Unknown {
        /// The path, project-relative raw bytes.
        path: Vec<u8>,
        /// The turn.
        turn: u64,
    },
    /// The path (project-relative raw bytes) is excluded from history
    /// (`.git` at the root).
    #[error(
        "{} is not part of the history: the project's .git is never recorded",
        paths::display(.0)
    )]
    Excluded(Vec<u8>),
    /// `show --outside`: no edit made behind the mount was kept for the
    /// path in that turn (or none with that number).
    #[error(
        "no edit of {} made behind the mount was kept in turn {turn}{}; `opfs log` lists the kept ones",
        paths::display(.path),
        .seq.map(|s| format!(" as number {s}")).unwrap_or_default()
    )]
    NoOutsideEdit {
        /// The path, project-relative raw bytes.
        path: Vec<u8>,
        /// The turn.
        turn: u64,
        /// The number asked for, if any.
        seq: Option<u64>,
    },
    /// A turn or turn range as given that is not `N` or `N..M` with turns
    /// from 1 ([`parse_range_arg`]).
    #[error("{0:?} is not a turn or a turn range (N or N..M, turns start at 1)")]
    BadRange(String),
    /// A turn as given that is neither a number from 1 nor `@`, `@-` or
    /// `@-K` ([`resolve_turn_ref`]).
    #[error("{0:?} is not a turn: give a number (from 1), @ (the open turn), @- or @-K (K turns before it)")]
    BadTurnRef(String),
    /// A relative turn ref that points before the oldest turn kept.
    #[error("{text} is out of range: {}", ref_range(*.open, *.first))]
    RefOutOfRange {
        /// The ref as given.
        text: String,
        /// The open turn (0: no turn yet).
        open: u64,
        /// The oldest turn kept (0: no turn yet).
        first: u64,
    },
    /// The path given is not a valid project-relative path.
    #[error("{path:?} is not a path inside the project: {why}")]
    BadPath {
        /// The path as given.
        path: String,
        /// What is wrong.
        why: &'static str,
    },
    /// The project directory itself cannot be opened.
    #[error("cannot read {project} in the project: {source}")]
    OpenProject {
        /// The project directory.
        project: PathBuf,
        /// The cause.
        #[source]
        source: io::Error,
    },
    /// The blob store cannot be opened.
    #[error("the recorded content of {dir} cannot be read: {source}")]
    OpenBlobs {
        /// The blob directory.
        dir: PathBuf,
        /// The cause.
        #[source]
        source: BlobError,
    },
    /// Reading the history failed: a path in the project
    /// ([`ViewError::Project`]), a file kept as ranges that cannot be put
    /// together ([`ViewError::Ranges`]), a missing or corrupt blob
    /// ([`ViewError::Blob`]), or the index ([`ViewError::Index`]). Never
    /// [`ViewError::Turn`]: that is [`HistoryError::Turn`].
    #[error(transparent)]
    Read(ViewError),
}

impl From<ViewError> for HistoryError {
    fn from(e: ViewError) -> HistoryError {
        match e {
            ViewError::Turn(e) => HistoryError::Turn(e),
            other => HistoryError::Read(other),
        }
    }
}

impl From<IndexError> for HistoryError {
    fn from(e: IndexError) -> HistoryError {
        HistoryError::Read(ViewError::Index(e))
    }
}

impl HistoryError {
    /// True when the error is the caller's mistake (unknown turn, bad path,
    /// empty range): the CLI exits 2 for these, 1 for the rest.
    pub fn is_usage(&self) -> bool {
        matches!(
            self,
            HistoryError::Turn(_)
                | HistoryError::EmptyRange { .. }
                | HistoryError::BadRange(_)
                | HistoryError::BadPath { .. }
                | HistoryError::BadTurnRef(_)
                | HistoryError::RefOutOfRange { .. }
                | HistoryError::NoOutsideEdit { .. }
        )
    }
}

/// The refs that exist, for [`HistoryError::RefOutOfRange`].
fn ref_range(open: u64, first: u64) -> String {
    if open == 0 {
        return "no turn has been recorded yet".to_string();
    }
    match open - first {
        0 => format!("only @ (turn {open}) exists"),
        k => format!(
            "@ is turn {open} and the oldest turn kept is {first}, so refs run from @ to @-{k}"
        ),
    }
}

/// What history commands read: a view's [`Reader`] (the index, the blob
/// store, the project, the group commit and the contents put together
/// from ranges; its fields are reached through `Deref`), whose methods
/// here report [`HistoryError`].
#[derive(Debug, Clone, Copy)]
pub struct Sources<'a>(pub Reader<'a>);

impl<'a> std::ops::Deref for Sources<'a> {
    type Target = Reader<'a>;

    fn deref(&self) -> &Reader<'a> {
        &self.0
    }
}

impl<'a> Sources<'a> {
    /// The same handles as a [`Reader`], which does the work.
    pub fn reader(&self) -> Reader<'a> {
        self.0
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
    /// [`ViewError::Ranges`] (in [`HistoryError::Read`]) when a ranged
    /// record cannot be put together.
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

    /// The content of the regular file `path` held when turn `turn`
    /// began, as a stream, never whole in memory: put together from its
    /// saved ranges as it is read when its record from that turn on is
    /// ranged ([`crate::view::chain::open_ranged`]), its blob's file when
    /// the record is a whole file, the project's file when no record
    /// covers it. `None` when that record is anything else (not a file:
    /// [`show`] says why). The caller checks the BLAKE3 of what it reads:
    /// the project's file may change while it is read.
    ///
    /// Errors: [`HistoryError::Absent`] when no record covers it and the
    /// project holds nothing there; [`ViewError::Ranges`] /
    /// [`ViewError::Blob`] / [`ViewError::Project`] (in
    /// [`HistoryError::Read`]) when it cannot be read or put together; the
    /// index.
    pub fn version_content(
        &self,
        path: &[u8],
        turn: u64,
    ) -> Result<Option<(Content<'a>, ContentFrom)>, HistoryError> {
        use crate::view::chain::{open_ranged, Bottom, RangeError};
        let blob_err = |source| {
            HistoryError::Read(ViewError::Blob {
                path: path.to_vec(),
                source,
            })
        };
        let project_err = |source| {
            HistoryError::Read(ViewError::Project {
                path: path.to_vec(),
                source,
            })
        };
        match self.0.index.state_from(path, turn)? {
            Some(crate::record::PreImage::Ranged { .. }) => {
                match open_ranged(self.0.index, self.0.blobs, self.0.backing, path, turn) {
                    Ok(r) => Ok(r.map(|(r, _)| (Box::new(r) as Content<'a>, ContentFrom::Ranges))),
                    Err(RangeError::Index(e)) => Err(e.into()),
                    Err(RangeError::Blob(source)) => Err(blob_err(source)),
                    Err(reason) => Err(HistoryError::Read(ViewError::Ranges {
                        path: path.to_vec(),
                        reason,
                    })),
                }
            }
            Some(crate::record::PreImage::File { blob, .. }) => {
                match Bottom::of_blob(self.0.index, self.0.blobs, &blob).map_err(blob_err)? {
                    Bottom::File(f) => Ok(Some((Box::new(f), ContentFrom::Blob))),
                    Bottom::Bytes(b) => {
                        Ok(Some((Box::new(std::io::Cursor::new(b)), ContentFrom::Blob)))
                    }
                }
            }
            None => match crate::view::current::read(self.0.backing, path).map_err(project_err)? {
                crate::view::current::Current::File { .. } => {
                    let f = self
                        .0
                        .backing
                        .open_file(path, libc::O_RDONLY | libc::O_NONBLOCK, 0)
                        .map_err(project_err)?;
                    Ok(Some((Box::new(f), ContentFrom::Project)))
                }
                crate::view::current::Current::Absent => Err(HistoryError::Absent {
                    path: path.to_vec(),
                    turn,
                }),
                _ => Ok(None),
            },
            Some(_) => Ok(None),
        }
    }

    /// [`Reader::content`]: the bytes of a file or symlink version.
    ///
    /// Errors: [`ViewError::Blob`] (in [`HistoryError::Read`]) when the blob
    /// is missing or corrupt.
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

/// A version's bytes as a stream ([`Sources::version_content`]).
pub type Content<'a> = Box<dyn std::io::Read + 'a>;

/// Where [`Sources::version_content`] reads a version.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ContentFrom {
    /// Put together from saved ranges as it is read (over a blob, or over
    /// the project's file, which the agent may be writing meanwhile).
    Ranges,
    /// A blob of the store (or one kept in the index).
    Blob,
    /// The project's file (no record covers the path from that turn on).
    Project,
}

/// The index, blob store and project of one state dir, opened for reading
/// (works while a daemon runs: the index is opened read-only).
pub struct Opened<'c> {
    index: Index,
    blobs: BlobStore,
    backing: Dir,
    commit: Box<dyn Fn() + 'c>,
    resolved: Resolved,
}

impl std::fmt::Debug for Opened<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Opened")
            .field("index", &self.index.path())
            .finish_non_exhaustive()
    }
}

impl<'c> Opened<'c> {
    /// Opens `state` for history commands. `commit` asks whoever serves
    /// the project to commit the records pending in its capture log (the
    /// CLI passes `control::client::commit_through_daemon`); history never
    /// talks to a daemon itself.
    ///
    /// Errors: the index ([`HistoryError::Read`]), the blob directory
    /// ([`HistoryError::OpenBlobs`]) or the project
    /// ([`HistoryError::OpenProject`]) cannot be opened.
    pub fn open(
        state: &crate::store::StateDir,
        commit: Box<dyn Fn() + 'c>,
    ) -> Result<Opened<'c>, HistoryError> {
        Opened::open_with(state, None, commit)
    }

    /// [`Opened::open`] reading through `index`, a read-only connection
    /// to `state`'s index that an earlier [`Opened`] gave back
    /// ([`Opened::into_index`]), when given: a long-lived reader (the
    /// daemon's exporter) opens it once. Each query reads the index as it
    /// is then. Errors as [`Opened::open`].
    pub fn open_with(
        state: &crate::store::StateDir,
        index: Option<Index>,
        commit: Box<dyn Fn() + 'c>,
    ) -> Result<Opened<'c>, HistoryError> {
        let index = match index {
            Some(ix) if ix.path() == state.index_path() => ix,
            _ => Index::open_read_only(&state.index_path())?,
        };
        let blobs = BlobStore::open(&state.blobs_dir(), false).map_err(|source| {
            HistoryError::OpenBlobs {
                dir: state.blobs_dir(),
                source,
            }
        })?;
        let backing = Dir::open(&state.project).map_err(|source| HistoryError::OpenProject {
            project: state.project.clone(),
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

    /// The index connection, for the next [`Opened::open_with`].
    pub fn into_index(self) -> Index {
        self.index
    }

    /// The sources to pass to history functions.
    pub fn sources(&self) -> Sources<'_> {
        Sources(Reader {
            index: &self.index,
            blobs: &self.blobs,
            backing: &self.backing,
            commit: &self.commit,
            resolved: &self.resolved,
        })
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

/// [`parse_range`], failing with [`HistoryError::BadRange`] (usage) when
/// `text` is not `N` or `N..M`: the one message `opfs diff` and the MCP
/// tool `history_diff` give.
pub fn parse_range_arg(text: &str) -> Result<(u64, u64), HistoryError> {
    parse_range(text).ok_or_else(|| HistoryError::BadRange(text.to_string()))
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
        let e = parse_range_arg("0..x").expect_err("bad");
        assert!(e.is_usage());
        assert_eq!(
            e.to_string(),
            "\"0..x\" is not a turn or a turn range (N or N..M, turns start at 1)"
        );
    }

    #[test]
    fn errors_keep_raw_paths_and_their_messages() {
        let e = HistoryError::Absent {
            path: b"caf\xe9".to_vec(),
            turn: 3,
        };
        assert_eq!(e.to_string(), "caf\\xe9 did not exist when turn 3 began");
        let e = HistoryError::Excluded(b".git/HEAD".to_vec());
        assert_eq!(
            e.to_string(),
            ".git/HEAD is not part of the history: the project's .git is never recorded"
        );
        let e = HistoryError::from(ViewError::Turn(TurnError::NoTurns));
        assert!(e.is_usage());
        let e = HistoryError::from(ViewError::Blob {
            path: b"f".to_vec(),
            source: BlobError::Missing("00".into()),
        });
        assert!(!e.is_usage());
        assert!(e
            .to_string()
            .starts_with("the recorded content of f cannot be read: "));
    }
}

//! History a person can read: the log of turns, what turns changed, and a
//! path's content as of the start of a turn.
//!
//! Everything here is derived from path-state records (see
//! `docs/design.md`): a record (turn T, path P, X) says "P was X when T
//! began". The state of P at the start of turn N is its earliest record with
//! turn >= N, or the project's current state when there is none; the
//! project at the *end* of turn T is its state at the start of T + 1.
//!
//! Reading the project races with a running agent. Every function that reads
//! a path's current state re-reads the records afterwards, after asking the
//! daemon to commit the records pending in its capture log ([`Sources::
//! commit`]): capture appends a record before the mutation it guards runs,
//! so a path that has no newer record after the read was read before
//! anything changed it.

use std::collections::{BTreeMap, BTreeSet};
use std::io;

use serde::Serialize;

use crate::backing::Backing;
use crate::paths;
use crate::record::{Hash, PreImage};
use crate::store::{BlobError, BlobStore, Index, IndexError, Turn};
use crate::view::{Reader, Resolved, Timeline, TurnError, Version, ViewError};

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
    /// first recorded it ([`PreImage::Unknown`]).
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
    /// cannot be put together (see `crate::ranges`).
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
    pub backing: &'a Backing,
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

/// Asks the daemon serving `state`, if one runs, to commit the records
/// pending in its capture log. Without a daemon nothing is pending that a
/// reader could race with, so errors (no socket) are ignored.
pub fn commit_through_daemon(state: &crate::state::StateDir) {
    let _ = crate::control::request(&state.socket_path(), &crate::control::Request::Commit);
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
                reason,
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
    backing: Backing,
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
    /// Opens `state` for history commands.
    ///
    /// Errors: the index, the blob directory or the project cannot be
    /// opened.
    pub fn open(state: &crate::state::StateDir) -> Result<Opened, HistoryError> {
        let index = Index::open_read_only(&state.index_path())?;
        let blobs =
            BlobStore::open(&state.blobs_dir(), false).map_err(|source| HistoryError::Blob {
                path: state.blobs_dir().display().to_string(),
                source,
            })?;
        let backing = Backing::open(&state.project).map_err(|source| HistoryError::Project {
            path: state.project.display().to_string(),
            source,
        })?;
        let state = state.clone();
        Ok(Opened {
            index,
            blobs,
            backing,
            commit: Box::new(move || commit_through_daemon(&state)),
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

/// One turn as `opfs log` shows it.
#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
pub struct LogEntry {
    /// Turn number.
    pub turn: u64,
    /// `agent`, `rewind` or `merge`.
    pub kind: &'static str,
    /// The label, if any.
    pub label: Option<String>,
    /// The external id, if any.
    pub external_id: Option<String>,
    /// Start, ns since the Unix epoch.
    pub started_at: i64,
    /// End, ns since the Unix epoch; `None` for the open turn.
    pub ended_at: Option<i64>,
    /// For rewind turns: the turn whose start was restored.
    pub rewound_to: Option<u64>,
    /// Files and symlinks that did not exist when the turn began and did at
    /// its end.
    pub added: u64,
    /// Files and symlinks that existed at both ends with different content,
    /// permission bits or type.
    pub modified: u64,
    /// Files and symlinks that existed when the turn began and not at its end.
    pub deleted: u64,
    /// Paths recorded in the turn (including directories and paths whose
    /// content ended up unchanged).
    pub paths: u64,
    /// Bytes of the distinct pre-image blobs the turn's records refer to.
    pub bytes_stored: u64,
}

/// How a path changed between two versions, as far as git can see it
/// (files and symlinks; directories and special files are invisible).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ChangeKind {
    /// Did not exist (or was invisible) before, exists after.
    Added,
    /// Existed on both sides, different content, mode or type.
    Modified,
    /// Existed before, not after.
    Deleted,
}

/// The git-visible identity of a state: mode and content identity.
fn visible(state: &PreImage) -> Option<(u32, &[u8])> {
    match state {
        PreImage::File { blob, perm, .. } => Some((git_file_mode(*perm), &blob[..])),
        PreImage::Symlink { target } => Some((0o120000, &target[..])),
        _ => None,
    }
}

/// The git mode of a regular file with permission bits `perm`: 100755 when
/// any execute bit is set, else 100644 (git keeps nothing finer).
pub fn git_file_mode(perm: u32) -> u32 {
    if perm & 0o111 != 0 {
        0o100755
    } else {
        0o100644
    }
}

/// Classifies the change from `old` to `new`; `None` when git sees none.
pub fn classify(old: &PreImage, new: &PreImage) -> Option<ChangeKind> {
    match (visible(old), visible(new)) {
        (None, None) => None,
        (None, Some(_)) => Some(ChangeKind::Added),
        (Some(_), None) => Some(ChangeKind::Deleted),
        (Some(a), Some(b)) if a == b => None,
        (Some(_), Some(_)) => Some(ChangeKind::Modified),
    }
}

/// `opfs log`: one entry per turn, newest first.
///
/// The end state of the newest turns is read from the project (once per
/// path). Errors: the index or the project cannot be read.
pub fn log(src: &Sources<'_>) -> Result<Vec<LogEntry>, HistoryError> {
    let turns = src.index.turns(None)?;
    let Some(first) = turns.last().map(|t| t.number) else {
        return Ok(Vec::new());
    };
    let mut timeline = Timeline::load(src.index, first)?;
    // A ranged record stores its saved ranges, not the file.
    let mut ranged_stored: BTreeMap<(u64, Vec<u8>), u64> = BTreeMap::new();
    for (path, recs) in timeline.iter() {
        for (t, pre) in recs {
            if let PreImage::Ranged { .. } = pre {
                let pieces = src.index.ranges_of(*t, path)?;
                ranged_stored.insert((*t, path.clone()), pieces.iter().map(|p| p.len).sum());
            }
        }
    }
    src.resolve(&mut timeline, None, false)?;
    // Paths whose newest record is their last word need the project's
    // current state; read each once.
    let need_current: Vec<Vec<u8>> = timeline.iter().map(|(p, _)| p.clone()).collect();
    let mut current_cache: BTreeMap<Vec<u8>, PreImage> = BTreeMap::new();
    let newest = turns.first().map(|t| t.number).unwrap_or(first);
    let at_end = src.states_at(&timeline, &need_current, newest + 1)?;
    for (p, v) in at_end {
        current_cache.insert(p, v.state);
    }
    let by_turn = timeline.by_turn();
    let mut out = Vec::with_capacity(turns.len());
    for t in &turns {
        let mut e = LogEntry {
            turn: t.number,
            kind: t.kind.as_str(),
            label: t.label.clone(),
            external_id: t.external_id.clone(),
            started_at: t.started_at,
            ended_at: t.ended_at,
            rewound_to: t.rewound_to,
            added: 0,
            modified: 0,
            deleted: 0,
            paths: 0,
            bytes_stored: 0,
        };
        let mut blobs: BTreeSet<Hash> = BTreeSet::new();
        for p in by_turn.get(&t.number).map(Vec::as_slice).unwrap_or(&[]) {
            e.paths += 1;
            let Some(before) = timeline.record(p, t.number) else {
                continue;
            };
            if let Some(n) = ranged_stored.get(&(t.number, p.clone())) {
                e.bytes_stored += n;
            } else if let PreImage::File { blob, size, .. } = before {
                if blobs.insert(*blob) {
                    e.bytes_stored += size;
                }
            }
            let after = match timeline.state_at(p, t.number + 1) {
                Some(a) => a,
                None => match current_cache.get(p) {
                    Some(a) => a,
                    None => continue,
                },
            };
            match classify(before, after) {
                Some(ChangeKind::Added) => e.added += 1,
                Some(ChangeKind::Modified) => e.modified += 1,
                Some(ChangeKind::Deleted) => e.deleted += 1,
                None => {}
            }
        }
        out.push(e);
    }
    Ok(out)
}

/// One path that differs between two points in history.
#[derive(Debug, Clone)]
pub struct PathChange {
    /// The path.
    pub path: Vec<u8>,
    /// Its state at the start of the range.
    pub old: Version,
    /// Its state at the end of the range.
    pub new: Version,
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

/// What turns `from..=to` changed: every path recorded in those turns
/// whose state at the start of `from` differs (as git sees it) from its
/// state at the end of `to`, limited to paths within one of `filter` (all
/// when empty). Sorted by path. The end of the open turn is the project as
/// it is now.
///
/// Errors: an unknown turn or empty range (usage), the index, a blob, or
/// the project cannot be read.
pub fn changes(
    src: &Sources<'_>,
    from: u64,
    to: u64,
    filter: &[Vec<u8>],
) -> Result<Vec<PathChange>, HistoryError> {
    if from > to {
        return Err(HistoryError::EmptyRange { from, to });
    }
    src.turn(from)?;
    src.turn(to)?;
    let timeline = src.timeline(from)?;
    let wanted: Vec<Vec<u8>> = timeline
        .paths_in(from, to)
        .into_iter()
        .filter(|p| filter.is_empty() || filter.iter().any(|f| paths::is_within(p, f)))
        .collect();
    let end = src.states_at(&timeline, &wanted, to + 1)?;
    let mut out = Vec::new();
    for (path, new) in end {
        let Some(old) = timeline.state_at(&path, from) else {
            continue;
        };
        if classify(old, &new.state).is_some() {
            out.push(PathChange {
                old: Version::recorded(old.clone()),
                new,
                path,
            });
        }
    }
    Ok(out)
}

/// What [`show_entry`] found at a path when a turn began.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Shown {
    /// A regular file.
    File {
        /// Its bytes.
        bytes: Vec<u8>,
        /// Its permission bits (`mode & 0o7777`).
        perm: u32,
    },
    /// A symbolic link.
    Symlink {
        /// Its target, bytes as stored.
        target: Vec<u8>,
    },
}

/// `opfs show N:PATH`: the bytes of `path` when turn `turn` began (a
/// symlink's target for a symlink).
///
/// Errors: as [`show_entry`].
pub fn show(src: &Sources<'_>, turn: u64, path: &[u8]) -> Result<Vec<u8>, HistoryError> {
    Ok(match show_entry(src, turn, path)? {
        Shown::File { bytes, .. } => bytes,
        Shown::Symlink { target } => target,
    })
}

/// `opfs show N:PATH --json`: the file (bytes and permission bits) or
/// symlink at `path` when turn `turn` began.
///
/// Errors: unknown turn (usage); [`HistoryError::Absent`] when the path did
/// not exist then; [`HistoryError::Unknown`] when what it held then is not
/// known; [`HistoryError::NoContent`] for a directory or special file; the
/// blob or project cannot be read.
pub fn show_entry(src: &Sources<'_>, turn: u64, path: &[u8]) -> Result<Shown, HistoryError> {
    src.turn(turn)?;
    if path.is_empty() {
        return Err(HistoryError::NoContent {
            path: ".".into(),
            turn,
            kind: "dir",
        });
    }
    if paths::is_excluded(path) {
        return Err(HistoryError::Excluded(paths::display(path)));
    }
    let timeline = Timeline::default();
    let v = match src.index.state_from(path, turn)? {
        Some(PreImage::Ranged { .. }) => {
            let mut timeline = Timeline::load(src.index, turn)?;
            src.resolve(&mut timeline, Some(path), true)?;
            let pre = timeline.state_at(path, turn).cloned();
            Version::recorded(pre.unwrap_or(PreImage::Absent))
        }
        Some(pre) => Version::recorded(pre),
        None => {
            let v = src.states_at(&timeline, &[path.to_vec()], turn)?;
            v.into_values()
                .next()
                .unwrap_or(Version::recorded(PreImage::Absent))
        }
    };
    match &v.state {
        PreImage::Absent => Err(HistoryError::Absent {
            path: paths::display(path),
            turn,
        }),
        PreImage::Unknown => Err(HistoryError::Unknown {
            path: paths::display(path),
            turn,
        }),
        PreImage::File { perm, .. } => Ok(Shown::File {
            bytes: src.content(path, &v)?.unwrap_or_default(),
            perm: *perm,
        }),
        PreImage::Symlink { target } => Ok(Shown::Symlink {
            target: target.clone(),
        }),
        other => Err(HistoryError::NoContent {
            path: paths::display(path),
            turn,
            kind: other.kind_name(),
        }),
    }
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

    #[test]
    fn classify_sees_what_git_sees() {
        let f = |b: u8, perm| PreImage::File {
            blob: [b; 32],
            size: 1,
            perm,
            ino: 0,
        };
        assert_eq!(
            classify(&PreImage::Absent, &f(1, 0o644)),
            Some(ChangeKind::Added)
        );
        assert_eq!(classify(&f(1, 0o644), &f(1, 0o600)), None);
        assert_eq!(
            classify(&f(1, 0o644), &f(1, 0o755)),
            Some(ChangeKind::Modified)
        );
        assert_eq!(
            classify(&PreImage::Dir { perm: 0o755 }, &PreImage::Absent),
            None
        );
        assert_eq!(
            classify(&f(1, 0o644), &PreImage::Dir { perm: 0o755 }),
            Some(ChangeKind::Deleted)
        );
    }
}

//! `opfs show N:PATH`: a path's content when a turn began.

use crate::paths;
use crate::record::PreImage;
use crate::view::chain::{self, RangeError};
use crate::view::{Timeline, Version, ViewError};

use super::{HistoryError, Sources};

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
/// known; [`HistoryError::Read`] with [`RangeError::EditedBehind`] when it
/// was kept as ranges and changed behind the mount during that turn; [`HistoryError::NoContent`] for a directory or special file; the
/// blob or project cannot be read.
pub fn show_entry(src: &Sources<'_>, turn: u64, path: &[u8]) -> Result<Shown, HistoryError> {
    src.turn(turn)?;
    if path.is_empty() {
        return Err(HistoryError::NoContent {
            path: b".".to_vec(),
            turn,
            kind: "dir",
        });
    }
    if paths::is_excluded(path) {
        return Err(HistoryError::Excluded(path.to_vec()));
    }
    let timeline = Timeline::default();
    let state = src.index.state_from(path, turn)?;
    if matches!(state, Some(PreImage::Ranged { .. } | PreImage::Unknown)) {
        // Not the bytes of an edit behind the mount presented as the
        // turn's start (`docs/ranges.md`, "Limits").
        chain::check_edited_behind(src.index, path, turn).map_err(|reason| match reason {
            RangeError::Index(e) => HistoryError::from(e),
            reason => HistoryError::Read(ViewError::Ranges {
                path: path.to_vec(),
                reason,
            }),
        })?;
    }
    let v = match state {
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
    shown(path, turn, &v.state, || src.content(path, &v))
}

/// What `show` gives for `path` when it held `state` as turn `turn` began:
/// a file (its bytes from `bytes`) or a symlink, else the error saying
/// why there is nothing to show. The one mapping the project's history
/// and a worktree's view (`worktree::history`) share.
///
/// Errors: [`HistoryError::Absent`], [`HistoryError::Unknown`],
/// [`HistoryError::NoContent`] (the path named `.` for the root), or what
/// `bytes` returns.
pub fn shown(
    path: &[u8],
    turn: u64,
    state: &PreImage,
    bytes: impl FnOnce() -> Result<Option<Vec<u8>>, HistoryError>,
) -> Result<Shown, HistoryError> {
    match state {
        PreImage::Absent => Err(HistoryError::Absent {
            path: path.to_vec(),
            turn,
        }),
        PreImage::Unknown => Err(HistoryError::Unknown {
            path: path.to_vec(),
            turn,
        }),
        PreImage::File { perm, .. } => Ok(Shown::File {
            bytes: bytes()?.unwrap_or_default(),
            perm: *perm,
        }),
        PreImage::Symlink { target } => Ok(Shown::Symlink {
            target: target.clone(),
        }),
        other => Err(HistoryError::NoContent {
            path: if path.is_empty() {
                b".".to_vec()
            } else {
                path.to_vec()
            },
            turn,
            kind: other.kind_name(),
        }),
    }
}

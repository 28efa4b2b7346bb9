//! What a range of turns changed, as git sees it (`opfs diff`).

use crate::paths;
use crate::record::PreImage;
use crate::view::{Timeline, Version};

use super::{HistoryError, Sources};

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

/// True when `old` and `new` are files whose permission bits differ in a
/// way git's modes do not show (0644 to 0600): `opfs diff` lists it,
/// since a rewind restores those bits.
pub fn perm_changed(old: &PreImage, new: &PreImage) -> bool {
    match (old, new) {
        (PreImage::File { perm: a, .. }, PreImage::File { perm: b, .. }) => {
            a & 0o7777 != b & 0o7777
        }
        _ => false,
    }
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

/// What turns `from..=to` changed: every path recorded in those turns
/// whose state at the start of `from` differs (as git sees it, or in a
/// file's permission bits) from its state at the end of `to`, limited to paths within one of `filter` (all
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
    let (timeline, wanted) = recorded_in(src, from, to, filter)?;
    let end = src.states_at(&timeline, &wanted, to + 1)?;
    let mut out = Vec::new();
    for (path, new) in end {
        let Some(old) = timeline.state_at(&path, from) else {
            continue;
        };
        if classify(old, &new.state).is_some() || perm_changed(old, &new.state) {
            out.push(PathChange {
                old: Version::recorded(old.clone()),
                new,
                path,
            });
        }
    }
    Ok(out)
}

/// The timeline from `from` and the paths turns `from..=to` recorded
/// within one of `filter` (all when empty), after checking the range.
fn recorded_in(
    src: &Sources<'_>,
    from: u64,
    to: u64,
    filter: &[Vec<u8>],
) -> Result<(Timeline, Vec<Vec<u8>>), HistoryError> {
    if from > to {
        return Err(HistoryError::EmptyRange { from, to });
    }
    src.turn(from)?;
    src.turn(to)?;
    let timeline = src.timeline(from)?;
    let wanted = timeline
        .paths_in(from, to)
        .into_iter()
        .filter(|p| filter.is_empty() || filter.iter().any(|f| paths::is_within(p, f)))
        .collect();
    Ok((timeline, wanted))
}

/// A directory that turns `from..=to` created or removed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DirChange {
    /// The directory, project-relative.
    pub path: Vec<u8>,
    /// True: absent at the start of `from`, a directory at the end of `to`;
    /// false: the other way round.
    pub added: bool,
}

/// The directories turns `from..=to` created or removed (absent at one
/// end, a directory at the other), within `filter` as for [`changes`].
/// Sorted by path. git cannot show a directory; `opfs diff` shows the
/// empty ones (those with no visible change beneath, see
/// [`crate::diff::empty_dirs`]).
///
/// Errors: as [`changes`].
pub fn dir_changes(
    src: &Sources<'_>,
    from: u64,
    to: u64,
    filter: &[Vec<u8>],
) -> Result<Vec<DirChange>, HistoryError> {
    let (timeline, mut wanted) = recorded_in(src, from, to, filter)?;
    wanted.retain(|p| {
        matches!(
            timeline.state_at(p, from),
            Some(PreImage::Dir { .. } | PreImage::Absent)
        )
    });
    let end = src.states_at(&timeline, &wanted, to + 1)?;
    let mut out = Vec::new();
    for (path, new) in end {
        let old = timeline.state_at(&path, from);
        let added = match (old, &new.state) {
            (Some(PreImage::Absent), PreImage::Dir { .. }) => true,
            (Some(PreImage::Dir { .. }), PreImage::Absent) => false,
            _ => continue,
        };
        out.push(DirChange { path, added });
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

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

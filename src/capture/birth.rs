//! Inodes that reached a path behind the mount's back, told apart by
//! their birth time (`docs/design.md`, "What fingerprints cannot see").

use super::{CaptureError, Inner, Journal};
use crate::paths::PathContext;
use crate::record::PreImage;
use crate::store::Entry;
use crate::tree::Tree;

impl<T: Tree> Journal<T> {
    /// Checks when the inode now at `path` was born, before the mount
    /// records the path in the open turn K (`docs/design.md`, "What
    /// fingerprints cannot see"). Say it was born while turn J was open:
    ///
    /// - J is before the first turn kept, or the path has a record in some
    ///   turn from J to K-1: nothing to do. The mount saw the path after
    ///   the inode arrived, or no rewind can reach back that far.
    /// - Otherwise the inode reached the path outside the mount. What the
    ///   path held when J began is unknown: a [`PreImage::Unknown`] record
    ///   goes into turn J. Turns J+1..K began after the inode arrived.
    /// - J is K itself: what the path held when K began is unknown. Returns
    ///   `true`, and the caller records [`PreImage::Unknown`] in K instead
    ///   of the content.
    ///
    /// Birth times come from the kernel's coarse clock and can read one
    /// tick early: when the inode reached the path outside the mount and a
    /// later turn began within a tick after its birth time, the unknown
    /// record goes into that later turn (on the safe side: a conflict,
    /// never a wrong restore).
    ///
    /// Cost: one `statx`. For an inode born after the first kept turn began,
    /// also a look in the paths recorded recently (`TurnState::recent`),
    /// and when that does not answer, one lookup in the index's
    /// `(path, turn)` index. Nothing when the filesystem does not report
    /// birth times: those paths keep the old rule, with no check.
    pub(super) fn note_birth(
        &self,
        inner: &mut Inner,
        path: &[u8],
        file: Option<&std::fs::File>,
    ) -> Result<bool, CaptureError> {
        let born = self.tree.born_ns(path, file).at(path)?;
        self.note_born(inner, path, born)
    }

    /// [`Journal::note_birth`] with the birth time already read (`None`:
    /// not reported).
    pub(super) fn note_born(
        &self,
        inner: &mut Inner,
        path: &[u8],
        born: Option<i64>,
    ) -> Result<bool, CaptureError> {
        let Some(born) = born else {
            return Ok(false);
        };
        let Some(j) = inner.turn.open_at(born) else {
            return Ok(false);
        };
        let k = inner.turn.number;
        if j >= k {
            return Ok(true);
        }
        // Recorded in turn J or later by this process: no query.
        if inner.turn.recent.get(path).is_some_and(|&t| t >= j) {
            return Ok(false);
        }
        // Records of turns before K are all in the index: a turn switch
        // commits the pending ones first.
        if inner.index.recorded_between(path, j, k).at(path)?
            || inner.index.turn(j).at(path)?.is_none()
        {
            return Ok(false);
        }
        // The kernel stamps births from its coarse clock, up to one tick
        // behind the instant the inode was made: an inode born "in J"
        // within a tick of a later turn's start may have been made in that
        // later turn. Its unknown record goes into the latest turn it may
        // have been made in, so no rewind restores a state the path may
        // never have had (the price: a false conflict for an inode made in
        // a turn's last tick).
        let latest = inner
            .turn
            .open_at(born.saturating_add(inner.turn.birth_slack))
            .unwrap_or(j)
            .max(j);
        if latest >= k {
            return Ok(true);
        }
        inner.append(Entry::record(
            latest,
            path.to_vec(),
            PreImage::Unknown,
            None,
        ))?;
        Ok(false)
    }
}

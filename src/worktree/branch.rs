//! A worktree's history as its branch of the project's export
//! (`refs/opfs/worktrees/NAME`, `docs/export.md` "Worktree branches"):
//! [`crate::export::export_branch`] writes the commits, this file says what
//! each worktree turn changed in the worktree's view, through
//! [`WorktreeHistory`] (the upper layer's records mapped through the
//! base), so a commit's tree is what the worktree showed at the end of the
//! turn: never a `.wh.` name, deleted lower files gone, opaque directories
//! holding only their own children.

use std::cell::RefCell;
use std::collections::HashMap;
use std::path::Path;

use opfs_fs::overlay::Lower;

use crate::export::{self, BranchReport, BranchSource, BranchSpec, ExportError};
use crate::history::{HistoryError, Sources};
use crate::record::{PreImage, Turn};
use crate::store::StateDir;
use crate::view::Timeline;

use super::history::{Seen, WorktreeHistory};
use super::{Meta, Worktree};

/// The worktree's view as a [`BranchSource`].
struct ViewBranch<'a> {
    hist: WorktreeHistory<'a>,
    /// Every record from the first turn asked for on (loaded then).
    timeline: RefCell<Option<Timeline>>,
    /// The view states [`BranchSource::end_states`] gave last, by path.
    seen: RefCell<HashMap<Vec<u8>, Seen>>,
}

impl BranchSource for ViewBranch<'_> {
    fn closed_after(&self, after: u64) -> Result<Vec<Turn>, ExportError> {
        let mut closed: Vec<Turn> = self
            .hist
            .sources()
            .index
            .turns(None)?
            .into_iter()
            .filter(|t| t.ended_at.is_some() && t.number > after)
            .collect();
        closed.sort_by_key(|t| t.number);
        Ok(closed)
    }

    fn end_states(&self, turn: u64) -> Result<Vec<(Vec<u8>, PreImage)>, ExportError> {
        let mut timeline = self.timeline.borrow_mut();
        if timeline.is_none() {
            let loaded = self.hist.sources().timeline(turn)?;
            // Every turn to export reads the upper layer's states at once.
            let all: Vec<Vec<u8>> = loaded.iter().map(|(p, _)| p.clone()).collect();
            self.hist.prefetch(&loaded, &all)?;
            *timeline = Some(loaded);
        }
        let Some(timeline) = timeline.as_ref() else {
            return Ok(Vec::new());
        };
        let states = self.hist.turn_end_states(timeline, turn)?;
        let mut seen = self.seen.borrow_mut();
        seen.clear();
        Ok(states
            .into_iter()
            .map(|(p, s)| {
                let state = s.version.state.clone();
                seen.insert(p.clone(), s);
                (p, state)
            })
            .collect())
    }

    fn bytes(&self, path: &[u8], _state: &PreImage) -> Result<Vec<u8>, ExportError> {
        let seen = self.seen.borrow();
        let s = seen.get(path).ok_or_else(|| {
            ExportError::History(HistoryError::Read(crate::view::ViewError::Project {
                path: path.to_vec(),
                source: std::io::Error::other("no state of it was given for this turn"),
            }))
        })?;
        Ok(self.hist.content(path, s)?.unwrap_or_default())
    }

    fn ignore_file(&self, path: &[u8]) -> Option<String> {
        match self.hist.file_now(path) {
            Ok(bytes) => bytes.map(|b| String::from_utf8_lossy(&b).into_owned()),
            Err(e) => {
                log::debug!(
                    "ignore file {} of the worktree: {e}",
                    crate::paths::display(path)
                );
                None
            }
        }
    }
}

/// Exports worktree `wt`'s closed turns not on its branch yet into
/// `git_dir` (default: the project's export repository), see
/// [`crate::export::export_branch`]. `src` reads the worktree's own
/// history, `base` is its lower layer; `project_commit` is the project's
/// group commit (for the project's export, run first when it lacks the
/// base's commit).
///
/// Errors: as [`crate::export::export_branch`].
pub fn export(
    project: &StateDir,
    wt: &Worktree,
    meta: &Meta,
    src: Sources<'_>,
    base: &dyn Lower,
    git_dir: Option<&Path>,
    project_commit: &dyn Fn(),
) -> Result<BranchReport, ExportError> {
    let source = ViewBranch {
        hist: WorktreeHistory::new(src, base),
        timeline: RefCell::new(None),
        seen: RefCell::new(HashMap::new()),
    };
    let spec = BranchSpec {
        name: wt.name.clone(),
        id: meta.created_ns.to_string(),
        base_turn: meta.base_turn,
    };
    export::export_branch(project, git_dir, &spec, &source, project_commit)
}

/// The files of a worktree's view at the end of its turns, read as its
/// branch's export reads them: what the bytes behind the pointer files of
/// its branch are read from when they go to a bucket
/// (`crate::remote`, `docs/remote.md` "Big files").
pub struct TurnEnds<'a> {
    branch: ViewBranch<'a>,
    /// The turn whose end states `branch.seen` holds.
    turn: std::cell::Cell<Option<u64>>,
}

impl<'a> TurnEnds<'a> {
    /// Over the worktree's own history `src` and its lower layer `base`.
    pub fn new(src: Sources<'a>, base: &'a dyn Lower) -> TurnEnds<'a> {
        TurnEnds {
            branch: ViewBranch {
                hist: WorktreeHistory::new(src, base),
                timeline: RefCell::new(None),
                seen: RefCell::new(HashMap::new()),
            },
            turn: std::cell::Cell::new(None),
        }
    }

    /// The bytes of the regular file at `path` in the worktree's view at
    /// the end of its closed turn `turn`, when that turn changed it;
    /// `None` when the turn left no file there or did not change it. Ask
    /// in ascending order of turns (a turn before the last one asked
    /// reloads the records).
    ///
    /// Errors: the worktree's history, its upper layer or its base cannot
    /// be read.
    pub fn file(&self, turn: u64, path: &[u8]) -> Result<Option<Vec<u8>>, ExportError> {
        if self.turn.get() != Some(turn) {
            if self.turn.get().is_some_and(|t| t > turn) {
                *self.branch.timeline.borrow_mut() = None;
            }
            self.turn.set(None);
            self.branch.end_states(turn)?;
            self.turn.set(Some(turn));
        }
        let seen = self.branch.seen.borrow();
        match seen.get(path) {
            Some(s) if matches!(s.version.state, PreImage::File { .. }) => {
                Ok(self.branch.hist.content(path, s)?)
            }
            _ => Ok(None),
        }
    }
}

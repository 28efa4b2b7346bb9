//! Rewind: restore the project to the start of a turn.
//!
//! The target of every path recorded in turn N or later is its earliest
//! record in that range, its state when turn N began (`Index::states_at`);
//! paths never recorded since N are never touched (design §2.4). The plan
//! and its execution are [`crate::restore`]'s; this module checks the turn,
//! opens the rewind turn around the restore, marks it running and done in
//! the index (so a crash is finished on the next start: [`resume`]), and
//! opens the next agent turn.

mod resume;
#[cfg(test)]
mod tests;

use serde::{Deserialize, Serialize};

use crate::capture::{Journal, NewTurn};
use crate::failpoint::failpoint;
use crate::record::TurnKind;
use crate::restore::apply::sync_project;
use crate::restore::{self, Conflict, PathPlan};
use crate::store::IndexError;
use crate::view::{check_turn, TurnError};

pub use resume::{close_interrupted_rewind_turn, resume};

/// Errors that stop a rewind before it writes anything.
#[derive(Debug, thiserror::Error)]
pub enum RewindError {
    /// The turn cannot be rewound to: it does not exist or was dropped by
    /// retention (`opfs gc`).
    #[error(transparent)]
    Turn(#[from] TurnError),
    /// The index failed or is corrupt.
    #[error(transparent)]
    Index(#[from] IndexError),
    /// The project directory was deleted while the daemon served it.
    #[error("project {0} was deleted while it was mounted; nothing was restored (unmount, recreate the directory, mount it again, then rewind)")]
    ProjectDeleted(std::path::PathBuf),
}

/// How to rewind.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RewindOptions {
    /// Compute and return the plan; write nothing.
    pub dry_run: bool,
    /// Restore paths changed outside the mount since opfs last saw them
    /// (without it they are conflicts).
    pub force: bool,
}

/// The outcome of a rewind (or of its dry run).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct RewindReport {
    /// The turn that records this rewind (for a dry run: the number it would
    /// get).
    pub turn: Option<u64>,
    /// The turn whose start was restored.
    pub rewound_to: u64,
    /// True for `--dry-run`: nothing was written.
    pub dry_run: bool,
    /// Paths brought back to their state at `rewound_to`'s start (for a dry
    /// run: the paths that would be).
    pub restored: Vec<String>,
    /// Paths left as they are, with the reason.
    pub conflicts: Vec<Conflict>,
    /// The plan that was (or would be) executed.
    pub plan: Vec<PathPlan>,
    /// The agent turn open after the rewind.
    pub open_turn: u64,
    /// Raw bytes of every path the rewind wrote (for cache invalidation).
    #[serde(skip)]
    pub touched: Vec<Vec<u8>>,
}

/// Computes the plan for rewinding to the start of `to` from the index and
/// the project's current state. Writes nothing to the project.
///
/// Returns the plan and the paths that cannot be restored, with the reason.
///
/// Errors: as [`rewind`].
pub fn plan(
    journal: &Journal,
    to: u64,
    force: bool,
) -> Result<(Vec<PathPlan>, Vec<Conflict>), RewindError> {
    plan_until(journal, to, None, force)
}

/// [`plan`] over the records before turn `until` only (all when `None`).
fn plan_until(
    journal: &Journal,
    to: u64,
    until: Option<u64>,
    force: bool,
) -> Result<(Vec<PathPlan>, Vec<Conflict>), RewindError> {
    if journal.backing().is_deleted() {
        return Err(RewindError::ProjectDeleted(journal.project().to_path_buf()));
    }
    journal.with_index(|ix| check_turn(ix, to))??;
    let mut targets = journal.with_index(|ix| ix.targets_at(to, until))?;
    // A rewind never touches an excluded path, whatever records it has
    // from a mount that recorded it (`docs/design.md` "Excluded paths").
    if !journal.exclude().is_empty() {
        targets.retain(|t| !journal.excludes(&t.path));
    }
    Ok(restore::plan::plan_targets(journal, to, targets, force))
}

/// Rewinds the project to the start of turn `to`.
///
/// With `opts.dry_run`, returns the plan and writes nothing. Otherwise: opens a
/// rewind turn, records the current state of every planned path in it,
/// marks the restore as running in the index, executes the plan, marks it
/// done and opens a new agent turn. The caller must hold the mount's
/// quiesce guard (if mounted) and invalidate `report.touched` afterwards.
///
/// `opts.force` restores paths changed outside the mount too.
///
/// Errors, all before anything is written to the project:
/// [`RewindError::Turn`] for a turn that does not exist or was dropped by
/// retention, [`RewindError::ProjectDeleted`] when the project directory
/// was deleted under the mount, [`RewindError::Index`] when the index fails
/// (an interrupted rewind finished first, if any, stays finished).
/// Per-path failures are not errors: they are listed in `conflicts` and
/// the other paths are restored.
pub fn rewind(
    journal: &Journal,
    to: u64,
    opts: RewindOptions,
) -> Result<RewindReport, RewindError> {
    rewind_with_progress(journal, to, opts, &mut |_, _| {})
}

/// [`rewind`], calling `progress(done, total)` while the restore runs
/// (units of work: a path recorded in the rewind turn, a removal, a path
/// restored): `done` grows to `total`, which the last call reaches. Not
/// called for a dry run or when the rewind fails before writing. The
/// callback runs on the rewinding thread, under the mount's quiesce guard:
/// it must return quickly and must not touch the mount.
///
/// Errors: as [`rewind`].
pub fn rewind_with_progress(
    journal: &Journal,
    to: u64,
    opts: RewindOptions,
    progress: &mut dyn FnMut(u64, u64),
) -> Result<RewindReport, RewindError> {
    let RewindOptions { dry_run, force } = opts;
    if !dry_run {
        // Only reachable without a daemon (a daemon resumes at start): finish
        // a rewind a crash interrupted before starting another, so that
        // one's plan can never be replayed over this one's result later.
        if let Some(r) = resume(journal)? {
            log::warn!(
                "finished an interrupted rewind to turn {} (recorded as turn {}) first",
                r.rewound_to,
                r.turn.unwrap_or(0)
            );
        }
    }
    let (plan, mut conflicts) = plan(journal, to, force)?;
    if dry_run {
        return Ok(RewindReport {
            turn: Some(journal.open_turn() + 1),
            rewound_to: to,
            dry_run,
            // What the real run would restore if no step fails.
            restored: plan.iter().map(|p| p.path.clone()).collect(),
            conflicts,
            plan,
            open_turn: journal.open_turn(),
            touched: Vec::new(),
        });
    }
    let rewind_turn = journal.next_turn(NewTurn {
        kind: TurnKind::Rewind,
        label: Some(&format!("rewind to turn {to}")),
        external_id: None,
        rewound_to: Some(to),
    })?;
    failpoint("rewind-begin");
    journal.with_index(|ix| ix.begin_restore(rewind_turn, to))?;
    let (restored, exec_conflicts) = restore::apply::apply_with_progress(journal, &plan, progress);
    conflicts.extend(exec_conflicts);
    sync_project(journal);
    failpoint("rewind-before-done");
    journal.with_index(|ix| ix.finish_restore(rewind_turn))?;
    failpoint("rewind-after-done");
    let open_turn = journal.next_turn(NewTurn::agent())?;
    Ok(RewindReport {
        turn: Some(rewind_turn),
        rewound_to: to,
        dry_run,
        restored,
        conflicts,
        touched: plan
            .iter()
            .flat_map(|p| std::iter::once(&p.raw).chain(&p.link_raw))
            .cloned()
            .collect(),
        plan,
        open_turn,
    })
}

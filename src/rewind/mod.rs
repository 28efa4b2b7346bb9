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

use crate::capture::{Exclusive, Journal, NewTurn};
use crate::failpoint::failpoint;
use crate::record::TurnKind;
use crate::restore::apply::sync_project;
use crate::restore::{self, Conflict, ConflictReason, PathPlan};
use crate::store::IndexError;
use crate::view::{check_turn, TurnError};

pub use resume::{abort, close_interrupted_rewind_turn, leave_rewind_turn, resume, resume_stopped};

/// Why a rewind failed: most stop it before it writes anything;
/// [`RewindError::RolledBack`] and [`RewindError::Stopped`] say what it
/// wrote and what is left.
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
    /// The room check failed: the rewind could not finish, so it did not
    /// start. Nothing was written, no turn was opened.
    #[error(
        "not enough room to rewind to turn {to}: {} ({}) has {} free, and the rewind needs \
         about {} there (the current state of the {paths} paths it changes, recorded first so \
         that it can be undone, and the bytes it writes back, plus a margin); nothing was \
         changed. Free space there (`opfs gc` drops turns older than the retention policy keeps) \
         and run it again",
        .shortage.what,
        .shortage.dir.display(),
        size(.shortage.free),
        size(.shortage.needed)
    )]
    NoRoom {
        /// The turn rewound to.
        to: u64,
        /// Paths the plan changes.
        paths: usize,
        /// Where room is short, and by how much.
        shortage: crate::restore::space::Shortage,
    },
    /// Recording the current states failed (the state dir is full or
    /// failing) before anything was written to the project: the project
    /// is as it was; the rewind's turn is closed and an agent turn open.
    #[error(
        "the rewind to turn {to} failed before it changed anything: {cause}; the project is as \
         it was ({})",
        closing(*.turn, .not_closed.as_deref())
    )]
    NotStarted {
        /// The turn rewound to.
        to: u64,
        /// The rewind's turn.
        turn: u64,
        /// What failed.
        cause: String,
        /// Why the turn could not be closed, if it could not: it stays
        /// open until the next start or rewind closes it as rolled back.
        not_closed: Option<String>,
    },
    /// A step failed for a reason that is not the path's own (no room,
    /// I/O error) after some paths were restored; the rewind put them back
    /// from its own records: the project is as it was before it.
    #[error(
        "the rewind to turn {to} failed: {cause}; rolled back: the project is as it was \
         before the rewind ({put_back} paths put back; turn {turn}, the rewind's, keeps their \
         states). Fix the cause and run it again"
    )]
    RolledBack {
        /// The turn rewound to.
        to: u64,
        /// The rewind's turn.
        turn: u64,
        /// What failed, and on which path.
        cause: String,
        /// Paths written back.
        put_back: usize,
        /// Raw paths the rewind wrote (for cache invalidation).
        touched: Vec<Vec<u8>>,
    },
    /// A step failed as for [`RewindError::RolledBack`], and putting back
    /// failed too: the project is half restored, and the index says so
    /// until `opfs rewind --resume` or `--abort`.
    #[error("{stopped}")]
    Stopped {
        /// What the index now says of it.
        stopped: crate::store::index::StoppedRestore,
        /// Raw paths the rewind wrote (for cache invalidation).
        touched: Vec<Vec<u8>>,
    },
    /// Every step ran, but the index failed to mark the restore done: it
    /// stays running, and the next start (or rewind) finishes it, checked
    /// like any rewind. An agent turn is open if the index took it.
    #[error(
        "the rewind to turn {to} (turn {turn}) ran every step, but the index could not mark it \
         finished ({source}): `opfs status` shows it; the next `opfs rewind` or `opfs mount` \
         finishes it (leaving alone what changed since)"
    )]
    NotMarkedDone {
        /// The turn rewound to.
        to: u64,
        /// The rewind's turn.
        turn: u64,
        /// The index's error.
        source: IndexError,
    },
    /// A rewind run without a daemon (or after a restore could not be
    /// marked done) first finished an interrupted one, then failed: what
    /// the finish changed stays changed, and `finished` says so.
    #[error("{finished}; then {source}")]
    AfterFinish {
        /// What the finish did, and how to undo it.
        finished: String,
        /// Why the rewind asked for failed after it.
        source: Box<RewindError>,
        /// Raw paths the finish and the failed rewind wrote.
        touched: Vec<Vec<u8>>,
    },
    /// `--resume` or `--abort` with no interrupted rewind.
    #[error("no rewind is interrupted: nothing to resume or abort")]
    NothingPending,
}

impl RewindError {
    /// The raw paths the failed rewind wrote in the project (and put back,
    /// or not): empty unless it got that far.
    pub fn touched(&self) -> &[Vec<u8>] {
        match self {
            RewindError::RolledBack { touched, .. }
            | RewindError::Stopped { touched, .. }
            | RewindError::AfterFinish { touched, .. } => touched,
            _ => &[],
        }
    }
}

/// What became of the turn of a rewind that failed before it changed
/// anything.
fn closing(turn: u64, not_closed: Option<&str>) -> String {
    match not_closed {
        None => format!("turn {turn}, the rewind's, is closed as rolled back"),
        Some(e) => format!(
            "turn {turn}, the rewind's, is still open: closing it failed too ({e}); changes made \
             now are recorded in it, and `opfs status` warns until the next `opfs turn`, \
             `opfs rewind` or `opfs mount` closes it as rolled back, without restoring anything"
        ),
    }
}

fn size(bytes: u64) -> String {
    crate::restore::space::human(bytes)
}

/// How to rewind.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RewindOptions {
    /// Compute and return the plan; write nothing.
    pub dry_run: bool,
    /// Restore paths changed outside the mount since opfs last saw them
    /// (without it they are conflicts).
    pub force: bool,
    /// With conflicts left (after `force` or `markers`): restore the other
    /// paths and leave the conflicts as they are. Without it a rewind with
    /// a conflict changes nothing ([`RewindReport::stopped_by_conflicts`]).
    pub partial: bool,
    /// Write git-style conflict markers into a text file changed outside
    /// the mount instead of leaving it ([`crate::restore::markers`]).
    pub markers: bool,
    /// Instead of rewinding to the turn given: finish (`Resume`) or put
    /// back (`Abort`) the pending rewind, one that stopped on a failure or
    /// that a crash interrupted ([`resume_stopped`], [`abort`]); with
    /// `dry_run`, only the plan that would run.
    pub pending: Option<Pending>,
}

/// What to do with a pending rewind ([`RewindOptions::pending`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Pending {
    /// `opfs rewind --resume`: finish it.
    Resume,
    /// `opfs rewind --abort`: put back what it changed.
    Abort,
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
    /// Set when the rewind first finished an interrupted one (what that
    /// changed, and how to undo it); `None` otherwise.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub finished_first: Option<String>,
    /// True when conflicts stopped it: nothing was written and no turn
    /// opened (for a dry run: would stop). `plan` is what it would have
    /// done to the other paths.
    #[serde(default)]
    pub stopped_by_conflicts: bool,
    /// Text files written with conflict markers (also in `restored`;
    /// `--markers`).
    #[serde(default)]
    pub marked: Vec<String>,
}

/// What finishing an interrupted rewind changed, for the rewind that ran
/// it first: a sentence.
fn finished_first(r: &RewindReport) -> String {
    let turn = r.turn.unwrap_or(0);
    format!(
        "first finished an interrupted rewind to turn {} (recorded as turn {turn}): {} path(s) \
         restored, {} left as they are; `opfs rewind {turn}` puts back what it changed",
        r.rewound_to,
        r.restored.len(),
        r.conflicts.len()
    )
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
    plan_within(journal, to, until, force, None)
}

/// True when `path` is `within` or beneath it (`within` empty: the root,
/// which holds every path).
fn is_within(path: &[u8], within: &[u8]) -> bool {
    within.is_empty()
        || (path.starts_with(within) && (path.len() == within.len() || path[within.len()] == b'/'))
}

/// [`plan_until`] of the paths within one of `only` (all when `None`).
fn plan_within(
    journal: &Journal,
    to: u64,
    until: Option<u64>,
    force: bool,
    only: Option<&[Vec<u8>]>,
) -> Result<(Vec<PathPlan>, Vec<Conflict>), RewindError> {
    if journal.backing().is_deleted() {
        return Err(RewindError::ProjectDeleted(journal.project().to_path_buf()));
    }
    journal.with_index(|ix| check_turn(ix, to))??;
    let mut targets = journal.with_index(|ix| ix.targets_at(to, until))?;
    if let Some(only) = only {
        targets.retain(|t| only.iter().any(|o| is_within(&t.path, o)));
    }
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
/// done and opens a new agent turn. Runs under `excl` (no mutation
/// through opfs in flight); the caller invalidates `report.touched`
/// afterwards when mounted.
///
/// `opts.force` restores paths changed outside the mount too.
///
/// Errors before anything is written to the project:
/// [`RewindError::Turn`] for a turn that does not exist or was dropped by
/// retention, [`RewindError::ProjectDeleted`] when the project directory
/// was deleted under the mount, [`RewindError::NoRoom`] when the state dir
/// or the project lacks the room the rewind needs (no turn opened),
/// [`RewindError::NotStarted`] when recording the current states failed
/// (the rewind's turn closed as rolled back, an agent turn open),
/// [`RewindError::Index`] when the index fails (an interrupted rewind
/// finished first, if any, stays finished). After writing:
/// [`RewindError::RolledBack`] when a step failed for a cause not the
/// path's own (`ENOSPC`, `EDQUOT`, `EROFS`, `EIO`) and everything written
/// was put back, [`RewindError::Stopped`] when putting back failed too
/// (the index says so until `--resume`/`--abort`); an agent turn is open
/// after either. Per-path failures of their own are not errors: they are
/// listed in `conflicts` and the other paths are restored.
pub fn rewind(
    journal: &Journal,
    excl: &Exclusive<'_>,
    to: u64,
    opts: RewindOptions,
) -> Result<RewindReport, RewindError> {
    rewind_with_progress(journal, excl, to, opts, &mut |_, _| {})
}

/// [`rewind`], calling `progress(done, total)` while the restore runs
/// (units of work: a path recorded in the rewind turn, a removal, a path
/// restored): `done` grows to `total`, which the last call reaches. Not
/// called for a dry run or when the rewind fails before writing. The
/// callback runs on the rewinding thread, under `excl`:
/// it must return quickly and must not touch the mount.
///
/// Errors: as [`rewind`].
pub fn rewind_with_progress(
    journal: &Journal,
    excl: &Exclusive<'_>,
    to: u64,
    opts: RewindOptions,
    progress: &mut dyn FnMut(u64, u64),
) -> Result<RewindReport, RewindError> {
    rewind_within(journal, excl, to, None, opts, progress)
}

/// `opfs restore [--from N] PATH…`: a rewind to the start of turn `to` of
/// the paths within `only` (a path, or a directory and everything beneath
/// it; an empty path is the whole project), and of nothing else: files,
/// directories, symlinks, permission bits and removals, as a rewind
/// restores them, under the same conflict rules (`opts`), recorded as a
/// rewind turn labelled `restore PATH… from turn N`, so that rewinding to
/// that turn undoes it. `opts.pending` is ignored. A path not recorded
/// since `to` began is as it was then already: nothing to do.
///
/// Errors: as [`rewind`].
pub fn restore_paths(
    journal: &Journal,
    excl: &Exclusive<'_>,
    to: u64,
    only: &[Vec<u8>],
    opts: RewindOptions,
    progress: &mut dyn FnMut(u64, u64),
) -> Result<RewindReport, RewindError> {
    let opts = RewindOptions {
        pending: None,
        ..opts
    };
    rewind_within(journal, excl, to, Some(only), opts, progress)
}

/// [`rewind_with_progress`] of the paths within `only` (all when `None`).
fn rewind_within(
    journal: &Journal,
    excl: &Exclusive<'_>,
    to: u64,
    only: Option<&[Vec<u8>]>,
    opts: RewindOptions,
    progress: &mut dyn FnMut(u64, u64),
) -> Result<RewindReport, RewindError> {
    let RewindOptions {
        dry_run,
        force,
        pending,
        ..
    } = opts;
    match pending {
        Some(which) if dry_run => return resume::plan_pending(journal, which, force),
        Some(Pending::Resume) => return resume_stopped(journal, excl, force, progress),
        Some(Pending::Abort) => return abort(journal, excl, force, progress),
        None => {}
    }
    let mut first = None;
    if !dry_run {
        // Finish a rewind a crash interrupted (without a daemon: a daemon
        // finishes it at start) or one whose restore could not be marked
        // done, before starting another, so that its plan can never be
        // replayed over this one's result later.
        if let Some(r) = resume(journal, excl)? {
            log::warn!("{}", finished_first(&r));
            first = Some(r);
        } else if let Some(m) = close_interrupted_rewind_turn(journal, excl)? {
            // A rewind turn left open by a rewind that failed before it
            // changed anything (or by a crash): closed as rolled back.
            log::warn!("{m}");
        }
    }
    let result = rewind_planned(journal, excl, to, only, opts, progress);
    let Some(first) = first else {
        return result;
    };
    match result {
        Ok(mut report) => {
            report.finished_first = Some(finished_first(&first));
            report.touched.extend(first.touched);
            Ok(report)
        }
        Err(e) => {
            let mut touched = first.touched.clone();
            touched.extend_from_slice(e.touched());
            Err(RewindError::AfterFinish {
                finished: finished_first(&first),
                source: Box::new(e),
                touched,
            })
        }
    }
}

/// [`rewind_with_progress`] once nothing is pending.
fn rewind_planned(
    journal: &Journal,
    excl: &Exclusive<'_>,
    to: u64,
    only: Option<&[Vec<u8>]>,
    opts: RewindOptions,
    progress: &mut dyn FnMut(u64, u64),
) -> Result<RewindReport, RewindError> {
    let planned = plan_within(journal, to, None, opts.force, only)?;
    if only.is_some() && planned.0.is_empty() && planned.1.is_empty() {
        // A restore of paths already as they were: no turn for nothing.
        return Ok(RewindReport {
            turn: None,
            rewound_to: to,
            dry_run: opts.dry_run,
            restored: Vec::new(),
            conflicts: Vec::new(),
            plan: Vec::new(),
            open_turn: journal.open_turn(),
            touched: Vec::new(),
            finished_first: None,
            stopped_by_conflicts: false,
            marked: Vec::new(),
        });
    }
    let label = match only {
        None => format!("rewind to turn {to}"),
        Some(paths) => format!(
            "restore {} from turn {to}",
            paths
                .iter()
                .map(|p| if p.is_empty() {
                    ".".to_string()
                } else {
                    crate::paths::display(p)
                })
                .collect::<Vec<_>>()
                .join(" ")
        ),
    };
    let job = Job {
        to,
        label,
        supersede: None,
    };
    run_planned(journal, excl, job, opts, planned, progress, &|force| {
        plan_within(journal, to, None, force, only)
    })
}

/// The plan of a rewind ([`plan`]) or of a restore of some paths, with or
/// without `force`.
pub(crate) type Replan<'a> =
    dyn Fn(bool) -> Result<(Vec<PathPlan>, Vec<Conflict>), RewindError> + 'a;

/// Whether conflict `c` stops a restore that was not told `partial`: all
/// do but a directory left in place only because it holds paths the
/// `[record] exclude` list names, which no rewind records or touches
/// (build output under a directory the rewind removes): it is reported,
/// the rest is applied.
pub(crate) fn stops(journal: &Journal, c: &Conflict) -> bool {
    match &c.reason {
        ConflictReason::UnrecordedEntries { names } => {
            names.is_empty() || !names.iter().all(|n| journal.excludes(n))
        }
        _ => true,
    }
}

/// Runs (or for a dry run, reports) a planned restore under the conflict
/// rules of `opts`: conflicted text files get markers (`opts.markers`,
/// planned again with `replan(true)` for their targets); conflicts left
/// stop it before anything is written unless `opts.partial`.
pub(crate) fn run_planned(
    journal: &Journal,
    excl: &Exclusive<'_>,
    mut job: Job,
    opts: RewindOptions,
    (mut plan, mut conflicts): (Vec<PathPlan>, Vec<Conflict>),
    progress: &mut dyn FnMut(u64, u64),
    replan: &Replan<'_>,
) -> Result<RewindReport, RewindError> {
    let to = job.to;
    let mut marked = Vec::new();
    if opts.markers && !opts.force && !conflicts.is_empty() {
        let forced = replan(true)?;
        (plan, conflicts, marked) = restore::plan::with_markers(journal, to, forced, conflicts);
    }
    let stopped_by_conflicts = !opts.partial && conflicts.iter().any(|c| stops(journal, c));
    if opts.dry_run || stopped_by_conflicts {
        return Ok(RewindReport {
            turn: (!stopped_by_conflicts).then(|| journal.open_turn() + 1),
            rewound_to: to,
            dry_run: opts.dry_run,
            // What the real run would restore if no step fails.
            restored: if stopped_by_conflicts {
                Vec::new()
            } else {
                plan.iter().map(|p| p.path.clone()).collect()
            },
            conflicts,
            plan,
            open_turn: journal.open_turn(),
            touched: Vec::new(),
            finished_first: None,
            stopped_by_conflicts,
            marked,
        });
    }
    // A rewind that stopped on a failure is superseded: this one records
    // the half-restored state first, like any state it overwrites.
    let stopped = journal.with_index(|ix| ix.stopped_restore())?;
    job.supersede = stopped.map(|s| (s.rewind_turn, "superseded"));
    let mut report = run(journal, excl, job, plan, conflicts, progress)?;
    report.marked = marked;
    Ok(report)
}

/// A restore run besides its plan: the turn it restores, the label of its
/// rewind turn, and an earlier pending restore it ends (its rewind turn and
/// the outcome recorded for it).
pub(crate) struct Job {
    pub(crate) to: u64,
    pub(crate) label: String,
    pub(crate) supersede: Option<(u64, &'static str)>,
}

/// Runs a planned restore as a new rewind turn (R1–R7 in
/// `docs/crash-model.md`): the room check, the turn, the current states
/// recorded and committed, the restore marked running, then the steps; a
/// step that fails for a reason that is not the path's own rolls back.
fn run(
    journal: &Journal,
    excl: &Exclusive<'_>,
    job: Job,
    plan: Vec<PathPlan>,
    mut conflicts: Vec<Conflict>,
    progress: &mut dyn FnMut(u64, u64),
) -> Result<RewindReport, RewindError> {
    let to = job.to;
    let need = restore::space::need(&plan);
    if let Some(shortage) = restore::space::shortage(need, &journal.state().dir, journal.project())
    {
        return Err(RewindError::NoRoom {
            to,
            paths: plan.len(),
            shortage,
        });
    }
    let rewind_turn = journal.next_turn(
        excl,
        NewTurn {
            kind: TurnKind::Rewind,
            label: Some(&job.label),
            external_id: None,
            rewound_to: Some(to),
            closing_label: None,
        },
    )?;
    failpoint("rewind-begin");
    let mut recorded = restore::apply::record(journal, excl, &plan, progress);
    // Every record of R2 is in the index before R3 marks the restore
    // running and R4 touches the project: a full or failing state dir
    // stops the rewind here, with nothing changed.
    let failure = recorded.store_failure().map(|c| c.to_string()).or_else(|| {
        crate::failpoint::failpoint_error("rewind-commit")
            .map_err(|e| format!("index: {e}"))
            .and_then(|()| journal.apply_pending().map_err(|e| e.to_string()))
            .err()
    });
    if let Some(cause) = failure {
        return Err(abandon(journal, excl, rewind_turn, to, cause));
    }
    // R3 only now, right before the first write to the project: a failure
    // while recording leaves no running restore, so nothing can finish
    // this rewind later over work done since.
    let began = journal.with_index(|ix| {
        ix.begin_restore(rewind_turn, to)?;
        if let Some((old, outcome)) = job.supersede {
            let note = format!("{outcome} by turn {rewind_turn}");
            ix.end_restore(old, outcome, Some(&note))?;
        }
        Ok(())
    });
    if let Err(e) = began {
        return Err(abandon(journal, excl, rewind_turn, to, e.to_string()));
    }
    failpoint("rewind-running");
    conflicts.append(&mut recorded.conflicts);
    let (restored, exec_conflicts) =
        restore::apply::execute_recorded(journal, excl, &recorded, progress);
    if let Some(hard) = exec_conflicts
        .iter()
        .find(|c| restore::apply::is_hard_failure(c))
    {
        let cause = hard.to_string();
        let touched = recorded
            .runnable
            .iter()
            .flat_map(|p| std::iter::once(&p.raw).chain(&p.link_raw))
            .cloned()
            .collect();
        return Err(roll_back(
            journal,
            excl,
            rewind_turn,
            to,
            cause,
            (&restored, recorded.runnable.len()),
            touched,
        ));
    }
    conflicts.extend(exec_conflicts);
    sync_project(journal);
    failpoint("rewind-before-done");
    let done = crate::failpoint::failpoint_error("rewind-done")
        .map_err(|_| IndexError::disk_full(journal.state().index_path()))
        .and_then(|()| journal.with_index(|ix| ix.finish_restore(rewind_turn)));
    if let Err(e) = done {
        // The project is rewound but the index says running: the next
        // start finishes it (nothing left to do). Meanwhile the agent must
        // not work in the rewind's turn, where its changes would be kept
        // nowhere; in a later turn a finish leaves them alone.
        if let Err(e) = journal.next_turn(excl, NewTurn::agent()) {
            log::error!("cannot open an agent turn after the rewind to turn {to}: {e}");
        }
        return Err(RewindError::NotMarkedDone {
            to,
            turn: rewind_turn,
            source: e,
        });
    }
    failpoint("rewind-after-done");
    let open_turn = journal.next_turn(excl, NewTurn::agent())?;
    Ok(RewindReport {
        turn: Some(rewind_turn),
        rewound_to: to,
        dry_run: false,
        restored,
        conflicts,
        touched: plan
            .iter()
            .flat_map(|p| std::iter::once(&p.raw).chain(&p.link_raw))
            .cloned()
            .collect(),
        plan,
        open_turn,
        finished_first: None,
        stopped_by_conflicts: false,
        marked: Vec::new(),
    })
}

/// A rewind that failed before writing to the project: its restore is
/// marked rolled back and an agent turn opened, so the agent's next
/// mutations are not recorded in the rewind's turn. When the index fails
/// here too, the rewind turn stays open with no running restore (or one
/// marked rolled back): `status` warns, and the next start or rewind closes
/// it as rolled back ([`close_interrupted_rewind_turn`]), never finishes it.
fn abandon(
    journal: &Journal,
    excl: &Exclusive<'_>,
    rewind_turn: u64,
    to: u64,
    cause: String,
) -> RewindError {
    let reopened = crate::failpoint::failpoint_error("rewind-close")
        .map_err(|_| IndexError::disk_full(journal.state().index_path()))
        .and_then(|()| journal.with_index(|ix| ix.abandon_restore(rewind_turn, to, &cause)))
        .and_then(|()| journal.next_turn(excl, NewTurn::agent()).map(drop));
    RewindError::NotStarted {
        to,
        turn: rewind_turn,
        cause,
        not_closed: reopened.err().map(|e| e.to_string()),
    }
}

/// A rewind whose step failed for a reason not the path's own (`ENOSPC`,
/// `EIO`...) after `restored` of `total` paths: puts back the pre-rewind
/// state of every path the rewind turn recorded (its own records, written
/// before any step), without recording it again. When that works the
/// restore is marked rolled back; otherwise stopped, with what still
/// differs. Either way an agent turn is opened.
fn roll_back(
    journal: &Journal,
    excl: &Exclusive<'_>,
    rewind_turn: u64,
    to: u64,
    cause: String,
    (restored, total): (&[String], usize),
    touched: Vec<Vec<u8>>,
) -> RewindError {
    let back = journal
        .with_index(|ix| ix.targets_at(rewind_turn, None))
        .map(|targets| restore::plan::plan_targets(journal, rewind_turn, targets, true));
    let (put_back, left) = match back {
        Ok((plan, mut left)) => {
            let (put_back, failed) = restore::apply::execute_unrecorded(journal, excl, &plan);
            left.extend(failed);
            (put_back, left)
        }
        Err(e) => (
            Vec::new(),
            vec![Conflict::new(b"", ConflictReason::Text(e.to_string()))],
        ),
    };
    // Paths the rewind restored that the roll back did not put back.
    let still_restored = restored.iter().filter(|p| !put_back.contains(p)).count();
    let put_back = put_back.len();
    sync_project(journal);
    let outcome = if left.is_empty() {
        journal
            .with_index(|ix| ix.end_restore(rewind_turn, "rolled_back", Some(&cause)))
            .map(|()| RewindError::RolledBack {
                to,
                turn: rewind_turn,
                cause: cause.clone(),
                put_back,
                touched: touched.clone(),
            })
    } else {
        let stopped = crate::store::index::StoppedRestore {
            rewind_turn,
            rewound_to: to,
            restored: still_restored as u64,
            total: total as u64,
            detail: format!(
                "{cause}; putting back what it changed failed too for {} path(s), first {}",
                left.len(),
                left[0]
            ),
        };
        journal
            .with_index(|ix| {
                ix.stop_restore(
                    rewind_turn,
                    stopped.restored,
                    stopped.total,
                    &stopped.detail,
                )
            })
            .map(|()| RewindError::Stopped { stopped, touched })
    };
    if let Err(e) = journal.next_turn(excl, NewTurn::agent()) {
        log::error!("cannot open an agent turn after the failed rewind to turn {to}: {e}");
    }
    outcome.unwrap_or_else(RewindError::Index)
}

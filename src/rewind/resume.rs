//! Recovery after a crash: finishing an interrupted restore, or closing a
//! rewind turn that a crash left open.

use std::collections::BTreeMap;

use crate::capture::{Exclusive, Journal, NewTurn};
use crate::record::TurnKind;
use crate::restore::{self, Conflict, ConflictReason, PathPlan};

use super::{plan_until, run, Job, RewindError, RewindReport};

/// Finishes a restore that a crash interrupted, if there is one (not one
/// that [stopped](crate::store::Index::stop_restore) on a failure: those
/// wait for [`resume_stopped`]). Returns the report, or `None` when nothing
/// was pending. Runs under `excl` (no mutation through opfs in flight).
///
/// The finish is a rewind like any other, recorded as a new rewind turn:
/// it plans from the records before the interrupted rewind's turn R (R's
/// own records keep the pre-rewind states, so a redo of R gives them
/// back), checks fingerprints as any rewind does, leaves alone every path
/// a turn after R recorded (work done since it stopped, `ChangedAfterStop`),
/// records whatever it overwrites in its own turn first (a redo of that
/// turn gives it back), and runs the room check. When it cannot start (no
/// room), the interrupted restore is marked stopped, so `status`, `rewind`
/// and the hook report it, and an agent turn is opened.
///
/// Errors: as [`super::rewind`].
pub fn resume(
    journal: &Journal,
    excl: &Exclusive<'_>,
) -> Result<Option<RewindReport>, RewindError> {
    let Some((old, to)) = journal.with_index(|ix| ix.unfinished_restore())? else {
        return Ok(None);
    };
    finish(journal, excl, old, to, false, &mut |_, _| {}).map(Some)
}

/// `opfs rewind --resume`: finishes the pending restore, one that stopped
/// on a failure or one a crash interrupted, as [`resume`] does; `force`
/// also overwrites paths changed behind the mount or after the rewind
/// stopped (each recorded first).
///
/// Errors: [`RewindError::NothingPending`] when no restore is pending;
/// otherwise as [`super::rewind`].
pub fn resume_stopped(
    journal: &Journal,
    excl: &Exclusive<'_>,
    force: bool,
    progress: &mut dyn FnMut(u64, u64),
) -> Result<RewindReport, RewindError> {
    let (old, to) = pending(journal)?.ok_or(RewindError::NothingPending)?;
    finish(journal, excl, old, to, force, progress)
}

/// `opfs rewind --abort`: puts back what the pending restore (recorded as
/// turn R) changed, i.e. rewinds to the start of R over the paths R
/// recorded only, as a new rewind turn, with the checks of [`resume`].
///
/// Errors: as [`resume_stopped`].
pub fn abort(
    journal: &Journal,
    excl: &Exclusive<'_>,
    force: bool,
    progress: &mut dyn FnMut(u64, u64),
) -> Result<RewindReport, RewindError> {
    let (job, plan, conflicts) = abort_plan(journal, force)?;
    run(journal, excl, job, plan, conflicts, progress)
}

/// The plan `--abort` runs: over the paths the pending restore's turn
/// recorded, to that turn's start.
fn abort_plan(journal: &Journal, force: bool) -> Result<Planned, RewindError> {
    let (old, to) = pending(journal)?.ok_or(RewindError::NothingPending)?;
    let targets = journal.with_index(|ix| ix.targets_at(old, Some(old + 1)))?;
    let (plan, conflicts) = restore::plan::plan_targets(journal, old, targets, force);
    let (plan, conflicts) = keep_later_work(journal, old, plan, conflicts, force)?;
    let job = Job {
        to: old,
        label: format!("abort the rewind to turn {to} (turn {old})"),
        supersede: Some((old, "aborted")),
    };
    Ok((job, plan, conflicts))
}

/// A restore's job, plan and conflicts.
type Planned = (Job, Vec<PathPlan>, Vec<Conflict>);

/// `opfs rewind --resume --dry-run` and `--abort --dry-run`: the plan the
/// pending restore's resume (or abort) would run now, as a dry-run report
/// (`rewound_to`: the turn it restores; `turn`: the number its rewind turn
/// would get). Writes nothing.
///
/// Errors: [`RewindError::NothingPending`] when no restore is pending;
/// the index's.
pub fn plan_pending(
    journal: &Journal,
    which: super::Pending,
    force: bool,
) -> Result<RewindReport, RewindError> {
    let (job, plan, conflicts) = match which {
        super::Pending::Resume => {
            let (old, to) = pending(journal)?.ok_or(RewindError::NothingPending)?;
            finish_plan(journal, old, to, force)?
        }
        super::Pending::Abort => abort_plan(journal, force)?,
    };
    Ok(RewindReport {
        turn: Some(journal.open_turn() + 1),
        rewound_to: job.to,
        dry_run: true,
        restored: plan.iter().map(|p| p.path.clone()).collect(),
        conflicts,
        plan,
        open_turn: journal.open_turn(),
        touched: Vec::new(),
        finished_first: None,
        stopped_by_conflicts: false,
        marked: Vec::new(),
    })
}

/// The pending restore, `(rewind turn, rewound-to turn)`: one a crash
/// interrupted, else one that stopped.
fn pending(journal: &Journal) -> Result<Option<(u64, u64)>, RewindError> {
    Ok(journal.with_index(|ix| {
        Ok(match ix.unfinished_restore()? {
            Some(r) => Some(r),
            None => ix.stopped_restore()?.map(|s| (s.rewind_turn, s.rewound_to)),
        })
    })?)
}

/// Finishes the restore recorded as turn `old` (to the start of `to`) as a
/// new rewind turn.
fn finish(
    journal: &Journal,
    excl: &Exclusive<'_>,
    old: u64,
    to: u64,
    force: bool,
    progress: &mut dyn FnMut(u64, u64),
) -> Result<RewindReport, RewindError> {
    let (job, plan, conflicts) = finish_plan(journal, old, to, force)?;
    let remaining = plan.len() as u64;
    match run(journal, excl, job, plan, conflicts, progress) {
        Ok(report) => {
            // Paths the interrupted run already restored are not in this
            // plan (they need nothing), and their records forgot their
            // fingerprints: remember what is there now, or the next rewind
            // could not check them.
            // (Not the paths left alone: a change behind the mount must
            // stay visible to the next rewind's check.)
            let left: std::collections::BTreeSet<&[u8]> =
                report.conflicts.iter().map(|c| c.path.as_slice()).collect();
            for path in journal.with_index(|ix| ix.paths_of_turn(old))? {
                if !left.contains(path.as_slice()) {
                    journal.remember(&path);
                }
            }
            if let Err(e) = journal.flush() {
                log::warn!("cannot store fingerprints after finishing the rewind: {e}");
            }
            Ok(report)
        }
        Err(e @ RewindError::NoRoom { .. }) => {
            // Nothing was written and no turn opened: say so wherever the
            // project is looked at, and let the agent work in its own turn.
            let total = journal
                .with_index(|ix| ix.paths_of_turn(old))
                .map_or(remaining, |p| p.len() as u64)
                .max(remaining);
            let detail = e.to_string();
            journal.with_index(|ix| ix.stop_restore(old, total - remaining, total, &detail))?;
            leave_rewind_turn(journal, excl)?;
            Err(e)
        }
        Err(e) => Err(e),
    }
}

/// The plan that finishes the restore recorded as turn `old`.
fn finish_plan(journal: &Journal, old: u64, to: u64, force: bool) -> Result<Planned, RewindError> {
    let (plan, conflicts) = plan_until(journal, to, Some(old), force)?;
    let (plan, conflicts) = keep_later_work(journal, old, plan, conflicts, force)?;
    let job = Job {
        to,
        label: format!("finish the rewind to turn {to} (turn {old})"),
        supersede: Some((old, "resumed")),
    };
    Ok((job, plan, conflicts))
}

/// Opens an agent turn when the open turn is a rewind turn, so the agent's
/// mutations are never recorded in a rewind's turn (whose first record of a
/// path wins: the agent's state there would be kept nowhere).
///
/// Errors: the index fails (the rewind turn stays open).
pub fn leave_rewind_turn(journal: &Journal, excl: &Exclusive<'_>) -> Result<(), RewindError> {
    let open = journal.open_turn();
    if journal.with_index(|ix| ix.turn(open))?.map(|t| t.kind) == Some(TurnKind::Rewind) {
        journal.next_turn(excl, NewTurn::agent())?;
    }
    Ok(())
}

/// Moves from `plan` to the conflicts every path recorded in a turn after
/// `old` (the stopped rewind's turn): work done since it stopped, which a
/// resume or abort must not overwrite unchecked. `force` keeps them in the
/// plan (the run records their state first).
fn keep_later_work(
    journal: &Journal,
    old: u64,
    plan: Vec<PathPlan>,
    mut conflicts: Vec<Conflict>,
    force: bool,
) -> Result<(Vec<PathPlan>, Vec<Conflict>), RewindError> {
    if force {
        return Ok((plan, conflicts));
    }
    let open = journal.open_turn();
    let mut later: BTreeMap<Vec<u8>, u64> = BTreeMap::new();
    for turn in (old + 1..=open).rev() {
        for path in journal.with_index(|ix| ix.paths_of_turn(turn))? {
            later.insert(path, turn);
        }
    }
    let (kept, plan): (Vec<PathPlan>, Vec<PathPlan>) =
        plan.into_iter().partition(|p| later.contains_key(&p.raw));
    for p in kept {
        let turn = later[&p.raw];
        conflicts.push(Conflict::new(
            &p.raw,
            ConflictReason::ChangedAfterStop { rewind: old, turn },
        ));
    }
    Ok((plan, conflicts))
}

/// Closes a rewind turn that a crash left open without a running restore,
/// and opens a new agent turn, so agent work never lands in a rewind turn.
/// Call after [`resume`] returned `None`.
///
/// Two crash points leave this: before the restore was marked running (the
/// rewind wrote nothing: the project is as it was before it, i.e. rolled
/// back; so does a rewind that failed while recording and could not close
/// its turn: its restore is then marked rolled back here) and after it was
/// marked done (the rewind is complete; only the next
/// agent turn was missing). Returns a description of what was found, or
/// `None` when the open turn is not a rewind turn.
pub fn close_interrupted_rewind_turn(
    journal: &Journal,
    excl: &Exclusive<'_>,
) -> Result<Option<String>, RewindError> {
    let open = journal.open_turn();
    let Some(turn) = journal.with_index(|ix| ix.turn(open))? else {
        return Ok(None);
    };
    if turn.kind != TurnKind::Rewind {
        return Ok(None);
    }
    let to = turn.rewound_to.unwrap_or(0);
    let started = journal.with_index(|ix| ix.restore_started(open))?;
    let outcome = journal.with_index(|ix| ix.restore_outcome(open))?;
    if !started {
        // Listed as the failed, rolled-back rewind it is.
        let note = "closed as rolled back: it failed or was interrupted before it changed anything";
        journal.with_index(|ix| ix.abandon_restore(open, to, note))?;
    }
    let next = journal.next_turn(excl, NewTurn::agent())?;
    Ok(Some(if outcome.as_deref() == Some("rolled_back") {
        format!(
            "a rewind to turn {to} (turn {open}) failed and was rolled back (the project is as it \
             was before it), but had not opened the next turn; opened turn {next}"
        )
    } else if started {
        format!("a finished rewind to turn {to} (turn {open}) had not opened the next turn; opened turn {next}")
    } else {
        format!(
            "a rewind to turn {to} (turn {open}) was interrupted before it changed anything: \
             the project is as it was before that rewind (rolled back); opened turn {next}"
        )
    }))
}

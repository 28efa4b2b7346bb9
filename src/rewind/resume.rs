//! Recovery after a crash: finishing an interrupted restore, or closing a
//! rewind turn that a crash left open.

use crate::capture::{Journal, NewTurn};
use crate::record::TurnKind;
use crate::restore::{self, apply::sync_project};

use super::{plan_until, RewindError, RewindReport};

/// Finishes a restore that a crash interrupted, if there is one: recomputes
/// the plan from the records before the rewind turn (the rewind's own
/// records keep the pre-rewind states, so nothing is lost), executes it and
/// opens a new agent turn. Returns the report, or `None` when nothing was
/// pending. The caller must hold the quiesce guard if mounted.
pub fn resume(journal: &Journal) -> Result<Option<RewindReport>, RewindError> {
    let Some((rewind_turn, to)) = journal.with_index(|ix| ix.unfinished_restore())? else {
        return Ok(None);
    };
    // The interrupted run checked fingerprints already; the paths it wrote
    // before the crash have none yet, so they are not checked again.
    let (plan, mut conflicts) = plan_until(journal, to, Some(rewind_turn), true)?;
    let (restored, exec_conflicts) = restore::apply(journal, &plan);
    conflicts.extend(exec_conflicts);
    // Paths the interrupted run already restored are not in this plan (they
    // need nothing), but the crash lost what it remembered of them: without
    // this, their old fingerprints would report them as changed behind the
    // mount's back on the next rewind.
    for path in journal.with_index(|ix| ix.paths_of_turn(rewind_turn))? {
        journal.remember(&path);
    }
    if let Err(e) = journal.flush() {
        log::warn!("cannot store fingerprints after finishing the rewind: {e}");
    }
    sync_project(journal);
    journal.with_index(|ix| ix.finish_restore(rewind_turn))?;
    let open_turn = if journal.open_turn() == rewind_turn {
        journal.next_turn(NewTurn::agent())?
    } else {
        journal.open_turn()
    };
    Ok(Some(RewindReport {
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
    }))
}

/// Closes a rewind turn that a crash left open without a running restore,
/// and opens a new agent turn, so agent work never lands in a rewind turn.
/// Call after [`resume`] returned `None`.
///
/// Two crash points leave this: before the restore was marked running (the
/// rewind wrote nothing: the project is as it was before it, i.e. rolled
/// back) and after it was marked done (the rewind is complete; only the next
/// agent turn was missing). Returns a description of what was found, or
/// `None` when the open turn is not a rewind turn.
pub fn close_interrupted_rewind_turn(journal: &Journal) -> Result<Option<String>, RewindError> {
    let open = journal.open_turn();
    let Some(turn) = journal.with_index(|ix| ix.turn(open))? else {
        return Ok(None);
    };
    if turn.kind != TurnKind::Rewind {
        return Ok(None);
    }
    let to = turn.rewound_to.unwrap_or(0);
    let started = journal.with_index(|ix| ix.restore_started(open))?;
    let next = journal.next_turn(NewTurn::agent())?;
    Ok(Some(if started {
        format!("a finished rewind to turn {to} (turn {open}) had not opened the next turn; opened turn {next}")
    } else {
        format!(
            "a rewind to turn {to} (turn {open}) was interrupted before it changed anything: \
             the project is as it was before that rewind (rolled back); opened turn {next}"
        )
    }))
}

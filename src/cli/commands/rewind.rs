//! `opfs rewind`: without N, list the rewind points; with N (or `--id`),
//! restore the start of turn N; `--resume`/`--abort` finish or put back a
//! rewind that stopped on a failure. Paths left unrestored exit 3.
//!
//! With no daemon serving the project both still work (a rewind runs
//! directly on the project under the state lock), and a warning on stderr
//! says so: changes made while unmounted were not recorded. `--json` adds
//! `"mounted": false` to the rewind object then.

use std::io::Write;

use opfs::control::client::Via;
use opfs::control::Project;
use opfs::paths;
use opfs::record::{Turn, TurnKind};
use opfs::rewind::RewindReport;
use opfs::store::Index;
use opfs::store::StateDir;

use crate::cli::args::{Choice, RewindArgs};
use crate::cli::error::{failure, CommandError, ErrorKind};
use crate::cli::output::{printable, rfc3339};
use crate::cli::{refs, Ctx};

pub fn run(
    ctx: &Ctx,
    a: &RewindArgs,
    out: &mut dyn Write,
    err: &mut dyn Write,
) -> Result<(), CommandError> {
    let project = ctx.project()?;
    let st = project.state();
    let target = match (&a.turn, &a.id) {
        (Some(t), _) => Some(match refs::relative_turn(st, t)? {
            Some(n) => n,
            None => parse_turn(t)?,
        }),
        (None, Some(id)) => {
            let ix = open_index(st)?;
            let t = ix
                .turn_by_external_id(id)
                .map_err(failure)?
                .ok_or_else(|| CommandError::usage(format!("no turn has the id {id:?}")))?;
            Some(t.number)
        }
        (None, None) => None,
    };
    let pending = if a.resume {
        Some(opfs::rewind::Pending::Resume)
    } else if a.abort {
        Some(opfs::rewind::Pending::Abort)
    } else {
        None
    };
    if pending.is_some() {
        if a.dry_run {
            return run_rewind(ctx, &project, 0, true, a.choice(), pending, None, out, err);
        }
        return execute_opts(ctx, &project, 0, a.choice(), pending, None, out, err);
    }
    if let (Some(_), false, Some(note)) = (target, a.dry_run, pending_note(st)) {
        writeln!(
            err,
            "opfs: note: this rewind runs over an earlier one that stopped; it records the \
             half-restored state first (a redo of it gives that back): {note}"
        )?;
    }
    let Some(n) = target else {
        project.commit_pending()?;
        if !project.served()? {
            writeln!(err, "opfs: warning: {}", unserved(st))?;
        }
        return list_rewind_points(ctx, st, a.all, out);
    };
    execute(ctx, &project, n, a.dry_run, a.choice(), None, out, err)
}

/// Rewinds to the start of turn `n` and prints the report (`opfs rewind N`
/// and `opfs undo`); `extra` is one more field for the JSON object.
/// Conflicts exit 3.
#[allow(clippy::too_many_arguments)]
pub fn execute(
    ctx: &Ctx,
    project: &Project,
    n: u64,
    dry_run: bool,
    choice: Choice,
    extra: Option<(&str, serde_json::Value)>,
    out: &mut dyn Write,
    err: &mut dyn Write,
) -> Result<(), CommandError> {
    if dry_run {
        return plan_only(ctx, project, n, choice, extra, out, err);
    }
    execute_opts(ctx, project, n, choice, None, extra, out, err)
}

/// [`execute`] of a dry run.
fn plan_only(
    ctx: &Ctx,
    project: &Project,
    n: u64,
    choice: Choice,
    extra: Option<(&str, serde_json::Value)>,
    out: &mut dyn Write,
    err: &mut dyn Write,
) -> Result<(), CommandError> {
    run_rewind(ctx, project, n, true, choice, None, extra, out, err)
}

/// [`execute`] for a rewind that writes, or for `--resume`/`--abort`
/// (`pending`; `n` is then ignored).
#[allow(clippy::too_many_arguments)]
fn execute_opts(
    ctx: &Ctx,
    project: &Project,
    n: u64,
    choice: Choice,
    pending: Option<opfs::rewind::Pending>,
    extra: Option<(&str, serde_json::Value)>,
    out: &mut dyn Write,
    err: &mut dyn Write,
) -> Result<(), CommandError> {
    run_rewind(ctx, project, n, false, choice, pending, extra, out, err)
}

#[allow(clippy::too_many_arguments)]
fn run_rewind(
    ctx: &Ctx,
    project: &Project,
    n: u64,
    dry_run: bool,
    choice: Choice,
    pending: Option<opfs::rewind::Pending>,
    extra: Option<(&str, serde_json::Value)>,
    out: &mut dyn Write,
    err: &mut dyn Write,
) -> Result<(), CommandError> {
    let st = project.state();
    // A bar on a terminal for a restore that runs longer than a second;
    // the daemon is asked for progress lines only when one may be drawn.
    let (report, via) = {
        let mut bar = crate::cli::progress::Bar::new(ctx, "restoring");
        let shown = bar.is_shown() && !dry_run;
        let mut update = |d, t| bar.update(d, t);
        let opts = opfs::rewind::RewindOptions {
            dry_run,
            force: choice.force,
            pending,
            partial: choice.partial,
            markers: choice.markers,
        };
        project.rewind_opts_with_progress(n, opts, shown.then_some(&mut update as _))?
    };
    if via == Via::Direct {
        writeln!(
            err,
            "opfs: warning: {}; this rewind {} the project directory directly",
            unserved(st),
            if dry_run { "planned on" } else { "ran on" }
        )?;
    }
    if ctx.format.is_json() {
        // Through a `Value`, whose objects keep their keys sorted: the order
        // `--json` has always printed.
        let mut value = serde_json::to_value(&report).map_err(failure)?;
        value["mounted"] = serde_json::Value::Bool(via == Via::Daemon);
        if let Some((k, v)) = extra {
            value[k] = v;
        }
        writeln!(out, "{value}")?;
    } else {
        print_human(&report, out)?;
        if let Some(f) = &report.finished_first {
            writeln!(err, "opfs: {f}")?;
        }
        for c in &report.conflicts {
            writeln!(err, "opfs: not restored: {c}")?;
        }
    }
    if report.conflicts.is_empty() && report.marked.is_empty() {
        Ok(())
    } else {
        Err(CommandError::reported(ErrorKind::Conflict))
    }
}

/// What a command says when no daemon serves the project.
fn unserved(st: &StateDir) -> String {
    format!(
        "no opfs daemon serves {}: changes made to it while unmounted were not recorded \
         (no turn holds them; mount it to record changes)",
        st.project.display()
    )
}

fn parse_turn(text: &str) -> Result<u64, CommandError> {
    match text.parse::<i64>() {
        Ok(n) if n >= 1 => Ok(n as u64),
        Ok(n) => Err(CommandError::usage(format!(
            "turn {n} does not exist: turn numbers start at 1"
        ))),
        Err(_) => Err(CommandError::usage(format!(
            "{text:?} is not a turn number"
        ))),
    }
}

fn open_index(st: &StateDir) -> Result<Index, CommandError> {
    Index::open(&st.index_path(), false).map_err(failure)
}

fn turn_json(t: &Turn, paths_changed: &[Vec<u8>], restore: Option<&str>) -> serde_json::Value {
    serde_json::json!({
        "restore": restore,
        "turn": t.number,
        "kind": t.kind.as_str(),
        "label": t.label,
        "external_id": t.external_id,
        "started_at": rfc3339(t.started_at),
        "ended_at": t.ended_at.map(rfc3339),
        "rewound_to": t.rewound_to,
        "paths": paths_changed.iter().map(|p| paths::display(p)).collect::<Vec<_>>(),
    })
}

fn list_rewind_points(
    ctx: &Ctx,
    st: &StateDir,
    all: bool,
    out: &mut dyn Write,
) -> Result<(), CommandError> {
    let ix = open_index(st)?;
    let json = ctx.format.is_json();
    let in_worktree = opfs::worktree::of_state(st).is_some();
    // JSON lists the newest 10 turns; the text list the newest 10 rows it
    // shows, so turns it leaves out do not shorten it.
    let turns = ix
        .turns(if all || !json {
            None
        } else {
            Some(LIST_ROWS as u64)
        })
        .map_err(failure)?;
    let mut rows = Vec::new();
    let mut shown = 0;
    for t in turns {
        if !all && shown == LIST_ROWS {
            break;
        }
        let mut p = ix.paths_of_turn(t.number).map_err(failure)?;
        if in_worktree {
            // The paths the worktree shows: a whiteout is the name it
            // hides, an opaque marker its directory.
            let named: std::collections::BTreeSet<Vec<u8>> = p
                .iter()
                .filter_map(|u| opfs::worktree::history::view_path_of(u))
                .collect();
            p = named.into_iter().collect();
        }
        if json || t.ended_at.is_none() || !is_empty_row(&t, &p) {
            shown += 1;
        }
        rows.push((t, p));
    }
    if json {
        let v: Vec<_> = rows
            .iter()
            .map(|(t, p)| turn_json(t, p, outcome(&ix, t).as_deref()))
            .collect();
        writeln!(out, "{}", serde_json::Value::Array(v))?;
        return Ok(());
    }
    writeln!(
        out,
        "{:>5}  {:<6}  {:<20}  {:>5}  LABEL",
        "TURN", "KIND", "STARTED", "PATHS"
    )?;
    let mut hidden = 0;
    for (i, (t, p)) in rows.iter().enumerate() {
        let open = t.ended_at.is_none();
        if !open && is_empty_row(t, p) {
            hidden += 1;
            continue;
        }
        let label = match t.label.as_deref().filter(|l| !l.is_empty()) {
            Some(l) => cut(&printable(l), LABEL_WIDTH),
            // The turn before, if listed, may say where this one began.
            None => match rows.get(i + 1) {
                Some((prev, _)) if prev.number + 1 == t.number && prev.kind == TurnKind::Rewind => {
                    format!(
                        "(after the rewind to turn {})",
                        prev.rewound_to.unwrap_or(0)
                    )
                }
                _ => "-".to_string(),
            },
        };
        let how = match outcome(&ix, t).as_deref() {
            Some("rolled_back") => " (failed, rolled back)",
            Some("stopped") => " (STOPPED: half restored, see below)",
            Some("resumed") => " (interrupted, finished by a later turn)",
            Some("aborted") => " (interrupted, put back by a later turn)",
            Some("superseded") => " (interrupted, a later rewind ran over it)",
            Some("running") if !open => " (interrupted)",
            // Every rewind that reached the project has a restore row: this
            // one failed or was killed before, and was closed unrecorded.
            None if t.kind == TurnKind::Rewind && !open => " (failed before it changed anything)",
            _ => "",
        };
        writeln!(
            out,
            "{:>5}  {:<6}  {:<20}  {:>5}  {label}{how}{}",
            t.number,
            t.kind.as_str(),
            rfc3339(t.started_at),
            p.len(),
            if open { " (open)" } else { "" }
        )?;
    }
    if let Some(s) = pending_note(st) {
        writeln!(out, "warning: {s}")?;
    }
    if hidden > 0 {
        writeln!(
            out,
            "({hidden} closed turn{s} that changed nothing and had no label not shown: \
             rewinding to one is the same as rewinding to the turn after it; --json lists them)",
            s = if hidden == 1 { "" } else { "s" }
        )?;
    }
    Ok(())
}

/// How the restore of a rewind turn ended (`None` for other turns).
fn outcome(ix: &Index, t: &Turn) -> Option<String> {
    if t.kind != TurnKind::Rewind {
        return None;
    }
    ix.restore_outcome(t.number).ok().flatten()
}

/// What a rewind that stopped on a failure says of itself
/// ([`opfs::store::index::StoppedRestore`]), if one waits for `--resume`
/// or `--abort`. `status`, the rewind list, `turn` and the hook print it.
pub fn pending_note(st: &StateDir) -> Option<String> {
    let ix = Index::open_read_only(&st.index_path()).ok()?;
    ix.stopped_restore().ok().flatten().map(|s| s.to_string())
}

/// How many rows the rewind list shows without `--all`.
const LIST_ROWS: usize = 10;

/// How many characters of a label the rewind list shows; longer labels
/// are cut and end in `…` (`--json` keeps them whole).
pub const LABEL_WIDTH: usize = 60;

/// A row the rewind list leaves out: a closed agent turn with no label
/// that recorded nothing (a rewind opens one; so does an idle `turn`).
/// Rewinding to it restores exactly what rewinding to the next turn does.
fn is_empty_row(t: &Turn, paths_changed: &[Vec<u8>]) -> bool {
    t.kind == TurnKind::Agent
        && paths_changed.is_empty()
        && t.label.as_deref().is_none_or(str::is_empty)
}

/// `text` cut to `width` characters, the last one `…` when cut.
pub fn cut(text: &str, width: usize) -> String {
    if text.chars().count() <= width {
        return text.to_string();
    }
    let mut s: String = text.chars().take(width.saturating_sub(1)).collect();
    s.push('…');
    s
}

fn print_human(r: &RewindReport, out: &mut dyn Write) -> std::io::Result<()> {
    let n = r.conflicts.len();
    if r.stopped_by_conflicts {
        writeln!(
            out,
            "{}rewinding to the start of turn {} {} nothing: {n} path(s) conflict (listed \
             below); without them it would change {} paths:",
            if r.dry_run { "dry run: " } else { "" },
            r.rewound_to,
            if r.dry_run { "would change" } else { "changed" },
            r.plan.len()
        )?;
        for p in &r.plan {
            writeln!(out, "  {}", opfs::restore::describe(p))?;
        }
        writeln!(out, "{CHOICES}")?;
    } else if r.dry_run {
        writeln!(
            out,
            "dry run: rewinding to the start of turn {} would change {} paths:",
            r.rewound_to,
            r.plan.len()
        )?;
        for p in &r.plan {
            writeln!(out, "  {}", opfs::restore::describe(p))?;
        }
    } else {
        writeln!(
            out,
            "rewound to the start of turn {} (recorded as turn {}); {} paths restored; turn {} is open",
            r.rewound_to,
            r.turn.map(|t| t.to_string()).unwrap_or_else(|| "-".into()),
            r.restored.len(),
            r.open_turn
        )?;
    }
    print_marked(&r.marked, r.dry_run, r.rewound_to, out)?;
    Ok(())
}

/// What a command stopped by conflicts offers.
pub const CHOICES: &str = "nothing was written. Choose: --partial applies the rest and leaves \
    the conflicts as they are; --force takes the incoming side (what is there now is recorded \
    first, so it can be undone); --markers writes conflict markers into text files";

/// The files a rewind or restore wrote (or would write) with conflict
/// markers, on one line; nothing when there are none.
pub(crate) fn print_marked(
    marked: &[String],
    dry_run: bool,
    turn: u64,
    out: &mut dyn Write,
) -> std::io::Result<()> {
    if marked.is_empty() {
        return Ok(());
    }
    writeln!(
        out,
        "{} {} file(s) with conflict markers (<<<<<<< project now / >>>>>>> turn {turn}): {}",
        if dry_run { "would write" } else { "wrote" },
        marked.len(),
        marked.join(", ")
    )
}

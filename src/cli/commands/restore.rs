//! `opfs restore [--from N] PATH…`: PATHs (and everything beneath a
//! directory) brought back to their state when turn N began (default: the
//! open turn, so its changes to them are undone), nothing else; recorded
//! as a rewind turn of its own, so `opfs rewind` to that turn undoes it.
//! The conflict rules are a rewind's: a conflict restores nothing unless
//! `--partial`, `--force` or `--markers` says how (exit 3 either way).

use std::io::Write;

use opfs::control::client::Via;
use opfs::rewind::{RewindOptions, RewindReport};

use crate::cli::args::RestoreArgs;
use crate::cli::error::{failure, CommandError, ErrorKind};
use crate::cli::{pathspec, refs, Ctx};

pub fn run(
    ctx: &Ctx,
    a: &RestoreArgs,
    out: &mut dyn Write,
    err: &mut dyn Write,
) -> Result<(), CommandError> {
    let project = ctx.project()?;
    let st = project.state();
    let from = refs::turn(st, a.from.as_deref().unwrap_or("@"))?;
    let only = a
        .paths
        .iter()
        .map(|p| pathspec::pathspec(ctx, st, p))
        .collect::<Result<Vec<_>, _>>()?;
    let choice = a.conflicts.choice(a.force);
    let opts = RewindOptions {
        dry_run: a.dry_run,
        force: choice.force,
        pending: None,
        partial: choice.partial,
        markers: choice.markers,
    };
    let (report, via) = {
        let mut bar = crate::cli::progress::Bar::new(ctx, "restoring");
        let shown = bar.is_shown() && !a.dry_run;
        let mut update = |d, t| bar.update(d, t);
        project.restore_paths(from, &only, opts, shown.then_some(&mut update as _))?
    };
    if via == Via::Direct {
        writeln!(
            err,
            "opfs: warning: no opfs daemon serves {}: changes made to it while unmounted were \
             not recorded; this restore {} the project directory directly",
            st.project.display(),
            if a.dry_run { "planned on" } else { "ran on" }
        )?;
    }
    if ctx.format.is_json() {
        let mut value = serde_json::to_value(&report).map_err(failure)?;
        value["mounted"] = serde_json::Value::Bool(via == Via::Daemon);
        writeln!(out, "{value}")?;
    } else {
        print_human(&report, &a.paths, out)?;
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

fn print_human(r: &RewindReport, asked: &[String], out: &mut dyn Write) -> std::io::Result<()> {
    let what = asked.join(" ");
    let to = r.rewound_to;
    if r.stopped_by_conflicts {
        writeln!(
            out,
            "{}restoring {what} from the start of turn {to} {} nothing: {} path(s) conflict \
             (listed below); without them it would change {} paths:",
            if r.dry_run { "dry run: " } else { "" },
            if r.dry_run { "would change" } else { "changed" },
            r.conflicts.len(),
            r.plan.len()
        )?;
        for p in &r.plan {
            writeln!(out, "  {}", opfs::restore::describe(p))?;
        }
        writeln!(out, "{}", super::rewind::CHOICES)?;
    } else if r.dry_run {
        writeln!(
            out,
            "dry run: restoring {what} from the start of turn {to} would change {} paths:",
            r.plan.len()
        )?;
        for p in &r.plan {
            writeln!(out, "  {}", opfs::restore::describe(p))?;
        }
    } else if r.plan.is_empty() && r.conflicts.is_empty() {
        writeln!(
            out,
            "{what}: already as at the start of turn {to}; nothing to restore"
        )?;
    } else {
        writeln!(
            out,
            "restored {what} from the start of turn {to} (recorded as turn {}; `opfs rewind {}` \
             undoes it): {} paths; turn {} is open",
            r.turn.map(|t| t.to_string()).unwrap_or_else(|| "-".into()),
            r.turn.map(|t| t.to_string()).unwrap_or_else(|| "-".into()),
            r.restored.len(),
            r.open_turn
        )?;
    }
    super::rewind::print_marked(&r.marked, r.dry_run, to, out)?;
    Ok(())
}

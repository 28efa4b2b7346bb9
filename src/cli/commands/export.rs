//! `opfs export [--git-dir DIR] [--export-ignored | --no-export-ignored]`.
//! The project's history, then each worktree's as its branch
//! `refs/opfs/worktrees/NAME`; with `-C <worktree path>`, that worktree's
//! branch alone (`docs/export.md`). A progress spinner goes to stderr on a
//! terminal (`cli::progress`).

use std::io::{self, Write};

use opfs::control::client::commit_through_daemon;
use opfs::export::{self, ExportReport, Progress};

use crate::cli::args::ExportArgs;
use crate::cli::error::{failure, CommandError};
use crate::cli::progress::Bar;
use crate::cli::Ctx;

pub fn run(
    ctx: &Ctx,
    a: &ExportArgs,
    out: &mut dyn Write,
    _err: &mut dyn Write,
) -> Result<(), CommandError> {
    let project = ctx.project()?;
    project.commit_pending()?;
    if let Some((project_st, wt)) = opfs::worktree::of_state(project.state()) {
        let wst = project.state().clone();
        let r = opfs::worktree::life::export_branch(
            ctx.home(),
            &project_st,
            &wt.name,
            a.git_dir.as_deref(),
            Box::new(move || commit_through_daemon(&wst)),
            commit_through_daemon,
        )?;
        if ctx.format.is_json() {
            writeln!(out, "{}", serde_json::to_string(&r).map_err(failure)?)?;
        } else {
            print_branch(&r, out)?;
        }
        return Ok(());
    }
    let st = project.state();
    let json = ctx.format.is_json();
    // The baseline walk reads the whole project: a spinner with the count
    // on a terminal once it runs for a second; nothing otherwise.
    let mut bar = Bar::new(ctx, "baseline: entries of the project read");
    let mut progress = |p: Progress| match p {
        Progress::Baseline { entries } => bar.tick(entries),
        Progress::Turn { .. } => {}
    };
    let commit = || commit_through_daemon(st);
    let options = export::ExportOptions {
        export_ignored: match (a.export_ignored, a.no_export_ignored) {
            (true, _) => Some(true),
            (_, true) => Some(false),
            _ => None,
        },
    };
    let report = export::export_with(st, a.git_dir.as_deref(), &options, &mut progress, &commit)
        .map_err(failure)?;
    let mut branches = Vec::new();
    for (wt, _) in opfs::worktree::list(st) {
        let wst = wt.state(ctx.home());
        branches.push(opfs::worktree::life::export_branch(
            ctx.home(),
            st,
            &wt.name,
            a.git_dir.as_deref(),
            Box::new(move || commit_through_daemon(&wst)),
            commit_through_daemon,
        )?);
    }
    // The bar is cleared before the report is printed.
    drop(bar);
    if json {
        let mut v = serde_json::to_value(&report).map_err(failure)?;
        v["worktrees"] = serde_json::to_value(&branches).map_err(failure)?;
        writeln!(out, "{v}")?;
        return Ok(());
    }
    print_human(&report, out)?;
    for b in &branches {
        print_branch(b, out)?;
    }
    Ok(())
}

fn print_branch(r: &opfs::export::BranchReport, out: &mut dyn Write) -> io::Result<()> {
    match (r.turns.first(), r.turns.last()) {
        (Some(a), Some(b)) if a == b => {
            writeln!(
                out,
                "worktree {}: exported its turn {a} to {}",
                r.name, r.branch
            )
        }
        (Some(a), Some(b)) => writeln!(
            out,
            "worktree {}: exported its turns {a} to {b} to {}",
            r.name, r.branch
        ),
        _ => writeln!(out, "worktree {}: {} is up to date", r.name, r.branch),
    }
}

fn print_human(report: &ExportReport, out: &mut dyn Write) -> io::Result<()> {
    if report.baseline {
        writeln!(
            out,
            "baseline written ({} entries of the project read)",
            report.baseline_entries
        )?;
    }
    match (report.turns.first(), report.turns.last()) {
        (Some(a), Some(b)) if a == b => writeln!(out, "exported turn {a}")?,
        (Some(a), Some(b)) => writeln!(out, "exported turns {a} to {b}")?,
        _ if report.relabelled.is_empty() => writeln!(out, "nothing new to export")?,
        _ => {}
    }
    if !report.relabelled.is_empty() {
        let list: Vec<String> = report.relabelled.iter().map(u64::to_string).collect();
        writeln!(
            out,
            "relabelled turn{} {} (their commits were written again with the new message)",
            if list.len() == 1 { "" } else { "s" },
            list.join(", ")
        )?;
    }
    if !report.skipped.is_empty() {
        writeln!(
            out,
            "{} paths left out (git cannot hold them), e.g. {}",
            report.skipped.len(),
            report.skipped[0]
        )?;
    }
    if report.ignored > 0 {
        writeln!(
            out,
            "{} ignored entries left out (the project's ignore rules; --export-ignored keeps them)",
            report.ignored
        )?;
    }
    writeln!(
        out,
        "{} objects in {} ms -> {}",
        report.objects,
        report.elapsed_ms,
        report.git_dir.display()
    )
}

//! `opfs export [--git-dir DIR] [--export-ignored | --no-export-ignored]`.
//! A progress spinner goes to stderr on a terminal (`cli::progress`).

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
    // The bar is cleared before the report is printed.
    drop(bar);
    if json {
        writeln!(out, "{}", serde_json::to_string(&report).map_err(failure)?)?;
        return Ok(());
    }
    print_human(&report, out)?;
    Ok(())
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
        _ => writeln!(out, "nothing new to export")?,
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

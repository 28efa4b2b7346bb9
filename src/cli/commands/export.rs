//! `opfs export [--git-dir DIR] [--export-ignored | --no-export-ignored]`.
//! Progress goes to stderr.

use std::io::{self, Write};
use std::time::{Duration, Instant};

use opfs::control::client::commit_through_daemon;
use opfs::export::{self, ExportReport, Progress};

use crate::cli::args::ExportArgs;
use crate::cli::error::{failure, CommandError};
use crate::cli::Ctx;

pub fn run(
    ctx: &Ctx,
    a: &ExportArgs,
    out: &mut dyn Write,
    err: &mut dyn Write,
) -> Result<(), CommandError> {
    let project = ctx.project()?;
    project.commit_pending()?;
    let st = project.state();
    let json = ctx.format.is_json();
    let mut last_shown = Instant::now();
    let mut progress_written: io::Result<()> = Ok(());
    let mut progress = |p: Progress| {
        if json || progress_written.is_err() {
            return;
        }
        match p {
            Progress::Baseline { entries } => {
                if last_shown.elapsed() >= Duration::from_millis(500) {
                    progress_written =
                        writeln!(err, "opfs: baseline: {entries} entries of the project read");
                    last_shown = Instant::now();
                }
            }
            Progress::Turn { .. } => {}
        }
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
    progress_written?;
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

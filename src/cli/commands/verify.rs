//! `opfs verify`: exits 1 when the check found problems. A progress bar
//! on a terminal while the blobs are checked ([`Bar`]).

use std::io::Write;

use crate::cli::error::{failure, CommandError, ErrorKind};
use crate::cli::progress::Bar;
use crate::cli::Ctx;

pub fn run(ctx: &Ctx, out: &mut dyn Write) -> Result<(), CommandError> {
    let project = ctx.project()?;
    // A damaged capture log is one of the problems verify reports, so a
    // failure to commit it is not the command's failure.
    if let Err(e) = project.commit_pending() {
        log::debug!("verify: pending captures not committed: {e}");
    }
    let report = {
        let mut bar = Bar::new(ctx, "checking blobs");
        opfs::verify::verify_with_progress(project.state(), &mut |d, t| bar.update(d, t))
            .map_err(failure)?
    };
    if ctx.format.is_json() {
        let mut v = serde_json::to_value(&report).map_err(failure)?;
        v["ok"] = serde_json::Value::Bool(report.ok());
        writeln!(out, "{v}")?;
    } else {
        for p in &report.problems {
            writeln!(out, "{}: {}", p.area, p.message)?;
        }
        writeln!(
            out,
            "{}: {} turns, {} records, {} blobs checked ({} unreferenced); {} problem(s)",
            if report.ok() { "ok" } else { "FAILED" },
            report.turns,
            report.records,
            report.blobs,
            report.unreferenced_blobs,
            report.problems.len()
        )?;
    }
    if report.ok() {
        Ok(())
    } else {
        Err(CommandError::reported(ErrorKind::Failure))
    }
}

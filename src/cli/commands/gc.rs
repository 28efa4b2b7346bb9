//! `opfs gc`: retention, only while nothing is mounted.

use std::io::Write;

use opfs::control::client::Project;

use crate::cli::args::GcArgs;
use crate::cli::error::{failure, CommandError};
use crate::cli::Ctx;

pub fn run(ctx: &Ctx, a: &GcArgs, out: &mut dyn Write) -> Result<(), CommandError> {
    let st = ctx.project_state()?;
    let retention = opfs::gc::Retention {
        keep: a.keep,
        max_bytes: a.max_bytes,
    };
    let r = Project::new(st).gc(retention, a.dry_run).map_err(failure)?;
    if ctx.format.is_json() {
        let v = serde_json::to_value(&r).map_err(failure)?;
        writeln!(out, "{v}")?;
        return Ok(());
    }
    let dropped = match r.dropped_turns {
        Some((a, b)) => format!("turns {a} to {b}"),
        None => "no turns".to_string(),
    };
    writeln!(
        out,
        "{}{dropped} dropped ({} records), {} blobs removed ({} bytes)",
        if r.dry_run { "dry run: " } else { "" },
        r.records_deleted,
        r.blobs_removed,
        r.bytes_freed
    )?;
    if let Some(n) = &r.note {
        writeln!(out, "{n}")?;
    }
    Ok(())
}

//! `opfs gc`: retention, only while nothing is mounted.

use std::io::Write;

use opfs::state::lock::StateLock;

use crate::cli::args::GcArgs;
use crate::cli::error::{failure, CommandError};
use crate::cli::Ctx;

pub fn run(ctx: &Ctx, a: &GcArgs, out: &mut dyn Write) -> Result<(), CommandError> {
    let st = ctx.project_state()?;
    let _lock = StateLock::try_acquire(&st)
        .map_err(|e| {
            CommandError::failure(format!("cannot lock {}: {e}", st.lock_path().display()))
        })?
        .ok_or_else(|| {
            CommandError::failure(format!(
                "{} is mounted: unmount it before `opfs gc` (a running daemon may be storing a blob its index does not name yet)",
                st.project.display()
            ))
        })?;
    let retention = opfs::gc::Retention {
        keep: a.keep,
        max_bytes: a.max_bytes,
    };
    let r = opfs::gc::gc(&st, retention, a.dry_run).map_err(failure)?;
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

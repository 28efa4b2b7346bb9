//! `opfs status`.

use std::io::Write;

use opfs::control::Status;

use crate::cli::error::{failure, CommandError};
use crate::cli::Ctx;

pub fn run(ctx: &Ctx, out: &mut dyn Write) -> Result<(), CommandError> {
    let status = ctx.project()?.status()?;
    if ctx.format.is_json() {
        writeln!(out, "{}", serde_json::to_string(&status).map_err(failure)?)?;
        return Ok(());
    }
    print_human(&status, out)?;
    Ok(())
}

fn print_human(s: &Status, out: &mut dyn Write) -> std::io::Result<()> {
    writeln!(out, "project:    {}", s.project.display())?;
    match &s.mountpoint {
        Some(m) => writeln!(
            out,
            "mounted:    {} (daemon pid {})",
            m.display(),
            s.pid.unwrap_or(0)
        )?,
        None => writeln!(out, "mounted:    no")?,
    }
    writeln!(out, "open turn:  {}", s.turn)?;
    writeln!(
        out,
        "store:      {} bytes in blobs, {} pre-image records ({})",
        s.store_bytes,
        s.records,
        s.state_dir.display()
    )?;
    if s.project_deleted {
        writeln!(
            out,
            "warning:    the project directory was deleted while mounted; changes through the mount fail and rewinds are refused (unmount it)"
        )?;
    }
    if let Some(r) = &s.recovered {
        writeln!(out, "recovered:  {r}")?;
    }
    Ok(())
}

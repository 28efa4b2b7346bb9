//! `opfs log`: the turns, newest first, with what each changed.

use opfs::control::client::commit_through_daemon;
use std::io::Write;

use opfs::history::{self, Opened};

use crate::cli::error::CommandError;
use crate::cli::output::{printable, rfc3339};
use crate::cli::Ctx;

pub fn run(ctx: &Ctx, out: &mut dyn Write) -> Result<(), CommandError> {
    let project = ctx.project()?;
    project.commit_pending()?;
    let st = project.state().clone();
    let opened = Opened::open(
        project.state(),
        Box::new(move || commit_through_daemon(&st)),
    )?;
    let entries = history::log(&opened.sources())?;
    if ctx.format.is_json() {
        writeln!(out, "{}", history::log_json(&entries))?;
        return Ok(());
    }
    for e in &entries {
        let kind = match e.rewound_to {
            Some(r) => format!("{} to {r}", e.kind),
            None => e.kind.to_string(),
        };
        writeln!(
            out,
            "turn {} ({kind}){}",
            e.turn,
            if e.ended_at.is_none() { " (open)" } else { "" }
        )?;
        if let Some(l) = &e.label {
            writeln!(out, "    label:   {}", printable(l))?;
        }
        if let Some(id) = &e.external_id {
            writeln!(out, "    id:      {}", printable(id))?;
        }
        writeln!(
            out,
            "    time:    {} .. {}",
            rfc3339(e.started_at),
            e.ended_at.map(rfc3339).unwrap_or_else(|| "now".into())
        )?;
        writeln!(
            out,
            "    changes: {} added, {} modified, {} deleted ({} paths recorded, {} bytes stored)",
            e.added, e.modified, e.deleted, e.paths, e.bytes_stored
        )?;
    }
    Ok(())
}

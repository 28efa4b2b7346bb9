//! `opfs undo [--dry-run] [--force] [--partial] [--markers]`: one rewind chosen from the newest
//! turns ([`opfs::history::undo_target`], `docs/cli.md`): the last rewind
//! is undone (redo), else the open turn's changes, else the last turn's.
//! It says on stderr what it undoes, then prints the rewind's report.

use std::io::Write;

use opfs::history::{self, Undo};
use opfs::store::Index;

use crate::cli::args::UndoArgs;
use crate::cli::error::{failure, CommandError};
use crate::cli::Ctx;

use super::rewind;

pub fn run(
    ctx: &Ctx,
    a: &UndoArgs,
    out: &mut dyn Write,
    err: &mut dyn Write,
) -> Result<(), CommandError> {
    let project = ctx.project()?;
    // Whether the open turn changed anything is read from the index.
    project.commit_pending()?;
    let undo = {
        let ix = Index::open_read_only(&project.state().index_path()).map_err(failure)?;
        history::undo_target(&ix)?
    };
    let Some(target) = undo.target() else {
        if ctx.format.is_json() {
            writeln!(
                out,
                "{}",
                serde_json::json!({ "undo": undo_json(&undo), "rewound_to": null })
            )?;
        } else {
            writeln!(out, "{}", undo.describe())?;
        }
        return Ok(());
    };
    if !ctx.format.is_json() {
        writeln!(
            err,
            "opfs: {}{}",
            if a.dry_run { "would " } else { "" },
            undo.describe()
        )?;
    }
    rewind::execute(
        ctx,
        &project,
        target,
        a.dry_run,
        a.choice(),
        Some(("undo", undo_json(&undo))),
        out,
        err,
    )
}

/// `{"action", "message"}`: what the undo chose.
fn undo_json(u: &Undo) -> serde_json::Value {
    serde_json::json!({ "action": u.as_str(), "message": u.describe() })
}

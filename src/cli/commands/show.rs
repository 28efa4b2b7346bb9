//! `opfs show N:PATH`: the raw bytes; with `--json` one object
//! (`docs/export.md`).

use opfs::control::client::commit_through_daemon;
use std::io::Write;

use opfs::history::{self, Opened, Shown};

use crate::cli::args::ShowArgs;
use crate::cli::error::CommandError;
use crate::cli::Ctx;

pub fn run(ctx: &Ctx, a: &ShowArgs, out: &mut dyn Write) -> Result<(), CommandError> {
    let project = ctx.project()?;
    project.commit_pending()?;
    let spec = &a.spec;
    let (n, path) = spec
        .split_once(':')
        .ok_or_else(|| CommandError::usage(format!("{spec:?} is not N:PATH")))?;
    let turn = match n.parse::<u64>() {
        Ok(t) if t >= 1 => t,
        _ => {
            return Err(CommandError::usage(format!(
                "{n:?} is not a turn number (turns start at 1)"
            )))
        }
    };
    let path = history::parse_path(path)?;
    let st = project.state().clone();
    let opened = Opened::open(
        project.state(),
        Box::new(move || commit_through_daemon(&st)),
    )?;
    let shown = history::show_entry(&opened.sources(), turn, &path)?;
    if !ctx.format.is_json() {
        let bytes = match &shown {
            Shown::File { bytes, .. } => bytes,
            Shown::Symlink { target } => target,
        };
        out.write_all(bytes)?;
        return Ok(());
    }
    writeln!(out, "{}", history::show_json(turn, &path, &shown))?;
    Ok(())
}

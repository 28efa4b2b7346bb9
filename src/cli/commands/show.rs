//! `opfs show N:PATH`: the raw bytes; with `--json` one object
//! (`docs/export.md`). With `--outside[=K]`, the edit of PATH made behind
//! the mount that was kept in turn N before the mount overwrote it. N may be a turn ref (`@`, `@-2`); `N:./PATH` is
//! relative to the current directory inside the mount, as in git. In a
//! worktree (`-C <worktree path>`), what the worktree showed at the start
//! of its own turn N (`opfs::worktree::history`).

use opfs::control::client::commit_through_daemon;
use std::io::Write;

use opfs::history::{self, Opened, Shown};
use opfs::worktree::history::WorktreeHistory;

use crate::cli::args::ShowArgs;
use crate::cli::error::CommandError;
use crate::cli::{pathspec, refs, Ctx};

pub fn run(
    ctx: &Ctx,
    a: &ShowArgs,
    out: &mut dyn Write,
    err: &mut dyn Write,
) -> Result<(), CommandError> {
    let project = ctx.project()?;
    project.commit_pending()?;
    let spec = &a.spec;
    let (n, path) = spec
        .split_once(':')
        .ok_or_else(|| CommandError::usage(format!("{spec:?} is not N:PATH")))?;
    let turn = match refs::relative_turn(project.state(), n)? {
        Some(t) => t,
        None => match n.parse::<u64>() {
            Ok(t) if t >= 1 => t,
            _ => {
                return Err(CommandError::usage(format!(
                    "{n:?} is not a turn number (turns start at 1; @, @- and @-K work too)"
                )))
            }
        },
    };
    // As git's `REV:./PATH`: relative to where the user stands; a plain
    // PATH is from the project root.
    let path = if path == "." || path == ".." || path.starts_with("./") || path.starts_with("../") {
        pathspec::pathspec(ctx, project.state(), path)?
    } else {
        history::parse_path(path)?
    };
    let st = project.state().clone();
    let opened = Opened::open(
        project.state(),
        Box::new(move || commit_through_daemon(&st)),
    )?;
    if let Some(k) = a.outside {
        let (kept, shown) =
            history::show_outside(&opened.sources(), turn, &path, (k > 0).then_some(k))?;
        if ctx.format.is_json() {
            let mut v = history::show_json(turn, &path, &shown);
            v["outside"] = history::outside_json(&kept);
            writeln!(out, "{v}")?;
        } else {
            out.write_all(match &shown {
                Shown::File { bytes, .. } => bytes,
                Shown::Symlink { target } => target,
            })?;
            link_note(&shown, turn, &path, err)?;
        }
        return Ok(());
    }
    let shown = match opfs::worktree::life::history_base(project.state(), commit_through_daemon)
        .transpose()?
    {
        Some((_, _, base)) => {
            WorktreeHistory::new(opened.sources(), &base).show_entry(turn, &path)?
        }
        None => history::show_entry(&opened.sources(), turn, &path)?,
    };
    if !ctx.format.is_json() {
        let bytes = match &shown {
            Shown::File { bytes, .. } => bytes,
            Shown::Symlink { target } => target,
        };
        out.write_all(bytes)?;
        link_note(&shown, turn, &path, err)?;
        return Ok(());
    }
    writeln!(out, "{}", history::show_json(turn, &path, &shown))?;
    Ok(())
}

/// For a symlink, says on stderr that what stdout got is a link's target
/// (stdout keeps the target's bytes alone, as `git show REV:LINK` prints
/// them, so a pipe gets exactly those).
fn link_note(shown: &Shown, turn: u64, path: &[u8], err: &mut dyn Write) -> std::io::Result<()> {
    if let Shown::Symlink { target } = shown {
        writeln!(
            err,
            "opfs: note: {} was a symbolic link when turn {turn} began; the output is its \
             target, {}",
            opfs::paths::display(path),
            opfs::paths::display(target)
        )?;
    }
    Ok(())
}

//! `opfs diff [N[..M]] [PATH...]`: a patch git can apply, `--stat` or
//! `--name-status`. Without a turn, the open turn (`@`); turns may be refs
//! (`@-2..@`); PATHs are relative to the current directory inside the
//! project or its mountpoint, as git's pathspecs are. In a worktree (`-C
//! <worktree path>`), its own turns as the worktree shows its paths: a
//! deleted lower file is a deletion, an edit of one a modification against
//! its lower bytes (`opfs::worktree::history`).

use opfs::control::client::commit_through_daemon;
use std::io::Write;

use opfs::diff as patch;
use opfs::history::{self, Opened};
use opfs::worktree::history::WorktreeHistory;

use crate::cli::args::DiffArgs;
use crate::cli::error::{failure, CommandError};
use crate::cli::{pager, pathspec, refs, Ctx};

/// What `opfs diff` prints.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Mode {
    Patch,
    Stat,
    NameStatus,
}

/// Whether a first argument names turns (`3`, `2..5`, `@-`, `@-2..@`)
/// rather than a path: only digits, `@`, `-` and `.`, and not `.` alone.
fn looks_like_range(text: &str) -> bool {
    !text.is_empty()
        && text != "."
        && text != ".."
        && text.chars().any(|c| c.is_ascii_digit() || c == '@')
        && text
            .chars()
            .all(|c| c.is_ascii_digit() || matches!(c, '@' | '-' | '.'))
}

pub fn run(ctx: &Ctx, a: &DiffArgs, out: &mut dyn Write) -> Result<(), CommandError> {
    let project = ctx.project()?;
    project.commit_pending()?;
    let mode = if a.stat {
        Mode::Stat
    } else if a.name_status {
        Mode::NameStatus
    } else {
        Mode::Patch
    };
    // `opfs diff PATH` (no turn): the open turn, limited to PATH, as
    // `git diff PATH`. A first argument that is a turn or a range is one.
    let (range, paths): (&str, Vec<&String>) = match &a.range {
        None => ("@", a.paths.iter().collect()),
        Some(r) if looks_like_range(r) => (r, a.paths.iter().collect()),
        Some(p) => ("@", std::iter::once(p).chain(&a.paths).collect()),
    };
    let (from, to) = refs::range(project.state(), range)?;
    let filter = paths
        .iter()
        .map(|p| pathspec::pathspec(ctx, project.state(), p))
        .collect::<Result<Vec<_>, _>>()?;
    let st = project.state().clone();
    let opened = Opened::open(
        project.state(),
        Box::new(move || commit_through_daemon(&st)),
    )?;
    let src = opened.sources();
    let (changes, dirs) =
        match opfs::worktree::life::history_base(project.state(), commit_through_daemon)
            .transpose()?
        {
            Some((_, _, base)) => WorktreeHistory::new(src, &base).changes(from, to, &filter)?,
            None => (
                history::changes(&src, from, to, &filter)?,
                history::dir_changes(&src, from, to, &filter)?,
            ),
        };
    // Edits made behind the mount in these turns that the mount then
    // overwrote: listed before the patch (`git apply` skips text before
    // the first `diff --git`), each with the command that prints it.
    let kept: Vec<_> =
        match opfs::worktree::life::history_base(project.state(), commit_through_daemon)
            .transpose()?
        {
            Some(_) => Vec::new(),
            None => history::outside_edits(&src, Some(from))?
                .into_iter()
                .filter(|k| k.turn <= to)
                .filter(|k| {
                    filter.is_empty() || filter.iter().any(|f| pathspec::is_within(&k.path, f))
                })
                .collect(),
        };
    let (mut changes, mut dirs) = (changes, dirs);
    if !a.include_ignored {
        let upper;
        let base = opfs::worktree::life::history_base(project.state(), commit_through_daemon)
            .transpose()?;
        let mut rules = match &base {
            Some((wt, _, base)) => {
                upper = opfs::tree::Dir::open(&wt.upper()).map_err(failure)?;
                opfs::worktree::changes::view_ignore_rules(&upper, base, &project.state().project)
            }
            None => {
                upper = opfs::tree::Dir::open(&project.state().project).map_err(failure)?;
                opfs::export::ignore::IgnoreRules::load(&upper)
            }
        };
        changes
            .retain(|c| !rules.is_ignored(&c.path, c.old.state.is_dir() || c.new.state.is_dir()));
        dirs.retain(|d| !rules.is_ignored(&d.path, true));
    }
    let diffs = patch::build(&src, &changes)?;
    let dirs = patch::empty_dirs(&dirs, &diffs);
    let write = |w: &mut dyn Write| match mode {
        Mode::Stat => patch::write_stat(&diffs, w),
        Mode::NameStatus => {
            patch::write_name_status(&diffs, w).and_then(|()| patch::write_dirs(&dirs, true, w))
        }
        Mode::Patch => {
            patch::write_patch(&diffs, w).and_then(|()| patch::write_dirs(&dirs, false, w))
        }
    };
    if ctx.format.is_json() {
        let mut buf = Vec::new();
        write(&mut buf).map_err(failure)?;
        let v = serde_json::json!({
            "from": from,
            "to": to,
            "output": String::from_utf8_lossy(&buf),
            "outside_edits": kept.iter().map(history::outside_json).collect::<Vec<_>>(),
        });
        writeln!(out, "{v}")?;
        return Ok(());
    }
    pager::page(ctx, out, |w, paint| {
        let mut buf = Vec::new();
        if mode == Mode::Patch {
            for k in &kept {
                writeln!(buf, "# user edit: {}", history::outside_line(k))?;
            }
        }
        write(&mut buf)?;
        paint.write_diff(&buf, w)
    })
}

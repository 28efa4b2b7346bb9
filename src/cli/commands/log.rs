//! `opfs log [-n N] [--oneline] [PATH...]`: the turns, newest first, with
//! what each changed; with PATHs only the turns that recorded one of them
//! (or a path beneath), PATHs relative to the current directory as git's
//! are. Coloured and paged on a terminal ([`crate::cli::pager`]). In a
//! worktree (`-C <worktree path>`), the turns of the worktree's own
//! history, counted as the worktree shows its paths
//! (`opfs::worktree::history`).

use opfs::control::client::commit_through_daemon;
use std::io::Write;

use opfs::history::{self, LogEntry, Opened};
use opfs::worktree::history::{view_path_of, WorktreeHistory};

use crate::cli::args::LogArgs;
use crate::cli::error::{failure, CommandError};
use crate::cli::output::{printable, rfc3339};
use crate::cli::pager::{self, Paint};
use crate::cli::pathspec::{self, is_within};
use crate::cli::Ctx;

pub fn run(ctx: &Ctx, a: &LogArgs, out: &mut dyn Write) -> Result<(), CommandError> {
    let project = ctx.project()?;
    project.commit_pending()?;
    let filter = a
        .paths
        .iter()
        .map(|p| pathspec::pathspec(ctx, project.state(), p))
        .collect::<Result<Vec<_>, _>>()?;
    let st = project.state().clone();
    let opened = Opened::open(
        project.state(),
        Box::new(move || commit_through_daemon(&st)),
    )?;
    let src = opened.sources();
    let worktree =
        opfs::worktree::life::history_base(project.state(), commit_through_daemon).transpose()?;
    // The counts follow the ignore rules of what -C names, as the export
    // does, unless --include-ignored.
    let dir;
    let mut rules = match (&worktree, a.include_ignored) {
        (_, true) => None,
        (Some((wt, _, base)), false) => {
            dir = opfs::tree::Dir::open(&wt.upper()).map_err(failure)?;
            Some(opfs::worktree::changes::view_ignore_rules(
                &dir,
                base,
                &project.state().project,
            ))
        }
        (None, false) => {
            dir = opfs::tree::Dir::open(&project.state().project).map_err(failure)?;
            Some(opfs::export::ignore::IgnoreRules::load(&dir))
        }
    };
    let mut counted = |p: &[u8]| rules.as_mut().is_none_or(|r| !r.is_ignored(p, false));
    let mut entries = match &worktree {
        Some((_, _, base)) => WorktreeHistory::new(src, base).log_counting(&mut counted)?,
        None => history::log_counting(&src, &mut counted)?,
    };
    if !filter.is_empty() {
        let mut kept = Vec::new();
        for e in entries {
            let mut recorded = src.index.paths_of_turn(e.turn).map_err(failure)?;
            if worktree.is_some() {
                // A whiteout names the path it hides, an opaque marker
                // its directory.
                recorded = recorded.iter().filter_map(|p| view_path_of(p)).collect();
            }
            if recorded
                .iter()
                .any(|p| filter.iter().any(|f| is_within(p, f)))
            {
                kept.push(e);
            }
        }
        entries = kept;
    }
    if let Some(n) = a.max_count {
        entries.truncate(n);
    }
    // `.git` is not recorded: changes to what git runs or trusts are
    // noted per turn (`opfs::capture::git_note`).
    let git_changes: std::collections::BTreeMap<u64, Vec<String>> =
        opfs::capture::git_note::git_changes(project.state())
            .into_iter()
            .collect();
    // Edits made behind the mount that the mount then overwrote, kept
    // (`opfs show N:PATH --outside`). A worktree keeps none.
    let kept = match &worktree {
        Some(_) => Vec::new(),
        None => history::outside_edits(&src, None)?,
    };
    if ctx.format.is_json() {
        let v = history::log_json(&entries, &kept, &git_changes);
        writeln!(out, "{v}")?;
        return Ok(());
    }
    pager::page(ctx, out, |w, paint| {
        if a.oneline {
            oneline(&entries, w, paint)
        } else {
            long(&entries, &git_changes, &kept, w, paint)
        }
    })
}

/// `turn N (kind)` and, for a rewind, its target.
fn kind_of(e: &LogEntry) -> String {
    match e.rewound_to {
        Some(r) => format!("{} to {r}", e.kind),
        None => e.kind.to_string(),
    }
}

/// `--oneline`: `N kind +A ~M -D label`, the label cut to fit a line.
fn oneline(entries: &[LogEntry], out: &mut dyn Write, paint: Paint) -> std::io::Result<()> {
    for e in entries {
        let label = e.label.as_deref().map(printable).unwrap_or_default();
        writeln!(
            out,
            "{} {:<6} +{} ~{} -{}{}{}",
            paint.turn(&format!("{:>4}", e.turn)),
            e.kind,
            e.added,
            e.modified,
            e.deleted,
            if label.is_empty() {
                String::new()
            } else {
                format!(
                    " {}",
                    super::rewind::cut(&label, super::rewind::LABEL_WIDTH)
                )
            },
            if e.ended_at.is_none() { " (open)" } else { "" }
        )?;
    }
    Ok(())
}

fn long(
    entries: &[LogEntry],
    git_changes: &std::collections::BTreeMap<u64, Vec<String>>,
    kept: &[opfs::store::index::OutsideEdit],
    out: &mut dyn Write,
    paint: Paint,
) -> std::io::Result<()> {
    for e in entries {
        writeln!(
            out,
            "{} ({}){}",
            paint.turn(&format!("turn {}", e.turn)),
            kind_of(e),
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
            "    changes: {} added, {} modified, {} deleted{} ({} paths recorded, {} bytes stored)",
            e.added,
            e.modified,
            e.deleted,
            if e.ignored > 0 {
                format!(", {} ignored", e.ignored)
            } else {
                String::new()
            },
            e.paths,
            e.bytes_stored
        )?;
        if let Some(paths) = git_changes.get(&e.turn) {
            writeln!(
                out,
                "    warning: {}",
                opfs::capture::git_note::git_change_warning(e.turn, paths)
            )?;
        }
        for k in kept.iter().filter(|k| k.turn == e.turn) {
            writeln!(out, "    user edit: {}", history::outside_line(k))?;
        }
    }
    Ok(())
}

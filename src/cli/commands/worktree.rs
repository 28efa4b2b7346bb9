//! `opfs worktree create|list|path|mount|diff|merge|discard`
//! (`docs/worktrees.md`). `-C` names the project or its mountpoint.

use std::io::Write;

use opfs::control::client::commit_through_daemon;
use opfs::daemon::worktree::{Asked, Served};
use opfs::daemon::DaemonOptions;
use opfs::diff as patch;
use opfs::store::StateDir;
use opfs::worktree::life::{self as wt_cmd, WorktreeCmdError};
use opfs::worktree::merge::MergeReport;
use opfs::worktree::Worktree;

use crate::cli::args::WorktreeCmd;
use crate::cli::error::{failure, CommandError, ErrorKind};
use crate::cli::Ctx;

fn err(e: WorktreeCmdError) -> CommandError {
    if e.is_usage() {
        CommandError::usage(e.to_string())
    } else {
        CommandError::failure(e.to_string())
    }
}

fn meta_of(st: &StateDir, name: &str) -> Result<(Worktree, opfs::worktree::Meta), CommandError> {
    let wt = Worktree::of(st, name);
    let meta = wt.meta().map_err(|e| err(e.into()))?;
    Ok((wt, meta))
}

pub fn run(
    ctx: &Ctx,
    cmd: &WorktreeCmd,
    out: &mut dyn Write,
    errs: &mut dyn Write,
) -> Result<i32, CommandError> {
    let project = ctx.project()?;
    let st = project.state().clone();
    let home = ctx.home();
    let json = ctx.format.is_json();
    let opts = DaemonOptions {
        range_min: ctx.range_min()?,
        tuning: ctx.env.tuning.clone(),
        ..DaemonOptions::default()
    };
    let served = Served {
        home,
        opts: &opts,
        verbose: ctx.verbose,
    };
    match cmd {
        WorktreeCmd::Create { name, from, at } => {
            let from = match from {
                Some(f) => Some(crate::cli::refs::turn(&st, f)?),
                None => None,
            };
            let meta = wt_cmd::create(
                home,
                &project,
                name,
                from,
                at.as_deref(),
                opfs::worktree::Creator::User,
                &served,
            )
            .map_err(err)?;
            if json {
                let v = serde_json::json!({
                    "name": meta.name,
                    "path": meta.mountpoint,
                    "base_turn": meta.base_turn,
                });
                writeln!(out, "{v}")?;
            } else {
                writeln!(out, "{}", meta.mountpoint.display())?;
            }
        }
        WorktreeCmd::List => {
            let rows = wt_cmd::list(home, &st, &Asked).map_err(err)?;
            if json {
                writeln!(out, "{}", serde_json::to_value(&rows).map_err(failure)?)?;
            } else if rows.is_empty() {
                writeln!(
                    out,
                    "no worktrees (make one with `opfs worktree create NAME`)"
                )?;
            } else {
                for r in &rows {
                    let drift = if r.drifted > 0 {
                        format!(", {} with an unknown base", r.drifted)
                    } else {
                        String::new()
                    };
                    let by = match r.created_by {
                        opfs::worktree::Creator::Agent => "  (made by the agent)",
                        opfs::worktree::Creator::User => "",
                    };
                    writeln!(
                        out,
                        "{}  from turn {}  {}  {}  {} changed{}{}",
                        r.name,
                        r.base_turn,
                        if r.mounted { "mounted" } else { "not mounted" },
                        r.path.display(),
                        r.changed,
                        drift,
                        by
                    )?;
                }
            }
        }
        WorktreeCmd::Path { name } => {
            let (_, meta) = meta_of(&st, name)?;
            if json {
                let v = serde_json::json!({ "name": name, "path": meta.mountpoint });
                writeln!(out, "{v}")?;
            } else {
                writeln!(out, "{}", meta.mountpoint.display())?;
            }
        }
        WorktreeCmd::Mount { name } => {
            let (_, meta) = meta_of(&st, name)?;
            let pid = wt_cmd::mount(&st, name, &served).map_err(err)?;
            if json {
                let v = serde_json::json!({ "name": name, "path": meta.mountpoint, "pid": pid });
                writeln!(out, "{v}")?;
            } else {
                writeln!(out, "{}", meta.mountpoint.display())?;
            }
        }
        WorktreeCmd::Diff {
            name,
            stat,
            name_status,
            include_ignored,
        } => {
            let (meta, diffs) =
                wt_cmd::diffs(&st, name, *include_ignored, commit_through_daemon).map_err(err)?;
            let write = |w: &mut dyn Write| {
                if *stat {
                    patch::write_stat(&diffs, w)
                } else if *name_status {
                    patch::write_name_status(&diffs, w)
                } else {
                    patch::write_patch(&diffs, w)
                }
            };
            if json {
                let mut buf = Vec::new();
                write(&mut buf).map_err(failure)?;
                let v = serde_json::json!({
                    "name": name,
                    "base_turn": meta.base_turn,
                    "output": String::from_utf8_lossy(&buf),
                });
                writeln!(out, "{v}")?;
            } else {
                write(out)?;
            }
        }
        WorktreeCmd::Merge {
            name,
            dry_run,
            force,
            conflicts,
            include_ignored,
        } => {
            let opts = opfs::worktree::merge::MergeOptions {
                dry_run: *dry_run,
                force: *force,
                partial: conflicts.partial,
                markers: conflicts.markers,
                include_ignored: *include_ignored,
            };
            let report = project.merge(name, opts)?;
            if json {
                writeln!(out, "{}", serde_json::to_value(&report).map_err(failure)?)?;
            } else {
                print_merge(&report, out)?;
                for c in &report.conflicts {
                    writeln!(errs, "opfs: not merged: {c}")?;
                }
            }
            if !report.conflicts.is_empty() || !report.marked.is_empty() {
                return Err(CommandError::reported(ErrorKind::Conflict));
            }
        }
        WorktreeCmd::Discard { name } => {
            wt_cmd::discard(home, &st, name, &served).map_err(err)?;
            if json {
                writeln!(out, "{}", serde_json::json!({ "discarded": name }))?;
            }
        }
        // Dispatched before the project is resolved (`agent_worktree.rs`).
        WorktreeCmd::Hook => {
            return Err(CommandError::failure(
                "opfs worktree hook is dispatched before the project is resolved".to_string(),
            ))
        }
    }
    Ok(0)
}

fn print_merge(r: &MergeReport, out: &mut dyn Write) -> std::io::Result<()> {
    let verb = if r.dry_run { "would merge" } else { "merged" };
    if r.stopped_by_conflicts {
        writeln!(
            out,
            "{}merging worktree {} (from turn {}) {} nothing: {} path(s) conflict (listed \
             below); without them it would change {} paths:",
            if r.dry_run { "dry run: " } else { "" },
            r.worktree,
            r.base_turn,
            if r.dry_run { "would change" } else { "changed" },
            r.conflicts.len(),
            r.plan.len()
        )?;
        for p in &r.plan {
            writeln!(out, "  {}", opfs::restore::describe(p))?;
        }
        writeln!(out, "{}", crate::cli::commands::rewind::CHOICES)?;
        return print_merge_notes(r, out);
    }
    let count = |n: usize, what: &str| format!("{n} {what}{}", if n == 1 { "" } else { "s" });
    let counts = format!(
        "{}, {}",
        count(r.merged.len(), "path"),
        count(r.conflicts.len(), "conflict")
    );
    let nothing = r.plan.is_empty() && r.three_way.is_empty() && r.conflicts.is_empty();
    match r.turn {
        _ if nothing && r.dry_run => writeln!(
            out,
            "worktree {} (from turn {}): already identical: the project holds all it changed \
             ({}); nothing to merge",
            r.worktree,
            r.base_turn,
            count(r.merged.len(), "path")
        )?,
        Some(t) => writeln!(
            out,
            "{verb} worktree {} (from turn {}) as turn {t}: {counts}",
            r.worktree, r.base_turn,
        )?,
        None => writeln!(
            out,
            "{verb} worktree {} (from turn {}): {counts}",
            r.worktree, r.base_turn,
        )?,
    }
    for p in &r.plan {
        writeln!(out, "  {}", opfs::restore::describe(p))?;
    }
    for p in &r.three_way {
        writeln!(out, "  {p}: merged three-way (both sides changed it)")?;
    }
    for p in &r.identical {
        writeln!(
            out,
            "  {p}: already identical (the project holds it as the worktree has it)"
        )?;
    }
    print_merge_notes(r, out)
}

/// The marked files and the ignored paths left out, after the plan.
fn print_merge_notes(r: &MergeReport, out: &mut dyn Write) -> std::io::Result<()> {
    for p in &r.marked {
        writeln!(
            out,
            "  {p}: conflict markers (<<<<<<< project / >>>>>>> worktree {})",
            r.worktree
        )?;
    }
    if r.ignored > 0 {
        writeln!(
            out,
            "  ({} changed path(s) the project's ignore rules ignore left out; \
             --include-ignored merges them)",
            r.ignored
        )?;
    }
    Ok(())
}

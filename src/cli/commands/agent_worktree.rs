//! `opfs worktree hook`: Claude Code's `WorktreeCreate` and
//! `WorktreeRemove` hooks (`claude --worktree NAME`, its `EnterWorktree`
//! and `ExitWorktree` tools) backed by opfs worktrees
//! (`docs/integrations.md`, "Claude Code's worktrees on opfs"); written
//! by `opfs integrate claude-code --worktrees`.
//!
//! Reads the hook event (JSON) on stdin:
//!
//! - `WorktreeCreate` (`cwd`, `name`): makes the opfs worktree `name`
//!   (characters other than letters, digits, `-`, `_`, `.` become `-`) of
//!   the project `cwd` lies in, from now (the open turn), copy-on-write,
//!   mounts it, and prints its path, which is all Claude Code reads: the
//!   session then works there. A worktree of that name that exists
//!   already is mounted if it is not and its path printed (a session
//!   resumed). Any failure exits 1 with the reason on stderr, and Claude
//!   Code makes no worktree.
//! - `WorktreeRemove` (`worktree_path`): discards the worktree served
//!   there if it changed nothing; one with changes is kept, mounted, and
//!   stderr says how to merge or discard it (Claude Code cannot see what an
//!   opfs worktree changed, so its "remove" is not taken as leave to
//!   throw work away). Exit 0 either way: removal is best effort for
//!   Claude Code.

use std::io::{Read, Write};
use std::path::PathBuf;

use opfs::daemon::worktree::{Asked, Served};
use opfs::daemon::DaemonOptions;
use opfs::integrate::hook::MAX_EVENT_BYTES;
use opfs::worktree::life as wt_cmd;
use opfs::worktree::{Creator, Worktree};
use serde_json::Value;

use crate::cli::error::CommandError;
use crate::cli::output::Format;
use crate::cli::Ctx;

pub fn run(ctx: &Ctx, out: &mut dyn Write, err: &mut dyn Write) -> Result<i32, CommandError> {
    let mut input = Vec::new();
    std::io::stdin()
        .take(MAX_EVENT_BYTES as u64 + 1)
        .read_to_end(&mut input)?;
    let event: Value = match serde_json::from_slice(&input) {
        Ok(v) => v,
        Err(e) => {
            writeln!(
                err,
                "opfs: the worktree hook event on stdin is not JSON: {e}"
            )?;
            return Ok(1);
        }
    };
    let text = |k: &str| event.get(k).and_then(Value::as_str).map(str::to_string);
    match text("hook_event_name").as_deref() {
        Some("WorktreeCreate") => {
            let Some(name) = text("name").or_else(|| text("worktree_name")) else {
                writeln!(err, "opfs: the WorktreeCreate event has no \"name\"")?;
                return Ok(1);
            };
            let dir = ctx.dir.clone().or(text("cwd").map(PathBuf::from));
            match create(ctx, dir, &sanitize(&name)) {
                Ok(path) => {
                    writeln!(out, "{}", path.display())?;
                    Ok(0)
                }
                Err(e) => {
                    writeln!(
                        err,
                        "opfs: no worktree was made for Claude Code: {}",
                        e.message.unwrap_or_default()
                    )?;
                    Ok(1)
                }
            }
        }
        Some("WorktreeRemove") => {
            let Some(path) = text("worktree_path") else {
                writeln!(
                    err,
                    "opfs: the WorktreeRemove event has no \"worktree_path\""
                )?;
                return Ok(1);
            };
            match remove(ctx, &PathBuf::from(&path)) {
                Ok(Some(note)) => writeln!(err, "opfs: {note}")?,
                Ok(None) => {}
                Err(e) => writeln!(
                    err,
                    "opfs: the worktree at {path} was not removed: {}",
                    e.message.unwrap_or_default()
                )?,
            }
            Ok(0)
        }
        other => {
            writeln!(
                err,
                "opfs worktree hook handles WorktreeCreate and WorktreeRemove events, not {}",
                other.unwrap_or("an event without hook_event_name")
            )?;
            Ok(1)
        }
    }
}

/// `name` with every character outside `[A-Za-z0-9._-]` made `-`.
fn sanitize(name: &str) -> String {
    let s: String = name
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.') {
                c
            } else {
                '-'
            }
        })
        .collect();
    match s.trim_start_matches('.') {
        "" => "claude".to_string(),
        t => t.to_string(),
    }
}

fn ctx_in(ctx: &Ctx, dir: Option<PathBuf>) -> Ctx {
    Ctx {
        dir,
        format: Format::Human,
        verbose: ctx.verbose,
        color: ctx.color,
        no_pager: true,
        env: ctx.env.clone(),
    }
}

fn daemon_options(ctx: &Ctx) -> Result<DaemonOptions, CommandError> {
    Ok(DaemonOptions {
        range_min: ctx.range_min()?,
        tuning: ctx.env.tuning.clone(),
        ..DaemonOptions::default()
    })
}

/// Makes (or mounts again) worktree `name` of the project `dir` is in;
/// its path.
fn create(ctx: &Ctx, dir: Option<PathBuf>, name: &str) -> Result<PathBuf, CommandError> {
    let c = ctx_in(ctx, dir);
    let project = c.project()?;
    let st = project.state().clone();
    let home = c.home();
    let opts = daemon_options(&c)?;
    let served = Served {
        home,
        opts: &opts,
        verbose: c.verbose,
    };
    let wt = Worktree::of(&st, name);
    if wt.exists() {
        let meta = wt
            .meta()
            .map_err(|e| CommandError::failure(e.to_string()))?;
        if !wt_cmd::is_mounted(home, &wt, &meta, &served) {
            wt_cmd::mount(&st, name, &served).map_err(|e| CommandError::failure(e.to_string()))?;
        }
        return Ok(meta.mountpoint);
    }
    let meta = wt_cmd::create(home, &project, name, None, None, Creator::User, &served)
        .map_err(|e| CommandError::failure(e.to_string()))?;
    Ok(meta.mountpoint)
}

/// Discards the worktree served at `path` if it changed nothing; a note
/// for the user when it is kept.
fn remove(ctx: &Ctx, path: &std::path::Path) -> Result<Option<String>, CommandError> {
    let c = ctx_in(ctx, Some(path.to_path_buf()));
    let home = c.home().to_path_buf();
    let own = c.project_state()?;
    let Some((project, wt)) = opfs::worktree::of_state(&own) else {
        return Err(CommandError::failure(format!(
            "{} is not an opfs worktree",
            path.display()
        )));
    };
    let rows =
        wt_cmd::list(&home, &project, &Asked).map_err(|e| CommandError::failure(e.to_string()))?;
    let Some(row) = rows.iter().find(|r| r.name == wt.name) else {
        return Ok(None);
    };
    if row.changed > 0 {
        return Ok(Some(format!(
            "worktree {} ({}) changed {} path(s), so it was kept: merge it with \
             `opfs -C {} worktree merge {}`, or throw it away with `opfs -C {} worktree discard {}`",
            row.name,
            row.path.display(),
            row.changed,
            project.project.display(),
            row.name,
            project.project.display(),
            row.name
        )));
    }
    // Claude Code runs this hook in the worktree: leave it, or the
    // unmount would find the mount busy.
    let _ = std::env::set_current_dir("/");
    let opts = DaemonOptions::default();
    let served = Served {
        home: &home,
        opts: &opts,
        verbose: c.verbose,
    };
    wt_cmd::discard(&home, &project, &row.name, &served)
        .map_err(|e| CommandError::failure(e.to_string()))?;
    Ok(None)
}

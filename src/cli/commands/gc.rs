//! `opfs gc`: retention, and the export pruned with it. A real run only
//! while nothing is mounted; `--dry-run` also while mounted (it asks the
//! daemon to commit what is pending, then only reads).

use std::io::Write;

use opfs::control::client::{commit_through_daemon, Project};
use opfs::state::usage::format_size as size;

use crate::cli::args::GcArgs;
use crate::cli::error::{failure, CommandError};
use crate::cli::progress::Bar;
use crate::cli::Ctx;

pub fn run(ctx: &Ctx, a: &GcArgs, out: &mut dyn Write) -> Result<(), CommandError> {
    let st = ctx.project_state()?;
    let retention = opfs::gc::Retention {
        keep: a.keep,
        max_bytes: a.max_bytes,
    };
    let mut bar = Bar::new(ctx, "sweeping blobs");
    let mut progress = |d, t| bar.update(d, t);
    let r = if a.dry_run {
        // Records a daemon still holds in its capture log reach the index
        // first, so the plan names every kept blob.
        commit_through_daemon(&st);
        opfs::gc::gc_with_progress(&st, retention, true, &mut progress).map_err(failure)?
    } else {
        Project::new(st)
            .gc_with_progress(retention, false, &mut progress)
            .map_err(failure)?
    };
    // The bar is cleared before the report is printed.
    drop(bar);
    if ctx.format.is_json() {
        let v = serde_json::to_value(&r).map_err(failure)?;
        writeln!(out, "{v}")?;
        return Ok(());
    }
    let dropped = match r.dropped_turns {
        Some((a, b)) => format!("turns {a} to {b}"),
        None => "no turns".to_string(),
    };
    let (would, dropped_word, removed_word) = if r.dry_run {
        ("dry run: ", "would be dropped", "would be removed")
    } else {
        ("", "dropped", "removed")
    };
    writeln!(
        out,
        "{would}{dropped} {dropped_word} ({} records), {} blobs {removed_word} ({} freed)",
        r.records_deleted,
        r.blobs_removed,
        size(r.bytes_freed)
    )?;
    if let Some(e) = &r.export {
        let packed = match e.packed {
            opfs::export::Packed::Git => ", packed with git gc",
            opfs::export::Packed::GitNotFound => ", not packed (git is not on PATH)",
            opfs::export::Packed::No => "",
        };
        if r.dry_run {
            writeln!(
                out,
                "export: {} commits of dropped turns would leave its history, {} kept commits \
                 would be rewritten on a new baseline (now {}; git gc then frees what only the \
                 dropped commits hold)",
                e.commits_dropped,
                e.commits_rewritten,
                size(e.bytes_before)
            )?;
        } else {
            writeln!(
                out,
                "export: {} commits of dropped turns removed, {} rewritten{packed}: {} -> {}",
                e.commits_dropped,
                e.commits_rewritten,
                size(e.bytes_before),
                size(e.bytes_after)
            )?;
        }
    }
    if let Some(n) = &r.note {
        writeln!(out, "{n}")?;
    }
    Ok(())
}

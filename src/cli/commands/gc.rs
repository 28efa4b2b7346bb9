//! `opfs gc`: retention, and the export pruned with it. While mounted the
//! daemon applies it; `--dry-run` asks the daemon to commit what is
//! pending, then only reads.

use std::io::Write;

use opfs::control::client::Project;
use opfs::sandbox::config::Size;
use opfs::state::usage::format_size as size;

use crate::cli::args::GcArgs;
use crate::cli::error::{failure, CommandError};
use crate::cli::progress::Bar;
use crate::cli::Ctx;

/// The retention policy of the configuration file's `[retention]` table
/// (unset values: `keep` 100, no byte budget), and whether the daemon
/// applies it by itself after turns (`auto`; unset: when `keep` or
/// `max_bytes` is set).
///
/// Errors: the file cannot be read or parsed, `keep` is 0, or `max_bytes`
/// is not a size (exit 1, naming the file).
pub fn configured(ctx: &Ctx) -> Result<(opfs::gc::Retention, bool), CommandError> {
    let Some(path) = &ctx.env.config else {
        return Ok((opfs::gc::Retention::automatic_default(), true));
    };
    let c = opfs::sandbox::config::load(path)
        .map_err(failure)?
        .retention;
    let bad =
        |what: String| CommandError::failure(format!("{}: [retention] {what}", path.display()));
    let keep = match c.keep {
        Some(n) if n < 1 => {
            return Err(bad(format!(
                "keep = {n}: keep at least 1 turn (a whole number of turns, 1 or more)"
            )))
        }
        Some(n) => n.unsigned_abs(),
        None => opfs::gc::DEFAULT_KEEP,
    };
    let max_bytes = match &c.max_bytes {
        None => None,
        Some(Size::Bytes(n)) if *n < 0 => {
            return Err(bad(format!(
                "max_bytes = {n}: a size cannot be negative; give bytes (1048576) or a size \
                 such as \"10G\""
            )))
        }
        Some(Size::Bytes(n)) => Some(n.unsigned_abs()),
        Some(Size::Text(t)) => {
            Some(opfs::state::usage::parse_size(t).map_err(|e| bad(format!("max_bytes: {e}")))?)
        }
    };
    let min_age_days = match c.keep_days {
        Some(n) if n < 0 => {
            return Err(bad(format!(
                "keep_days = {n}: a number of days cannot be negative"
            )))
        }
        Some(n) => Some(n.unsigned_abs()),
        None => None,
    };
    if c.keep.is_none() && c.max_bytes.is_none() && c.keep_days.is_none() {
        // No policy of the user's: the default one, applied while mounted
        // unless `auto = false`.
        return Ok((
            opfs::gc::Retention::automatic_default(),
            c.auto.unwrap_or(true),
        ));
    }
    Ok((
        opfs::gc::Retention {
            keep,
            max_bytes,
            min_age_days,
        },
        c.auto.unwrap_or(true),
    ))
}

pub fn run(ctx: &Ctx, a: &GcArgs, out: &mut dyn Write) -> Result<(), CommandError> {
    let st = ctx.project_state()?;
    let (defaults, _) = configured(ctx)?;
    let default_policy = defaults == opfs::gc::Retention::automatic_default() && !user_set_age(ctx);
    // `opfs gc` is the user's own request: the default policy's minimum
    // age does not hold it back (a configured `keep_days` does, unless
    // `--keep` or `--max-bytes` is given).
    let given = a.keep.is_some() || a.max_bytes.is_some();
    let retention = opfs::gc::Retention {
        keep: a.keep.unwrap_or(defaults.keep),
        max_bytes: a.max_bytes.or(defaults.max_bytes),
        min_age_days: match defaults.min_age_days {
            Some(d) if !given && !default_policy => Some(d),
            _ => None,
        },
    };
    let mut bar = Bar::new(ctx, "sweeping blobs");
    let mut progress = |d, t| bar.update(d, t);
    let r = Project::new(st)
        .gc_with_progress(retention, a.dry_run, &mut progress)
        .map_err(failure)?;
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

/// True when the configuration's `[retention]` sets `keep_days` itself.
fn user_set_age(ctx: &Ctx) -> bool {
    ctx.config()
        .map(|c| c.retention.keep_days.is_some())
        .unwrap_or(false)
}

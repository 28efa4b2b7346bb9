//! `opfs turn [-m TEXT] [--label L] [--id ID] [--allow-unmounted]`: `-m`
//! labels the turn it closes, `--label` the one it opens. Refused (exit 1)
//! when no daemon serves the project, unless `--allow-unmounted`; then the
//! turn is opened in the state dir and a note on stderr says that nothing
//! is recorded until the project is mounted.

use std::io::Write;

use std::path::{Path, PathBuf};

use opfs::control::client::{ClientError, Via};

use crate::cli::args::TurnArgs;
use crate::cli::error::CommandError;
use crate::cli::Ctx;

pub fn run(
    ctx: &Ctx,
    a: &TurnArgs,
    out: &mut dyn Write,
    err: &mut dyn Write,
) -> Result<(), CommandError> {
    run_within(ctx, a, None, out, err).map(|_| ())
}

/// [`run`], waiting at most `limit` for the daemon's answer when given
/// (else the turn's own bound, `opfs::control::client::answer_limit`).
/// Returns the note of a rewind that stopped half way, if any (also
/// written to `err`), so a caller need not open the index again for it.
pub fn run_within(
    ctx: &Ctx,
    a: &TurnArgs,
    limit: Option<std::time::Duration>,
    out: &mut dyn Write,
    err: &mut dyn Write,
) -> Result<Option<String>, CommandError> {
    let mut project = ctx.project()?;
    if let Some(l) = limit {
        project = project.with_answer_limit(l);
    }
    let (turn, via, checked) = project
        .turn_checked(
            a.message.as_deref(),
            a.label.as_deref(),
            a.id.as_deref(),
            a.allow_unmounted,
        )
        .map_err(|e| match e {
            ClientError::NotServed(ref p) => match stale_mount(p) {
                Some(m) => CommandError::failure(format!(
                    "{e}; its mount at {m} is stale (the daemon is gone): `opfs mount {} {m}` \
                     serves it again",
                    p.display(),
                    m = m.display()
                )),
                None => CommandError::from(e),
            },
            e => CommandError::from(e),
        })?;
    let mounted = via == Via::Daemon;
    if ctx.format.is_json() {
        writeln!(
            out,
            "{}",
            serde_json::json!({ "turn": turn, "mounted": mounted })
        )?;
    } else {
        writeln!(out, "{turn}")?;
    }
    // The daemon looked for a stopped rewind right after opening the turn
    // (on its open index); only when it did not is the index opened here.
    let pending = match checked {
        Some(note) => note,
        None => super::rewind::pending_note(project.state()),
    };
    if let Some(note) = &pending {
        writeln!(err, "opfs: warning: {note}")?;
    }
    if !mounted {
        writeln!(
            err,
            "opfs: warning: no opfs daemon serves {}: turn {turn} was opened in its state dir, \
             but changes to the project are not recorded until it is mounted",
            project.state().project.display()
        )?;
    }
    Ok(pending)
}

/// A stale opfs mount of `project` (its daemon gone), if there is one.
fn stale_mount(project: &Path) -> Option<PathBuf> {
    opfs::daemon::mounts_of(project)
        .into_iter()
        .find(|m| opfs::daemon::is_dead_mount(m))
}

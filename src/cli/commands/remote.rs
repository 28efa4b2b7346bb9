//! `opfs remote list REMOTE [PROJECT]` and `opfs remote checkout REMOTE
//! PROJECT TURN DIR`: a checkpoint remote read on any machine, without a
//! project of its own (`docs/remote.md`, "Reading it elsewhere").

use std::io::Write;

use crate::cli::args::RemoteCmd;
use crate::cli::error::{failure, CommandError, ErrorKind};
use crate::cli::output::printable;
use crate::cli::Ctx;

pub fn run(
    ctx: &Ctx,
    cmd: &RemoteCmd,
    out: &mut dyn Write,
    err: &mut dyn Write,
) -> Result<(), CommandError> {
    let git = &ctx.git_env()?;
    let json = ctx.format.is_json();
    let given = match cmd {
        RemoteCmd::List { remote, .. } | RemoteCmd::Checkout { remote, .. } => remote,
    };
    if let Some(problem) = opfs::remote::url_problem(given) {
        return Err(CommandError::usage(format!(
            "the REMOTE argument: {problem}"
        )));
    }
    // One repository is one local copy, as a path or a `file://` URL.
    let normalized = opfs::remote::normalize_url(given);
    let remote = &normalized;
    match cmd {
        RemoteCmd::List { project: None, .. } => {
            let list = opfs::remote::list(ctx.home(), remote, git).map_err(failure)?;
            if json {
                writeln!(out, "{}", serde_json::to_string(&list).map_err(failure)?)?;
                return Ok(());
            }
            if list.is_empty() {
                writeln!(out, "{} holds no opfs history", printable(remote))?;
            }
            // Names and paths come from whoever pushed: escaped.
            for p in &list {
                writeln!(
                    out,
                    "{}  {}  {} turn(s){}{}",
                    printable(&p.name),
                    printable(p.path.as_deref().unwrap_or("?")),
                    p.turns.len(),
                    p.turns
                        .last()
                        .map(|t| format!(", newest {t}"))
                        .unwrap_or_default(),
                    if p.worktrees.is_empty() {
                        String::new()
                    } else {
                        format!(", worktrees: {}", printable(&p.worktrees.join(", ")))
                    }
                )?;
            }
        }
        RemoteCmd::List {
            project: Some(project),
            ..
        } => {
            let turns = opfs::remote::turns(ctx.home(), remote, project, git).map_err(failure)?;
            if json {
                writeln!(out, "{}", serde_json::to_string(&turns).map_err(failure)?)?;
                return Ok(());
            }
            for t in turns.iter().rev() {
                let when =
                    std::time::UNIX_EPOCH + std::time::Duration::from_secs(t.time.max(0) as u64);
                writeln!(
                    out,
                    "{:>5}  {}  {}  {}",
                    t.turn,
                    &t.commit[..12.min(t.commit.len())],
                    humantime::format_rfc3339_seconds(when),
                    printable(&t.subject)
                )?;
            }
        }
        RemoteCmd::Checkout {
            project,
            turn,
            dir,
            bucket,
            ..
        } => {
            let config = ctx.config()?;
            let from = match (bucket, &ctx.env.config) {
                (Some(_), _) => "--bucket".to_string(),
                (None, Some(file)) => format!("{}: [push] bucket", file.display()),
                (None, None) => "[push] bucket".to_string(),
            };
            let bucket = bucket.clone().or_else(|| config.push.bucket.clone());
            if let Some(problem) = bucket
                .as_deref()
                .and_then(opfs::remote::bucket::url_problem)
            {
                return Err(CommandError::usage(format!("{from}: {problem}")));
            }
            let bucket = match bucket {
                Some(b) => Some(ctx.bucket_config(&config, &b)?),
                None => None,
            };
            let r = opfs::remote::checkout(
                ctx.home(),
                remote,
                project,
                turn,
                dir,
                git,
                bucket.as_ref(),
            )
            .map_err(failure)?;
            // Each kind said, in one message: the tree's other entries are
            // written, and the command exits 1.
            let mut problems = Vec::new();
            if let Some(e) = r.skipped.first() {
                problems.push(format!(
                    "{} entr{} of the tree {} not written: a gitlink (mode 160000, a submodule's commit) or an entry of a mode git does not know (git lists 140000 and the like as 160000), e.g. {} (mode {}); a push by opfs holds none, so the tree was written by another program; the rest of the tree was written",
                    r.skipped.len(),
                    if r.skipped.len() == 1 { "y" } else { "ies" },
                    if r.skipped.len() == 1 { "was" } else { "were" },
                    e.path,
                    e.mode
                ));
            }
            if let (Some(m), Some(b)) = (r.missing_objects.first(), &r.bucket) {
                let machine = project.split('/').next().unwrap_or(project);
                problems.push(format!(
                    "{} file(s) of 8 MiB or more were written as pointer files: bucket {b} holds no object for their bytes, e.g. {} (object {}); objects are never deleted by opfs, so the pushing machine withheld it (larger than what its [push] bucket_turn_budget let one turn send: its `opfs status` lists it), or it was deleted or expired in the bucket (a lifecycle rule), or the push that sent the pointer had no bucket; on a machine that still holds the project's history (machine {machine:?}), raise [push] bucket_turn_budget if `opfs status` says it was withheld, upload them with `opfs push --objects`, then check out again",
                    r.missing_objects.len(),
                    m.path,
                    m.key
                ));
            }
            if let (Some(m), Some(b)) = (r.bad_objects.first(), &r.bucket) {
                let machine = project.split('/').next().unwrap_or(project);
                problems.push(format!(
                    "{} file(s) of 8 MiB or more were written as pointer files: their object in bucket {b} is not their bytes, e.g. {} (object {}: {}); delete that object in the bucket, upload it again with `opfs push --objects` on a machine that still holds the project's history (machine {machine:?}), then check out again",
                    r.bad_objects.len(),
                    m.path,
                    m.key,
                    m.cause
                ));
            }
            if !r.pointers.is_empty() && r.missing_objects.is_empty() && r.bad_objects.is_empty() {
                problems.push(format!(
                    "{} file(s) of 8 MiB or more were written as pointer files: their bytes are not in the bucket (none configured: --bucket or [push] bucket; or the push that sent them had none; docs/remote.md, \"Big files\"), e.g. {}",
                    r.pointers.len(),
                    r.pointers[0]
                ));
            }
            let problem = (!problems.is_empty()).then(|| problems.join("; also "));
            if json {
                // One JSON value on stdout: the report, carrying the error
                // (in the form every command's `--json` error has) when the
                // checkout exits 1.
                let mut v = serde_json::to_value(&r).map_err(failure)?;
                if let Some(message) = &problem {
                    v["error"] = serde_json::json!({
                        "code": 1, "kind": "failure", "message": message
                    });
                }
                writeln!(out, "{v}")?;
                if let Some(message) = problem {
                    writeln!(err, "opfs: {message}")?;
                    return Err(CommandError::reported(ErrorKind::Failure));
                }
            } else {
                writeln!(
                    out,
                    "wrote turn {turn} of {project} ({}) into {}: {} file(s) ({} from the bucket), {} symlink(s), {} bytes",
                    &r.commit[..12.min(r.commit.len())],
                    dir.display(),
                    r.files,
                    r.resolved,
                    r.symlinks,
                    r.bytes
                )?;
                if let Some(message) = problem {
                    return Err(CommandError::failure(message));
                }
            }
        }
    }
    Ok(())
}

//! `opfs push [REMOTE]`: export what is closed (the project's history and
//! each worktree's branch), then push the export
//! repository (the history and every worktree branch) to the checkpoint
//! remote, under `refs/opfs/<machine>/<project key>/` (`docs/remote.md`).

use std::io::Write;

use opfs::control::client::commit_through_daemon;

use crate::cli::args::PushArgs;
use crate::cli::error::{failure, CommandError};
use crate::cli::Ctx;

pub fn run(ctx: &Ctx, a: &PushArgs, out: &mut dyn Write) -> Result<(), CommandError> {
    let project = ctx.project()?;
    if opfs::worktree::of_state(project.state()).is_some() {
        return Err(CommandError::usage(
            "opfs push pushes a project with its worktrees' branches: run it with -C the project",
        ));
    }
    let st = project.state();
    let Some((target, _, _)) = ctx.push_target(&st.project, a.remote.as_deref())? else {
        return Err(CommandError::usage(format!(
            "no remote to push {} to: give one (opfs push URL) or configure it outside the project: [projects.\"{}\".push] remote = \"URL\" in {}",
            st.project.display(),
            st.project.display(),
            ctx.env
                .config
                .as_deref()
                .map(|p| p.display().to_string())
                .unwrap_or_else(|| "the configuration file".into())
        )));
    };
    project.commit_pending()?;
    opfs::export::export(st, None, &mut |_| {}, &|| commit_through_daemon(st)).map_err(failure)?;
    // Each worktree's branch too, as `opfs export` does: a push carries
    // them.
    for (wt, _) in opfs::worktree::list(st) {
        let wst = wt.state(ctx.home());
        opfs::worktree::life::export_branch(
            ctx.home(),
            st,
            &wt.name,
            None,
            Box::new(move || commit_through_daemon(&wst)),
            commit_through_daemon,
        )?;
    }
    let git = ctx.git_env()?;
    let backfilled = if a.objects {
        if target.bucket.is_none() {
            return Err(CommandError::usage(
                "--objects uploads to the bucket, and none is configured: set [push] bucket (docs/remote.md, \"Big files: the bucket\")",
            ));
        }
        Some(opfs::remote::upload_all_objects(st, &target, &git).map_err(failure)?)
    } else {
        None
    };
    let mut r = opfs::remote::push(st, &target, &git).map_err(failure)?;
    let up_to_date = r.up_to_date();
    // What --objects found gone for good, reported as the push reports
    // its own (once each).
    for m in backfilled.iter().flat_map(|b| &b.missing) {
        if !r.objects_missing.iter().any(|x| x.hash == m.hash) {
            r.objects_missing.push(m.clone());
        }
    }
    if !ctx.format.is_json() {
        for m in &r.objects_missing {
            writeln!(
                out,
                "warning: {} at the end of turn {} was pushed without its bytes (BLAKE3 {}): they are gone from this machine ({}); it checks out as its pointer file (opfs status lists it)",
                m.path, m.turn, m.hash, m.cause
            )?;
        }
    }
    if let (Some(b), false) = (&backfilled, ctx.format.is_json()) {
        writeln!(
            out,
            "uploaded {} object(s) ({} bytes) missing from the bucket",
            b.objects, b.bytes
        )?;
    }
    if ctx.format.is_json() {
        let mut v = serde_json::to_value(&r).map_err(failure)?;
        v["up_to_date"] = serde_json::json!(up_to_date);
        if let Some(b) = &backfilled {
            v["objects_backfilled"] = serde_json::json!(b.objects);
            v["bytes_backfilled"] = serde_json::json!(b.bytes);
        }
        writeln!(out, "{v}")?;
    } else if up_to_date {
        writeln!(out, "{} is up to date ({})", r.remote, r.namespace)?;
    } else {
        writeln!(
            out,
            "pushed {} ref(s){} to {} under {}{}: {} bytes in {} ms",
            r.updated,
            if r.deleted > 0 {
                format!(", deleted {}", r.deleted)
            } else {
                String::new()
            },
            r.remote,
            r.namespace,
            r.last_turn
                .map(|t| format!(" (up to turn {t})"))
                .unwrap_or_default(),
            r.bytes_sent,
            r.elapsed_ms
        )?;
    }
    Ok(())
}

//! `opfs push [REMOTE]`: export what is closed (the project's history and
//! each worktree's branch), then push the export
//! repository (the history and every worktree branch) to the checkpoint
//! remote, under `refs/opfs/<machine>/<project key>/` (`docs/remote.md`).

use std::io::Write;

use opfs::control::client::commit_through_daemon;

use crate::cli::args::PushArgs;
use crate::cli::error::{failure, CommandError};
use crate::cli::output::printable;
use crate::cli::Ctx;

pub fn run(ctx: &Ctx, a: &PushArgs, out: &mut dyn Write) -> Result<(), CommandError> {
    let project = ctx.project()?;
    if opfs::worktree::of_state(project.state()).is_some() {
        return Err(CommandError::usage(
            "opfs push pushes a project with its worktrees' branches: run it with -C the project",
        ));
    }
    let st = project.state();
    if let Some(url) = &a.forget {
        return forget(ctx, st, url, out);
    }
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
    // `elapsed_ms` covers the upload of --objects and the push.
    let started = std::time::Instant::now();
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
    r.elapsed_ms = started.elapsed().as_millis() as u64;
    let up_to_date = r.up_to_date();
    // What --objects found gone for good, reported as the push reports
    // its own (once each).
    for m in backfilled.iter().flat_map(|b| &b.missing) {
        if !r.objects_missing.iter().any(|x| x.hash == m.hash) {
            r.objects_missing.push(m.clone());
        }
    }
    for w in backfilled.iter().flat_map(|b| &b.withheld) {
        if !r.objects_withheld.iter().any(|x| x.hash == w.hash) {
            r.objects_withheld.push(w.clone());
        }
    }
    if !ctx.format.is_json() {
        if let Some(note) = &r.push_state_set_aside {
            writeln!(out, "note: {note}")?;
        }
        for m in &r.objects_missing {
            writeln!(
                out,
                "warning: {} at the end of turn {} was pushed without its bytes (BLAKE3 {}): they are gone from this machine ({}); it checks out as its pointer file (opfs status lists it)",
                m.path, m.turn, m.hash, m.cause
            )?;
        }
        for w in &r.objects_withheld {
            writeln!(out, "warning: {}", w.explain())?;
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
        writeln!(
            out,
            "{} is up to date ({})",
            printable(&opfs::remote::redact_url(&r.remote)),
            r.namespace
        )?;
    } else if r.updated == 0 && r.deleted == 0 && r.adopted > 0 {
        writeln!(
            out,
            "adopted {} ref(s) the remote {} already held under {}{}: nothing sent, in {} ms",
            r.adopted,
            printable(&opfs::remote::redact_url(&r.remote)),
            r.namespace,
            r.last_turn
                .map(|t| format!(" (up to turn {t})"))
                .unwrap_or_default(),
            r.elapsed_ms
        )?;
    } else {
        writeln!(
            out,
            "pushed {} ref(s){}{} to {} under {}{}: {} bytes in {} ms",
            r.updated,
            if r.deleted > 0 {
                format!(", deleted {}", r.deleted)
            } else {
                String::new()
            },
            if r.adopted > 0 {
                format!(", adopted {} the remote already held", r.adopted)
            } else {
                String::new()
            },
            printable(&opfs::remote::redact_url(&r.remote)),
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

/// `opfs push --forget URL`: drops `url`'s entry from the project's
/// `push.json` (as given, as a path made absolute, or as `opfs status`
/// prints it); refused for the remote the configuration names.
fn forget(
    ctx: &Ctx,
    st: &opfs::store::StateDir,
    url: &str,
    out: &mut dyn Write,
) -> Result<(), CommandError> {
    let normalized = opfs::remote::normalize_url(url);
    let configured = ctx
        .push_target(&st.project, None)
        .ok()
        .flatten()
        .map(|(t, _, _)| t.url);
    if configured
        .as_deref()
        .is_some_and(|c| c == url || c == normalized || opfs::remote::redact_url(c) == url)
    {
        return Err(CommandError::usage(format!(
            "{} is the remote the configuration names for {}: its entry is what the next push needs (its leases); remove it from the configuration first",
            printable(&opfs::remote::redact_url(url)),
            st.project.display()
        )));
    }
    let mut gone = opfs::remote::state::forget(st, url).map_err(failure)?;
    if gone.is_none() && normalized != url {
        gone = opfs::remote::state::forget(st, &normalized).map_err(failure)?;
    }
    let Some((key, r)) = gone else {
        let known = opfs::remote::state::load(st)
            .map(|s| {
                s.remotes
                    .keys()
                    .map(|k| printable(&opfs::remote::redact_url(k)))
                    .collect::<Vec<_>>()
                    .join(", ")
            })
            .unwrap_or_default();
        return Err(CommandError::failure(format!(
            "no push of {} to {} is recorded (its remotes: {}); give the URL as `opfs status` prints it",
            st.project.display(),
            printable(&opfs::remote::redact_url(url)),
            if known.is_empty() { "none" } else { &known }
        )));
    };
    let shown = printable(&opfs::remote::redact_url(&key));
    if ctx.format.is_json() {
        let v = serde_json::json!({
            "forgot": opfs::remote::redact_url(&key),
            "namespace": r.namespace,
            "refs": r.pushed.len(),
            "last_turn": r.last_turn,
            "failure": r.failure.as_ref().map(|f| opfs::remote::redact(&f.message, &key)),
        });
        writeln!(out, "{v}")?;
        return Ok(());
    }
    writeln!(
        out,
        "forgot {shown} ({}): {}{}; nothing on the remote was changed",
        r.namespace,
        match r.last_turn {
            Some(t) => format!("it held up to turn {t} ({} ref(s))", r.pushed.len()),
            None => "never pushed".to_string(),
        },
        r.failure
            .as_ref()
            .map(|f| format!(", {} failed attempt(s)", f.attempts))
            .unwrap_or_default()
    )?;
    Ok(())
}

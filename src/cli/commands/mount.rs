//! `opfs mount PROJECT MOUNTPOINT`: in the foreground, or started in the
//! background and returning once the mount is ready. `--label` names the
//! mount's first turn once the mount is ready: turn 1 at a first mount
//! (the turn the daemon opened), else a new turn opened through the daemon
//! as `opfs turn --label` opens one.

use std::io::{self, Write};

use opfs::control::Project;
use opfs::daemon::{self, DaemonOptions, MountPlan};
use opfs::store::{Index, StateDir};

use crate::cli::args::MountArgs;
use crate::cli::error::{failure, CommandError};
use crate::cli::Ctx;

pub fn run(ctx: &Ctx, a: &MountArgs, out: &mut dyn Write) -> Result<(), CommandError> {
    // Read here too when the daemon is started in the background (it reads
    // the same file again), so a broken file is reported to the caller.
    let (retention, auto) = super::gc::configured(ctx)?;
    let git = ctx.git_env()?;
    let opts = DaemonOptions {
        sync: a.sync,
        threads: a.threads,
        export: !a.no_export,
        range_min: match a.range_min {
            Some(n) => n,
            None => ctx.range_min()?,
        },
        tuning: ctx.env.tuning.clone(),
        worktree: match (&a.worktree_of, &a.worktree) {
            (Some(project), Some(name)) => Some(opfs::worktree::life::WorktreeSpec {
                project: project.clone(),
                name: name.clone(),
            }),
            _ => None,
        },
        // Read at every mount of a project; a worktree records all it sees.
        record_exclude: match a.worktree {
            Some(_) => None,
            None => Some(ctx.record_exclude(&project_path(&a.project))?),
        },
        // A worktree's own history is discarded or merged with it.
        retention: (auto && a.worktree.is_none()).then_some(retention),
        // A worktree's daemon pushes its project's export (which carries
        // the worktree's branch) to the project's remote.
        push: ctx
            .push_target(
                &match (&a.worktree_of, &a.worktree) {
                    (Some(project), Some(_)) => project.clone(),
                    _ => project_path(&a.project),
                },
                None,
            )?
            .filter(|(_, auto, _)| *auto)
            .map(|(target, _, retry)| opfs::remote::AutoPush {
                target,
                git: git.clone(),
                retry,
            }),
    };
    let home = ctx.home();
    let plan = daemon::check(home, &a.project, &a.mountpoint).map_err(failure)?;
    let json = ctx.format.is_json();
    let first_mount = !has_turns(&plan.state);
    if a.foreground {
        // With --json, the same object as a background mount, once ready.
        let mut printed: io::Result<()> = Ok(());
        let mut labelled: Result<(), CommandError> = Ok(());
        let ready = || {
            if let Some(l) = &a.label {
                labelled = label_first_turn(&plan.state, first_mount, l).map(drop);
                if let Err(e) = &labelled {
                    log::error!("{}", e.message.as_deref().unwrap_or(""));
                }
            }
            if json {
                printed = writeln!(out, "{}", mounted_json(&plan, std::process::id()))
                    .and_then(|()| out.flush());
            }
        };
        daemon::run(home, &plan, &opts, ready).map_err(failure)?;
        labelled?;
        return Ok(printed?);
    }
    let pid = daemon::spawn::spawn(home, &plan, &opts, ctx.verbose).map_err(failure)?;
    if let Some(l) = &a.label {
        label_first_turn(&plan.state, first_mount, l)?;
    }
    if json {
        writeln!(out, "{}", mounted_json(&plan, pid))?;
    }
    Ok(())
}

/// Whether the state dir has recorded a turn (else this is the project's
/// first mount). A missing or unreadable index has none.
fn has_turns(st: &StateDir) -> bool {
    Index::open_read_only(&st.index_path())
        .and_then(|ix| ix.last_turn())
        .is_ok_and(|t| t.is_some())
}

/// `--label`: labels the open turn (the one the daemon opened at a first
/// mount), else opens a new turn with the label through the daemon.
/// Returns the labelled turn.
///
/// Errors: the index cannot be written or the daemon does not answer
/// (exit 1; the project stays mounted).
fn label_first_turn(st: &StateDir, first_mount: bool, label: &str) -> Result<u64, CommandError> {
    let why = |e: String| {
        CommandError::failure(format!(
            "{} is mounted, but its first turn could not be labelled: {e}; \
             run `opfs label @ TEXT`",
            st.project.display()
        ))
    };
    if !first_mount {
        return Project::new(st.clone())
            .turn(Some(label), None)
            .map_err(|e| why(e.to_string()));
    }
    let mut ix = Index::open(&st.index_path(), false).map_err(|e| why(e.to_string()))?;
    let open = ix
        .last_turn()
        .map_err(|e| why(e.to_string()))?
        .ok_or_else(|| why("no turn is open".into()))?;
    ix.set_label(open.number, Some(label))
        .map_err(|e| why(e.to_string()))?;
    Ok(open.number)
}

/// What `opfs mount --json` prints once the mount is ready.
fn mounted_json(plan: &MountPlan, pid: u32) -> serde_json::Value {
    serde_json::json!({
        "project": plan.state.project,
        "mountpoint": plan.mountpoint,
        "pid": pid,
        "state_dir": plan.state.dir,
    })
}

/// The canonical path of `project` (as given when it cannot be resolved:
/// the mount's own check then says why).
fn project_path(project: &std::path::Path) -> std::path::PathBuf {
    std::fs::canonicalize(project).unwrap_or_else(|_| project.to_path_buf())
}

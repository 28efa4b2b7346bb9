//! `opfs mount PROJECT MOUNTPOINT`: in the foreground, or started in the
//! background and returning once the mount is ready.

use std::io::{self, Write};

use opfs::daemon::{self, DaemonOptions, MountPlan};

use crate::cli::args::MountArgs;
use crate::cli::error::{failure, CommandError};
use crate::cli::Ctx;

pub fn run(ctx: &Ctx, a: &MountArgs, out: &mut dyn Write) -> Result<(), CommandError> {
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
            (Some(project), Some(name)) => Some(daemon::worktree::WorktreeSpec {
                project: project.clone(),
                name: name.clone(),
            }),
            _ => None,
        },
    };
    let home = ctx.home();
    let plan = daemon::check(home, &a.project, &a.mountpoint).map_err(failure)?;
    let json = ctx.format.is_json();
    if a.foreground {
        // With --json, the same object as a background mount, once ready.
        let mut printed: io::Result<()> = Ok(());
        let ready = || {
            if json {
                printed = writeln!(out, "{}", mounted_json(&plan, std::process::id()))
                    .and_then(|()| out.flush());
            }
        };
        daemon::run(home, &plan, &opts, ready).map_err(failure)?;
        return Ok(printed?);
    }
    let pid = daemon::spawn::spawn(home, &plan, &opts, ctx.verbose).map_err(failure)?;
    if json {
        writeln!(out, "{}", mounted_json(&plan, pid))?;
    }
    Ok(())
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

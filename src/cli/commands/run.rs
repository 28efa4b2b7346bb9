//! `opfs run [--sandbox MODE] -- CMD...`: exits with the command's status.

use std::io::Write;

use opfs::daemon::DaemonOptions;
use opfs::sandbox::{self, RunError, RunOptions};
use opfs::state;

use crate::cli::args::RunArgs;
use crate::cli::error::{failure, CommandError};
use crate::cli::Ctx;

pub fn run(ctx: &Ctx, a: &RunArgs, err: &mut dyn Write) -> Result<i32, CommandError> {
    let range_min = ctx.range_min()?;
    let config = match &ctx.env.config {
        Some(p) => sandbox::config::load(p).map_err(failure)?,
        None => Default::default(),
    };
    let opts = RunOptions {
        home: ctx.home().to_path_buf(),
        user_home: ctx.env.home.clone(),
        dir: ctx.dir(),
        mode: a.sandbox.into(),
        net: a.net,
        writable: a.writable.iter().map(|w| state::absolute(w)).collect(),
        turn: a.turn.clone(),
        worktree: a.worktree.clone(),
        writable_git_config: a.writable_git_config,
        command: a.command.clone(),
        config: config.sandbox,
        bwrap: ctx.env.bwrap.clone(),
        env: ctx.env.run.clone(),
        daemon: DaemonOptions {
            range_min,
            tuning: ctx.env.tuning.clone(),
            ..DaemonOptions::default()
        },
        verbose: ctx.verbose,
    };
    match sandbox::run(&opts) {
        Ok(outcome) => {
            for w in &outcome.warnings {
                writeln!(err, "opfs: {w}")?;
            }
            Ok(outcome.code)
        }
        Err(e @ RunError::Usage(_)) => Err(CommandError::usage(e.to_string())),
        Err(RunError::Worktree(e)) if e.is_usage() => Err(CommandError::usage(e.to_string())),
        Err(e) => Err(failure(e)),
    }
}

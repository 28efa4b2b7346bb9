//! `opfs shell [--worktree NAME] [--sandbox MODE] [-- CMD...]`: `opfs run`
//! for a person. The command (default `$SHELL`, else `/bin/sh`) runs where
//! the project's own path shows the journaled project, or worktree NAME;
//! `--sandbox` defaults to `unrestricted` (nothing else changed). Exits
//! with the command's status.

use std::ffi::OsString;
use std::io::Write;

use crate::cli::args::{RunArgs, ShellArgs};
use crate::cli::error::CommandError;
use crate::cli::Ctx;

pub fn run(ctx: &Ctx, a: &ShellArgs, err: &mut dyn Write) -> Result<i32, CommandError> {
    let command = if a.command.is_empty() {
        vec![ctx
            .env
            .shell
            .clone()
            .unwrap_or_else(|| OsString::from("/bin/sh"))]
    } else {
        a.command.clone()
    };
    let run = RunArgs {
        sandbox: a.sandbox,
        net: a.net,
        writable: a.writable.clone(),
        turn: a.turn.clone(),
        worktree: a.worktree.clone(),
        writable_git_config: a.writable_git_config,
        // A command named after an agent gets its preset, as in `opfs run`.
        agent: None,
        command,
    };
    super::run::run(ctx, &run, err)
}

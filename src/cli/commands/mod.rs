//! One file per command: each takes the context, its arguments and the
//! output streams, and returns `Ok` (exit 0) or a [`CommandError`].

use std::io::Write;

use super::args::{Cmd, WorktreeCmd};
use super::error::CommandError;
use super::Ctx;

mod agent_worktree;
mod completions;
mod diff;
mod doctor;
mod export;
mod gc;
mod hook;
mod integrate;
mod label;
mod log;
mod mcp;
mod mount;
mod push;
mod remote;
mod restore;
mod rewind;
mod run;
mod shell;
mod show;
mod status;
mod turn;
mod umount;
mod undo;
mod verify;
mod worktree;

/// Runs `cmd`; returns the exit code of a command that succeeded (`opfs
/// run` passes on its command's).
pub fn run(
    ctx: &Ctx,
    cmd: &Cmd,
    out: &mut dyn Write,
    err: &mut dyn Write,
) -> Result<i32, CommandError> {
    match cmd {
        Cmd::Mount(a) => mount::run(ctx, a, out).map(|()| 0),
        Cmd::Umount(a) => umount::run(ctx, a, out).map(|()| 0),
        Cmd::Status => status::run(ctx, out, err).map(|()| 0),
        Cmd::Turn(a) => turn::run(ctx, a, out, err).map(|()| 0),
        Cmd::Rewind(a) => rewind::run(ctx, a, out, err).map(|()| 0),
        Cmd::Restore(a) => restore::run(ctx, a, out, err).map(|()| 0),
        Cmd::Run(a) => run::run(ctx, a, err),
        Cmd::Shell(a) => shell::run(ctx, a, err),
        Cmd::Log(a) => log::run(ctx, a, out).map(|()| 0),
        Cmd::Diff(a) => diff::run(ctx, a, out).map(|()| 0),
        Cmd::Show(a) => show::run(ctx, a, out, err).map(|()| 0),
        Cmd::Verify => verify::run(ctx, out).map(|()| 0),
        Cmd::Gc(a) => gc::run(ctx, a, out).map(|()| 0),
        Cmd::Export(a) => export::run(ctx, a, out, err).map(|()| 0),
        Cmd::Push(a) => push::run(ctx, a, out).map(|()| 0),
        Cmd::Remote(a) => remote::run(ctx, a, out, err).map(|()| 0),
        Cmd::Worktree(WorktreeCmd::Hook) => agent_worktree::run(ctx, out, err),
        Cmd::Worktree(a) => worktree::run(ctx, a, out, err),
        Cmd::Mcp => mcp::run(ctx).map(|()| 0),
        Cmd::Hook(a) => hook::run(ctx, a, out, err),
        Cmd::Integrate(a) => integrate::run(ctx, a, out).map(|()| 0),
        Cmd::Label(a) => label::run(ctx, a, out).map(|()| 0),
        Cmd::Undo(a) => undo::run(ctx, a, out, err).map(|()| 0),
        Cmd::Completions(a) => completions::completions(a, out).map(|()| 0),
        Cmd::Man(a) => completions::man(ctx, a, out).map(|()| 0),
        Cmd::Doctor => doctor::run(ctx, out).map(|()| 0),
    }
}

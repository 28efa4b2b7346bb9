//! `opfs mcp`: the agent tools over MCP on stdin/stdout (`docs/mcp.md`).
//! `-C` names the project (or its mountpoint), resolved once at start;
//! with `OPFS_MCP_SOCKET` (set by `opfs run` inside its sandbox) the tools
//! run behind that narrow socket instead.

use std::os::fd::AsFd;

use opfs::daemon::DaemonOptions;
use opfs::mcp::{self, Backend, Tools};

use crate::cli::error::{failure, CommandError};
use crate::cli::Ctx;

pub fn run(ctx: &Ctx) -> Result<(), CommandError> {
    // Inside `opfs run`'s sandbox the state is invisible; `opfs run` names
    // its narrow socket instead (docs/mcp.md).
    let tools = match ctx.env.mcp_socket.clone() {
        Some(socket) => Backend::Narrow(socket),
        None => {
            let project = ctx.project()?;
            let opts = DaemonOptions {
                range_min: ctx.range_min()?,
                tuning: ctx.env.tuning.clone(),
                ..DaemonOptions::default()
            };
            Backend::Local(Box::new(Tools::new(
                ctx.home().to_path_buf(),
                project,
                opts,
                ctx.verbose,
            )))
        }
    };
    // Copies of fds 0 and 1: the CLI holds the lock of Rust's stdout for
    // its output, which the server's writer must not wait for.
    let dup = |what: &str, fd: std::io::Result<std::os::fd::OwnedFd>| {
        fd.map_err(|e| CommandError::failure(format!("cannot use {what} for MCP: {e}")))
    };
    let input = dup("stdin", std::io::stdin().as_fd().try_clone_to_owned())?;
    let output = dup("stdout", std::io::stdout().as_fd().try_clone_to_owned())?;
    mcp::serve(tools, input, output).map_err(failure)
}

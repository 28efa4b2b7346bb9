//! `opfs mcp`: the agent-facing tools as a Model Context Protocol server
//! (`docs/mcp.md`). [`tools`] is the tool table, independent of any
//! transport (typed arguments in, typed results out); [`serve`] runs it as
//! an MCP server on a pair of file descriptors (the CLI passes stdin and
//! stdout) until the client closes its end.
//!
//! Guarantee 8 (the agent cannot rewrite its own history) shapes the
//! table: worktree tools and read-only history only. Nothing here rewinds,
//! opens or closes turns on request, collects garbage, exports or deletes
//! the project's history.

use std::os::fd::OwnedFd;
use std::path::PathBuf;

pub mod narrow;
mod server;
pub mod tools;

pub use tools::{ToolError, ToolSpec, Tools, TOOLS};

/// Where `tools/call` runs.
#[derive(Debug)]
pub enum Backend {
    /// In this process, on the project's state ([`Tools::call`]).
    Local(Box<Tools>),
    /// Behind `opfs run`'s narrow socket at this path ([`narrow::call`]):
    /// inside the sandbox, where the state is invisible.
    Narrow(PathBuf),
}

impl Backend {
    /// Runs tool `name` with `args` where this backend runs tools.
    ///
    /// Errors: as [`Tools::call`] or [`narrow::call`].
    pub fn call(
        &self,
        name: &str,
        args: serde_json::Value,
    ) -> Result<serde_json::Value, ToolError> {
        match self {
            Backend::Local(t) => t.call(name, args),
            Backend::Narrow(socket) => narrow::call(socket, name, args),
        }
    }
}

/// Why the MCP server stopped with an error.
#[derive(Debug, thiserror::Error)]
pub enum ServeError {
    /// The async runtime could not be started (threads, timers).
    #[error("cannot start the MCP server's runtime: {0}")]
    Runtime(#[source] std::io::Error),
    /// The client did not complete the MCP handshake (`initialize`).
    #[error("the MCP handshake failed: {0} (is the other end an MCP client?)")]
    Handshake(String),
    /// The server's task ended abnormally.
    #[error("the MCP server stopped: {0}")]
    Stopped(String),
}

/// Serves the tools of `tools` over MCP (JSON-RPC 2.0, one message per line): reads
/// requests from `input`, writes responses to `output`, until `input`
/// reaches end of file (or the client quits). A client that closes its end
/// before the handshake is a clean end too. Tool calls run one blocking
/// task each; a call in flight at end of file finishes first.
///
/// Errors: [`ServeError::Runtime`], [`ServeError::Handshake`] (the first
/// message is not `initialize`, or writing the answer failed),
/// [`ServeError::Stopped`].
pub fn serve(tools: Backend, input: OwnedFd, output: OwnedFd) -> Result<(), ServeError> {
    use rmcp::service::ServerInitializeError;
    use rmcp::ServiceExt;

    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
        .map_err(ServeError::Runtime)?;
    rt.block_on(async move {
        let reader = tokio::fs::File::from_std(std::fs::File::from(input));
        let writer = tokio::fs::File::from_std(std::fs::File::from(output));
        let handler = server::Handler {
            tools: std::sync::Arc::new(tools),
        };
        let running = match handler.serve((reader, writer)).await {
            Ok(r) => r,
            Err(ServerInitializeError::ConnectionClosed(why)) => {
                log::info!("the MCP client left before the handshake: {why}");
                return Ok(());
            }
            Err(e) => return Err(ServeError::Handshake(e.to_string())),
        };
        match running.waiting().await {
            Ok(reason) => {
                log::info!("the MCP session ended: {reason:?}");
                Ok(())
            }
            Err(e) => Err(ServeError::Stopped(e.to_string())),
        }
    })
}

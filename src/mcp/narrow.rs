//! The narrow socket (`docs/mcp.md`): how `opfs mcp`
//! inside `opfs run`'s sandbox reaches the project's tools although the
//! state dir and the control socket are invisible there (guarantee 8).
//!
//! `opfs run` (outside) serves the tool table of its one project on a Unix
//! socket of its own and binds that socket, alone, into the sandbox; an
//! `opfs mcp` started inside finds it through `OPFS_MCP_SOCKET` and sends
//! each `tools/call` there instead of running the tool itself. The socket
//! accepts exactly one kind of request, one JSON object per line:
//!
//! ```json
//! {"tool": "history_log", "arguments": {"limit": 3}}
//! ```
//!
//! answered by `{"ok": RESULT}` or `{"error": {"message": TEXT, "detail":
//! VALUE|null}}`. A tool that is not in [`TOOLS`], a request of any other
//! shape (a control request such as `{"op": "rewind", ...}`, unknown
//! fields, bad JSON) is refused with an error and nothing runs: nothing on
//! this socket rewinds, opens or closes a turn, collects garbage or
//! deletes history, and it serves no other project.

use std::io::{self, BufRead, BufReader, Write};
use std::os::unix::fs::PermissionsExt;
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::tools::{ToolError, Tools, TOOLS};

/// The longest request line read (a tool's arguments are small).
const MAX_REQUEST: u64 = 1 << 20;

/// One request on the narrow socket.
#[derive(Debug, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
struct NarrowRequest {
    tool: String,
    #[serde(default)]
    arguments: Value,
}

/// One answer.
#[derive(Debug, Deserialize, Serialize)]
#[serde(deny_unknown_fields, rename_all = "snake_case")]
enum NarrowResponse {
    Ok(Value),
    Error {
        message: String,
        #[serde(default)]
        detail: Option<Value>,
    },
}

/// The narrow socket's server: serves `Tools` on a socket until dropped.
#[derive(Debug)]
pub struct NarrowServer {
    path: PathBuf,
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl NarrowServer {
    /// Listens on `path` (a socket file created there, 0600; an old one
    /// is replaced) and serves `tools` on a thread, one more thread per
    /// connection.
    ///
    /// Errors: the socket cannot be created.
    pub fn start(tools: Tools, path: &Path) -> io::Result<NarrowServer> {
        match std::fs::remove_file(path) {
            Ok(()) => {}
            Err(e) if e.kind() == io::ErrorKind::NotFound => {}
            Err(e) => return Err(e),
        }
        let listener = UnixListener::bind(path)?;
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600))?;
        let stop = Arc::new(AtomicBool::new(false));
        let tools = Arc::new(tools);
        let thread = {
            let stop = Arc::clone(&stop);
            std::thread::Builder::new()
                .name("opfs-narrow".into())
                .spawn(move || {
                    for conn in listener.incoming() {
                        if stop.load(Ordering::SeqCst) {
                            break;
                        }
                        match conn {
                            Ok(stream) => {
                                let tools = Arc::clone(&tools);
                                let spawned = std::thread::Builder::new()
                                    .name("opfs-narrow-conn".into())
                                    .spawn(move || serve_connection(&tools, stream));
                                if let Err(e) = spawned {
                                    log::warn!("narrow socket: cannot start a thread: {e}");
                                }
                            }
                            Err(e) => log::warn!("narrow socket: accept failed: {e}"),
                        }
                    }
                })?
        };
        Ok(NarrowServer {
            path: path.to_path_buf(),
            stop,
            thread: Some(thread),
        })
    }

    /// The socket's path (outside the sandbox).
    pub fn path(&self) -> &Path {
        &self.path
    }
}

impl Drop for NarrowServer {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        // Wake the accept loop so it sees the flag.
        let _ = UnixStream::connect(&self.path);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
        let _ = std::fs::remove_file(&self.path);
    }
}

fn serve_connection(tools: &Tools, stream: UnixStream) {
    let Ok(write_half) = stream.try_clone() else {
        return;
    };
    let mut writer = io::BufWriter::new(write_half);
    let mut reader = BufReader::new(io::Read::take(stream, u64::MAX));
    let mut line = String::new();
    loop {
        line.clear();
        reader.get_mut().set_limit(MAX_REQUEST);
        match reader.read_line(&mut line) {
            Ok(0) | Err(_) => return,
            Ok(_) => {}
        }
        let answer = answer(tools, &line);
        let sent = serde_json::to_vec(&answer)
            .map_err(io::Error::other)
            .and_then(|mut out| {
                out.push(b'\n');
                writer.write_all(&out)?;
                writer.flush()
            });
        if sent.is_err() {
            return;
        }
    }
}

/// The answer to one request line: only a tool of [`TOOLS`] runs.
fn answer(tools: &Tools, line: &str) -> NarrowResponse {
    let refused = |why: String| NarrowResponse::Error {
        message: format!(
            "refused: the narrow socket serves only the opfs MCP tools, as \
             {{\"tool\": NAME, \"arguments\": {{...}}}} ({why})"
        ),
        detail: None,
    };
    let req: NarrowRequest = match serde_json::from_str(line) {
        Ok(r) => r,
        Err(e) => return refused(e.to_string()),
    };
    if !TOOLS.iter().any(|t| t.name == req.tool) {
        return refused(ToolError::UnknownTool(req.tool).to_string());
    }
    log::info!("narrow socket: {}", req.tool);
    match tools.call(&req.tool, req.arguments) {
        Ok(v) => NarrowResponse::Ok(v),
        Err(e) => NarrowResponse::Error {
            message: e.to_string(),
            detail: e.detail(),
        },
    }
}

/// Runs tool `name` with `args` through the narrow socket at `socket`
/// (what `opfs mcp` inside the sandbox does instead of [`Tools::call`]).
///
/// Errors: [`ToolError::Remote`] with the server's message (and detail),
/// or one saying the socket cannot be reached.
pub fn call(socket: &Path, name: &str, args: Value) -> Result<Value, ToolError> {
    let unreachable = |e: io::Error| ToolError::Remote {
        message: format!(
            "cannot reach opfs run's narrow socket {}: {e} (has `opfs run` ended?)",
            socket.display()
        ),
        detail: None,
    };
    let stream = UnixStream::connect(socket).map_err(unreachable)?;
    let mut out = serde_json::to_vec(&NarrowRequest {
        tool: name.to_string(),
        arguments: args,
    })
    .map_err(|e| ToolError::Output(e.to_string()))?;
    out.push(b'\n');
    (&stream).write_all(&out).map_err(unreachable)?;
    let mut line = String::new();
    BufReader::new(&stream)
        .read_line(&mut line)
        .map_err(unreachable)?;
    match serde_json::from_str(&line) {
        Ok(NarrowResponse::Ok(v)) => Ok(v),
        Ok(NarrowResponse::Error { message, detail }) => Err(ToolError::Remote { message, detail }),
        Err(e) => Err(ToolError::Remote {
            message: format!("a bad answer from the narrow socket: {e}"),
            detail: None,
        }),
    }
}

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
//! VALUE|null}}`. One more request opens a turn for a prompt, sent by
//! the agent's prompt hook (`opfs hook`) inside the sandbox:
//!
//! ```json
//! {"turn": {"label": "the prompt", "id": "the session id"}}
//! ```
//!
//! answered by `{"ok": {"turn": N}}`. The daemon opens it as a hook
//! outside would (atomically with respect to mutations), under rules that
//! leave the history the user had untouched whatever the agent sends
//! (`docs/sandbox.md`, "Turns opened from inside"): the label is cut to
//! [`MAX_LABEL_BYTES`] and the id to [`MAX_ID_BYTES`]; an empty open turn
//! that was opened from inside (or the run's own placeholder turn) is
//! relabelled rather than followed by another; the turn is marked as
//! opened from inside, which count-based retention does not count; and
//! the request never starts retention. A tool that is not in [`TOOLS`], a
//! request of any other shape (a control request such as `{"op":
//! "rewind", ...}`, unknown fields, bad JSON) is refused with an error
//! and nothing runs: nothing on this socket rewinds, relabels a turn the
//! user opened, collects garbage or deletes history, and it serves no
//! other project.

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
use crate::control::Project;

/// The longest request line read (a tool's arguments are small).
const MAX_REQUEST: u64 = 1 << 20;

/// The longest label a turn opened from inside gets, in bytes (a longer
/// prompt is cut at a character boundary and ends with `…`).
pub const MAX_LABEL_BYTES: usize = 4096;

/// The longest session id a turn opened from inside gets, in bytes.
pub const MAX_ID_BYTES: usize = 256;

/// One request on the narrow socket.
#[derive(Debug, Deserialize, Serialize)]
#[serde(untagged)]
enum NarrowRequest {
    Tool(ToolRequest),
    Turn(TurnRequest),
}

/// A tool call.
#[derive(Debug, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
struct ToolRequest {
    tool: String,
    #[serde(default)]
    arguments: Value,
}

/// A prompt's turn.
#[derive(Debug, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
struct TurnRequest {
    turn: TurnFields,
}

#[derive(Debug, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
struct TurnFields {
    #[serde(default)]
    label: Option<String>,
    #[serde(default)]
    id: Option<String>,
}

/// What opens the turns the agent's prompt hook asks for: the project
/// (its daemon) and the turn `opfs run` opened for the session with a
/// label of its own, if any (the first prompt may relabel it while it is
/// empty).
#[derive(Debug, Clone)]
pub struct TurnOpener {
    /// The project, with the hook's bound on the daemon's answer.
    pub project: Project,
    /// The run's placeholder turn.
    pub placeholder: Option<u64>,
}

/// `s` cut to at most `max` bytes at a character boundary, ending with
/// `…` when it was cut.
pub fn cut_to(s: &str, max: usize) -> String {
    if s.len() <= max {
        return s.to_string();
    }
    let mut end = max.saturating_sub('…'.len_utf8());
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}…", &s[..end])
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
    /// is replaced) and serves `tools`, and turn requests through
    /// `turns` (refused without it), on a thread, one more thread per
    /// connection.
    ///
    /// Errors: the socket cannot be created.
    pub fn start(tools: Tools, turns: Option<TurnOpener>, path: &Path) -> io::Result<NarrowServer> {
        match std::fs::remove_file(path) {
            Ok(()) => {}
            Err(e) if e.kind() == io::ErrorKind::NotFound => {}
            Err(e) => return Err(e),
        }
        let listener = UnixListener::bind(path)?;
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600))?;
        let stop = Arc::new(AtomicBool::new(false));
        let tools = Arc::new((tools, turns));
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
                                    .spawn(move || {
                                        serve_connection(&tools.0, tools.1.as_ref(), stream)
                                    });
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

fn serve_connection(tools: &Tools, turns: Option<&TurnOpener>, stream: UnixStream) {
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
        let answer = answer(tools, turns, &line);
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

/// The answer to one request line: only a tool of [`TOOLS`] runs, or a
/// turn opens under the rules of [`TurnOpener`].
fn answer(tools: &Tools, turns: Option<&TurnOpener>, line: &str) -> NarrowResponse {
    let refused = |why: String| NarrowResponse::Error {
        message: format!(
            "refused: the narrow socket serves only the opfs MCP tools, as \
             {{\"tool\": NAME, \"arguments\": {{...}}}} ({why})"
        ),
        detail: None,
    };
    let req = match serde_json::from_str(line) {
        Ok(NarrowRequest::Tool(r)) => r,
        Ok(NarrowRequest::Turn(t)) => return open_turn(turns, t.turn),
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

/// Opens the turn of a prompt: label and id cut to their bounds, then
/// the daemon's [`crate::control::protocol::Request::SandboxTurn`].
fn open_turn(turns: Option<&TurnOpener>, t: TurnFields) -> NarrowResponse {
    let Some(opener) = turns else {
        return NarrowResponse::Error {
            message: "this opfs run was given --turn, so the whole run is one turn: no turn \
                      is opened from inside"
                .into(),
            detail: None,
        };
    };
    let label = t
        .label
        .filter(|l| !l.is_empty())
        .map(|l| cut_to(&l, MAX_LABEL_BYTES));
    let id =
        t.id.filter(|i| !i.is_empty())
            .map(|i| cut_to(&i, MAX_ID_BYTES));
    log::info!("narrow socket: a turn for a prompt");
    match opener
        .project
        .sandbox_turn(label.as_deref(), id.as_deref(), opener.placeholder)
    {
        Ok(turn) => NarrowResponse::Ok(serde_json::json!({ "turn": turn })),
        Err(e) => NarrowResponse::Error {
            message: e.to_string(),
            detail: None,
        },
    }
}

/// Asks the narrow socket at `socket` to open a turn labelled `label`
/// for session `id` (what `opfs hook` does inside the sandbox), waiting at
/// most `limit` for the answer. Returns the open turn's number.
///
/// Errors: the socket cannot be reached or does not answer in time, or
/// the server's message.
pub fn open_prompt_turn(
    socket: &Path,
    label: Option<&str>,
    id: Option<&str>,
    limit: std::time::Duration,
) -> Result<u64, String> {
    let unreachable = |e: io::Error| {
        format!(
            "cannot reach opfs run's narrow socket {}: {e} (has `opfs run` ended?)",
            socket.display()
        )
    };
    let stream = UnixStream::connect(socket).map_err(unreachable)?;
    stream.set_read_timeout(Some(limit)).map_err(unreachable)?;
    stream.set_write_timeout(Some(limit)).map_err(unreachable)?;
    let mut out = serde_json::to_vec(&NarrowRequest::Turn(TurnRequest {
        turn: TurnFields {
            label: label.map(String::from),
            id: id.map(String::from),
        },
    }))
    .map_err(|e| e.to_string())?;
    out.push(b'\n');
    (&stream).write_all(&out).map_err(unreachable)?;
    let mut line = String::new();
    BufReader::new(&stream)
        .read_line(&mut line)
        .map_err(unreachable)?;
    match serde_json::from_str(&line) {
        Ok(NarrowResponse::Ok(v)) => v["turn"]
            .as_u64()
            .ok_or_else(|| format!("a bad answer from the narrow socket: {v}")),
        Ok(NarrowResponse::Error { message, .. }) => Err(message),
        Err(e) => Err(format!("a bad answer from the narrow socket: {e}")),
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
    let mut out = serde_json::to_vec(&NarrowRequest::Tool(ToolRequest {
        tool: name.to_string(),
        arguments: args,
    }))
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn labels_are_cut_at_a_character_boundary() {
        assert_eq!(cut_to("short", 10), "short");
        let cut = cut_to(&"日本語".repeat(10), 10);
        assert!(cut.len() <= 10 && cut.ends_with('…'), "{cut}");
        assert_eq!(cut, "日本…");
        assert_eq!(
            cut_to(&"x".repeat(5000), MAX_LABEL_BYTES).len(),
            MAX_LABEL_BYTES
        );
    }

    #[test]
    fn turn_requests_parse_and_other_shapes_do_not() {
        let t: NarrowRequest =
            serde_json::from_str(r#"{"turn": {"label": "p", "id": "s"}}"#).expect("turn");
        assert!(matches!(t, NarrowRequest::Turn(_)));
        for bad in [
            r#"{"turn": {"label": "p", "placeholder": 3}}"#,
            r#"{"turn": {"label": "p"}, "tool": "history_log"}"#,
            r#"{"op": "turn", "label": "p"}"#,
        ] {
            assert!(serde_json::from_str::<NarrowRequest>(bad).is_err(), "{bad}");
        }
    }
}

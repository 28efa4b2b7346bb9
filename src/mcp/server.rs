//! The MCP front end of the tool table, on the `rmcp` crate: `tools/list`
//! from [`TOOLS`], `tools/call` through [`Tools::call`] on tokio's
//! blocking pool (the tools do file I/O, start daemons and wait for
//! merges). A tool's failure is a tool result with `isError: true` whose
//! text is the CLI's message; only an unknown tool name is a JSON-RPC
//! error (invalid params), as the MCP specification says.

use std::borrow::Cow;
use std::sync::Arc;

use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, ContentBlock, Implementation,
    ListToolsResult, PaginatedRequestParams, ServerCapabilities, ServerConfig, Tool,
    ToolAnnotations,
};
use rmcp::service::RequestContext;
use rmcp::{ErrorData, RoleServer, ServerHandler};
use serde_json::Value;

use super::tools::{cut_arguments, result_object, ToolError, TOOLS};
use super::Backend;

/// What the server tells the agent at `initialize`.
const INSTRUCTIONS: &str = "opfs records every change to this project per turn so the user \
can rewind it. Try ideas in worktrees: worktree_create gives a path to work in; \
worktree_diff shows what changed there; worktree_merge applies it to the project as one \
turn the user can rewind; worktree_discard drops it. history_log, history_diff and \
history_show read the project's history. Rewinding and deleting history are the user's.";

/// The rmcp handler over a tool table.
#[derive(Debug, Clone)]
pub(super) struct Handler {
    pub(super) tools: Arc<Backend>,
}

fn tool_list() -> Vec<Tool> {
    TOOLS
        .iter()
        .map(|t| {
            let schema = match (t.input_schema)() {
                Value::Object(m) => m,
                _ => Default::default(),
            };
            let output = match (t.output_schema)() {
                Value::Object(m) => m,
                _ => Default::default(),
            };
            let mut notes = ToolAnnotations::new();
            notes.read_only_hint = Some(t.read_only);
            notes.destructive_hint = Some(t.destructive);
            notes.idempotent_hint = Some(t.idempotent);
            notes.open_world_hint = Some(false);
            Tool::new(t.name, t.description, Arc::new(schema))
                .with_raw_output_schema(Arc::new(output))
                .with_annotations(notes)
        })
        .collect()
}

/// The error result of a failed call with `args` (long arguments cut
/// from its text, [`cut_arguments`]): the message, then the detail (a
/// merge report) as text and as `structuredContent`.
fn error_result(e: &ToolError, args: &Value) -> CallToolResult {
    let mut content = vec![ContentBlock::text(cut_arguments(&e.to_string(), args))];
    let detail = e.detail();
    if let Some(d) = &detail {
        content.push(ContentBlock::text(d.to_string()));
    }
    let mut r = CallToolResult::error(content);
    r.structured_content = detail;
    r
}

impl ServerHandler for Handler {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(ServerCapabilities::builder().enable_tools().build())
            .with_server_info(Implementation::new("opfs", env!("CARGO_PKG_VERSION")))
            .with_instructions(INSTRUCTIONS)
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        Ok(ListToolsResult {
            tools: tool_list(),
            ..Default::default()
        })
    }

    fn get_tool(&self, name: &str) -> Option<Tool> {
        // `None` for every tool: the tools check their own arguments, so
        // a bad one is a tool error the agent can read and correct.
        let _ = name;
        None
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        let name: Cow<'static, str> = request.name;
        if !TOOLS.iter().any(|t| t.name == name) {
            let e = ToolError::UnknownTool(name.to_string());
            let text = cut_arguments(&e.to_string(), &Value::String(name.into_owned()));
            return Err(ErrorData::invalid_params(text, None));
        }
        let args = request.arguments.map_or(Value::Null, Value::Object);
        let echo = args.clone();
        let tools = Arc::clone(&self.tools);
        let tool = name.clone();
        let outcome = tokio::task::spawn_blocking(move || tools.call(&tool, args))
            .await
            .map_err(|e| ErrorData::internal_error(format!("tool {name} failed: {e}"), None))?;
        Ok(match outcome {
            // Every result is an object: `structuredContent`, and the
            // same JSON as text for clients that read only `content`.
            Ok(v) => CallToolResult::structured(result_object(&name, v)),
            Err(e) => {
                let r = error_result(&e, &echo);
                if let Some(ContentBlock::Text(t)) = r.content.first() {
                    log::info!("tool {name}: {}", t.text);
                }
                r
            }
        }
        .into())
    }
}

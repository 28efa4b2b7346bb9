//! The tool table: each tool's name, description, hints and the JSON
//! schemas of its arguments and result.

use schemars::JsonSchema;
use serde_json::Value;

use super::args::{
    HistoryDiffArgs, HistoryLogArgs, HistoryShowArgs, NameArgs, NoArgs, WorktreeCreateArgs,
    WorktreeDiffArgs, WorktreeMergeArgs,
};
use super::output;

/// One tool as an MCP client lists it.
#[derive(Debug, Clone, Copy)]
pub struct ToolSpec {
    /// Its name (`tools/call`'s `name`).
    pub name: &'static str,
    /// What it does, for the agent.
    pub description: &'static str,
    /// True when it changes nothing (the history tools and the worktree
    /// listing and diff).
    pub read_only: bool,
    /// True when it may overwrite or delete what exists: the project's
    /// files (`worktree_merge`) or a worktree and its history
    /// (`worktree_discard`). MCP's `destructiveHint`.
    pub destructive: bool,
    /// True when calling it again with the same arguments changes nothing
    /// more (MCP's `idempotentHint`; read-only tools are).
    pub idempotent: bool,
    /// The JSON schema of its arguments (an object schema).
    pub input_schema: fn() -> Value,
    /// The JSON schema of its result (an object schema: every result is a
    /// JSON object, MCP's `structuredContent`).
    pub output_schema: fn() -> Value,
}

fn schema<T: JsonSchema>() -> Value {
    let mut v = serde_json::to_value(schemars::schema_for!(T)).unwrap_or(Value::Null);
    drop_custom_formats(&mut v);
    v
}

/// The `format`s JSON Schema (2020-12) defines. schemars adds its own
/// (`uint`, `uint64`, ... for Rust's integer types, beside `minimum: 0`),
/// which validators that check formats warn about on every start (Gemini
/// CLI prints `unknown format "uint" ignored in schema`); those are
/// dropped, the `type` and `minimum` say the same.
const STANDARD_FORMATS: &[&str] = &[
    "date-time",
    "date",
    "time",
    "duration",
    "email",
    "idn-email",
    "hostname",
    "idn-hostname",
    "ipv4",
    "ipv6",
    "uri",
    "uri-reference",
    "iri",
    "iri-reference",
    "uuid",
    "uri-template",
    "json-pointer",
    "relative-json-pointer",
    "regex",
];

fn drop_custom_formats(v: &mut Value) {
    match v {
        Value::Object(map) => {
            if map
                .get("format")
                .and_then(Value::as_str)
                .is_some_and(|f| !STANDARD_FORMATS.contains(&f))
            {
                map.remove("format");
            }
            map.values_mut().for_each(drop_custom_formats);
        }
        Value::Array(items) => items.iter_mut().for_each(drop_custom_formats),
        _ => {}
    }
}

/// Every tool, in the order `tools/list` gives them. Nothing else can be
/// called: [`Tools::call`] dispatches on exactly these names.
pub const TOOLS: &[ToolSpec] = &[
    ToolSpec {
        name: "worktree_create",
        description: "Make a copy-on-write worktree of the project, from the start of turn \
                      `from_turn` or (default) from now, and mount it; returns its name, path \
                      and base turn. Work in the returned path; the project is not touched.",
        read_only: false,
        destructive: false,
        idempotent: false,
        input_schema: schema::<WorktreeCreateArgs>,
        output_schema: output::created,
    },
    ToolSpec {
        name: "worktree_list",
        description: "List the project's worktrees as `{\"worktrees\": [...]}`: name, path, \
                      base turn, mounted, paths changed, paths whose base is unknown.",
        read_only: true,
        destructive: false,
        idempotent: true,
        input_schema: schema::<NoArgs>,
        output_schema: output::worktrees,
    },
    ToolSpec {
        name: "worktree_diff",
        description: "What worktree `name` changed against its base: a patch git can apply, \
                      or with `stat` a summary of changed lines per path. Paths the project's \
                      ignore rules ignore are left out, as a merge leaves them.",
        read_only: true,
        destructive: false,
        idempotent: true,
        input_schema: schema::<WorktreeDiffArgs>,
        output_schema: output::diff,
    },
    ToolSpec {
        name: "worktree_merge",
        description: "Apply worktree `name`'s changes to the project as one turn of kind \
                      `merge` (the user can rewind it). Paths the project changed too are \
                      merged three-way when clean; any other conflict stops the merge before \
                      it writes anything (an error result with the report listing the \
                      conflicts). Paths the project's ignore rules ignore are not merged. \
                      `dry_run` only plans.",
        read_only: false,
        destructive: true,
        idempotent: false,
        input_schema: schema::<WorktreeMergeArgs>,
        output_schema: output::merge,
    },
    ToolSpec {
        name: "worktree_discard",
        description: "Unmount worktree `name` and delete it (its changes and its own \
                      history; the project's history is untouched).",
        read_only: false,
        destructive: true,
        idempotent: true,
        input_schema: schema::<NameArgs>,
        output_schema: output::discarded,
    },
    ToolSpec {
        name: "history_log",
        description: "The project's turns as `{\"turns\": [...]}`, newest first (at most \
                      `limit`), with what each added, modified and deleted; each entry as in \
                      `opfs log --json`.",
        read_only: true,
        destructive: false,
        idempotent: true,
        input_schema: schema::<HistoryLogArgs>,
        output_schema: output::turns,
    },
    ToolSpec {
        name: "history_diff",
        description: "What turn N (`range` \"N\") or turns N..M (\"N..M\") changed, as a patch \
                      git can apply; `paths` narrows it to those paths (and what is below \
                      them).",
        read_only: true,
        destructive: false,
        idempotent: true,
        input_schema: schema::<HistoryDiffArgs>,
        output_schema: output::diff,
    },
    ToolSpec {
        name: "history_show",
        description: "The file or symlink at `path` as it was when turn `turn` began; the \
                      JSON of `opfs show N:PATH --json` (content in base64).",
        read_only: true,
        destructive: false,
        idempotent: true,
        input_schema: schema::<HistoryShowArgs>,
        output_schema: output::shown,
    },
];

//! The JSON schema of each tool's result (`outputSchema` in `tools/list`).
//! Every result is an object (a list is wrapped: `{"worktrees": [...]}`,
//! `{"turns": [...]}`), because MCP's `structuredContent` must be one and
//! clients (Gemini CLI) refuse anything else. The schemas name the fields
//! a result always has; results may carry more (`additionalProperties`
//! is left open, so a new field is no break).

use serde_json::{json, Value};

fn object(properties: Value, required: &[&str]) -> Value {
    json!({ "type": "object", "properties": properties, "required": required })
}

fn text(description: &str) -> Value {
    json!({ "type": "string", "description": description })
}

fn count(description: &str) -> Value {
    json!({ "type": "integer", "minimum": 0, "description": description })
}

fn strings(description: &str) -> Value {
    json!({ "type": "array", "items": { "type": "string" }, "description": description })
}

/// `worktree_create`.
pub(super) fn created() -> Value {
    object(
        json!({
            "name": text("the worktree's name"),
            "path": text("where it is mounted: work there"),
            "base_turn": count("the project turn whose start it shows"),
            "note": text("inside opfs run's sandbox, when the path is outside it: why, and how to reach the worktree"),
        }),
        &["name", "path", "base_turn"],
    )
}

/// `worktree_list`.
pub(super) fn worktrees() -> Value {
    let row = object(
        json!({
            "name": text("its name"),
            "path": text("its mountpoint"),
            "base_turn": count("the project turn whose start is its base"),
            "mounted": { "type": "boolean", "description": "true while a daemon serves it" },
            "changed": count("paths changed against the base"),
            "drifted": count("paths whose base is not known"),
            "created_by": { "type": "string", "enum": ["user", "agent"], "description": "who made it" },
        }),
        &[
            "name",
            "path",
            "base_turn",
            "mounted",
            "changed",
            "drifted",
            "created_by",
        ],
    );
    object(
        json!({ "worktrees": { "type": "array", "items": row, "description": "every worktree of the project" } }),
        &["worktrees"],
    )
}

/// `worktree_diff` and `history_diff`.
pub(super) fn diff() -> Value {
    object(
        json!({ "output": text("the patch (git apply takes it), or the stat") }),
        &["output"],
    )
}

/// `worktree_merge` (also the `structuredContent` of its conflict
/// error).
pub(super) fn merge() -> Value {
    object(
        json!({
            "worktree": text("the worktree merged"),
            "turn": { "type": ["integer", "null"], "minimum": 0, "description": "the project turn that records the merge (null for a dry run)" },
            "base_turn": count("the worktree's base turn"),
            "dry_run": { "type": "boolean" },
            "merged": strings("paths the project now holds as the worktree has them"),
            "three_way": strings("paths both sides changed, combined by a clean three-way merge"),
            "conflicts": { "type": "array", "description": "paths left as the project has them, with the reason" },
            "plan": { "type": "array", "description": "what was (or would be) done per path" },
            "open_turn": count("the turn open after the merge"),
            "stopped_by_conflicts": { "type": "boolean", "description": "true when a conflict stopped the merge: nothing was merged" },
            "marked": strings("text files written with conflict markers"),
            "ignored": count("changed paths the project's ignore rules ignore, left out of the merge"),
        }),
        &[
            "worktree",
            "turn",
            "base_turn",
            "dry_run",
            "merged",
            "conflicts",
            "plan",
            "open_turn",
        ],
    )
}

/// `worktree_discard`.
pub(super) fn discarded() -> Value {
    object(
        json!({ "discarded": text("the worktree deleted") }),
        &["discarded"],
    )
}

/// `history_log`.
pub(super) fn turns() -> Value {
    let nullable = |t: &str, d: &str| json!({ "type": [t, "null"], "description": d });
    let turn = object(
        json!({
            "turn": count("the turn's number"),
            "kind": { "type": "string", "enum": ["agent", "rewind", "merge"] },
            "label": nullable("string", "its label, cut to 1024 bytes and ended with … when longer"),
            "label_bytes": count("when the label was cut: the whole label's length in bytes (`opfs log --json` gives it whole)"),
            "external_id": nullable("string", "the agent's session id"),
            "started_at": text("RFC 3339"),
            "ended_at": nullable("string", "RFC 3339; null for the open turn"),
            "started_at_ns": { "type": "integer", "description": "ns since the Unix epoch" },
            "ended_at_ns": nullable("integer", "ns since the Unix epoch"),
            "rewound_to": nullable("integer", "for a rewind: the turn whose start was restored"),
            "added": count("files and symlinks added"),
            "modified": count("files and symlinks modified"),
            "deleted": count("files and symlinks deleted"),
            "paths": count("paths recorded"),
            "bytes_stored": count("bytes of the pre-images kept"),
            "git_changes": strings("paths under .git the turn changed"),
            "outside_edits": { "type": "array", "description": "edits made behind the mount, kept" },
        }),
        &[
            "turn",
            "kind",
            "started_at",
            "added",
            "modified",
            "deleted",
            "paths",
        ],
    );
    object(
        json!({ "turns": { "type": "array", "items": turn, "description": "the project's turns, newest first" } }),
        &["turns"],
    )
}

/// `history_show`.
pub(super) fn shown() -> Value {
    object(
        json!({
            "turn": count("the turn at whose start the path is shown"),
            "path": text("the project-relative path"),
            "kind": { "type": "string", "enum": ["file", "symlink"] },
            "perm": text("a file's permission bits, octal"),
            "size": count("a file's size in bytes"),
            "content_base64": text("a file's content, base64"),
            "target": text("a symlink's target"),
            "target_base64": text("a symlink's target, base64"),
        }),
        &["turn", "path", "kind"],
    )
}

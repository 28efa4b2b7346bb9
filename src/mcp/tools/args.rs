//! The typed arguments of each tool, decoded from the JSON of `tools/call`
//! (unknown fields refused).

use schemars::JsonSchema;
use serde::Deserialize;

/// No arguments.
#[derive(Debug, Clone, Default, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct NoArgs {}

/// A worktree's name.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct NameArgs {
    /// The worktree's name.
    pub name: String,
}

/// `worktree_create`.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct WorktreeCreateArgs {
    /// Its name: letters, digits, '-', '_', '.'.
    pub name: String,
    /// The project turn whose start it shows (default: now).
    #[serde(default)]
    pub from_turn: Option<u64>,
}

/// `worktree_diff`.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct WorktreeDiffArgs {
    /// The worktree's name.
    pub name: String,
    /// A summary of changed lines per path instead of the patch.
    #[serde(default)]
    pub stat: bool,
}

/// `worktree_merge`. There is no `force`: paths the user changed in the
/// project stay the user's.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct WorktreeMergeArgs {
    /// The worktree's name.
    pub name: String,
    /// Only plan: report what would be merged, change nothing.
    #[serde(default)]
    pub dry_run: bool,
}

/// `history_log`.
#[derive(Debug, Clone, Default, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct HistoryLogArgs {
    /// At most this many turns, newest first (default: all).
    #[serde(default)]
    pub limit: Option<usize>,
}

/// `history_diff`.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct HistoryDiffArgs {
    /// A turn `N` or an inclusive range `N..M` (turns start at 1).
    pub range: String,
    /// Only these project-relative paths (and what is below them).
    #[serde(default)]
    pub paths: Vec<String>,
}

/// `history_show`.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct HistoryShowArgs {
    /// The turn (from 1) at whose start to look.
    pub turn: u64,
    /// The project-relative path.
    pub path: String,
}

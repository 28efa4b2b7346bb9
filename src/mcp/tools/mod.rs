//! The tool table of `opfs mcp`, independent of any transport: one
//! function per tool, each taking its typed arguments and returning a
//! typed result, plus [`TOOLS`] (name, description, argument schema) and
//! [`Tools::call`], which decodes JSON arguments, runs the tool and encodes
//! its result. The stdio server ([`super::serve`]) is one front end; a
//! later narrow socket inside `opfs run`'s sandbox can be another.
//!
//! What is here and what is not is the guarantee-8 decision
//! (`docs/mcp.md`): worktree tools and read-only history, nothing that
//! rewinds, opens or closes a turn of its own accord, collects garbage,
//! exports or deletes the project's history; `worktree_merge` has no
//! `force` (an agent must not override the user's edits).

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use serde::de::DeserializeOwned;
use serde::Serialize;
use serde_json::{json, Value};

use crate::control::client::{commit_through_daemon, ClientError, Project};
use crate::daemon::worktree::{Asked, Served};
use crate::daemon::DaemonOptions;
use crate::diff;
use crate::history::{self, HistoryError, Opened};
use crate::worktree::history::WorktreeHistory;
use crate::worktree::life::{self as wt_cmd, Listed, WorktreeCmdError};
use crate::worktree::merge::MergeReport;
use crate::worktree::{Creator, Worktree};

mod args;
mod output;
mod spec;

pub use args::*;
pub use spec::{ToolSpec, TOOLS};

/// Where `opfs run`'s sandbox shows the project's worktrees (those
/// mounted when it started and, with a shared folder, those created during
/// the run), each at `WORKTREES_INSIDE/NAME` (on the sandbox's private
/// `/tmp`).
pub const WORKTREES_INSIDE: &str = "/tmp/opfs-worktrees";

/// A running sandbox's shared worktree folder, as the tools reach it
/// (implemented in `crate::sandbox`; `docs/mcp.md` "Worktrees inside the
/// sandbox"): a mount made in it outside shows inside at once, under
/// [`WORKTREES_INSIDE`].
pub trait SandboxBinds: Send + Sync + std::fmt::Debug {
    /// Binds the worktree `name`, mounted outside at `mountpoint`, into the
    /// running sandbox; returns where it shows inside.
    ///
    /// Errors: the sandbox has ended, or the bind mount failed; nothing is
    /// left bound then.
    fn bind(&self, name: &str, mountpoint: &Path) -> std::io::Result<PathBuf>;

    /// Removes worktree `name` from the running sandbox, if [`Self::bind`]
    /// put it there: `Ok(true)` when it was bound and is gone, `Ok(false)`
    /// when it was not bound.
    ///
    /// Errors: a process inside still uses it (`EBUSY`); it stays bound.
    fn unbind(&self, name: &str) -> std::io::Result<bool>;
}

/// What the tools know of the sandbox they serve ([`Tools::in_sandbox`]).
#[derive(Debug)]
struct SandboxView {
    /// Worktrees mounted when the sandbox started: it holds a copy of
    /// their mounts until it ends, so they cannot be discarded from inside.
    at_start: BTreeSet<String>,
    /// Where each worktree the sandbox shows appears inside; grows as
    /// `worktree_create` binds new ones, shrinks as `worktree_discard`
    /// removes them.
    visible: Mutex<BTreeMap<String, PathBuf>>,
    /// The shared folder, or why there is none (new worktrees are then
    /// reachable inside from the next run on).
    binds: Result<Arc<dyn SandboxBinds>, String>,
}

impl SandboxView {
    fn visible(&self) -> std::sync::MutexGuard<'_, BTreeMap<String, PathBuf>> {
        // A panic elsewhere while holding it leaves a usable map.
        self.visible.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// What `worktree_create` returns.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Created {
    /// Its name.
    pub name: String,
    /// Where it is mounted: work there.
    pub path: PathBuf,
    /// The project turn whose start it shows.
    pub base_turn: u64,
    /// Inside `opfs run`'s sandbox, when it cannot show the new worktree
    /// at once (no shared folder, or its bind failed): `path` is outside
    /// it, why, and how to reach the worktree (`docs/mcp.md` "Worktrees
    /// inside the sandbox").
    #[serde(skip_serializing_if = "Option::is_none")]
    pub note: Option<String>,
}

/// What `worktree_diff` and `history_diff` return.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct DiffOutput {
    /// The patch (or the stat), as text (bytes that are not UTF-8 are
    /// replaced).
    pub output: String,
}

/// What `worktree_discard` returns.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Discarded {
    /// The worktree deleted.
    pub discarded: String,
}

/// Why a tool call failed. The message is the one the CLI prints for the
/// same failure (after `opfs: `).
#[derive(Debug, thiserror::Error)]
pub enum ToolError {
    /// No tool has that name.
    #[error("there is no tool {0:?}; the tools are {names}", names = tool_names())]
    UnknownTool(String),
    /// The arguments do not fit the tool's schema.
    #[error("bad arguments for {tool}: {message}")]
    BadArguments {
        /// The tool.
        tool: &'static str,
        /// What serde said (names the field).
        message: String,
    },
    /// A worktree operation failed.
    #[error(transparent)]
    Worktree(#[from] WorktreeCmdError),
    /// The daemon refused, or the direct operation failed.
    #[error(transparent)]
    Client(#[from] ClientError),
    /// Reading the history failed.
    #[error(transparent)]
    History(#[from] HistoryError),
    /// A merge had conflicts (the CLI exits 3): it merged nothing; the
    /// report lists them and what the other paths would get.
    #[error("{}", conflict_lines(.0))]
    Conflicts(Box<MergeReport>),
    /// A patch could not be rendered or a result encoded.
    #[error("{0}")]
    Output(String),
    /// `worktree_discard` of a worktree bound into the running sandbox:
    /// its mount cannot stop while the sandbox holds it.
    #[error(
        "worktree {0:?} is bound into this sandbox (at {WORKTREES_INSIDE}/{0}) and cannot be \
         unmounted while the sandbox runs: discard it after this `opfs run` ends (the user can \
         run `opfs worktree discard {0}`); worktree_diff and worktree_merge work on it now"
    )]
    BoundInSandbox(String),
    /// `worktree_discard` of a worktree bound into the running sandbox
    /// after it started, which a process inside still uses: it stays bound
    /// and mounted.
    #[error(
        "worktree {name:?} is in use inside this sandbox (a process has its current directory or \
         a file open under {WORKTREES_INSIDE}/{name}), so it was not discarded: {source}; leave \
         it and try again"
    )]
    InUseInSandbox {
        /// The worktree.
        name: String,
        /// What the unmount said.
        source: std::io::Error,
    },
    /// `worktree_merge` or `worktree_discard` of a worktree the user made
    /// (`opfs worktree create`, or one whose metadata predates the
    /// record of who made it): the agent's tools act only on the agent's
    /// worktrees. Nothing was changed.
    #[error(
        "worktree {0:?} was made by the user (`opfs worktree create`), not through these tools, \
         so the agent may not merge or discard it: nothing was changed; worktree_diff and \
         worktree_list work on it, and the user can run `opfs worktree merge {0}` or \
         `opfs worktree discard {0}`"
    )]
    NotTheAgents(String),
    /// The tool ran behind the narrow socket (`super::narrow`) and failed
    /// there, or the socket could not be reached: its message and detail.
    #[error("{message}")]
    Remote {
        /// The message of the failure.
        message: String,
        /// Data that goes with it (a merge report).
        detail: Option<Value>,
    },
}

/// Tool `tool`'s result `v` (as [`Tools::call`] returns it) as the JSON
/// object MCP's `structuredContent` must be, matching the tool's
/// `output_schema`: the lists of `worktree_list` and `history_log` under
/// `worktrees` and `turns`; objects as they are.
pub fn result_object(tool: &str, v: Value) -> Value {
    match v {
        Value::Object(_) => v,
        other => {
            let key = match tool {
                "worktree_list" => "worktrees",
                "history_log" => "turns",
                _ => "result",
            };
            json!({ key: other })
        }
    }
}

/// The most characters of one argument an error text repeats
/// ([`cut_arguments`]).
pub const ARGUMENT_ECHO_CHARS: usize = 200;

/// `message` with every string in `args` (values and keys, at any depth)
/// longer than [`ARGUMENT_ECHO_CHARS`] characters cut to its first
/// [`ARGUMENT_ECHO_CHARS`] characters and `… (N bytes)`, wherever the
/// message repeats it as it is or escaped (`{:?}`, JSON): an agent that
/// sent a 1 MB path gets the reason, not its megabyte back.
pub fn cut_arguments(message: &str, args: &Value) -> String {
    let mut long = Vec::new();
    collect_long_strings(args, &mut long);
    if long.is_empty() {
        return message.to_string();
    }
    // Longest first, so a string inside another is cut in the longer one.
    long.sort_by_key(|s| std::cmp::Reverse(s.len()));
    let mut out = message.to_string();
    for s in long {
        let cut = cut_one(s);
        let debug = format!("{s:?}");
        let json = Value::String(s.to_string()).to_string();
        for form in [
            s.to_string(),
            debug[1..debug.len() - 1].to_string(),
            json[1..json.len() - 1].to_string(),
        ] {
            if out.contains(&form) {
                out = out.replace(&form, &cut);
            }
        }
    }
    out
}

fn cut_one(s: &str) -> String {
    let head: String = s.chars().take(ARGUMENT_ECHO_CHARS).collect();
    format!("{head}… ({} bytes)", s.len())
}

fn collect_long_strings<'a>(v: &'a Value, out: &mut Vec<&'a str>) {
    match v {
        Value::String(s) if s.chars().nth(ARGUMENT_ECHO_CHARS).is_some() => out.push(s),
        Value::Array(items) => items.iter().for_each(|i| collect_long_strings(i, out)),
        Value::Object(map) => {
            for (k, v) in map {
                if k.chars().nth(ARGUMENT_ECHO_CHARS).is_some() {
                    out.push(k);
                }
                collect_long_strings(v, out);
            }
        }
        _ => {}
    }
}

fn tool_names() -> String {
    TOOLS.iter().map(|t| t.name).collect::<Vec<_>>().join(", ")
}

fn conflict_lines(r: &MergeReport) -> String {
    let mut lines: Vec<String> = r
        .conflicts
        .iter()
        .map(|c| format!("not merged: {c}"))
        .collect();
    if r.stopped_by_conflicts {
        lines.push(format!(
            "nothing was merged ({} other path(s) would be); the user can merge with \
             `opfs worktree merge {} --partial`, `--force` or `--markers`",
            r.plan.len(),
            r.worktree
        ));
    }
    lines.join("\n")
}

impl ToolError {
    /// Data that goes with the error: the merge report of
    /// [`ToolError::Conflicts`].
    pub fn detail(&self) -> Option<Value> {
        match self {
            ToolError::Conflicts(r) => serde_json::to_value(r).ok(),
            ToolError::Remote { detail, .. } => detail.clone(),
            _ => None,
        }
    }
}

/// The tools of one project.
#[derive(Debug, Clone)]
pub struct Tools {
    home: PathBuf,
    project: Project,
    opts: DaemonOptions,
    verbose: u8,
    /// Serving `opfs run`'s sandbox: what it shows ([`Tools::in_sandbox`]).
    sandbox: Option<Arc<SandboxView>>,
}

fn decode<A: DeserializeOwned>(tool: &'static str, args: Value) -> Result<A, ToolError> {
    let args = if args.is_null() {
        Value::Object(Default::default())
    } else {
        args
    };
    serde_json::from_value(args).map_err(|e| ToolError::BadArguments {
        tool,
        message: e.to_string(),
    })
}

fn encode<R: Serialize>(r: R) -> Result<Value, ToolError> {
    serde_json::to_value(r).map_err(|e| ToolError::Output(format!("cannot encode the result: {e}")))
}

impl Tools {
    /// The tools of `project`, whose state lives under `home`; worktree
    /// daemons start with `opts` (the CLI passes its own, as for `opfs
    /// worktree create`) and log at `verbose`.
    pub fn new(home: PathBuf, project: Project, opts: DaemonOptions, verbose: u8) -> Tools {
        Tools {
            home,
            project,
            opts,
            verbose,
            sandbox: None,
        }
    }

    /// These tools serve `opfs run`'s sandbox. `at_start` names the
    /// worktrees mounted when it started (it holds their mounts until it
    /// ends: `worktree_discard` refuses them); `visible` (name → path
    /// inside) those bound into it, whose inside paths `worktree_list`
    /// gives. With `binds` (the sandbox's shared folder),
    /// `worktree_create` binds the new worktree into the running sandbox
    /// and answers with its inside path, and `worktree_discard` unbinds it
    /// first; with `Err(why)` the new worktree is reachable inside from
    /// the next run on, which its `note` says, with `why`.
    pub fn in_sandbox(
        mut self,
        at_start: BTreeSet<String>,
        visible: BTreeMap<String, PathBuf>,
        binds: Result<Arc<dyn SandboxBinds>, String>,
    ) -> Tools {
        self.sandbox = Some(Arc::new(SandboxView {
            at_start,
            visible: Mutex::new(visible),
            binds,
        }));
        self
    }

    /// Runs tool `name` with JSON `args` (an object; `null` counts as
    /// `{}`) and returns its JSON result.
    ///
    /// Errors: [`ToolError::UnknownTool`], [`ToolError::BadArguments`], or
    /// the tool's own.
    pub fn call(&self, name: &str, args: Value) -> Result<Value, ToolError> {
        let spec = TOOLS
            .iter()
            .find(|t| t.name == name)
            .ok_or_else(|| ToolError::UnknownTool(name.to_string()))?;
        let tool = spec.name;
        match tool {
            "worktree_create" => encode(self.worktree_create(decode(tool, args)?)?),
            "worktree_list" => encode(self.worktree_list(decode(tool, args)?)?),
            "worktree_diff" => encode(self.worktree_diff(decode(tool, args)?)?),
            "worktree_merge" => encode(self.worktree_merge(decode(tool, args)?)?),
            "worktree_discard" => encode(self.worktree_discard(decode(tool, args)?)?),
            "history_log" => self.history_log(decode(tool, args)?),
            "history_diff" => encode(self.history_diff(decode(tool, args)?)?),
            "history_show" => self.history_show(decode(tool, args)?),
            _ => Err(ToolError::UnknownTool(name.to_string())),
        }
    }

    /// The daemons as the worktree tools start and stop them.
    fn served(&self) -> Served<'_> {
        Served {
            home: &self.home,
            opts: &self.opts,
            verbose: self.verbose,
        }
    }

    /// `worktree_create`: as `opfs worktree create NAME [--from N]`
    /// (mounted in its folder of the state dir; no custom mountpoint).
    /// From now, when the open turn already has records, the project gets
    /// a new turn labelled `worktree NAME` so the base is exact. Serving a
    /// sandbox with a shared folder, the worktree is bound into it and
    /// `path` is where it shows inside; without one (or if the bind fails)
    /// `path` is outside and `note` says so and why.
    ///
    /// Errors: as [`wt_cmd::create`] (a failed bind is not an error: the
    /// worktree exists and is mounted outside).
    pub fn worktree_create(&self, a: WorktreeCreateArgs) -> Result<Created, ToolError> {
        let meta = wt_cmd::create(
            &self.home,
            &self.project,
            &a.name,
            a.from_turn,
            None,
            Creator::Agent,
            &self.served(),
        )?;
        let Some(view) = &self.sandbox else {
            return Ok(Created {
                name: meta.name,
                path: meta.mountpoint,
                base_turn: meta.base_turn,
                note: None,
            });
        };
        let why = match &view.binds {
            Ok(binds) => match binds.bind(&meta.name, &meta.mountpoint) {
                Ok(inside) => {
                    view.visible().insert(meta.name.clone(), inside.clone());
                    return Ok(Created {
                        name: meta.name,
                        path: inside,
                        base_turn: meta.base_turn,
                        note: None,
                    });
                }
                Err(e) => format!("binding it into this sandbox failed: {e}"),
            },
            Err(why) => why.clone(),
        };
        let note = format!(
            "the worktree is mounted outside this sandbox, at {}, and this sandbox cannot show \
             mounts made after it started ({why}): a sandbox shows the worktrees that were mounted \
             when `opfs run` started (at {}/NAME), so files of this one can be edited from the \
             next `opfs run` on (or by the user outside, or in `opfs run --worktree {}`); \
             worktree_diff, worktree_merge and worktree_discard work on it by name now",
            meta.mountpoint.display(),
            WORKTREES_INSIDE,
            meta.name
        );
        Ok(Created {
            name: meta.name,
            path: meta.mountpoint,
            base_turn: meta.base_turn,
            note: Some(note),
        })
    }

    /// `worktree_list`: the rows of `opfs worktree list --json`.
    ///
    /// Errors: as [`wt_cmd::list`].
    pub fn worktree_list(&self, _: NoArgs) -> Result<Vec<Listed>, ToolError> {
        let mut rows = wt_cmd::list(&self.home, self.project.state(), &Asked)?;
        if let Some(view) = &self.sandbox {
            let visible = view.visible();
            for r in &mut rows {
                if let Some(inside) = visible.get(&r.name) {
                    r.path = inside.clone();
                }
            }
        }
        Ok(rows)
    }

    /// `worktree_diff`: the patch (or `--stat`) of `opfs worktree diff`.
    ///
    /// Errors: as [`wt_cmd::diffs`].
    pub fn worktree_diff(&self, a: WorktreeDiffArgs) -> Result<DiffOutput, ToolError> {
        let (_, diffs) =
            wt_cmd::diffs(self.project.state(), &a.name, false, commit_through_daemon)?;
        render(&diffs, a.stat)
    }

    /// `worktree_merge`: `opfs worktree merge NAME [--dry-run]`, never
    /// `--force`; recorded as one project turn of kind `merge`.
    ///
    /// Errors: [`ToolError::NotTheAgents`] for a worktree the user made;
    /// as [`Project::merge`]; [`ToolError::Conflicts`] (with the
    /// report) when paths were left as the project has them.
    pub fn worktree_merge(&self, a: WorktreeMergeArgs) -> Result<MergeReport, ToolError> {
        self.agents_own(&a.name)?;
        let opts = crate::worktree::merge::MergeOptions {
            dry_run: a.dry_run,
            ..Default::default()
        };
        let report = self.project.merge(&a.name, opts)?;
        if report.conflicts.is_empty() {
            Ok(report)
        } else {
            Err(ToolError::Conflicts(Box::new(report)))
        }
    }

    /// `worktree_discard`: `opfs worktree discard NAME`. Serving a
    /// sandbox, a worktree bound into it after it started is unbound first
    /// (and bound again if the discard then fails).
    ///
    /// Errors: [`ToolError::NotTheAgents`] for a worktree the user made
    /// (checked first: nothing is unmounted); as [`wt_cmd::discard`];
    /// serving a sandbox,
    /// [`ToolError::BoundInSandbox`] for a worktree mounted when it started
    /// and [`ToolError::InUseInSandbox`] for one a process inside uses
    /// (nothing is unmounted in either case).
    pub fn worktree_discard(&self, a: NameArgs) -> Result<Discarded, ToolError> {
        self.agents_own(&a.name)?;
        let Some(view) = &self.sandbox else {
            wt_cmd::discard(&self.home, self.project.state(), &a.name, &self.served())?;
            return Ok(Discarded { discarded: a.name });
        };
        // Refused before anything is unmounted: the sandbox holds a copy of
        // the mounts that existed when it started, so the host's unmount
        // would succeed, the daemon would wait for the sandbox's copy, and
        // the worktree would be left unmounted outside.
        if view.at_start.contains(&a.name) {
            return Err(ToolError::BoundInSandbox(a.name));
        }
        // One bound since: its bind goes first (the unmount reaches the
        // sandbox's copies through the shared folder), or nothing happens
        // while a process inside uses it.
        let binds = view.binds.as_ref().ok();
        let mut unbound = None;
        if let Some(b) = binds {
            match b.unbind(&a.name) {
                Ok(true) => unbound = view.visible().remove(&a.name),
                Ok(false) => {}
                Err(source) => {
                    return Err(ToolError::InUseInSandbox {
                        name: a.name,
                        source,
                    })
                }
            }
        }
        if let Err(e) = wt_cmd::discard(&self.home, self.project.state(), &a.name, &self.served()) {
            // Still there (its daemon refused to stop): show it again.
            if let (Some(b), Some(_)) = (binds, unbound) {
                if let Ok(meta) =
                    crate::worktree::Worktree::of(self.project.state(), &a.name).meta()
                {
                    if let Ok(inside) = b.bind(&a.name, &meta.mountpoint) {
                        view.visible().insert(a.name.clone(), inside);
                    }
                }
            }
            return Err(e.into());
        }
        Ok(Discarded { discarded: a.name })
    }

    /// Refuses a worktree the agent did not make through these tools
    /// ([`Creator::User`], which a `worktree.json` without the field
    /// counts as).
    ///
    /// Errors: [`ToolError::NotTheAgents`]; the worktree's metadata
    /// missing or unreadable, as [`wt_cmd::discard`] says it.
    fn agents_own(&self, name: &str) -> Result<(), ToolError> {
        crate::worktree::check_name(name).map_err(WorktreeCmdError::from)?;
        let meta = Worktree::of(self.project.state(), name)
            .meta()
            .map_err(WorktreeCmdError::from)?;
        match meta.created_by {
            Creator::Agent => Ok(()),
            Creator::User => Err(ToolError::NotTheAgents(name.to_string())),
        }
    }

    /// `history_log`: `opfs log --json`, the newest `limit` entries.
    ///
    /// Errors: the daemon cannot commit its capture log; the history
    /// cannot be read.
    pub fn history_log(&self, a: HistoryLogArgs) -> Result<Value, ToolError> {
        self.project.commit_pending()?;
        let st = self.project.state().clone();
        let opened = Opened::open(
            self.project.state(),
            Box::new(move || commit_through_daemon(&st)),
        )?;
        // In a worktree (`opfs -C <worktree path> mcp`): its view.
        // A worktree keeps no edits made behind the mount.
        let (mut entries, kept) =
            match wt_cmd::history_base(self.project.state(), commit_through_daemon).transpose()? {
                Some((_, _, base)) => (
                    WorktreeHistory::new(opened.sources(), &base).log()?,
                    Vec::new(),
                ),
                None => (
                    history::log(&opened.sources())?,
                    history::outside_edits(&opened.sources(), None)?,
                ),
            };
        if let Some(n) = a.limit {
            entries.truncate(n);
        }
        let git_changes = crate::capture::git_note::git_changes(self.project.state())
            .into_iter()
            .collect();
        let mut log = history::log_json(&entries, &kept, &git_changes);
        cut_labels(&mut log, LABEL_SHOWN);
        Ok(log)
    }

    /// `history_diff`: the patch of `opfs diff RANGE [PATH...]`.
    ///
    /// Errors: a bad range or path (as the CLI's), an unknown turn, the
    /// history cannot be read.
    pub fn history_diff(&self, a: HistoryDiffArgs) -> Result<DiffOutput, ToolError> {
        self.project.commit_pending()?;
        let (from, to) = history::parse_range_arg(&a.range)?;
        let filter = a
            .paths
            .iter()
            .map(|p| history::parse_path(p))
            .collect::<Result<Vec<_>, _>>()?;
        let st = self.project.state().clone();
        let opened = Opened::open(
            self.project.state(),
            Box::new(move || commit_through_daemon(&st)),
        )?;
        let src = opened.sources();
        let changes =
            match wt_cmd::history_base(self.project.state(), commit_through_daemon).transpose()? {
                Some((_, _, base)) => {
                    WorktreeHistory::new(src, &base)
                        .changes(from, to, &filter)?
                        .0
                }
                None => history::changes(&src, from, to, &filter)?,
            };
        let diffs = diff::build(&src, &changes)?;
        render(&diffs, false)
    }

    /// `history_show`: `opfs show TURN:PATH --json`.
    ///
    /// Errors: a bad path, an unknown turn, the path absent, unknown or
    /// without content then, the history cannot be read.
    pub fn history_show(&self, a: HistoryShowArgs) -> Result<Value, ToolError> {
        self.project.commit_pending()?;
        let path = history::parse_path(&a.path)?;
        let st = self.project.state().clone();
        let opened = Opened::open(
            self.project.state(),
            Box::new(move || commit_through_daemon(&st)),
        )?;
        let shown =
            match wt_cmd::history_base(self.project.state(), commit_through_daemon).transpose()? {
                Some((_, _, base)) => {
                    WorktreeHistory::new(opened.sources(), &base).show_entry(a.turn, &path)?
                }
                None => history::show_entry(&opened.sources(), a.turn, &path)?,
            };
        Ok(history::show_json(a.turn, &path, &shown))
    }
}

fn render(diffs: &[diff::FileDiff], stat: bool) -> Result<DiffOutput, ToolError> {
    let mut buf = Vec::new();
    let written = if stat {
        diff::write_stat(diffs, &mut buf)
    } else {
        diff::write_patch(diffs, &mut buf)
    };
    written.map_err(|e| ToolError::Output(format!("cannot render the patch: {e}")))?;
    Ok(DiffOutput {
        output: String::from_utf8_lossy(&buf).into_owned(),
    })
}

#[cfg(test)]
mod tests;

/// The bytes of a label `history_log` gives whole; a longer one (a pasted
/// file as the prompt, say) is cut there, at a character boundary.
pub const LABEL_SHOWN: usize = 1024;

/// Cuts each `label` of the turns in `log` (a JSON array of `opfs log
/// --json` entries) to at most `max` bytes, ending it with `…` and setting
/// `label_bytes` to the whole label's length: an agent reading its history
/// gets every turn without one long prompt filling its context
/// (`opfs log --json` gives the label whole).
fn cut_labels(log: &mut Value, max: usize) {
    let Some(turns) = log.as_array_mut() else {
        return;
    };
    for t in turns {
        let Some(label) = t.get("label").and_then(Value::as_str) else {
            continue;
        };
        if label.len() <= max {
            continue;
        }
        let whole = label.len();
        let mut end = max;
        while !label.is_char_boundary(end) {
            end -= 1;
        }
        let cut = format!("{}…", &label[..end]);
        t["label"] = Value::String(cut);
        t["label_bytes"] = Value::from(whole);
    }
}

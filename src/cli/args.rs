//! The clap tree: global flags and one arguments struct per command.
//!
//! Each command's help is the doc comment on its [`Cmd`] variant; the
//! structs carry only their fields' help.

use std::ffi::OsString;
use std::path::PathBuf;

use clap::{Parser, Subcommand, ValueEnum};

/// Reversible workspaces for AI coding agents.
#[derive(Debug, Parser)]
#[command(name = "opfs", version, about)]
pub struct Cli {
    /// Run as if started in PATH (a project, a mountpoint, or inside one).
    #[arg(short = 'C', global = true, value_name = "PATH")]
    pub dir: Option<PathBuf>,
    /// Print machine-readable JSON.
    #[arg(long, global = true)]
    pub json: bool,
    /// More log output (repeat for more).
    #[arg(short, long, global = true, action = clap::ArgAction::Count)]
    pub verbose: u8,
    /// Colour in `diff` and `log`: auto (on a terminal, unless NO_COLOR
    /// is set), always or never.
    #[arg(
        long,
        global = true,
        value_enum,
        value_name = "WHEN",
        default_value = "auto"
    )]
    pub color: ColorWhen,
    /// Never page the output of `diff` and `log`.
    #[arg(long, global = true)]
    pub no_pager: bool,
    #[command(subcommand)]
    pub command: Cmd,
}

#[derive(Debug, Subcommand)]
pub enum Cmd {
    /// Serve PROJECT at MOUNTPOINT, recording every change.
    ///
    /// Paths the configuration file's `[record] exclude` lists name
    /// (gitignore patterns, global and the project's own, read now), and
    /// the regenerable directories the project's ignore rules ignore
    /// (target/, node_modules/, .venv/, __pycache__/...), are served but
    /// not recorded, and a rewind never restores them (docs/design.md
    /// "What opfs keeps by default").
    Mount(MountArgs),
    /// Stop serving MOUNTPOINT (default: the mount of `-C`), flushing everything.
    Umount(UmountArgs),
    /// Show mount state, open turn and store size.
    Status,
    /// Close the open turn and open the next; prints its number. `-m
    /// TEXT` labels the turn it closes, `--label TEXT` the one it opens.
    Turn(TurnArgs),
    /// Without N: list rewind points. With N: restore the start of turn N.
    Rewind(RewindArgs),
    /// Restore PATHs (files, directories with everything beneath,
    /// symlinks, modes, removals) as they were when turn N began, as a
    /// turn of their own (undo it with `opfs rewind` to that turn).
    Restore(RestoreArgs),
    /// Run CMD in a sandbox with the project (through the mount) at its own path.
    Run(RunArgs),
    /// Start your shell (or CMD) where the project's own path shows the
    /// journaled project, or worktree NAME; nothing else is restricted
    /// unless --sandbox says so (docs/worktrees.md "One path").
    Shell(ShellArgs),
    /// List the turns, newest first, with what each changed.
    Log(LogArgs),
    /// Show what turn N (or turns N..M) changed, as a patch git can apply.
    Diff(DiffArgs),
    /// Print PATH as it was when turn N began (`N:PATH`).
    Show(ShowArgs),
    /// Check the store against the index; exit 1 if anything is wrong.
    Verify,
    /// Apply retention: drop the oldest turns and the blobs only they use.
    Gc(GcArgs),
    /// Write the history as a shadow git repository (one commit per turn).
    Export(ExportArgs),
    /// Push the history (and worktree branches) to a checkpoint remote,
    /// under refs/opfs/<machine>/<project key>/ (docs/remote.md).
    Push(PushArgs),
    /// Read a checkpoint remote: list its projects and turns, materialise
    /// a pushed turn into a directory (docs/remote.md).
    #[command(subcommand)]
    Remote(RemoteCmd),
    /// Copy-on-write worktrees of the project: try an idea, merge it back.
    #[command(subcommand)]
    Worktree(WorktreeCmd),
    /// Serve the agent tools (worktrees, read-only history) over MCP on
    /// stdin/stdout; register it with the agent (docs/mcp.md).
    Mcp,
    /// Open a turn from an agent's prompt-submitted hook: reads the hook
    /// event (JSON) on stdin, labels the turn with the prompt
    /// (docs/integrations.md).
    Hook(HookArgs),
    /// Write the user-level configuration that makes AGENT open a turn per
    /// user message and register `opfs mcp` (docs/integrations.md).
    Integrate(IntegrateArgs),
    /// Set the label of turn TURN (a number, @, @- or @-K).
    Label(LabelArgs),
    /// Undo the last action: the last rewind (redo), else the open turn's
    /// changes, else the last turn's (see docs/cli.md).
    Undo(UndoArgs),
    /// Print the completion script for SHELL (bash, zsh, fish, elvish,
    /// powershell).
    Completions(CompletionsArgs),
    /// Print the man page, or write one page per command into DIR.
    Man(ManArgs),
    /// Check what opfs needs from this machine (/dev/fuse, fusermount3,
    /// the kernel, bubblewrap, the state home); exit 1 if something
    /// required is missing.
    Doctor,
}

// `opfs completions`.
#[derive(Debug, clap::Args)]
pub struct CompletionsArgs {
    /// The shell.
    #[arg(value_enum)]
    pub shell: clap_complete::Shell,
}

// `opfs man`.
#[derive(Debug, clap::Args)]
pub struct ManArgs {
    /// Write opfs.1 and opfs-COMMAND.1 here (an existing directory).
    #[arg(long, value_name = "DIR")]
    pub dir: Option<std::path::PathBuf>,
}

/// `--color`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum ColorWhen {
    Auto,
    Always,
    Never,
}

// `opfs label`.
#[derive(Debug, clap::Args)]
pub struct LabelArgs {
    /// The turn: a number, @ (the open turn), @- or @-K.
    pub turn: String,
    /// The new label; an empty TEXT removes the label.
    pub text: String,
}

// `opfs undo`.
#[derive(Debug, clap::Args)]
pub struct UndoArgs {
    /// Print what it would do and change nothing.
    #[arg(long)]
    pub dry_run: bool,
    /// Restore paths changed outside the mount too (their current state
    /// is recorded first, so it can be undone).
    #[arg(long)]
    pub force: bool,
    #[command(flatten)]
    pub conflicts: ConflictArgs,
}

impl UndoArgs {
    /// The conflict choices given.
    pub fn choice(&self) -> Choice {
        self.conflicts.choice(self.force)
    }
}

/// What a rewind, undo, restore or merge does with conflicts: by default
/// a conflict applies nothing (exit 3).
#[derive(Debug, Clone, Copy, Default, clap::Args)]
pub struct ConflictArgs {
    /// With conflicts: apply the other paths and leave the conflicted ones
    /// as they are (exit 3).
    #[arg(long)]
    pub partial: bool,
    /// Write git-style conflict markers into a conflicted text file (its
    /// current bytes against the incoming ones) instead of leaving it.
    #[arg(long, conflicts_with = "force")]
    pub markers: bool,
}

impl ConflictArgs {
    /// With `--force` or not.
    pub fn choice(self, force: bool) -> Choice {
        Choice {
            force,
            partial: self.partial,
            markers: self.markers,
        }
    }
}

/// The conflict choices of one command (`--force`, `--partial`,
/// `--markers`).
#[derive(Debug, Clone, Copy, Default)]
pub struct Choice {
    /// Take the incoming side.
    pub force: bool,
    /// Apply the rest, leave the conflicts.
    pub partial: bool,
    /// Conflict markers in text files.
    pub markers: bool,
}

// `opfs log`.
#[derive(Debug, clap::Args)]
pub struct LogArgs {
    /// Show only the newest N turns.
    #[arg(short = 'n', long = "max-count", value_name = "N")]
    pub max_count: Option<usize>,
    /// One line per turn.
    #[arg(long)]
    pub oneline: bool,
    /// Count paths the project's ignore rules ignore too (by default the
    /// counts leave them out, as the export does).
    #[arg(long)]
    pub include_ignored: bool,
    /// Only turns that recorded one of these paths (or a path beneath).
    pub paths: Vec<String>,
}

/// `opfs worktree ...` (`-C` names the project or its mountpoint).
#[derive(Debug, Subcommand)]
pub enum WorktreeCmd {
    /// Make worktree NAME from the start of turn N (default: now) and
    /// mount it; prints its path.
    Create {
        /// Its name: letters, digits, '-', '_', '.'.
        name: String,
        /// The project turn whose start it shows (a number, @, @- or @-K).
        #[arg(long, value_name = "N")]
        from: Option<String>,
        /// Mount it here instead of its folder in the state dir.
        #[arg(long, value_name = "PATH")]
        at: Option<PathBuf>,
    },
    /// List the worktrees: name, base turn, path, mounted, paths changed.
    List,
    /// Claude Code's WorktreeCreate/WorktreeRemove hook: reads the event
    /// (JSON) on stdin; makes an opfs worktree and prints its path, or
    /// discards an unchanged one (docs/integrations.md).
    Hook,
    /// Print worktree NAME's path.
    Path {
        /// The worktree.
        name: String,
    },
    /// Mount worktree NAME again (after `opfs umount`, a crash, a reboot).
    Mount {
        /// The worktree.
        name: String,
    },
    /// Show what worktree NAME changed against its base, as a patch git
    /// can apply.
    Diff {
        /// The worktree.
        name: String,
        /// Show a summary of changed lines per path instead.
        #[arg(long)]
        stat: bool,
        /// Show the status letter and path of each change instead.
        #[arg(long, conflicts_with = "stat")]
        name_status: bool,
        /// Show paths the ignore rules ignore too (build output,
        /// virtualenvs...); by default they are left out, as a merge
        /// leaves them.
        #[arg(long)]
        include_ignored: bool,
    },
    /// Apply worktree NAME's changes to the project as one turn (kind
    /// merge); paths the project changed too are left and listed (exit 3).
    Merge {
        /// The worktree.
        name: String,
        /// Print the plan and change nothing.
        #[arg(long)]
        dry_run: bool,
        /// Take the worktree's side for paths the project changed too.
        #[arg(long)]
        force: bool,
        #[command(flatten)]
        conflicts: ConflictArgs,
        /// Merge paths the project's ignore rules ignore too (build
        /// output, virtualenvs...); by default they are left out, as the
        /// export leaves them.
        #[arg(long)]
        include_ignored: bool,
    },
    /// Unmount worktree NAME if needed, then delete it.
    Discard {
        /// The worktree.
        name: String,
    },
}

// `opfs mount`.
#[derive(Debug, clap::Args)]
pub struct MountArgs {
    /// The project directory.
    pub project: PathBuf,
    /// An empty directory outside the project.
    pub mountpoint: PathBuf,
    /// Stay in the foreground.
    #[arg(short, long)]
    pub foreground: bool,
    /// fsync every record and blob (survives power loss; slower).
    #[arg(long)]
    pub sync: bool,
    /// FUSE worker threads (default: half the CPUs, at least 1).
    #[arg(long, default_value_t = opfs::daemon::default_threads())]
    pub threads: usize,
    /// Do not export each closed turn to the shadow git repository.
    #[arg(long)]
    pub no_export: bool,
    /// Label the first turn of this mount: turn 1 at a first mount, else
    /// a new turn opened as `opfs turn --label` opens one.
    #[arg(long, value_name = "TEXT")]
    pub label: Option<String>,
    /// Files of at least BYTES written in place save only the bytes
    /// each write overwrites (docs/ranges.md); `off` saves whole files.
    /// Default: $OPFS_RANGE_MIN, else 1048576.
    #[arg(long, value_name = "BYTES|off", value_parser = parse_range_min)]
    pub range_min: Option<u64>,
    // A daemon started in the background (`opfs::daemon::spawn`) leaves
    // the caller's session first thing.
    #[arg(long = "setsid", hide = true)]
    pub setsid: bool,
    // A worktree's daemon (`opfs worktree create|mount`): the project whose
    // worktree PROJECT (its upper layer) is, and the worktree's name.
    #[arg(long = "worktree-of", hide = true, requires = "worktree")]
    pub worktree_of: Option<PathBuf>,
    #[arg(long = "worktree", hide = true, requires = "worktree_of")]
    pub worktree: Option<String>,
}

/// `--range-min`: a number of bytes, or `off`.
fn parse_range_min(s: &str) -> Result<u64, String> {
    opfs::daemon::parse_range_min(s).map_err(|e| e.to_string())
}

// `opfs umount`.
#[derive(Debug, clap::Args)]
pub struct UmountArgs {
    /// The mountpoint (default: where the project `-C` names is mounted).
    pub mountpoint: Option<PathBuf>,
    /// End a daemon that is stopped, hung or does not answer: detach its
    /// mount lazily and kill it by its pid, without asking it anything
    /// (what it captured is kept and replayed at the next mount).
    #[arg(long)]
    pub force: bool,
}

// `opfs turn`.
#[derive(Debug, clap::Args)]
pub struct TurnArgs {
    /// Label the turn this closes (the work just done), as `git commit
    /// -m` does; an empty TEXT removes its label.
    #[arg(short = 'm', long = "message", value_name = "TEXT")]
    pub message: Option<String>,
    /// A label for the new turn, the one that opens (e.g. the user's
    /// message, from a prompt hook).
    #[arg(long, value_name = "TEXT")]
    pub label: Option<String>,
    /// An external id for the new turn (e.g. the agent's message id).
    #[arg(long)]
    pub id: Option<String>,
    /// Open the turn even when no daemon serves the project (nothing is
    /// recorded until it is mounted); without it that is an error (exit 1).
    #[arg(long)]
    pub allow_unmounted: bool,
}

// `opfs rewind`.
#[derive(Debug, clap::Args)]
pub struct RewindArgs {
    /// The turn whose start to restore: a number, @ (the open turn), @-
    /// or @-K.
    pub turn: Option<String>,
    /// Select the turn by its external id instead.
    #[arg(long, conflicts_with = "turn")]
    pub id: Option<String>,
    /// List every rewind point, not just the newest 10.
    #[arg(long)]
    pub all: bool,
    /// Print the plan and change nothing.
    #[arg(long)]
    pub dry_run: bool,
    /// Restore paths changed outside the mount too (their current state
    /// is recorded first, so it can be undone).
    #[arg(long)]
    pub force: bool,
    #[command(flatten)]
    pub conflicts: ConflictArgs,
    /// Finish the rewind that stopped on a failure (or that a crash
    /// interrupted), as a new rewind turn, checked like any rewind.
    /// With --dry-run: print the plan the resume would run.
    #[arg(long, conflicts_with_all = ["turn", "id", "abort", "all"])]
    pub resume: bool,
    /// Put back what the rewind that stopped on a failure changed, as a new
    /// rewind turn, checked like any rewind. With --dry-run: print the plan.
    #[arg(long, conflicts_with_all = ["turn", "id", "all"])]
    pub abort: bool,
}

impl RewindArgs {
    /// The conflict choices given.
    pub fn choice(&self) -> Choice {
        self.conflicts.choice(self.force)
    }
}

// `opfs restore`.
#[derive(Debug, clap::Args)]
pub struct RestoreArgs {
    /// The turn whose start to restore the paths to: a number, @ (the open
    /// turn: undo its changes to them), @- or @-K. Default: @.
    #[arg(long, value_name = "N")]
    pub from: Option<String>,
    /// Print the plan and change nothing.
    #[arg(long)]
    pub dry_run: bool,
    /// Restore paths changed outside the mount too (their current state
    /// is recorded first, so it can be undone).
    #[arg(long)]
    pub force: bool,
    #[command(flatten)]
    pub conflicts: ConflictArgs,
    /// The paths, relative to the current directory (inside the project
    /// or its mountpoint); a directory means everything beneath it.
    #[arg(required = true)]
    pub paths: Vec<String>,
}

// `opfs run`.
#[derive(Debug, clap::Args)]
pub struct RunArgs {
    /// workspace-write (default), read-only, unrestricted (only the
    /// project's path changed), or danger-full-access (no sandbox).
    #[arg(
        long,
        value_name = "MODE",
        value_enum,
        default_value = "workspace-write"
    )]
    pub sandbox: SandboxMode,
    /// Give the command the network.
    #[arg(long)]
    pub net: bool,
    /// Make PATH (a directory or a file) writable inside too (repeatable).
    #[arg(long, value_name = "PATH")]
    pub writable: Vec<PathBuf>,
    /// Open a turn with this label before the command starts.
    #[arg(long, value_name = "LABEL")]
    pub turn: Option<String>,
    /// Run over worktree NAME of the project (seen at the project's path).
    #[arg(long, value_name = "NAME")]
    pub worktree: Option<String>,
    /// Leave what git runs or trusts (.git/config, hooks, info/...) writable.
    #[arg(long)]
    pub writable_git_config: bool,
    /// The agent preset: claude, codex, gemini, aider, or none (default:
    /// told by the command's name; docs/integrations.md).
    #[arg(long, value_name = "NAME", value_parser = ["claude", "codex", "gemini", "aider", "none"])]
    pub agent: Option<String>,
    /// The command and its arguments.
    #[arg(
        required = true,
        trailing_var_arg = true,
        allow_hyphen_values = true,
        value_name = "CMD"
    )]
    pub command: Vec<OsString>,
}

// `opfs shell`: `opfs run` with the person's shell and no restriction by
// default.
#[derive(Debug, clap::Args)]
pub struct ShellArgs {
    /// unrestricted (default: only the project's path changed),
    /// workspace-write, read-only, or danger-full-access (no view).
    #[arg(long, value_name = "MODE", value_enum, default_value = "unrestricted")]
    pub sandbox: SandboxMode,
    /// Show worktree NAME at the project's path instead of the project.
    #[arg(long, value_name = "NAME")]
    pub worktree: Option<String>,
    /// Open a turn with this label first.
    #[arg(long, value_name = "LABEL")]
    pub turn: Option<String>,
    /// Give the command the network (workspace-write, read-only).
    #[arg(long)]
    pub net: bool,
    /// Make PATH writable inside too (workspace-write; repeatable).
    #[arg(long, value_name = "PATH")]
    pub writable: Vec<PathBuf>,
    /// Leave what git runs or trusts writable (workspace-write).
    #[arg(long)]
    pub writable_git_config: bool,
    /// The command and its arguments (default: $SHELL, else /bin/sh).
    #[arg(
        trailing_var_arg = true,
        allow_hyphen_values = true,
        value_name = "CMD"
    )]
    pub command: Vec<OsString>,
}

// `--sandbox`: the names of `opfs::sandbox::Mode` (no doc comments here:
// clap would list them in the help, which names the modes already).
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum SandboxMode {
    WorkspaceWrite,
    ReadOnly,
    Unrestricted,
    DangerFullAccess,
}

impl From<SandboxMode> for opfs::sandbox::Mode {
    fn from(m: SandboxMode) -> Self {
        match m {
            SandboxMode::WorkspaceWrite => opfs::sandbox::Mode::WorkspaceWrite,
            SandboxMode::ReadOnly => opfs::sandbox::Mode::ReadOnly,
            SandboxMode::Unrestricted => opfs::sandbox::Mode::Unrestricted,
            SandboxMode::DangerFullAccess => opfs::sandbox::Mode::DangerFullAccess,
        }
    }
}

// `opfs diff`.
#[derive(Debug, clap::Args)]
pub struct DiffArgs {
    /// A turn N, or a range N..M (the start of N to the end of M); refs
    /// @, @-, @-K work too. Default: @, the open turn.
    pub range: Option<String>,
    /// Show a summary of changed lines per path instead of the patch.
    #[arg(long)]
    pub stat: bool,
    /// Show the status letter and path of each change instead.
    #[arg(long, conflicts_with = "stat")]
    pub name_status: bool,
    /// Show paths the project's ignore rules ignore too (build output,
    /// virtualenvs...); by default they are left out, as the export
    /// leaves them.
    #[arg(long)]
    pub include_ignored: bool,
    /// Limit to these paths (relative to the current directory).
    pub paths: Vec<String>,
}

// `opfs show`.
#[derive(Debug, clap::Args)]
pub struct ShowArgs {
    /// `N:PATH`.
    pub spec: String,
    /// Print instead the edit of PATH made behind the mount that was kept
    /// in turn N before the mount overwrote, removed or moved it: the
    /// K-th kept in that turn (`--outside=K`), else the last one.
    #[arg(long, value_name = "K", num_args = 0..=1, require_equals = true,
          default_missing_value = "0", value_parser = clap::value_parser!(u64))]
    pub outside: Option<u64>,
}

// `opfs gc`.
#[derive(Debug, clap::Args)]
pub struct GcArgs {
    /// Keep the newest N turns (default: `keep` of the configuration's
    /// [retention] table, else 100).
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u64).range(1..))]
    pub keep: Option<u64>,
    /// Also drop old turns until the kept blobs take at most SIZE (bytes,
    /// or with K, M, G, T: 512K, 10M, 2G; default: `max_bytes` of the
    /// [retention] table, else none).
    #[arg(long, value_name = "SIZE", value_parser = parse_size)]
    pub max_bytes: Option<u64>,
    /// Report what would be removed and change nothing.
    #[arg(long)]
    pub dry_run: bool,
}

// `opfs export`.
#[derive(Debug, clap::Args)]
pub struct ExportArgs {
    /// The bare repository to write (default: export.git in the state dir).
    #[arg(long, value_name = "DIR")]
    pub git_dir: Option<PathBuf>,
    /// Export ignored paths too (.gitignore, .git/info/exclude, global
    /// excludes); kept for this repository, the daemon's exports included.
    #[arg(long, conflicts_with = "no_export_ignored")]
    pub export_ignored: bool,
    /// Follow the project's ignore rules again (the default).
    #[arg(long)]
    pub no_export_ignored: bool,
}

// `opfs push`.
#[derive(Debug, clap::Args)]
pub struct PushArgs {
    /// The git remote (URL or path); default: the project's configured
    /// remote ([projects."PATH".push] remote, else [push] remote).
    pub remote: Option<String>,
    /// First upload to the bucket the bytes behind the pointer files of
    /// every pushed turn, not only the new ones (after the bucket was
    /// configured late, an object was deleted from it, or [push]
    /// bucket_turn_budget was raised to send objects it withheld).
    #[arg(long)]
    pub objects: bool,
    /// Forget a remote this project was pushed to: drop its entry (its
    /// last push, its failure) from the project's push state, so `opfs
    /// status` no longer shows it. Nothing on the remote changes. Refused
    /// for the configured remote.
    #[arg(long, value_name = "URL", conflicts_with_all = ["remote", "objects"])]
    pub forget: Option<String>,
}

// `opfs remote`.
#[derive(Debug, clap::Subcommand)]
pub enum RemoteCmd {
    /// List the projects a remote holds (machine/key, path, newest turn),
    /// or with PROJECT its turns.
    List {
        /// The git remote (URL or path).
        remote: String,
        /// A project as the list names it: MACHINE/KEY.
        project: Option<String>,
    },
    /// Write the project at the end of turn TURN (a number, or `head`) as
    /// pushed, or a worktree's branch (`worktrees/NAME`), into DIR (new or
    /// empty).
    Checkout {
        /// The git remote (URL or path).
        remote: String,
        /// The project: MACHINE/KEY (see `opfs remote list`).
        project: String,
        /// The turn: a number, `baseline`, `head`, `worktrees/NAME` (the
        /// newest turn of worktree NAME's branch) or a full commit id of
        /// the project's history or of one of its branches.
        turn: String,
        /// The directory to write (created; must be empty if it exists).
        dir: PathBuf,
        /// The bucket of the big files' bytes (s3://BUCKET[/PREFIX]);
        /// default: the configuration's [push] bucket.
        #[arg(long, value_name = "URL")]
        bucket: Option<String>,
    },
}

/// `--max-bytes` and other sizes: `opfs::state::usage::parse_size` (clap
/// names the flag in its error).
fn parse_size(v: &str) -> Result<u64, opfs::state::usage::BadSize> {
    opfs::state::usage::parse_size(v)
}

// `opfs hook`.
#[derive(Debug, clap::Args)]
pub struct HookArgs {
    /// The agent whose event is on stdin (default: told from the event).
    #[arg(long, value_name = "AGENT", value_parser = ["claude-code", "codex", "gemini"])]
    pub agent: Option<String>,
}

// `opfs integrate`.
#[derive(Debug, clap::Args)]
pub struct IntegrateArgs {
    /// claude-code, codex, gemini or aider.
    #[arg(value_parser = ["claude-code", "codex", "gemini", "aider"])]
    pub agent: String,
    /// Print what would be added to each file and write nothing.
    #[arg(long)]
    pub print: bool,
    /// Take opfs's entries out again.
    #[arg(long, visible_alias = "undo")]
    pub remove: bool,
    /// claude-code only: also back Claude Code's worktrees
    /// (`claude --worktree`) with opfs worktrees (WorktreeCreate and
    /// WorktreeRemove hooks running `opfs worktree hook`).
    #[arg(long, conflicts_with = "remove")]
    pub worktrees: bool,
}

//! `opfs run`: runs a command in a bubblewrap sandbox with the project,
//! served through the journaling mount, at its own absolute path (design §6
//! and guarantee 8).
//!
//! The sandbox is built from one ordered list of bwrap arguments
//! ([`bwrap_args`]); bwrap resolves every bind *source* in the host's view, so
//! a source may lie inside a directory that an earlier argument hid. The
//! order is:
//!
//! 1. namespaces and process hygiene: a new pid, ipc and uts namespace (and a
//!    new network namespace unless `--net`), a new session (no terminal
//!    injection), `--die-with-parent`, and every capability dropped (bwrap
//!    run by root keeps them otherwise, and with `CAP_SYS_ADMIN` a process
//!    could unmount what hides the state dir);
//! 2. the host root read-only, a fresh `/dev` and `/proc` (a new pid
//!    namespace, so `/proc/PID/root` of host processes is unreachable), a
//!    private `/tmp`;
//! 3. writable roots (`--writable`, config), the narrow socket, and the
//!    worktrees at `/tmp/opfs-worktrees` (the run's shared folder,
//!    read-only but for the worktree mounts in it: `share.rs`);
//! 4. hidden paths that are not inside the project: the state dirs and
//!    credential paths, an empty read-only tmpfs over a directory and
//!    `/dev/null` over anything else;
//! 5. the mountpoint bound over the project path (read-only in `read-only`
//!    mode), so every write to the project goes through the journal, and
//!    over the user's mountpoint of the project too (its path then means
//!    the same view: `mountpoint_alias`);
//! 6. in `workspace-write` mode, what git runs or trusts in the project
//!    (and in each worktree bound by bwrap) bound read-only over itself,
//!    the `.git` folder and every folder above a protected path bound
//!    onto itself, parents first (`git.rs`);
//! 7. hidden paths inside the project (they would be re-exposed by 5).
//!
//! `unrestricted` keeps only the mount namespace: the host bound as it is
//! (`--dev-bind / /`), then 5, and nothing else (`bwrap::unrestricted_args`).
//!
//! The library never prints; what went wrong is in [`RunError`].

use std::ffi::OsString;
use std::io;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::str::FromStr;
use std::sync::Arc;

use crate::control::{ClientError, Project};
use crate::daemon::spawn::SpawnError;
use crate::daemon::DaemonOptions;
use crate::mcp::narrow::{NarrowServer, TurnOpener};
use crate::mcp::tools::SandboxBinds;
use crate::mcp::Tools;
use crate::state;
use crate::store::StateDir;

mod bwrap;
pub mod config;
pub mod git;
mod mount;
mod policy;
pub mod preset;
mod process;
mod share;

pub use bwrap::{bwrap_args, find_bwrap, map_cwd, Layout};
use config::{ConfigError, SandboxConfig};
use mount::MountGuard;
pub use policy::{policy_for, Policy, CREDENTIAL_PATHS, SECRET_ENV, SYSTEM_HIDDEN};
use share::WorktreeShare;

/// How much the sandboxed command may do.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// The host read-only; the project (through the mount), writable roots
    /// and a private `/tmp` writable.
    WorkspaceWrite,
    /// Nothing writable but a private `/tmp`; the project is read through
    /// the mount.
    ReadOnly,
    /// Only the project's path is changed: in a mount namespace of its
    /// own, the command sees the journaled project (or a worktree) at the
    /// project's path; the rest of the host, the network, processes,
    /// capabilities and environment are the caller's. The default of
    /// `opfs shell`.
    Unrestricted,
    /// No sandbox at all: the command runs as a plain child process. Only
    /// when asked for by name.
    DangerFullAccess,
}

impl Mode {
    /// The name used on the command line.
    pub fn as_str(self) -> &'static str {
        match self {
            Mode::WorkspaceWrite => "workspace-write",
            Mode::ReadOnly => "read-only",
            Mode::Unrestricted => "unrestricted",
            Mode::DangerFullAccess => "danger-full-access",
        }
    }
}

impl FromStr for Mode {
    type Err = String;

    fn from_str(s: &str) -> Result<Mode, String> {
        match s {
            "workspace-write" => Ok(Mode::WorkspaceWrite),
            "read-only" => Ok(Mode::ReadOnly),
            "unrestricted" => Ok(Mode::Unrestricted),
            "danger-full-access" => Ok(Mode::DangerFullAccess),
            other => Err(format!(
                "unknown sandbox mode {other:?} (workspace-write, read-only, unrestricted, \
                 danger-full-access)"
            )),
        }
    }
}

/// Why `opfs run` refused or failed. In every case the command was not run
/// unless the variant says otherwise.
#[derive(Debug, thiserror::Error)]
pub enum RunError {
    /// Bad arguments (exit code 2).
    #[error("{0}")]
    Usage(String),
    /// bubblewrap is not installed (or `$OPFS_BWRAP` names a missing file).
    #[error(
        "bubblewrap ({0}) was not found, so the command was not run: opfs run never runs a \
         command unsandboxed. Install it (e.g. `apt-get install bubblewrap`), or ask for no \
         sandbox by name with --sandbox danger-full-access"
    )]
    BwrapMissing(String),
    /// bwrap could not build the sandbox; the command was not run.
    #[error("cannot set up the sandbox, so the command was not run: {0}")]
    Setup(String),
    /// The project could not be mounted.
    #[error("cannot mount the project: {0}")]
    Mount(SpawnError),
    /// Another opfs command holds the project's lock, but nothing is
    /// mounted to bind.
    #[error("cannot mount the project: {} is locked by another opfs command but not mounted; try again", .0.display())]
    LockedUnmounted(PathBuf),
    /// `--worktree`: the worktree does not exist or cannot be mounted; the
    /// command was not run.
    #[error("{0}")]
    Worktree(crate::worktree::life::WorktreeCmdError),
    /// `--turn` could not open a turn; the command was not run.
    #[error("cannot open a turn: {0}")]
    Turn(ClientError),
    /// A file git would run or trust outside the sandbox does not exist,
    /// and the folder it would be made in must stay writable inside, so
    /// it cannot be kept read-only; the command was not run.
    #[error(
        "cannot keep {} read-only inside the sandbox, so the command was not run: it does not \
         exist, git would run or trust it once made, and {} must stay writable inside; create \
         it outside first (e.g. `mkdir -p {}` for a folder of hooks, `touch` for a file), or \
         pass --writable-git-config (config: [sandbox] writable_git_config = true) to let the \
         command change git's configuration and hooks",
        .path.display(),
        .parent.display(),
        .path.display()
    )]
    GitPath {
        /// The path, as the command would see it.
        path: PathBuf,
        /// Its nearest existing folder, which stays writable.
        parent: PathBuf,
    },
    /// The configuration file is unusable.
    #[error(transparent)]
    Config(#[from] ConfigError),
    /// A system call failed.
    #[error("{what}: {source}")]
    Io {
        /// What was being done, naming the path.
        what: String,
        /// The cause.
        source: io::Error,
    },
}

impl RunError {
    pub(crate) fn io(what: impl Into<String>) -> impl FnOnce(io::Error) -> RunError {
        let what = what.into();
        move |source| RunError::Io { what, source }
    }
}

/// Everything `opfs run` was asked to do.
#[derive(Debug, Clone)]
pub struct RunOptions {
    /// The opfs home (root of the state dirs).
    pub home: PathBuf,
    /// The user's home directory (for credential paths and `~/` in the
    /// configuration), if known.
    pub user_home: Option<PathBuf>,
    /// The project, a mountpoint, or a directory inside one (`-C`, else the
    /// current directory). A directory opfs does not know yet becomes the
    /// project.
    pub dir: PathBuf,
    /// The mode.
    pub mode: Mode,
    /// `--net`.
    pub net: bool,
    /// `--writable` directories and regular files (a file is bound alone:
    /// it can be rewritten in place, not replaced by a rename).
    pub writable: Vec<PathBuf>,
    /// `--turn`: open a turn with this label before the command starts
    /// (in the worktree's own history with `worktree`).
    pub turn: Option<String>,
    /// `turn` was chosen by the agent's preset (the prompt of a one-shot
    /// run, or `AGENT session`), not given by `--turn`: the agent's first
    /// prompt hook inside may relabel that turn while it is empty. With a
    /// `turn` given by `--turn`, the hook opens no turns (the run is one
    /// turn, as asked).
    pub turn_is_preset: bool,
    /// `--writable-git-config` (or the configuration's
    /// `writable_git_config`): leave what git executes or trusts (`.git/config`,
    /// hooks, `info/`, includes...) writable inside; by default it is
    /// read-only (`git.rs`).
    pub writable_git_config: bool,
    /// `--worktree NAME`: run over this worktree of the project instead of
    /// the project (mounted first if it is not; left mounted), seen inside
    /// at the project's own path.
    pub worktree: Option<String>,
    /// The command and its arguments.
    pub command: Vec<OsString>,
    /// Defaults from the configuration file.
    pub config: SandboxConfig,
    /// The bwrap binary (`$OPFS_BWRAP`); `None` searches
    /// [`RunEnv::search_path`].
    pub bwrap: Option<PathBuf>,
    /// What the caller read from the environment.
    pub env: RunEnv,
    /// The options of a daemon `opfs run` starts itself.
    pub daemon: DaemonOptions,
    /// `-v` flags passed on to a daemon `opfs run` starts.
    pub verbose: u8,
}

/// The environment variables `opfs run` depends on, read by the caller
/// (the library never reads the environment).
#[derive(Debug, Clone, Default)]
pub struct RunEnv {
    /// `$XDG_DATA_HOME`: its `opfs` folder is hidden too.
    pub xdg_data_home: Option<PathBuf>,
    /// `$SSH_AUTH_SOCK`: the agent socket is hidden.
    pub ssh_auth_sock: Option<PathBuf>,
    /// Credential files the environment names, hidden like
    /// [`policy::CREDENTIAL_PATHS`]: git's credential store under
    /// `$XDG_CONFIG_HOME`, `$AWS_SHARED_CREDENTIALS_FILE`, `$AWS_CONFIG_FILE`,
    /// `$AWS_WEB_IDENTITY_TOKEN_FILE`, `$GOOGLE_APPLICATION_CREDENTIALS`
    /// ([`credential_files`]).
    pub credential_files: Vec<PathBuf>,
    /// `$PATH`: where bwrap is looked for.
    pub search_path: Option<OsString>,
}

/// The variables whose value names a file of credentials.
pub const CREDENTIAL_FILE_VARS: &[&str] = &[
    "AWS_SHARED_CREDENTIALS_FILE",
    "AWS_CONFIG_FILE",
    "AWS_WEB_IDENTITY_TOKEN_FILE",
    "GOOGLE_APPLICATION_CREDENTIALS",
];

/// The credential files the environment names (`var` reads a variable):
/// each of [`CREDENTIAL_FILE_VARS`] set to an absolute path, and git's
/// credential store `$XDG_CONFIG_HOME/git/credentials` (its place under
/// `$HOME` is in [`policy::CREDENTIAL_PATHS`]). Relative or empty values
/// are skipped: they name nothing the sandbox could hide reliably.
pub fn credential_files(var: impl Fn(&str) -> Option<OsString>) -> Vec<PathBuf> {
    let mut files: Vec<PathBuf> = CREDENTIAL_FILE_VARS
        .iter()
        .filter_map(|k| var(k))
        .map(PathBuf::from)
        .collect();
    if let Some(x) = var("XDG_CONFIG_HOME") {
        files.push(PathBuf::from(x).join("git/credentials"));
    }
    files.retain(|p| p.is_absolute());
    files
}

/// How the run ended.
#[derive(Debug, Clone)]
pub struct RunOutcome {
    /// The command's exit status: its exit code, or 128 + the signal that
    /// killed it.
    pub code: i32,
    /// Problems after the command ran (e.g. the private mount could not be
    /// unmounted), for the caller to report.
    pub warnings: Vec<String>,
    /// The daemon serving the project (or the worktree) the command worked
    /// in stopped while it ran: from then on the command's writes there
    /// failed (`ENOTCONN`) rather than going unrecorded, and
    /// [`RunOutcome::warnings`] says so. The caller should not report
    /// success.
    pub daemon_stopped: bool,
}

/// Runs `opts.command` as `opts.mode` says, and returns its exit status.
///
/// In the sandboxed modes the project is mounted first if no daemon serves
/// it (with `opts.daemon`, at a private mountpoint under the state dir, unmounted
/// again afterwards); an existing mount is used and left running. Signals
/// sent to this process (SIGHUP, SIGINT, SIGQUIT, SIGTERM, SIGUSR1/2,
/// SIGWINCH) are forwarded to the command's process group while it runs.
///
/// Errors: every `Err` means the command did not run. bwrap missing, or
/// failing to build the sandbox, is an error, never a reason to run the
/// command without one.
pub fn run(opts: &RunOptions) -> Result<RunOutcome, RunError> {
    if opts.command.is_empty() {
        return Err(RunError::Usage(
            "no command given (opfs run -- CMD...)".into(),
        ));
    }
    let home = state::absolute(&opts.home);
    if opts.mode == Mode::DangerFullAccess && opts.worktree.is_some() {
        return Err(RunError::Usage(
            "--worktree needs a mount namespace (it shows the worktree at the project's \
             path): use --sandbox unrestricted for no other restriction, or run the command \
             in the worktree's path itself (`opfs worktree path NAME`)"
                .into(),
        ));
    }
    if opts.mode == Mode::DangerFullAccess {
        return process::run_unsandboxed(opts, &home);
    }
    let policy = policy_for(opts, &home)?;
    let bwrap = find_bwrap(opts.bwrap.as_deref(), opts.env.search_path.as_deref())?;
    let st = locate(&home, &opts.dir)?;
    if opts.mode != Mode::Unrestricted {
        // Unrestricted keeps the host's /tmp.
        command_is_visible(
            Path::new(&opts.command[0]),
            &st.project,
            &state::absolute(&opts.dir),
            opts.env.search_path.as_deref(),
        )?;
    }
    let (mut guard, history) = match &opts.worktree {
        None => (
            MountGuard::ensure(&st, &home, &opts.daemon, opts.verbose)?,
            st.clone(),
        ),
        Some(name) => MountGuard::worktree(&st, &home, name, &opts.daemon, opts.verbose)?,
    };
    let run_turn = match &opts.turn {
        Some(label) => Some(open_turn(&history, label)?),
        None => None,
    };
    let mut warnings = Vec::new();
    // The agent's MCP tools, for this project only, on a socket of their
    // own: the state dir and control socket stay hidden (docs/mcp.md).
    let tools_inside = opts.mode == Mode::WorkspaceWrite && opts.worktree.is_none();
    // The project's worktrees mounted now, shown inside at
    // WORKTREES_INSIDE/NAME (their mounts alone: the state dir around them
    // stays hidden), so the paths the tools give work inside.
    let mounted: Vec<(String, PathBuf)> = if tools_inside {
        crate::worktree::list(&st)
            .into_iter()
            .filter(|(wt, meta)| {
                crate::worktree::life::is_mounted(&home, wt, meta, &crate::daemon::worktree::Asked)
            })
            .map(|(wt, meta)| (wt.name, meta.mountpoint))
            .collect()
    } else {
        Vec::new()
    };
    // What git runs or trusts stays read-only inside (git.rs), in the
    // project and in every worktree the sandbox shows.
    let git_guard = git::GitGuard {
        enabled: opts.mode == Mode::WorkspaceWrite
            && !(opts.writable_git_config || opts.config.writable_git_config),
        git: git::find_git(opts.env.search_path.as_deref()),
        user_home: opts.user_home.clone(),
        writable: policy.writable.clone(),
    };
    // Through a shared folder where the host allows one, so that
    // worktrees created during the run show inside at once (share.rs);
    // else bound by bwrap, and a new one shows from the next run on.
    let share = if tools_inside {
        match WorktreeShare::make(&st, git_guard.clone()) {
            Ok(s) => Ok(ShareGuard(Arc::new(s))),
            Err(e) => {
                log::info!(
                    "no shared worktree folder ({e}): worktrees created during the run show \
                     inside from the next run on"
                );
                Err(format!("a shared folder could not be made: {e}"))
            }
        }
    } else {
        Err("no worktree tools in this mode".to_string())
    };
    let mut visible = std::collections::BTreeMap::new();
    if let Ok(s) = &share {
        for (name, mountpoint) in &mounted {
            match s.0.bind(name, mountpoint) {
                Ok(inside) => {
                    visible.insert(name.clone(), inside);
                }
                Err(e) => warnings.push(format!(
                    "worktree {name:?} is not shown inside the sandbox: {e}"
                )),
            }
        }
    }
    // Shared only now that the worktrees of the start are in it.
    let share = match share {
        Ok(s) => match s.0.share() {
            Ok(()) => Ok(s),
            Err(e) => {
                visible.clear();
                Err(format!("the shared folder could not be made shared: {e}"))
            }
        },
        Err(why) => Err(why),
    };
    let mut bwrap_binds = Vec::new();
    if share.is_err() {
        for (name, mountpoint) in &mounted {
            let inside = Path::new(crate::mcp::tools::WORKTREES_INSIDE).join(name);
            visible.insert(name.clone(), inside.clone());
            bwrap_binds.push((mountpoint.clone(), inside));
        }
    }
    let narrow = if tools_inside {
        let binds = match &share {
            Ok(s) => Ok(s.0.clone() as Arc<dyn SandboxBinds>),
            Err(why) => Err(why.clone()),
        };
        let tools = Tools::new(
            home.clone(),
            Project::new(st.clone()),
            opts.daemon.clone(),
            opts.verbose,
        )
        .in_sandbox(
            mounted.iter().map(|(name, _)| name.clone()).collect(),
            visible,
            binds,
        );
        let path = st.dir.join(format!("mcp-{}.sock", std::process::id()));
        // Optional: without it the command runs as before, only `opfs mcp`
        // inside cannot reach the tools.
        // The agent's prompt hook opens a turn per prompt through it
        // (docs/sandbox.md, "Turns opened from inside"), unless the user
        // asked for one turn for the whole run (`--turn`).
        let turns = (run_turn.is_none() || opts.turn_is_preset).then(|| TurnOpener {
            project: Project::new(st.clone()).with_answer_limit(crate::control::client::HOOK_LIMIT),
            placeholder: run_turn.filter(|_| opts.turn_is_preset),
        });
        match NarrowServer::start(tools, turns, &path) {
            Ok(server) => Some(server),
            Err(e) => {
                warnings.push(format!(
                    "cannot start the narrow MCP socket {} ({e}): `opfs mcp` inside the \
                     sandbox could not reach the tools",
                    path.display()
                ));
                None
            }
        }
    } else {
        None
    };
    // What git executes or trusts, read-only over the project as the
    // sandbox shows it (the mount, or the worktree's mount), and over each
    // worktree bound in by bwrap.
    let mut git = git_guard.binds(&guard.mountpoint, &st.project)?;
    for (outside, inside) in &bwrap_binds {
        git.extend(git_guard.binds(outside, inside)?);
    }
    let aliases = mountpoint_alias(&st, &home).into_iter().collect::<Vec<_>>();
    for alias in &aliases {
        git.extend(git_guard.binds(&guard.mountpoint, alias)?);
    }
    let layout = Layout {
        project: st.project.clone(),
        source: guard.mountpoint.clone(),
        aliases,
        cwd: map_cwd(&opts.dir, &st.project, &guard.mountpoint),
        narrow: narrow.as_ref().map(|n| n.path().to_path_buf()),
        worktrees: bwrap_binds,
        shared_worktrees: share.as_ref().ok().map(|s| s.0.dir().to_path_buf()),
        git,
    };
    let args = bwrap_args(&policy, &layout)?;
    bwrap::preflight(&bwrap, &args, &policy)?;
    let info = process::InfoPipe::new()?;
    // In an unrestricted view opfs's own commands work as outside: the
    // daemon of what the view shows (the project's, or the worktree's) is
    // asked to serve callers in the view's namespaces before the command
    // starts (sandbox.md, "No control socket inside").
    let trust_failed = Arc::new(std::sync::Mutex::new(None::<String>));
    let gate = if opts.mode == Mode::Unrestricted {
        let state = history.clone();
        let failed = trust_failed.clone();
        Some(process::Gate::new(Box::new(move |pid| {
            if let Err(e) = crate::control::client::trust_view(&state, pid) {
                *failed.lock().unwrap_or_else(|e| e.into_inner()) = Some(format!(
                    "opfs commands inside the shell were refused by the daemon of {} ({e}): \
                     run them outside",
                    state.project.display()
                ));
            }
        }))?)
    } else {
        None
    };
    let mut cmd = Command::new(&bwrap);
    cmd.args(&args).arg("--info-fd").arg(info.fd().to_string());
    if let Some(g) = &gate {
        cmd.arg("--block-fd").arg(g.fd().to_string());
    }
    cmd.arg("--").args(&opts.command);
    bwrap::apply_env(&mut cmd, &policy, layout.narrow.is_some());
    match &opts.worktree {
        Some(name) => cmd.env("OPFS_WORKTREE", name),
        None => cmd.env_remove("OPFS_WORKTREE"),
    };
    let code = process::spawn_and_wait(cmd, info, opts.mode == Mode::Unrestricted, gate)?;
    let daemon_stopped = guard.daemon_stopped();
    if daemon_stopped {
        warnings.push(format!(
            "the daemon serving {} at {} stopped while the command ran (killed, or \
             unmounted): from then on the command's writes there failed with \"Transport \
             endpoint is not connected\"; what it wrote before was recorded. See `opfs -C {} \
             status`, then run the command again",
            st.project.display(),
            guard.mountpoint.display(),
            st.project.display()
        ));
    }
    if let Some(w) = trust_failed
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .take()
    {
        warnings.push(w);
    }
    drop(narrow);
    if let Ok(s) = &share {
        warnings.extend(s.0.close());
    }
    if let Err(e) = guard.finish() {
        warnings.push(e);
    }
    Ok(RunOutcome {
        code,
        warnings,
        daemon_stopped,
    })
}

/// The mountpoint a user mounted `st`'s project at, if it is mounted
/// there now: the sandbox shows the same view there as at the project's
/// path, so a path a tool wrote through the mountpoint (a venv, an
/// editable install made there) resolves inside too, to the project or to
/// the worktree the run is over. None when no daemon serves the project
/// (a stale record), for a private mountpoint under the opfs home (hidden
/// inside), or one that contains the project or lies in it.
fn mountpoint_alias(st: &StateDir, home: &Path) -> Option<PathBuf> {
    if !crate::state::lock::StateLock::is_held(st) {
        return None;
    }
    let mp = crate::state::registry::recorded_mountpoint(st)?;
    let usable = mp.is_absolute()
        && !mp.starts_with(home)
        && !mp.starts_with(&st.dir)
        && !mp.starts_with(&st.project)
        && !st.project.starts_with(&mp)
        && crate::state::mountinfo::is_mount_point(&mp);
    usable.then_some(mp)
}

/// Closes the run's shared worktree folder on every way out of [`run`],
/// even while a narrow-socket thread still holds the folder.
struct ShareGuard(Arc<WorktreeShare>);

impl Drop for ShareGuard {
    fn drop(&mut self) {
        for w in self.0.close() {
            log::warn!("{w}");
        }
    }
}

/// The state dir of the project `dir` belongs to; a directory opfs does not
/// know yet is the project itself.
fn locate(home: &Path, dir: &Path) -> Result<StateDir, RunError> {
    let abs = state::absolute(dir);
    if let Some(st) = state::resolve(home, &abs) {
        return Ok(st);
    }
    if !abs.is_dir() {
        return Err(RunError::Usage(format!(
            "{} is not a directory",
            abs.display()
        )));
    }
    Ok(StateDir::for_project(home, &abs))
}

/// Refuses a command the sandbox cannot show: one under `/tmp`, which is
/// a fresh, empty tmpfs inside (only the project is bound into it, at its
/// own path). `command` is the program as given: a path (absolute, or
/// relative to `dir`, the directory it starts in: one that stays below
/// `dir` is in the project or its mountpoint, which the sandbox shows; one
/// that climbs out with `..` is checked), or a name looked up in
/// `search_path` (the value of `$PATH`) as `execvp` would.
///
/// Errors: [`RunError::Usage`] naming the path and the fix.
fn command_is_visible(
    command: &Path,
    project: &Path,
    dir: &Path,
    search_path: Option<&std::ffi::OsStr>,
) -> Result<(), RunError> {
    use std::os::unix::fs::PermissionsExt;
    let found = if command.is_absolute() {
        Some(command.to_path_buf())
    } else if command.components().count() > 1 {
        climbs_out(command).then(|| dir.join(command))
    } else {
        search_path
            .into_iter()
            .flat_map(std::env::split_paths)
            .map(|d| d.join(command))
            .find(|p| {
                std::fs::metadata(p)
                    .is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
            })
    };
    let Some(path) = found else {
        return Ok(());
    };
    let real = std::fs::canonicalize(&path).unwrap_or_else(|_| path.clone());
    if real.starts_with("/tmp") && !real.starts_with(project) {
        return Err(RunError::Usage(format!(
            "the command {} lies under /tmp, which is private inside the sandbox (an empty \
             tmpfs: only the project is bound into it), so it cannot run there; move it outside \
             /tmp (e.g. under your home or /var/tmp) or into the project",
            path.display()
        )));
    }
    Ok(())
}

/// Whether relative path `p` climbs above its start (`../x`, `a/../../x`).
fn climbs_out(p: &Path) -> bool {
    let mut depth: i64 = 0;
    for c in p.components() {
        match c {
            std::path::Component::ParentDir => depth -= 1,
            std::path::Component::Normal(_) => depth += 1,
            _ => {}
        }
        if depth < 0 {
            return true;
        }
    }
    false
}

/// Closes the open turn and opens one labelled `label`: through the daemon
/// if one runs, else directly on the state dir.
fn open_turn(st: &StateDir, label: &str) -> Result<u64, RunError> {
    Project::new(st.clone())
        .turn(Some(label), None)
        .map_err(RunError::Turn)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn a_relative_command_that_climbs_into_tmp_is_refused() {
        let tmp = tempfile_under_tmp();
        let project = tmp.join("project");
        std::fs::create_dir_all(project.join("a")).unwrap();
        let script = tmp.join("agent.sh");
        std::fs::write(&script, "#!/bin/sh\n").unwrap();
        let p = Path::new;
        assert!(command_is_visible(p("../agent.sh"), &project, &project, None).is_err());
        assert!(command_is_visible(p("a/../../agent.sh"), &project, &project, None).is_err());
        assert!(command_is_visible(&script, &project, &project, None).is_err());
        assert!(command_is_visible(p("./agent.sh"), &project, &project, None).is_ok());
        assert!(command_is_visible(p("sub/../agent.sh"), &project, &project, None).is_ok());
        std::fs::remove_dir_all(&tmp).unwrap();
    }

    fn tempfile_under_tmp() -> PathBuf {
        let d = Path::new("/tmp").join(format!("opfs-unit-{}", std::process::id()));
        std::fs::create_dir_all(&d).unwrap();
        d.canonicalize().unwrap()
    }

    #[test]
    fn modes_parse_by_name_only() {
        assert_eq!("read-only".parse::<Mode>().unwrap(), Mode::ReadOnly);
        assert!("danger".parse::<Mode>().is_err());
        assert!("full".parse::<Mode>().is_err());
    }
}
